// The one list of intercepted CUDA symbols. Everything that names them is generated from here:
// the real-function table (real_driver.h), the answers given through cuGetProcAddress and dlsym
// (proc_address.cpp), and the exported shims (driver_hooks.cpp must define one per entry, or the
// library does not link).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

// X(exported name, base name cuGetProcAddress is asked for, CUDA version that introduced the ABI,
//   per-thread-default-stream variant, PFN type of that ABI)
#define UMSWAP_DRIVER_HOOKS(X)                                                                     \
  X(cuMemAlloc_v2, cuMemAlloc, 3020, false, PFN_cuMemAlloc_v3020)                                  \
  X(cuMemFree_v2, cuMemFree, 3020, false, PFN_cuMemFree_v3020)                                     \
  X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, false, PFN_cuMemAllocPitch_v3020)                   \
  X(cuMemGetInfo_v2, cuMemGetInfo, 3020, false, PFN_cuMemGetInfo_v3020)                            \
  X(cuMemAllocManaged, cuMemAllocManaged, 6000, false, PFN_cuMemAllocManaged_v6000)                \
  X(cuMemCreate, cuMemCreate, 10020, false, PFN_cuMemCreate_v10020)                                \
  X(cuMemRelease, cuMemRelease, 10020, false, PFN_cuMemRelease_v10020)                             \
  X(cuMemMap, cuMemMap, 10020, false, PFN_cuMemMap_v10020)                                         \
  X(cuMemUnmap, cuMemUnmap, 10020, false, PFN_cuMemUnmap_v10020)                                   \
  X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, false,                        \
    PFN_cuMemRetainAllocationHandle_v11000)                                                        \
  X(cuMemSetAccess, cuMemSetAccess, 10020, false, PFN_cuMemSetAccess_v10020)                       \
  X(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 10020, false,                      \
    PFN_cuMemExportToShareableHandle_v10020)                                                       \
  X(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle, 10020, false,  \
    PFN_cuMemGetAllocationPropertiesFromHandle_v10020)                                             \
  X(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, false, PFN_cuIpcGetMemHandle_v4010)                \
  X(cuMemAllocAsync, cuMemAllocAsync, 11020, false, PFN_cuMemAllocAsync_v11020)                    \
  X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, true, PFN_cuMemAllocAsync_v11020_ptsz)           \
  X(cuMemFreeAsync, cuMemFreeAsync, 11020, false, PFN_cuMemFreeAsync_v11020)                       \
  X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, true, PFN_cuMemFreeAsync_v11020_ptsz)              \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, false,                                \
    PFN_cuMemAllocFromPoolAsync_v11020)                                                            \
  X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, true,                            \
    PFN_cuMemAllocFromPoolAsync_v11020_ptsz)                                                       \
  X(cuStreamDestroy_v2, cuStreamDestroy, 4000, false, PFN_cuStreamDestroy_v4000)                   \
  X(cuLaunchKernel, cuLaunchKernel, 4000, false, PFN_cuLaunchKernel_v4000)                         \
  X(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, true, PFN_cuLaunchKernel_v7000_ptsz)                \
  X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, false, PFN_cuLaunchKernelEx_v11060)                 \
  X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, true, PFN_cuLaunchKernelEx_v11060_ptsz)        \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, false,                             \
    PFN_cuLaunchCooperativeKernel_v9000)                                                           \
  X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, true,                         \
    PFN_cuLaunchCooperativeKernel_v9000_ptsz)                                                      \
  X(cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020, false, PFN_cuMemcpyDtoH_v3020)                            \
  X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH, 7000, true, PFN_cuMemcpyDtoH_v7000_ptds)                   \
  X(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, 3020, false, PFN_cuMemcpyDtoHAsync_v3020)             \
  X(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync, 7000, true, PFN_cuMemcpyDtoHAsync_v7000_ptsz)    \
  X(cuCtxSynchronize_v2, cuCtxSynchronize, 13000, false, PFN_cuCtxSynchronize_v13000)              \
  X(cuStreamSynchronize, cuStreamSynchronize, 2000, false, PFN_cuStreamSynchronize_v2000)          \
  X(cuStreamSynchronize_ptsz, cuStreamSynchronize, 7000, true, PFN_cuStreamSynchronize_v7000_ptsz) \
  X(cuEventSynchronize, cuEventSynchronize, 2000, false, PFN_cuEventSynchronize_v2000)

