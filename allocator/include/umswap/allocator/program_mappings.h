// ProgramMappings: the GPU memory a program maps itself with cuMemCreate (NCCL's buffers, JAX,
// PyTorch's expandable segments), which umswap cannot move: it stays on the GPU, so it counts
// against the budget (issue 41). Engine vmm's pool shrinks by it (VmmAllocator::
// set_program_gpu_bytes) and engine um's plans and learning evict down to the budget less it.
//
// Contract:
//   * created(handle, bytes, on_gpu): a handle the program made; its bytes are counted while
//     on_gpu (memory on this process's GPU; host or other locations are not the budget's) until
//     released(handle). Returns the bytes counted now.
//   * released(handle): the program released it; an unknown handle (never counted, or released
//     twice) changes nothing. Returns the bytes counted now.
//   * Any thread; one mutex. Never throws (an allocation failure of the map counts the handle as
//     not on the GPU, which under-counts instead of failing the program's call).
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace umswap {

class ProgramMappings {
 public:
  uint64_t created(uint64_t handle, uint64_t bytes, bool on_gpu);
  uint64_t released(uint64_t handle);

  uint64_t gpu_bytes() const;
  uint64_t gpu_bytes_peak() const;
  uint64_t handles() const;  // created, on the GPU or not

 private:
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, uint64_t> gpu_handles_;  // handle -> bytes, on the GPU only
  uint64_t gpu_bytes_ = 0;
  uint64_t gpu_bytes_peak_ = 0;
  uint64_t handles_ = 0;
};

}  // namespace umswap
