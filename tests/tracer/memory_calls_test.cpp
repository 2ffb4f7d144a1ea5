// The driver's copies, memsets and memory operations decoded from CUPTI's callback parameters
// (memory_calls.h): what each form touches and on which stream.
#include "umswap/tracer/memory_calls.h"

#include <cupti.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>
#include <vector>

namespace umswap::tracer {
namespace {

constexpr CUdeviceptr kDst = 0x7f0000200000;
constexpr CUdeviceptr kSrc = 0x7f0000400000;
CUstream stream_of(uintptr_t v) {
  return reinterpret_cast<CUstream>(v);
}

struct Decoded {
  bool known = false;
  MemoryCall call;
  std::vector<uint64_t> pointers;
};
Decoded decode(uint32_t cbid, const void* params) {
  Decoded d;
  d.pointers = {1, 2, 3};  // cleared by the decoder
  d.known = decode_memory_call(cbid, params, &d.call, &d.pointers);
  return d;
}

TEST(MemoryCalls, EveryIdDecodesOnceAndLaunchesAreNotAmongThem) {
  const auto ids = memory_callback_ids();
  EXPECT_EQ(std::set<uint32_t>(ids.begin(), ids.end()).size(), ids.size());
  // Zeroed parameters: null structs and arrays must be read as "nothing touched".
  alignas(64) std::array<std::byte, 512> zero{};
  for (uint32_t cbid : ids) {
    const Decoded d = decode(cbid, zero.data());
    EXPECT_TRUE(d.known) << cbid;
    for (uint64_t p : d.pointers) EXPECT_EQ(p, 0u) << cbid;
  }
  for (uint32_t launch :
       {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
        CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2}) {
    EXPECT_FALSE(decode(launch, zero.data()).known);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), launch), 0);
  }
}

TEST(MemoryCalls, TheFormsTheTracerDidNotSeeBefore) {
  // Synchronous copies on the per-thread default stream.
  const cuMemcpyDtoD_v2_ptds_params dtod{.dstDevice = kDst, .srcDevice = kSrc, .ByteCount = 8};
  Decoded d = decode(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds, &dtod);
  ASSERT_TRUE(d.known);
  EXPECT_EQ(d.call.what, MemoryCallClass::dtod);
  EXPECT_EQ(d.call.stream, CU_STREAM_PER_THREAD);
  EXPECT_EQ(d.pointers, (std::vector<uint64_t>{kDst, kSrc}));
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2, &dtod);
  EXPECT_EQ(d.call.stream, nullptr);

  // A 16-bit memset on a stream; a 2D 32-bit memset on the per-thread stream.
  const cuMemsetD16Async_params d16{.dstDevice = kDst, .us = 7, .N = 4, .hStream = stream_of(9)};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz, &d16);
  EXPECT_EQ(d.call.what, MemoryCallClass::memset);
  EXPECT_EQ(d.call.stream, stream_of(9));
  EXPECT_EQ(d.pointers, (std::vector<uint64_t>{kDst}));
  const cuMemsetD2D32_v2_ptds_params d2d{
      .dstDevice = kSrc, .dstPitch = 256, .ui = 1, .Width = 4, .Height = 2};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2_ptds, &d2d);
  EXPECT_EQ(d.call.stream, CU_STREAM_PER_THREAD);
  EXPECT_EQ(d.pointers, (std::vector<uint64_t>{kSrc}));

  // A host pointer may be managed memory: it is handed on too.
  int host = 0;
  const cuMemcpyHtoDAsync_v2_params htod{
      .dstDevice = kDst, .srcHost = &host, .ByteCount = 4, .hStream = stream_of(3)};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, &htod);
  EXPECT_EQ(d.call.what, MemoryCallClass::htod);
  EXPECT_EQ(d.pointers, (std::vector<uint64_t>{kDst, reinterpret_cast<uint64_t>(&host)}));
}

