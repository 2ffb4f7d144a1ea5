// VmmResidency: engine vmm's moves (issue 38, step 2). Every range is always mapped, so a kernel
// finds its data wherever it is; this part decides where it is. A step (kernel launch, copy,
// memset) that reaches a range with chunks on the host gets a window: the program is held
// (SubmissionHold), the GPU drained, and the ranges the step reaches are brought to the GPU. Once
// the steps repeat (a training loop: the same kernels on the same ranges, iteration after
// iteration), the last iteration says when each range is used next, and a window also
//   * evicts the ranges used furthest ahead first (never one used before what it makes room
//     for): Belady's choice, where without a repeat it evicts the least recently used;
//   * brings in the ranges the steps of the next eighth of the period use, nearest first, by
//     evicting only ranges used after that, so that one window serves many steps.
// Moves ahead of use beside the running program (stage() outside the hold, commit() inside) are
// the next step.
//
// Contract:
//   * touch(key, bases): at every step's entry, in launch order (the tracer serializes
//     steps), with the step's key (its kernel's name) and the bases of the ranges it reaches:
//     records the step; true when one of those ranges has chunks on the host and a window could
//     bring them in (a step whose same ranges were left short by the last window, with nothing
//     freed since, gets false: the pool cannot hold them; so does a step whose ranges together
//     are larger than the whole pool, which no window can bring in: it reaches them where they
//     are).
//   * make_resident(bases, stream): only inside a window (no program work running or submitted on
//     the device), right after the touch() of the same step: as above. What does not fit stays on
//     the host (correct, reached over the link) and counts as bytes short. Copies go on `stream`;
//     each move waits for its copies.
//   * forget(base): the range at `base` is released (VmmAllocator::release); any thread.
//   * alias(address, range) / unalias(address): a small allocation at `address` lives in the
//     range at `range` (a slab of vmm_small.h); a step reaching it reaches that range, until
//     unalias() at its free. Any thread.
//   * Bases that are neither ranges of the arena nor aliases are ignored. Never throws but
//     std::bad_alloc.
// Thread safety: every member may be called from any thread (one mutex, held across a window's
// moves; forget() waits for it; alias() and unalias() do not).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "umswap/vmm/chunk_arena.h"

namespace umswap {

struct ResidencyStats {
  uint64_t steps_held = 0;         // steps that got a window (make_resident calls)
  uint64_t steps_left_short = 0;   // steps touch() sent no window: their ranges could not fit
  uint64_t steps_too_large = 0;    // of them, steps whose ranges together pass the whole pool
  uint64_t windows_planned = 0;    // windows that knew the steps' period (next uses predicted)
  uint64_t period = 0;             // the steps' period as last found (0: none)
  uint64_t ranges_restored = 0;    // restores made for the step itself (whole or partial)
  uint64_t ranges_prefetched = 0;  // restores made ahead, for a coming step
  uint64_t ranges_evicted = 0;
  uint64_t bytes_short = 0;    // bytes windows could not bring onto the GPU for their step
  uint64_t move_failures = 0;  // moves that failed for another reason than a full pool
};

class VmmResidency {
 public:
  explicit VmmResidency(vmm::ChunkArena& arena);
  VmmResidency(const VmmResidency&) = delete;
  VmmResidency& operator=(const VmmResidency&) = delete;

  void alias(CUdeviceptr address, CUdeviceptr range);
  void unalias(CUdeviceptr address);
  bool touch(uint32_t key, std::span<const CUdeviceptr> bases);
  void make_resident(std::span<const CUdeviceptr> bases, CUstream stream);
  void forget(CUdeviceptr base);
  // Releases the free GPU chunks past the pool's limit (the pool shrank: ChunkArena::
  // set_gpu_limit_bytes). Under this lock, so no move is between its stage and its commit;
  // make_resident() does it too, at its end. Any thread.
  void trim_to_pool();
  ResidencyStats stats() const;

  // Steps remembered: periods up to half of it are found.
  static constexpr uint64_t kHistory = uint64_t{1} << 17;

 private:
  struct Entry {
    uint64_t last_use = 0;
    uint64_t reserved = 0;
    bool whole_on_gpu = false;  // as of the last look (only this part moves a live range)
  };
  struct Step {
    uint64_t key = 0;     // the kernel (or copy) alone
    uint64_t symbol = 0;  // the key and the bases, mixed: equal steps of two iterations match
    std::vector<CUdeviceptr> bases;
  };
  static uint64_t key_of(std::span<const CUdeviceptr> bases);
  // The bases with each alias replaced by its range, each once (canon_, or `given` itself).
  std::span<const CUdeviceptr> canonical(std::span<const CUdeviceptr> given);
  const Step& step_at(uint64_t n) const { return history_[n % kHistory]; }
  bool period_holds(uint64_t period) const;
  void find_period();
  // Next uses from the last iteration: distance in steps from the current one, for every range
  // the coming period's steps reach (the current step's own: 0).
  void predict(std::span<const CUdeviceptr> bases);
  // Brings the range `info` describes (looked at just before) onto the GPU; false when nothing
  // was tried (already there, or ahead with no room).
  bool restore(const vmm::RangeInfo& info, CUstream stream, bool partial_ok, uint64_t* short_bytes);

  vmm::ChunkArena& arena_;
  mutable std::mutex mutex_;
  std::unordered_map<CUdeviceptr, Entry> entries_;
  // Small allocation -> its slab's range. Under alias_mutex_ alone (taken after mutex_ when
  // both are), so that allocations and frees never wait for a window.
  std::mutex alias_mutex_;
  std::unordered_map<CUdeviceptr, CUdeviceptr> alias_;
  std::vector<CUdeviceptr> canon_;  // canonical()'s answer, under mutex_
  std::vector<Step> history_;
  uint64_t steps_ = 0;      // steps recorded; the current one is steps_ - 1
  uint64_t period_ = 0;     // 0: none found
  uint64_t short_key_ = 0;  // the bases of the last window that left bytes short; 0: none
  // Scratch of make_resident(), keeping its capacity.
  std::unordered_map<CUdeviceptr, uint64_t> next_;
  std::vector<CUdeviceptr> victims_;
  std::vector<std::pair<uint64_t, CUdeviceptr>> wanted_;
  ResidencyStats stats_;
};

}  // namespace umswap
