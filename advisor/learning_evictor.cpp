#include "umswap/advisor/learning_evictor.h"

#include <algorithm>
#include <stdexcept>

namespace umswap::advisor {

LearningEvictor::LearningEvictor(uint64_t budget, uint64_t block) : budget_(budget), block_(block) {
  if (block == 0) throw std::invalid_argument("LearningEvictor: block size 0");
}

void LearningEvictor::touch(uint64_t launch, uint64_t lo, uint64_t hi, uint64_t alloc_lo,
                            uint64_t alloc_hi, std::vector<Range>* fresh_out) {
  if (hi <= lo) return;
  const uint64_t last = (hi - 1) / block_;
  for (uint64_t b = lo / block_; b <= last; ++b) {
    const auto [it, fresh] = blocks_.try_emplace(b, Block{launch, alloc_lo, alloc_hi});
    if (fresh && fresh_out) {
      const uint64_t from = std::max(b * block_, alloc_lo);
      const uint64_t to = std::min((b + 1) * block_, alloc_hi);
      if (!fresh_out->empty() && fresh_out->back().address + fresh_out->back().length == from &&
          from != alloc_lo) {
        fresh_out->back().length = to - fresh_out->back().address;
      } else if (to > from) {
        fresh_out->push_back({from, to - from});
      }
    }
    if (!fresh) {
      if (it->second.last >= launch) continue;
      by_age_.erase({it->second.last, b});
      it->second = {launch, alloc_lo, alloc_hi};
    }
    by_age_.emplace(launch, b);
  }
}

std::vector<LearningEvictor::Range> LearningEvictor::take_evictions(uint64_t done_before) {
  std::vector<std::pair<uint64_t, Block>> picked;
  while (resident_bytes() > budget_ && !by_age_.empty() && by_age_.begin()->first < done_before) {
    const uint64_t b = by_age_.begin()->second;
    by_age_.erase(by_age_.begin());
    const auto it = blocks_.find(b);
    picked.emplace_back(b, it->second);
    blocks_.erase(it);
  }
  std::sort(picked.begin(), picked.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<Range> out;
  uint64_t run_lo = 0, run_hi = 0;  // the allocation of out.back()
  for (const auto& [b, block] : picked) {
    const uint64_t lo = std::max(b * block_, block.alloc_lo);
    const uint64_t hi = std::min((b + 1) * block_, block.alloc_hi);
    if (hi <= lo) continue;
    if (!out.empty() && run_lo == block.alloc_lo && run_hi == block.alloc_hi &&
        out.back().address + out.back().length == lo) {
      out.back().length = hi - out.back().address;
    } else {
      out.push_back({lo, hi - lo});
      run_lo = block.alloc_lo;
      run_hi = block.alloc_hi;
    }
  }
  return out;
}

void LearningEvictor::clear() {
  blocks_.clear();
  by_age_.clear();
}

}  // namespace umswap::advisor
