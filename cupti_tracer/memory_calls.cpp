#include "umswap/tracer/memory_calls.h"

#include <cupti.h>

#include <array>

namespace umswap::tracer {
namespace {

constexpr std::array<std::string_view, static_cast<size_t>(MemoryCallClass::count)> kNames = {
    "memcpy",       "memcpy HtoD", "memcpy DtoH",  "memcpy DtoD",           "memcpy 2D/3D",
    "memcpy batch", "memset",      "stream memop", "graph or host function"};

// Every id decode_memory_call() takes; each _ptsz/_ptds form shares its base form's parameters.
constexpr uint32_t kIds[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoA_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoA_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoD_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoD_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue32,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue32_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue32_v2,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue32_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue64,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue64_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue64_v2,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue64_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp_v2,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamAddCallback,
    CUPTI_DRIVER_TRACE_CBID_cuStreamAddCallback_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice,
};

template <class P>
const P& params_as(const void* p) {
  return *static_cast<const P*>(p);
}

// An asynchronous memset: its destination and its stream.
template <class P>
bool memset_async(const void* p, MemoryCall* call, std::vector<uint64_t>* pointers) {
  const P& a = params_as<P>(p);
  *pointers = {a.dstDevice};
  call->what = MemoryCallClass::memset;
  call->stream = a.hStream;
  return true;
}

// A batch of linear copies (cuMemcpyBatchAsync and its _v2): each destination and source.
template <class P>
bool copy_batch(const void* p, MemoryCall* call, std::vector<uint64_t>* pointers) {
  const P& a = params_as<P>(p);
  for (size_t i = 0; i < a.count; ++i) {
    pointers->push_back(a.dsts ? a.dsts[i] : 0);
    pointers->push_back(a.srcs ? a.srcs[i] : 0);
  }
  call->what = MemoryCallClass::copy_batch;
  call->stream = a.hStream;
  return true;
}

// A batch of 3D copies (cuMemcpy3DBatchAsync and its _v2): each operand that is a pointer.
template <class P>
bool copy_3d_batch(const void* p, MemoryCall* call, std::vector<uint64_t>* pointers) {
  const P& a = params_as<P>(p);
  for (size_t i = 0; a.opList && i < a.numOps; ++i) {
    for (const CUmemcpy3DOperand* o : {&a.opList[i].dst, &a.opList[i].src}) {
      if (o->type == CU_MEMCPY_OPERAND_TYPE_POINTER) pointers->push_back(o->op.ptr.ptr);
    }
  }
  call->what = MemoryCallClass::copy_batch;
  call->stream = a.hStream;
  return true;
}

uint64_t host(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}

// Where one side of a 2D/3D copy starts: the base of its memory type, moved to (x, y, z).
uint64_t operand_start(CUmemorytype type, const void* host_base, CUdeviceptr device_base, size_t x,
                       size_t y, size_t z, size_t pitch, size_t height) {
  uint64_t base = 0;
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      base = host(host_base);
      break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
      base = device_base;
      break;
    default:  // an array, or a type the driver would refuse
      return 0;
  }
  return base ? base + (z * height + y) * pitch + x : 0;
}

template <class Copy3D>
void add_3d(const Copy3D& c, std::vector<uint64_t>* out) {
  out->push_back(operand_start(c.srcMemoryType, c.srcHost, c.srcDevice, c.srcXInBytes, c.srcY,
                               c.srcZ, c.srcPitch, c.srcHeight));
  out->push_back(operand_start(c.dstMemoryType, c.dstHost, c.dstDevice, c.dstXInBytes, c.dstY,
                               c.dstZ, c.dstPitch, c.dstHeight));
}

void add_memop(const CUstreamBatchMemOpParams& op, std::vector<uint64_t>* out) {
  switch (op.operation) {
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      out->push_back(op.writeValue.address);
      break;
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      out->push_back(op.waitValue.address);
      break;
    default:  // flushes and barriers touch no address
      break;
  }
}

}  // namespace

std::string_view step_name(MemoryCallClass c) {
  const auto i = static_cast<size_t>(c);
  return i < kNames.size() ? kNames[i] : std::string_view("memory call");
}