TEST(MemoryCalls, TwoAndThreeDimensionalCopiesStartWhereTheirOffsetsPoint) {
  char host[64];
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = kSrc;
  c.srcXInBytes = 16;
  c.srcY = 3;
  c.srcPitch = 256;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = host;
  c.dstXInBytes = 4;
  c.dstY = 1;
  c.dstPitch = 32;
  const cuMemcpy2DAsync_v2_params async{.pCopy = &c, .hStream = stream_of(5)};
  Decoded d = decode(CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2, &async);
  EXPECT_EQ(d.call.what, MemoryCallClass::copy_2d);
  EXPECT_EQ(d.call.stream, stream_of(5));
  EXPECT_EQ(d.pointers,
            (std::vector<uint64_t>{kSrc + 3 * 256 + 16, reinterpret_cast<uint64_t>(host) + 36}));
  const cuMemcpy2D_v2_params sync{.pCopy = &c};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2, &sync);
  EXPECT_EQ(d.call.stream, nullptr);
  EXPECT_EQ(d.pointers.size(), 2u);
  // An array side touches no linear memory.
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2_ptds, &sync);
  EXPECT_EQ(d.call.stream, CU_STREAM_PER_THREAD);
  EXPECT_EQ(d.pointers, (std::vector<uint64_t>{kSrc + 3 * 256 + 16, 0}));

  CUDA_MEMCPY3D c3{};
  c3.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
  c3.srcDevice = kSrc;
  c3.srcXInBytes = 8;
  c3.srcY = 2;
  c3.srcZ = 1;
  c3.srcPitch = 128;
  c3.srcHeight = 4;
  c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.dstDevice = kDst;
  const cuMemcpy3D_v2_params three{.pCopy = &c3};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2, &three);
  EXPECT_EQ(d.pointers, (std::vector<uint64_t>{kSrc + (1 * 4 + 2) * 128 + 8, kDst}));
}

TEST(MemoryCalls, BatchesGiveEveryOperand) {
  CUdeviceptr dsts[] = {kDst, kDst + 64, kDst + 128};
  CUdeviceptr srcs[] = {kSrc, kSrc + 64, kSrc + 128};
  size_t sizes[] = {8, 8, 8};
  const cuMemcpyBatchAsync_v2_params batch{.dsts = dsts,
                                           .srcs = srcs,
                                           .sizes = sizes,
                                           .count = 3,
                                           .attrs = nullptr,
                                           .attrsIdxs = nullptr,
                                           .numAttrs = 0,
                                           .hStream = stream_of(2)};
  Decoded d = decode(CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2, &batch);
  EXPECT_EQ(d.call.what, MemoryCallClass::copy_batch);
  EXPECT_EQ(d.call.stream, stream_of(2));
  EXPECT_EQ(d.pointers,
            (std::vector<uint64_t>{kDst, kSrc, kDst + 64, kSrc + 64, kDst + 128, kSrc + 128}));

  CUDA_MEMCPY3D_BATCH_OP ops[2]{};
  ops[0].dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  ops[0].dst.op.ptr.ptr = kDst;
  ops[0].src.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  ops[1].dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  ops[1].dst.op.ptr.ptr = kDst + 4096;
  ops[1].src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  ops[1].src.op.ptr.ptr = kSrc;
  const cuMemcpy3DBatchAsync_params batch3{
      .numOps = 2, .opList = ops, .failIdx = nullptr, .flags = 0, .hStream = stream_of(4)};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_ptsz, &batch3);
  EXPECT_EQ(d.call.stream, stream_of(4));
  EXPECT_EQ(d.pointers, (std::vector<uint64_t>{kDst, kDst + 4096, kSrc}));
}

