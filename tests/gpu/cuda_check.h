// CHECK(call) for the GPU test programs and bench/'s probes: a CUDA runtime call that fails prints
// the call and the error on stderr and ends the program with exit status 1.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                           \
  do {                                                                        \
    const cudaError_t e_ = (call);                                            \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

// The same for a driver API call (the program links libcuda).
#define CHECK_CU(call)                                               \
  do {                                                               \
    const CUresult r_ = (call);                                      \
    if (r_ != CUDA_SUCCESS) {                                        \
      std::fprintf(stderr, "%s failed: error %d\n", #call, int(r_)); \
      std::exit(1);                                                  \
    }                                                                \
  } while (0)