bool may_wait_for_gpu(MemoryCallClass c) {
  switch (c) {
    case MemoryCallClass::memcpy:
    case MemoryCallClass::htod:
    case MemoryCallClass::dtoh:
    case MemoryCallClass::copy_2d:
    case MemoryCallClass::copy_batch:
      return true;
    default:
      return false;
  }
}

std::span<const uint32_t> memory_callback_ids() {
  return kIds;
}

bool decode_memory_call(uint32_t cbid, const void* p, MemoryCall* call,
                        std::vector<uint64_t>* pointers) {
  pointers->clear();
  call->opaque = nullptr;
  const auto set = [&](MemoryCallClass what, CUstream stream) {
    call->what = what;
    call->stream = stream;
    return true;
  };
  // Synchronous _ptds forms run on the calling thread's default stream.
  const CUstream per_thread = CU_STREAM_PER_THREAD;
  using C = MemoryCallClass;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds: {
      const auto& a = params_as<cuMemcpy_params>(p);
      *pointers = {a.dst, a.src};
      return set(C::memcpy, cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy ? nullptr : per_thread);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz: {
      const auto& a = params_as<cuMemcpyAsync_params>(p);
      *pointers = {a.dst, a.src};
      return set(C::memcpy, a.hStream);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds: {
      const auto& a = params_as<cuMemcpyHtoD_v2_params>(p);
      *pointers = {a.dstDevice, host(a.srcHost)};
      return set(C::htod, cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2 ? nullptr : per_thread);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz: {
      const auto& a = params_as<cuMemcpyHtoDAsync_v2_params>(p);
      *pointers = {a.dstDevice, host(a.srcHost)};
      return set(C::htod, a.hStream);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds: {
      const auto& a = params_as<cuMemcpyDtoH_v2_params>(p);
      *pointers = {host(a.dstHost), a.srcDevice};
      return set(C::dtoh, cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2 ? nullptr : per_thread);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz: {
      const auto& a = params_as<cuMemcpyDtoHAsync_v2_params>(p);
      *pointers = {host(a.dstHost), a.srcDevice};
      return set(C::dtoh, a.hStream);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds: {
      const auto& a = params_as<cuMemcpyDtoD_v2_params>(p);
      *pointers = {a.dstDevice, a.srcDevice};
      return set(C::dtod, cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2 ? nullptr : per_thread);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz: {
      const auto& a = params_as<cuMemcpyDtoDAsync_v2_params>(p);
      *pointers = {a.dstDevice, a.srcDevice};
      return set(C::dtod, a.hStream);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer_ptds: {
      const auto& a = params_as<cuMemcpyPeer_params>(p);
      *pointers = {a.dstDevice, a.srcDevice};
      return set(C::dtod, cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer ? nullptr : per_thread);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync_ptsz: {
      const auto& a = params_as<cuMemcpyPeerAsync_params>(p);
      *pointers = {a.dstDevice, a.srcDevice};
      return set(C::dtod, a.hStream);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoA_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoA_v2_ptds: {
      *pointers = {params_as<cuMemcpyDtoA_v2_params>(p).srcDevice};
      return set(C::dtod, cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoA_v2 ? nullptr : per_thread);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoD_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoD_v2_ptds: {
      *pointers = {params_as<cuMemcpyAtoD_v2_params>(p).dstDevice};
      return set(C::dtod, cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoD_v2 ? nullptr : per_thread);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2_ptsz: {
      // cuMemcpy2D_v2_params and cuMemcpy2DUnaligned_v2_params: {pCopy}; the async form adds
      // the stream after it.
      const auto& a = params_as<cuMemcpy2DAsync_v2_params>(p);
      if (const CUDA_MEMCPY2D* c = a.pCopy) {
        pointers->push_back(operand_start(c->srcMemoryType, c->srcHost, c->srcDevice,
                                          c->srcXInBytes, c->srcY, 0, c->srcPitch, 0));
        pointers->push_back(operand_start(c->dstMemoryType, c->dstHost, c->dstDevice,
                                          c->dstXInBytes, c->dstY, 0, c->dstPitch, 0));
      }
      const bool async = cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2 ||
                         cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2_ptsz;
      const bool ptds = cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2_ptds ||
                        cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2_ptds;
      return set(C::copy_2d, async ? a.hStream : (ptds ? per_thread : nullptr));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2_ptsz: {
      const auto& a = params_as<cuMemcpy3DAsync_v2_params>(p);
      if (a.pCopy) add_3d(*a.pCopy, pointers);
      const bool async = cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2 ||
                         cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2_ptsz;
      return set(C::copy_2d,
                 async
                     ? a.hStream
                     : (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2_ptds ? per_thread : nullptr));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync_ptsz: {
      const auto& a = params_as<cuMemcpy3DPeerAsync_params>(p);
      if (a.pCopy) add_3d(*a.pCopy, pointers);
      const bool async = cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync ||
                         cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync_ptsz;
      return set(
          C::copy_2d,
          async ? a.hStream
                : (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer_ptds ? per_thread : nullptr));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_ptsz:
      return copy_batch<cuMemcpyBatchAsync_params>(p, call, pointers);
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2_ptsz:
      return copy_batch<cuMemcpyBatchAsync_v2_params>(p, call, pointers);
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_ptsz:
      return copy_3d_batch<cuMemcpy3DBatchAsync_params>(p, call, pointers);
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2_ptsz:
      return copy_3d_batch<cuMemcpy3DBatchAsync_v2_params>(p, call, pointers);
    // Memsets: the destination comes first in every form; the async forms end with the stream.
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2:
      *pointers = {params_as<cuMemsetD8_v2_params>(p).dstDevice};
      return set(C::memset, nullptr);
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds:
      *pointers = {params_as<cuMemsetD8_v2_ptds_params>(p).dstDevice};
      return set(C::memset, per_thread);
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz:
      return memset_async<cuMemsetD8Async_params>(p, call, pointers);
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz:
      return memset_async<cuMemsetD16Async_params>(p, call, pointers);
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz:
      return memset_async<cuMemsetD32Async_params>(p, call, pointers);
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2:
      *pointers = {params_as<cuMemsetD2D8_v2_params>(p).dstDevice};
      return set(C::memset, nullptr);
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2_ptds:
      *pointers = {params_as<cuMemsetD2D8_v2_ptds_params>(p).dstDevice};
      return set(C::memset, per_thread);
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async_ptsz:
      return memset_async<cuMemsetD2D8Async_params>(p, call, pointers);
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async_ptsz:
      return memset_async<cuMemsetD2D16Async_params>(p, call, pointers);
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async_ptsz:
      return memset_async<cuMemsetD2D32Async_params>(p, call, pointers);
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue32:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue32_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue32_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue32_v2_ptsz: {
      const auto& a = params_as<cuStreamWriteValue32_params>(p);
      *pointers = {a.addr};
      return set(C::memop, a.stream);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue64:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue64_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue64_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue64_v2_ptsz: {
      const auto& a = params_as<cuStreamWriteValue64_params>(p);
      *pointers = {a.addr};
      return set(C::memop, a.stream);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp_v2_ptsz: {
      const auto& a = params_as<cuStreamBatchMemOp_params>(p);
      for (unsigned i = 0; a.paramArray && i < a.count; ++i) add_memop(a.paramArray[i], pointers);
      return set(C::memop, a.stream);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
      call->opaque = kGraphLaunch.data();
      return set(C::opaque, params_as<cuGraphLaunch_params>(p).hStream);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc_ptsz:
      call->opaque = "a host function";
      return set(C::opaque, params_as<cuLaunchHostFunc_params>(p).hStream);
    case CUPTI_DRIVER_TRACE_CBID_cuStreamAddCallback:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamAddCallback_ptsz:
      call->opaque = "a stream callback";
      return set(C::opaque, params_as<cuStreamAddCallback_params>(p).hStream);
    // The deprecated launches (parameters set by cuParamSet*, or several devices' at once): their
    // pointers are not read, so what they reach is not known.
    case CUPTI_DRIVER_TRACE_CBID_cuLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid:
      call->opaque = "a legacy kernel launch";
      return set(C::opaque, nullptr);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync:
      call->opaque = "a legacy kernel launch";
      return set(C::opaque, params_as<cuLaunchGridAsync_params>(p).hStream);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice:
      call->opaque = "a multi-device cooperative launch";
      return set(C::opaque, nullptr);
    default:
      return false;
  }
}

}  // namespace umswap::tracer
