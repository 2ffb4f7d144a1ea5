// VirtualHandles: the handles engine vmm gives a program for its own cuMemCreate (JAX's
// allocators; not PyTorch's, whose expandable segments put a tensor across handles: hooks/
// driver_hooks.cpp, not_virtualized(); issue 38), so that the memory the program maps itself is
// the engine's to move too. A virtual handle has no physical memory. Its one mapping, the whole
// handle at offset 0 (what PyTorch and JAX do: docs/lab/2026-12-02-jax.md), becomes a range of
// the engine's at the program's own addresses (VmmAllocator::map_program); hooks/driver_hooks.cpp
// answers the program's calls on it. Any other first use of a handle (part of it, at an offset,
// or when the engine has no room) is served by real memory made for it then ("materialized"):
// from there on its calls go to the driver with the real handle, as umswap did before. A second
// mapping of a handle the engine maps, and any mapping or export of one the engine mapped and the
// program unmapped (its contents went with the range), are refused.
//
// This class is the bookkeeping only (no driver call); the hooks make the calls it decides.
//   * create(bytes, prop): a new handle, with one reference. Its value has the top bit set,
//     which no handle of the driver's (a host address) has.
//   * map(handle, address, bytes, offset): what a cuMemMap of it should do: `engine` (whole, at
//     offset 0, the first mapping: then mapped() once the engine made the range), `real` (a
//     materialized handle: the driver maps `real_handle`), `materialize` (another use of a handle
//     never mapped: make real memory, then set_real()), `refuse` (a handle the engine maps, or
//     mapped and lost with its range: CUDA_ERROR_NOT_SUPPORTED), or `not_virtual` (not a live
//     virtual handle, or one with no reference left: CUDA_ERROR_INVALID_VALUE).
//   * The engine's mappings are kept by address: covering(address, bytes) says which of them an
//     interval holds whole and whether it cuts one (cuMemUnmap and cuMemSetAccess take intervals
//     over many handles, as PyTorch's expandable segments do); unmapped(address) ends one.
//   * release(handle) drops a reference; retain(address) adds one to the handle mapped there. A
//     handle goes when it has no reference and no engine mapping (as the driver frees memory).
//     A materialized handle goes at its release (the driver then counts the rest).
//   * Any thread: one mutex. Never throws but std::bad_alloc.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace umswap {

class VirtualHandles {
 public:
  static constexpr uint64_t kTag = uint64_t{1} << 63;
  static bool is_virtual(CUmemGenericAllocationHandle h) { return (h & kTag) != 0; }

  CUmemGenericAllocationHandle create(uint64_t bytes, const CUmemAllocationProp& prop);

  enum class MapAction { not_virtual, engine, real, materialize, refuse };
  struct MapDecision {
    MapAction action = MapAction::not_virtual;
    CUmemGenericAllocationHandle real_handle = 0;  // for `real`
    uint64_t bytes = 0;                            // the handle's, for `materialize`
    CUmemAllocationProp prop{};                    // for `materialize`
  };
  // `engine` and `materialize` claim the handle for the caller until mapped(), set_real() or
  // unclaim(): meanwhile any other map() of it is refused (two threads never both map or
  // materialize one handle).
  MapDecision map(CUmemGenericAllocationHandle h, CUdeviceptr address, uint64_t bytes,
                  uint64_t offset);
  // The claimed map or materialization failed: the handle is as before it.
  void unclaim(CUmemGenericAllocationHandle h);
  // The engine made the range for h at `address`.
  void mapped(CUmemGenericAllocationHandle h, CUdeviceptr address);
  // Real memory made for h (materialize): its calls go to the driver with the real handle from
  // now on. Returns the handle that stands: `real`, or one set before (the caller then releases
  // its own); 0 when h is gone, or mapped by the engine since.
  CUmemGenericAllocationHandle set_real(CUmemGenericAllocationHandle h,
                                        CUmemGenericAllocationHandle real);
  // The real handle behind h when h was materialized (else nullopt: not virtual, or not real).
  std::optional<CUmemGenericAllocationHandle> real(CUmemGenericAllocationHandle h) const;

  struct Covered {
    // The engine's mappings wholly inside the interval (address, bytes), by address.
    std::vector<std::pair<CUdeviceptr, uint64_t>> whole;
    // The rest of the interval, between and around them [from, to), by address: the driver's.
    std::vector<std::pair<CUdeviceptr, CUdeviceptr>> others;
    bool cuts = false;  // the interval holds part of one only
  };
  Covered covering(CUdeviceptr address, uint64_t bytes) const;
  // cuMemUnmap of an engine mapping that starts at `address` (after the engine let it go).
  void unmapped(CUdeviceptr address);

  // One reference less: the references left and the real handle (0 unless materialized), read
  // together; nullopt when h is not a live virtual handle with a reference. A materialized
  // handle's real one is the caller's to release when none is left.
  struct Released {
    uint64_t left = 0;
    CUmemGenericAllocationHandle real = 0;
  };
  std::optional<Released> release(CUmemGenericAllocationHandle h);
  // The handle the engine maps at `address` (any byte of it), one reference more.
  std::optional<CUmemGenericAllocationHandle> retain(CUdeviceptr address);
  std::optional<CUmemAllocationProp> properties(CUmemGenericAllocationHandle h) const;

  uint64_t live() const;          // handles alive now
  uint64_t materialized() const;  // handles given real memory, in all
  // Bytes of live handles neither mapped by the engine, nor lost, nor real: what their first
  // mappings will ask of the engine (cuMemCreate checks the engine's room against it).
  uint64_t pending_bytes() const;

 private:
  struct Handle {
    uint64_t bytes = 0;
    CUmemAllocationProp prop{};
    uint64_t references = 1;
    CUdeviceptr mapped_at = 0;  // the engine's mapping, 0 when none
    bool lost = false;     // the engine mapped it, the program unmapped it: its contents are gone
    bool claimed = false;  // a map() in progress (see map())
    CUmemGenericAllocationHandle real = 0;  // materialized: the driver's handle
  };
  struct Mapping {
    uint64_t bytes = 0;
    CUmemGenericAllocationHandle handle = 0;
  };
  void drop_if_unused(std::unordered_map<uint64_t, Handle>::iterator it);  // mutex_ held

  mutable std::mutex mutex_;
  uint64_t next_ = 1;
  uint64_t materialized_ = 0;
  std::unordered_map<uint64_t, Handle> handles_;
  std::map<CUdeviceptr, Mapping> mappings_;  // the engine's, by address
};

}  // namespace umswap
