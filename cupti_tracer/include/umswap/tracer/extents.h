// Extents: the byte range each pointer hit of an iteration stands for.
//
// A parameter scan gives where an access starts (the pointer), not how far it goes. PyTorch's
// caching allocator packs tensors back to back in one segment (one registered buffer), so the
// next pointer into the same buffer is a good guess at where this tensor ends:
//
//   start = the pointer;
//   end   = the next larger distinct pointer into the same buffer seen in the scope (the whole
//           iteration by default, or only the same step), or the end of the allocation the
//           pointer lies in (the buffer's end, or in a slab of umswap's stream-ordered
//           allocations the end of the program's block, hit.limit), whichever comes first. In a
//           slab the scope is always the step: its space holds different tensors at different
//           times, so a pointer another step passed belongs to another tensor (measured: VGG-16's
//           3.1 GB first activation was cut to its first 784 MiB by a later tensor's pointer).
//           The step is the scope too in a buffer where two distinct pointers of the iteration
//           lie less than 512 bytes apart: a caching allocator's tensors start at least that far
//           apart (PyTorch rounds its blocks to 512 bytes), so such a buffer is one allocation
//           with structure inside (cuDNN's workspace: pointers at 0, 8, 32, 72... of 215 MB, and
//           a kernel given its base writes 100 MB past them).
//
// e.g. pointers at offsets 0, 4096 and 10000 of one buffer of size S give lengths 4096, 5904 and
// S - 10000; a lone pointer covers the rest of its buffer; buffers are independent.
//
// Known imprecision: a kernel may read past the next pointer (a view whose base pointer precedes
// another view of the same tensor, a kernel that walks neighbouring tensors) and then the extent
// is too short; in a caching allocator's segment, free space between tensors and tensors not used
// in this iteration are counted into the extent before them, which is then too long. Blocks of a
// slab (PyTorch with backend:cudaMallocAsync under umswap) do not have that problem: an extent
// never runs past its block.
//
// Cost: O(H log H) time and O(H) scratch for H hits in the iteration. Pure; reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "umswap/core/trace.h"
#include "umswap/tracer/param_scanner.h"

namespace umswap::tracer {

enum class ExtentScope : uint8_t {
  iteration,  // the next pointer seen anywhere in the iteration (default)
  step,       // the next pointer seen by the same step only
};

// steps[i] = step i's hits (deduplicated, as the scanner gives them). For each step in order,
// appends one trace::Access per hit (a hit outside its own buffer is skipped) to `accesses` (buffer
// = buffer_index(hit.buffer), the index into Trace::buffers), and sets step_first[i] to the index
// of its first access, with step_first[steps.size()] = accesses.size(): step i's accesses are
// [step_first[i], step_first[i + 1]). Both vectors are replaced.
void compute_extents(std::span<const std::span<const PointerHit>> steps,
                     const std::function<uint32_t(BufferId)>& buffer_index,
                     std::vector<trace::Access>& accesses, std::vector<uint64_t>& step_first,
                     ExtentScope scope = ExtentScope::iteration);

// The same over several iterations at once (a trace's whole run): `boundaries` (increasing, each
// in (0, steps.size())) cut the steps into chunks, and the iteration scope of each is its own
// chunk, so that one iteration's pointers never end another's extents.
void compute_extents_by_chunk(std::span<const std::span<const PointerHit>> steps,
                              std::span<const uint64_t> boundaries,
                              const std::function<uint32_t(BufferId)>& buffer_index,
                              std::vector<trace::Access>& accesses,
                              std::vector<uint64_t>& step_first);

}  // namespace umswap::tracer
