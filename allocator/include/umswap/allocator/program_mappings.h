// ProgramMappings: the GPU memory a program maps itself with cuMemCreate (NCCL's buffers, JAX,
// PyTorch's expandable segments), which umswap cannot move: it stays on the GPU, so it counts
// against the budget (issue 41). Engine vmm's pool shrinks by it (VmmAllocator::
// set_program_gpu_bytes) and engine um's plans and learning evict down to the budget less it.
//
// The driver frees a handle's memory once every reference is released and every mapping of it
// unmapped; so does the count:
//   * created(handle, bytes, on_gpu): a handle the program made (one reference); followed only
//     when on_gpu (memory on the GPU umswap manages; host or other GPUs are not its budget).
//   * retained(handle): cuMemRetainAllocationHandle gave the program one more reference.
//   * released(handle): one reference less.
//   * mapped(address, bytes, handle): cuMemMap put part of the handle at [address, +bytes).
//   * unmapped(address, bytes): cuMemUnmap took every mapping that starts in [address, +bytes).
//   * A handle's bytes count from created() until it has neither references nor mappings. An
//     unknown handle or address changes nothing (not on the GPU, or never seen).
//   * Any thread; one mutex (gpu_bytes() reads without it: the advisor asks on launches). Never
//     throws (an allocation failure of the maps drops what it was
//     recording, which under-counts instead of failing the program's call).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

namespace umswap {

class ProgramMappings {
 public:
  void created(uint64_t handle, uint64_t bytes, bool on_gpu);
  void retained(uint64_t handle);
  void released(uint64_t handle);
  void mapped(uint64_t address, uint64_t bytes, uint64_t handle);
  void unmapped(uint64_t address, uint64_t bytes);

  uint64_t gpu_bytes() const { return gpu_bytes_.load(std::memory_order_relaxed); }
  uint64_t gpu_bytes_peak() const;
  uint64_t handles() const;        // created, on the GPU or not
  uint64_t created_bytes() const;  // their bytes, in all

 private:
  struct Handle {
    uint64_t bytes = 0;
    uint64_t references = 1;
    uint64_t mappings = 0;
  };
  void drop_if_unused(std::unordered_map<uint64_t, Handle>::iterator it);  // mutex_ held

  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, Handle> gpu_handles_;  // handle -> its state, on the GPU only
  std::map<uint64_t, uint64_t> mappings_;             // address -> handle, of gpu_handles_
  std::atomic<uint64_t> gpu_bytes_{0};                // written under mutex_
  uint64_t gpu_bytes_peak_ = 0;
  uint64_t handles_ = 0;
  uint64_t created_bytes_ = 0;
};

}  // namespace umswap
