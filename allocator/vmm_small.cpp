#include "umswap/allocator/vmm_small.h"

namespace umswap {

uint64_t SmallSlabs::find_run(const Slab& s, uint64_t units) {
  uint64_t run = 0;
  for (uint64_t u = 0; u < kUnits; ++u) {
    const uint64_t word = s.used[u / 64];
    if (u % 64 == 0 && word == ~uint64_t{0}) {  // a full word: no run through it
      run = 0;
      u += 63;
      continue;
    }
    if (word >> (u % 64) & 1) {
      run = 0;
    } else if (++run == units) {
      return u + 1 - units;
    }
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
    live_bytes_ += bytes;
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
  live_bytes_ -= l.bytes;
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

std::optional<CUdeviceptr> SmallSlabs::slab_of(CUdeviceptr address) const {
  const auto it = live_.find(address);
  if (it == live_.end()) return std::nullopt;
  return it->second.slab;
}

}  // namespace umswap