TEST(MemoryCalls, StreamMemoryOperationsAndOpaqueCalls) {
  const cuStreamWriteValue64_v2_params write{
      .stream = stream_of(6), .addr = kDst, .value = 1, .flags = 0};
  Decoded d = decode(CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue64_v2, &write);
  EXPECT_EQ(d.call.what, MemoryCallClass::memop);
  EXPECT_EQ(d.call.stream, stream_of(6));
  EXPECT_EQ(d.pointers, (std::vector<uint64_t>{kDst}));

  CUstreamBatchMemOpParams ops[3]{};
  ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[0].writeValue.address = kDst;
  ops[1].flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
  ops[2].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
  ops[2].waitValue.address = kSrc;
  const cuStreamBatchMemOp_v2_params batch{
      .stream = stream_of(8), .count = 3, .paramArray = ops, .flags = 0};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp_v2, &batch);
  EXPECT_EQ(d.pointers, (std::vector<uint64_t>{kDst, kSrc}));

  const cuGraphLaunch_params graph{.hGraph = nullptr, .hStream = stream_of(11)};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, &graph);
  EXPECT_EQ(d.call.what, MemoryCallClass::opaque);
  EXPECT_EQ(d.call.stream, stream_of(11));
  EXPECT_TRUE(d.pointers.empty());
  EXPECT_STREQ(d.call.opaque, "a CUDA graph launch");
  // kGraphLaunch names graph launches, both forms, and no other opaque call (the advisor and
  // engine vmm count them by it: stats advisor.graph_launches, vmm.graph_launches).
  EXPECT_TRUE(d.call.opaque == kGraphLaunch);
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, &graph);
  EXPECT_TRUE(d.call.opaque != nullptr && d.call.opaque == kGraphLaunch);
  const cuLaunchHostFunc_params fn{.hStream = stream_of(12), .fn = nullptr, .userData = nullptr};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc_ptsz, &fn);
  EXPECT_EQ(d.call.what, MemoryCallClass::opaque);
  EXPECT_EQ(d.call.stream, stream_of(12));
  EXPECT_FALSE(d.call.opaque == kGraphLaunch);
  const cuStreamAddCallback_params callback{
      .hStream = stream_of(13), .callback = nullptr, .userData = nullptr, .flags = 0};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuStreamAddCallback, &callback);
  EXPECT_EQ(d.call.what, MemoryCallClass::opaque);
  EXPECT_EQ(d.call.stream, stream_of(13));
  EXPECT_STREQ(d.call.opaque, "a stream callback");
  // The deprecated launches: what they reach is not read.
  const cuLaunchGridAsync_params grid{
      .f = nullptr, .grid_width = 1, .grid_height = 1, .hStream = stream_of(14)};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync, &grid);
  EXPECT_EQ(d.call.what, MemoryCallClass::opaque);
  EXPECT_EQ(d.call.stream, stream_of(14));
  EXPECT_STREQ(d.call.opaque, "a legacy kernel launch");
  const cuLaunch_params legacy{.f = nullptr};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuLaunch, &legacy);
  EXPECT_EQ(d.call.what, MemoryCallClass::opaque);
  EXPECT_EQ(d.call.stream, nullptr);
  const cuLaunchCooperativeKernelMultiDevice_params multi{
      .launchParamsList = nullptr, .numDevices = 2, .flags = 0};
  d = decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice, &multi);
  EXPECT_EQ(d.call.what, MemoryCallClass::opaque);
  EXPECT_STREQ(d.call.opaque, "a multi-device cooperative launch");
}

TEST(MemoryCalls, StepNamesKeepTheTracesEarlierNamesAndAreDistinct) {
  EXPECT_EQ(step_name(MemoryCallClass::memcpy), "memcpy");
  EXPECT_EQ(step_name(MemoryCallClass::htod), "memcpy HtoD");
  EXPECT_EQ(step_name(MemoryCallClass::dtoh), "memcpy DtoH");
  EXPECT_EQ(step_name(MemoryCallClass::dtod), "memcpy DtoD");
  EXPECT_EQ(step_name(MemoryCallClass::memset), "memset");
  std::set<std::string_view> names;
  for (size_t i = 0; i < static_cast<size_t>(MemoryCallClass::count); ++i) {
    names.insert(step_name(static_cast<MemoryCallClass>(i)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(MemoryCallClass::count));
}

TEST(MemoryCalls, OnlyCopiesThatMayTouchHostMemoryMayWaitForTheGpu) {
  EXPECT_TRUE(may_wait_for_gpu(MemoryCallClass::memcpy));
  EXPECT_TRUE(may_wait_for_gpu(MemoryCallClass::htod));
  EXPECT_TRUE(may_wait_for_gpu(MemoryCallClass::dtoh));
  EXPECT_TRUE(may_wait_for_gpu(MemoryCallClass::copy_2d));
  EXPECT_TRUE(may_wait_for_gpu(MemoryCallClass::copy_batch));
  EXPECT_FALSE(may_wait_for_gpu(MemoryCallClass::dtod));
  EXPECT_FALSE(may_wait_for_gpu(MemoryCallClass::memset));
  EXPECT_FALSE(may_wait_for_gpu(MemoryCallClass::memop));
  EXPECT_FALSE(may_wait_for_gpu(MemoryCallClass::opaque));
}

}  // namespace
}  // namespace umswap::tracer
