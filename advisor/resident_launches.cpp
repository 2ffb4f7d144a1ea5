#include "umswap/advisor/resident_launches.h"

#include <algorithm>

namespace umswap::advisor {

bool needs_resident_memory(std::string_view kernel_name) {
  return kernel_name.starts_with("cudnn_generated") &&
         kernel_name.find("sdpa") != std::string_view::npos;
}

void resident_ranges(std::span<const LaunchReach> reaches, std::vector<ResidentRange>& out,
                     uint64_t page) {
  out.clear();
  for (const LaunchReach& r : reaches) {
    const uint64_t lo = std::max(r.pointer & ~(page - 1), r.base);
    const uint64_t hi = std::min((r.end + page - 1) & ~(page - 1), r.base_end);
    if (hi <= lo) continue;
    out.push_back({lo, hi - lo});
  }
  std::sort(out.begin(), out.end(),
            [](const ResidentRange& a, const ResidentRange& b) { return a.address < b.address; });
  // The allocation a range lies in: the first reach that holds its start.
  const auto base_of = [&](uint64_t address) {
    for (const LaunchReach& r : reaches) {
      if (address >= r.base && address < r.base_end) return r.base;
    }
    return address;
  };
  size_t n = 0;
  for (const ResidentRange& r : out) {
    if (n > 0 && r.address <= out[n - 1].address + out[n - 1].length &&
        base_of(r.address) == base_of(out[n - 1].address)) {
      const uint64_t end = std::max(out[n - 1].address + out[n - 1].length, r.address + r.length);
      out[n - 1].length = end - out[n - 1].address;
    } else {
      out[n++] = r;
    }
  }
  out.resize(n);
}

}  // namespace umswap::advisor
