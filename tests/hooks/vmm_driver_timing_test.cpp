// hooks/vmm_driver_timing: the shims time_vmm_driver() puts in engine vmm's driver tables pass
// every argument and result through, count each function's calls apart, count a thread's calls
// inside a window apart too, count cuMemCreate's calls on the host apart as well, and leave a slot
// with no function empty.
#include "vmm_driver_timing.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string_view>
#include <thread>

namespace umswap {
namespace {

CUdeviceptr g_mapped_at = 0;
size_t g_mapped_size = 0;
CUresult g_map_result = CUDA_SUCCESS;

CUresult CUDAAPI fake_map(CUdeviceptr ptr, size_t size, size_t, CUmemGenericAllocationHandle,
                          unsigned long long) {
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a call that takes its time
  g_mapped_at = ptr;
  g_mapped_size = size;
  return g_map_result;
}
CUresult CUDAAPI fake_unmap(CUdeviceptr, size_t) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_stream_synchronize(CUstream) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_event_query(CUevent) {
  return CUDA_ERROR_NOT_READY;
}

DriverCallTotal total(std::string_view name) {
  for (const DriverCallTotal& t : vmm_driver_call_totals()) {
    if (t.name == name) return t;
  }
  return {name, 0, 0, 0, 0};
}

TEST(VmmDriverTiming, ShimsPassCallsThroughAndCountThemByFunctionAndWindow) {
  vmm::VmmDriver arena;
  arena.mem_map = fake_map;
  arena.mem_unmap = fake_unmap;
  arena.stream_synchronize = fake_stream_synchronize;
  VmmSyncDriver sync;
  sync.event_query = fake_event_query;
  sync.stream_synchronize = fake_stream_synchronize;
  time_vmm_driver(arena, sync);

  // Replaced, and empty slots left empty.
  EXPECT_NE(arena.mem_map, &fake_map);
  EXPECT_EQ(arena.mem_create, nullptr);
  EXPECT_EQ(sync.event_create, nullptr);
  EXPECT_EQ(total("cuMemMap").calls, 0u);

  g_map_result = CUDA_ERROR_OUT_OF_MEMORY;
  EXPECT_EQ(arena.mem_map(0x200000, 4 << 20, 0, 7, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(g_mapped_at, CUdeviceptr{0x200000});
  EXPECT_EQ(g_mapped_size, size_t{4} << 20);
  EXPECT_EQ(sync.event_query(nullptr), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(sync.event_query(nullptr), CUDA_ERROR_NOT_READY);

  EXPECT_EQ(total("cuMemMap").calls, 1u);
  EXPECT_EQ(total("cuMemMap").window_calls, 0u);
  EXPECT_GE(total("cuMemMap").ms, 2.0);  // the call's own time is counted
  EXPECT_EQ(total("cuEventQuery").calls, 2u);
  EXPECT_EQ(total("cuMemUnmap").calls, 0u);  // never called: not listed

  // The same driver function in the two tables counts apart.
  arena.stream_synchronize(nullptr);
  EXPECT_EQ(total("cuStreamSynchronize").calls, 1u);
  EXPECT_EQ(total("cuStreamSynchronize (frees)").calls, 0u);
  sync.stream_synchronize(nullptr);
  EXPECT_EQ(total("cuStreamSynchronize (frees)").calls, 1u);

  // Inside a window, on this thread only.
  vmm_driver_in_window(true);
  arena.mem_unmap(0x200000, 4 << 20);
  vmm_driver_in_window(false);
  arena.mem_unmap(0x200000, 4 << 20);
  EXPECT_EQ(total("cuMemUnmap").calls, 2u);
  EXPECT_EQ(total("cuMemUnmap").window_calls, 1u);
  EXPECT_LE(total("cuMemUnmap").window_ms, total("cuMemUnmap").ms);
}

CUmemLocationType g_created_on = CU_MEM_LOCATION_TYPE_INVALID;
CUresult CUDAAPI fake_create(CUmemGenericAllocationHandle* handle, size_t,
                             const CUmemAllocationProp* prop, unsigned long long) {
  g_created_on = prop->location.type;
  *handle = 42;
  return CUDA_SUCCESS;
}

// cuMemCreate's calls count in all, and those on the host apart as well.
TEST(VmmDriverTiming, HostCreatesCountApartToo) {
  vmm::VmmDriver arena;
  arena.mem_create = fake_create;
  VmmSyncDriver sync;
  time_vmm_driver(arena, sync);
  const uint64_t all = total("cuMemCreate").calls, host = total("cuMemCreate (host)").calls;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(arena.mem_create(&handle, 2 << 20, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(handle, 42u);
  EXPECT_EQ(g_created_on, CU_MEM_LOCATION_TYPE_DEVICE);
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  vmm_driver_in_window(true);
  EXPECT_EQ(arena.mem_create(&handle, 2 << 20, &prop, 0), CUDA_SUCCESS);
  vmm_driver_in_window(false);
  EXPECT_EQ(g_created_on, CU_MEM_LOCATION_TYPE_HOST_NUMA);
  EXPECT_EQ(total("cuMemCreate").calls, all + 2);
  EXPECT_EQ(total("cuMemCreate (host)").calls, host + 1);
  EXPECT_EQ(total("cuMemCreate (host)").window_calls, 1u);
}

}  // namespace
}  // namespace umswap
