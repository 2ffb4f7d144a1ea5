#include "umswap/allocator/vmm_small.h"

#include <algorithm>
#include <bit>

namespace umswap {

uint64_t SmallSlabs::find_run(const Slab& s, uint64_t units) {
  // Runs of used and free units a word at a time: a fragmented slab costs its runs, not its bits.
  uint64_t run_start = 0, u = 0;
  while (u < kUnits) {
    const uint64_t bits = s.used[u / 64] >> (u % 64);
    const uint64_t left = 64 - u % 64;  // units of this word from u on
    if (bits & 1) {
      const uint64_t used = std::min<uint64_t>(std::countr_one(bits), left);
      u += used;
      run_start = u;
      continue;
    }
    const uint64_t free = std::min<uint64_t>(bits == 0 ? left : std::countr_zero(bits), left);
    u += free;
    if (u - run_start >= units) return run_start;
  }
  return kUnits;
}

void SmallSlabs::mark(Slab& s, uint64_t first, uint64_t units, bool used) {
  for (uint64_t u = first; u < first + units; ++u) {
    const uint64_t bit = uint64_t{1} << (u % 64);
    s.used[u / 64] = used ? s.used[u / 64] | bit : s.used[u / 64] & ~bit;
  }
  s.free_units = used ? s.free_units - units : s.free_units + units;
}

CUdeviceptr SmallSlabs::take(uint64_t bytes) {
  if (!small(bytes)) return 0;
  const uint64_t units = (bytes + kUnit - 1) / kUnit;
  auto try_slab = [&](std::map<CUdeviceptr, Slab>::iterator it) -> CUdeviceptr {
    Slab& s = it->second;
    if (s.free_units < units) return 0;
    const uint64_t first = find_run(s, units);
    if (first == kUnits) return 0;
    mark(s, first, units, true);
    const CUdeviceptr address = it->first + first * kUnit;
    live_[address] = {it->first, static_cast<uint32_t>(first), static_cast<uint32_t>(units), bytes};
    last_ = it->first;
    if (empty_ == it->first) empty_ = 0;
    return address;
  };
  if (const auto it = slabs_.find(last_); it != slabs_.end()) {
    if (const CUdeviceptr a = try_slab(it)) return a;
  }
  for (auto it = slabs_.begin(); it != slabs_.end(); ++it) {
    if (it->first == last_) continue;
    if (const CUdeviceptr a = try_slab(it)) return a;
  }
  return 0;
}

void SmallSlabs::add_slab(CUdeviceptr base) {
  slabs_.emplace(base, Slab{});
  last_ = base;
}

std::optional<SmallSlabs::Given> SmallSlabs::give(CUdeviceptr address) {
  const auto it = live_.find(address);
  if (it == live_.end()) return std::nullopt;
  const Live l = it->second;
  live_.erase(it);
  Slab& s = slabs_.at(l.slab);
  mark(s, l.first, l.units, false);
  Given given{l.slab, false};
  if (s.free_units == kUnits) {
    if (empty_ == 0) {
      empty_ = l.slab;  // kept for the next small allocation
    } else {
      slabs_.erase(l.slab);
      if (last_ == l.slab) last_ = 0;
      given.release_slab = true;
    }
  }
  return given;
}

CUdeviceptr SmallSlabs::drop_empty() {
  const CUdeviceptr slab = empty_;
  if (slab == 0) return 0;
  slabs_.erase(slab);
  if (last_ == slab) last_ = 0;
  empty_ = 0;
  return slab;
}

uint64_t SmallSlabs::live_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [address, l] : live_) bytes += l.bytes;
  return bytes;
}

std::optional<CUdeviceptr> SmallSlabs::slab_of(CUdeviceptr address) const {
  const auto it = live_.find(address);
  if (it == live_.end()) return std::nullopt;
  return it->second.slab;
}

}  // namespace umswap
