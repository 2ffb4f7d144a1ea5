// Stands in for PyTorch's libc10_cuda.so in preload_faults_test: its file name holds
// "libc10_cuda", and it calls cuMemCreate from its own code, as PyTorch's expandable segments do,
// so that engine vmm's hook sees a caller inside it (hooks/driver_hooks.cpp, not_virtualized()).
#include <cuda.h>

extern "C" __attribute__((visibility("default"))) CUresult c10_shim_create(
    CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* prop) {
  const CUresult status = cuMemCreate(handle, bytes, prop, 0);
  asm volatile("" ::: "memory");  // a call, not a jump: the return address stays in this library
  return status;
}