// Driver functions umswap calls but does not intercept: X(field, base name, version, PFN type).
#define UMSWAP_DRIVER_USED(X)                                                                 \
  X(cuGetProcAddress_v1, cuGetProcAddress, 11030, PFN_cuGetProcAddress_v11030)                \
  X(cuCtxGetDevice, cuCtxGetDevice, 2000, PFN_cuCtxGetDevice_v2000)                           \
  X(cuDeviceGet, cuDeviceGet, 2000, PFN_cuDeviceGet_v2000)                                    \
  X(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, PFN_cuDeviceTotalMem_v3020)                  \
  X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020,                              \
    PFN_cuDeviceGetDefaultMemPool_v11020)                                                     \
  X(cuMemGetDefaultMemPool, cuMemGetDefaultMemPool, 13000, PFN_cuMemGetDefaultMemPool_v13000) \
  X(cuFuncGetParamInfo, cuFuncGetParamInfo, 12040, PFN_cuFuncGetParamInfo_v12040)             \
  X(cuKernelGetParamInfo, cuKernelGetParamInfo, 12040, PFN_cuKernelGetParamInfo_v12040)       \
  X(cuFuncGetName, cuFuncGetName, 12030, PFN_cuFuncGetName_v12030)                            \
  X(cuKernelGetName, cuKernelGetName, 12030, PFN_cuKernelGetName_v12030)                      \
  X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, PFN_cuCtxGetCurrent_v4000)                        \
  X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, PFN_cuCtxSetCurrent_v4000)                        \
  X(cuStreamCreate, cuStreamCreate, 2000, PFN_cuStreamCreate_v2000)                           \
  X(cuEventCreate, cuEventCreate, 2000, PFN_cuEventCreate_v2000)                              \
  X(cuEventRecord, cuEventRecord, 2000, PFN_cuEventRecord_v2000)                              \
  X(cuEventQuery, cuEventQuery, 2000, PFN_cuEventQuery_v2000)                                 \
  X(cuEventDestroy_v2, cuEventDestroy, 4000, PFN_cuEventDestroy_v4000)                        \
  X(cuCtxSynchronize, cuCtxSynchronize, 2000, PFN_cuCtxSynchronize_v2000)                     \
  X(cuStreamIsCapturing, cuStreamIsCapturing, 10000, PFN_cuStreamIsCapturing_v10000)          \
  X(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, 10010,              \
    PFN_cuThreadExchangeStreamCaptureMode_v10010)                                             \
  X(cuMemDiscardBatchAsync, cuMemDiscardBatchAsync, 13000, PFN_cuMemDiscardBatchAsync_v13000) \
  X(cuMemDiscardAndPrefetchBatchAsync, cuMemDiscardAndPrefetchBatchAsync, 13000,              \
    PFN_cuMemDiscardAndPrefetchBatchAsync_v13000)                                             \
  X(cuStreamWaitEvent, cuStreamWaitEvent, 3020, PFN_cuStreamWaitEvent_v3020)                  \
  X(cuMemPrefetchAsync_v2, cuMemPrefetchAsync, 12020, PFN_cuMemPrefetchAsync_v12020)          \
  X(cuMemHostAlloc, cuMemHostAlloc, 2020, PFN_cuMemHostAlloc_v2020)                           \
  X(cuMemHostGetDevicePointer_v2, cuMemHostGetDevicePointer, 3020,                            \
    PFN_cuMemHostGetDevicePointer_v3020)                                                      \
  X(cuStreamWaitValue64, cuStreamWaitValue64, 11070, PFN_cuStreamWaitValue64_v11070)          \
  X(cuStreamWriteValue64, cuStreamWriteValue64, 11070, PFN_cuStreamWriteValue64_v11070)       \
  X(cuMemFreeHost, cuMemFreeHost, 2000, PFN_cuMemFreeHost_v2000)                              \
  X(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, 3020, PFN_cuMemcpyHtoDAsync_v3020)               \
  X(cuModuleLoadData, cuModuleLoadData, 2000, PFN_cuModuleLoadData_v2000)                     \
  X(cuModuleGetFunction, cuModuleGetFunction, 2000, PFN_cuModuleGetFunction_v2000)            \
  X(cuMemAddressReserve, cuMemAddressReserve, 10020, PFN_cuMemAddressReserve_v10020)          \
  X(cuMemAddressFree, cuMemAddressFree, 10020, PFN_cuMemAddressFree_v10020)                   \
  X(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync, 3020, PFN_cuMemcpyDtoDAsync_v3020)

// CUDA runtime functions exported by the library: X(name, function whose type it has).
// The runtime reaches the driver through the hooked table, so these delegate to the real runtime
// and only tag which runtime API is in flight (and check that the driver hooks saw it).
#define UMSWAP_RUNTIME_HOOKS(X)            \
  X(cudaMalloc, cudaMalloc)                \
  X(cudaFree, cudaFree)                    \
  X(cudaMallocPitch, cudaMallocPitch)      \
  X(cudaMallocManaged, cudaMallocManaged)  \
  X(cudaMallocAsync, cudaMallocAsync)      \
  X(cudaMallocAsync_ptsz, cudaMallocAsync) \
  X(cudaFreeAsync, cudaFreeAsync)          \
  X(cudaFreeAsync_ptsz, cudaFreeAsync)     \
  X(cudaMemGetInfo, cudaMemGetInfo)
