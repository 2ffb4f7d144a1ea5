// The driver calls besides kernel launches that read or write device memory: copies, memsets
// and stream memory operations, decoded from CUPTI's driver-API callback parameters into the
// addresses they touch; and the calls whose reach the tracer cannot know (a CUDA graph launch,
// a host function or stream callback). Pure: reads only the parameter structs it is given, calls
// no driver.
//
// Why every variant: with UMSWAP_EVICT_COPY a range can be discarded on the GPU while its bytes
// wait on the host, and only launches the tracer sees are held until they come back (the guard,
// advisor.h). A copy through an entry point the tracer does not decode (a 2D copy, a 16-bit
// memset, a synchronous copy on the per-thread default stream, a batch of copies) would read or
// write that range unseen.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace umswap::tracer {

// The step name of each decoded call; a trace key (step names) per class.
enum class MemoryCallClass : uint8_t {
  memcpy,      // unified addressing: either side may be device memory
  htod,        // host to device
  dtoh,        // device to host
  dtod,        // device to device (and peer)
  copy_2d,     // cuMemcpy2D*, cuMemcpy3D*
  copy_batch,  // cuMemcpyBatchAsync, cuMemcpy3DBatchAsync
  memset,      // cuMemsetD8/16/32 and their 2D forms
  memop,       // cuStreamWriteValue*, cuStreamBatchMemOp
  opaque,      // a graph launch, host function, stream callback or deprecated kernel launch
               // (cuLaunch, cuLaunchGrid[Async], multi-device cooperative): reach not known
  count
};
std::string_view step_name(MemoryCallClass c);

// True for the calls that may hold their thread, inside the driver, until the GPU has run what
// the stream holds before them: every copy that can have host memory on one side (synchronous
// copies, and asynchronous ones to or from pageable memory, which the driver stages). A device
// to device copy, a memset or a memory operation returns at once.
bool may_wait_for_gpu(MemoryCallClass c);

struct MemoryCall {
  MemoryCallClass what = MemoryCallClass::memcpy;
  CUstream stream = nullptr;     // legacy default stream for synchronous calls; the per-thread
                                 // default stream for their _ptds forms
  const char* opaque = nullptr;  // what an opaque call is, for messages ("a CUDA graph launch")
};

// MemoryCall::opaque of a CUDA graph launch (cuGraphLaunch and its _ptsz form).
inline constexpr std::string_view kGraphLaunch = "a CUDA graph launch";

// The callback ids decode_memory_call() knows (to enable with cuptiEnableCallback).
std::span<const uint32_t> memory_callback_ids();

// Decodes the parameters of driver callback `cbid` (CUpti_CallbackData::functionParams). True
// when it is one of memory_callback_ids(): `call` says what it is and `pointers` (cleared first)
// holds the addresses it starts touching, device and host alike (a host pointer may be managed
// memory; one outside every buffer matches none), each once per operand. A 2D or 3D operand's
// address is where the copy starts (its X, Y and Z offsets applied); arrays are left out.
// Opaque calls give no pointers.
bool decode_memory_call(uint32_t cbid, const void* params, MemoryCall* call,
                        std::vector<uint64_t>* pointers);

}  // namespace umswap::tracer
