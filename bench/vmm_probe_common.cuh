// What bench/vmm_window_probe.cu and bench/vmm_stage_probe.cu share: a kernel that keeps the GPU
// busy, host timing, and CU(call), which ends the program on a failed driver call, naming the
// error (an illegal address, the probes' expected outcome without a hold, must be told apart).
#pragma once

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CU(call)                                                              \
  do {                                                                        \
    CUresult r_ = (call);                                                     \
    if (r_ != CUDA_SUCCESS) {                                                 \
      const char* s_ = nullptr;                                               \
      cuGetErrorName(r_, &s_);                                                \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, s_); \
      std::exit(2);                                                           \
    }                                                                         \
  } while (0)

namespace probe {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kStride = 4096;  // the programs' kernels touch one word per 4 KiB

// Keeps one SM busy for `ns` nanoseconds of the GPU's clock.
__global__ void spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// Device 0's primary context, made current on the calling thread (the probes' other threads set
// it themselves).
inline CUcontext primary_context(CUdevice* device) {
  CU(cuInit(0));
  CU(cuDeviceGet(device, 0));
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, *device));
  CU(cuCtxSetCurrent(ctx));
  return ctx;
}

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace probe
