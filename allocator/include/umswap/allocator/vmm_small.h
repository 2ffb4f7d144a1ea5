// Engine vmm's small allocations (issue 38): an allocation of at most kMaxSmall bytes shares a
// slab (one arena range of one 2 MiB chunk) with others, instead of taking a whole chunk of its
// own. On PyTorch's async backend, where every tensor is an allocation, whole chunks for small
// tensors made the peak of chunks 1.53x the peak asked for on the matrix's cnn (2,463 of its
// 5,274 allocations an iteration under 1 MiB), 1.32x on the masked LM (run 151's traces).
//
// A slab is cut in kUnit-byte units (the alignment cudaMalloc gives), first fit: the slab last
// taken from first, then the others by address. A slab whose last allocation is given back is
// kept while it is the only empty one (the next small allocation takes it without a new range),
// else handed back to the caller to release. Moves are the residency's: a slab is one range, so
// the allocations in it move together.
//
// Pure bookkeeping (no driver call); the caller makes and releases the slabs' ranges.
// Thread safety: none (VmmAllocator holds a mutex around it).
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>

namespace umswap {

class SmallSlabs {
 public:
  static constexpr uint64_t kSlab = uint64_t{2} << 20;
  static constexpr uint64_t kUnit = 512;
  static constexpr uint64_t kMaxSmall = uint64_t{1} << 20;

  static bool small(uint64_t bytes) { return bytes > 0 && bytes <= kMaxSmall; }
  // Where `bytes` (small()) goes in a slab with room; 0 when none has it (add a slab, ask again).
  CUdeviceptr take(uint64_t bytes);
  // A new slab at `base` (a range of kSlab bytes), empty.
  void add_slab(CUdeviceptr base);
  struct Given {
    CUdeviceptr slab = 0;       // the slab it was in
    bool release_slab = false;  // that slab is now empty and not kept: release its range
  };
  // Gives back the allocation at `address` (from take()); nullopt when it is none.
  std::optional<Given> give(CUdeviceptr address);
  // Forgets the one empty slab kept and returns its base for the caller to release (0: none):
  // an allocation that needs its chunk.
  CUdeviceptr drop_empty();
  // The slab of a live small allocation at `address`.
  std::optional<CUdeviceptr> slab_of(CUdeviceptr address) const;
  uint64_t slabs() const { return slabs_.size(); }  // the kept empty one included
  uint64_t live() const { return live_.size(); }
  uint64_t live_bytes() const;  // as asked (a sum over the live allocations)

 private:
  static constexpr uint64_t kUnits = kSlab / kUnit;
  struct Slab {
    std::array<uint64_t, kUnits / 64> used{};  // a bit a unit
    uint64_t free_units = kUnits;
  };
  struct Live {
    CUdeviceptr slab = 0;
    uint32_t first = 0, units = 0;
    uint64_t bytes = 0;
  };
  // The first run of `units` free units in `s`, or kUnits.
  static uint64_t find_run(const Slab& s, uint64_t units);
  static void mark(Slab& s, uint64_t first, uint64_t units, bool used);

  std::map<CUdeviceptr, Slab> slabs_;
  std::unordered_map<CUdeviceptr, Live> live_;
  CUdeviceptr last_ = 0;   // the slab last taken from (0: none)
  CUdeviceptr empty_ = 0;  // the one empty slab kept (0: none)
};

}  // namespace umswap
