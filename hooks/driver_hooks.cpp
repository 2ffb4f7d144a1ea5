// Exported driver-API shims, one per entry of UMSWAP_DRIVER_HOOKS. Each: find the state, pass the
// call through when umswap does not redirect (or is itself the caller), else hand it to the
// allocator. Reached directly by programs linked with -lcuda, and through cuGetProcAddress/dlsym
// answers by everything else (proc_address.cpp).
#include <dlfcn.h>

#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "launch_in_order.h"
#include "preload.h"
#include "reentry_guard.h"
#include "umswap/core/log.h"
#include "umswap/tracer/tracer.h"
#include "vmm_engine.h"

#define UMSWAP_EXPORT extern "C" __attribute__((visibility("default")))

using umswap::AllocApi;
using umswap::Preload;
using umswap::preload;
using umswap::ReentryGuard;

namespace {

// Without a driver no driver hook can have been reached legitimately (the program got the symbol
// from libcuda); answer as a driver that is not there would.
constexpr CUresult kNoDriver = CUDA_ERROR_NOT_INITIALIZED;

// The legacy default stream of a _ptsz entry point means the per-thread stream.
CUstream per_thread(CUstream stream) {
  return stream ? stream : CU_STREAM_PER_THREAD;
}

bool skip(Preload& p) {
  return ReentryGuard::active() || !p.redirecting();
}

// Engine vmm (UMSWAP_ENGINE=vmm): its allocator when it is to serve an allocation made now: not
// umswap's own call, and the calling thread's context is on the engine's device (one arena per
// process; an allocation on another device is left to the driver, on purpose). nullptr under
// engine um, always.
umswap::VmmAllocator* vmm_for_allocation(Preload& p) {
  if (ReentryGuard::active()) return nullptr;
  umswap::VmmAllocator* vmm = p.vmm();
  if (!vmm) return nullptr;
  CUdevice device = 0;
  if (p.driver()->cuCtxGetDevice(&device) == CUDA_SUCCESS && device != vmm->device()) {
    umswap::RuntimeApiScope::note_left_to_driver();
    return nullptr;
  }
  return vmm;
}

// Engine vmm's allocator for a free, a memory query or a call it leaves to the driver (pointers
// it does not know go to the driver); nullptr under engine um.
umswap::VmmAllocator* vmm_engine(Preload& p) {
  return ReentryGuard::active() ? nullptr : p.vmm();
}

// Why engine vmm does not give the program's cuMemCreate a virtual handle (virtual_handles.h);
// nullptr when it does: plain device memory on the engine's GPU, in whole chunks, with no
// attribute the engine cannot honour (compression, a usage), made by a library other than
// NCCL's or NVSHMEM's, which export their buffers to other processes (a virtual handle mapped by
// the engine cannot be), or PyTorch's: its expandable segments put a tensor across several
// handles, of which a window brings in only the one its pointer lands in, and cuDNN's dropout
// attention computed differently reading the rest over the link (H200, run 216). GPUDirect RDMA
// capability is asked for by PyTorch and JAX wherever the GPU has it, and is not honoured: a NIC
// given the memory would not follow its moves.
const char* not_virtualized(const CUmemAllocationProp& prop, size_t size, unsigned long long flags,
                            CUdevice device, void* caller) {
  if (flags != 0 || size == 0 || size % umswap::vmm::kChunk != 0) return "not whole 2 MiB chunks";
  if (prop.type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != device) {
    return "not memory on the engine's GPU";
  }
  if (prop.allocFlags.compressionType != 0 || prop.allocFlags.usage != 0) {
    return "compressible or with a usage";
  }
  if ((prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) != 0) {
    return "shareable across nodes (a fabric handle)";
  }
  Dl_info info{};
  if (caller && dladdr(caller, &info) && info.dli_fname) {
    const std::string_view file = info.dli_fname;
    if (file.find("nccl") != std::string_view::npos ||
        file.find("nvshmem") != std::string_view::npos) {
      return "NCCL's or NVSHMEM's, shared with other processes";
    }
    if (file.find("libc10_cuda") != std::string_view::npos) {
      return "PyTorch's expandable segments, whose tensors can span handles that the engine "
             "moves apart, which changes what cuDNN's dropout attention computes; set "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False, as umswap run does";
    }
  }
  return nullptr;
}

// Whether a virtual handle of `size` would find no room in the engine's pools when mapped (the
// handles made and not mapped yet counted as taken). cuMemCreate then answers out of memory, as
// engine vmm's cudaMalloc does, where programs expect it (allocators that map their own memory,
// as PyTorch's expandable segments do, recover from it there, not at cuMemMap).
bool no_room(umswap::VmmAllocator& vmm, const umswap::VirtualHandles& handles, size_t size) {
  auto short_of_room = [&] { return vmm.bytes_available() < handles.pending_bytes() + size; };
  // Frees in flight give their room back: waited for before the answer, as an allocation does.
  return short_of_room() && (vmm.drain() == 0 || short_of_room());
}

// A call on a mapping the engine made for the program that umswap does not serve (`what` says
// which): refused, with one warning for all of them.
CUresult refuse_on_virtual(const char* what) {
  static umswap::OnceFlag once;
  if (once.first()) {
    umswap::log_warning(
        "engine vmm: {}, on memory umswap maps for the program (a virtual handle): not supported "
        "(CUDA_ERROR_NOT_SUPPORTED)",
        what);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

// After the program's own mapping changed (ProgramMappings): engine vmm's pool follows.
void program_mappings_changed(Preload& p) {
  if (p.options().engine != umswap::Engine::vmm) return;
  if (umswap::VmmAllocator* vmm = p.vmm()) vmm->set_program_gpu_bytes(p.program_mappings());
}

// Real memory for a virtual handle the engine does not map (virtual_handles.h): counted as the
// program's own from now on.
CUresult materialize(Preload& p, CUmemGenericAllocationHandle handle, uint64_t bytes,
                     const CUmemAllocationProp& prop, CUmemGenericAllocationHandle* real) {
  // The caller holds the handle's claim (VirtualHandles::map): no other thread materializes it.
  CUmemGenericAllocationHandle made = 0;
  const CUresult status = p.driver()->cuMemCreate(&made, bytes, &prop, 0);
  if (status != CUDA_SUCCESS) {
    p.virtual_handles().unclaim(handle);
    return status;
  }
  // Counted before other threads can see it (a mapping of it must find it counted).
  p.program_mappings().created(made, bytes, true);
  *real = p.virtual_handles().set_real(handle, made);
  if (*real != made) {
    // The handle went meanwhile: this memory is not needed.
    p.driver()->cuMemRelease(made);
    p.program_mappings().released(made);
    program_mappings_changed(p);
    return *real != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  program_mappings_changed(p);
  static umswap::OnceFlag once;
  if (once.first()) {
    umswap::log_warning(
        "engine vmm: a handle of the program's is used otherwise than mapped whole once (or the "
        "engine had no room for it): it gets GPU memory of its own, counted against the budget "
        "(stats: vmm.program_gpu_bytes_peak)");
  }
  return CUDA_SUCCESS;
}

}  // namespace

UMSWAP_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (umswap::VmmAllocator* vmm = vmm_for_allocation(p); vmm && dptr && bytesize > 0) {
    ReentryGuard guard;
    return vmm->allocate(Preload::api_or(AllocApi::cuMemAlloc), bytesize, p.call_site(), false,
                         dptr);
  }
  if (skip(p) || !dptr || bytesize == 0) return p.driver()->cuMemAlloc_v2(dptr, bytesize);
  ReentryGuard guard;
  return p.allocator().allocate(Preload::api_or(AllocApi::cuMemAlloc), bytesize, p.call_site(),
                                dptr);
}

UMSWAP_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (umswap::VmmAllocator* vmm = vmm_engine(p)) {
    ReentryGuard guard;
    if (auto status = vmm->free(dptr)) return *status;
    return p.driver()->cuMemFree_v2(dptr);
  }
  if (skip(p)) return p.driver()->cuMemFree_v2(dptr);
  ReentryGuard guard;
  if (auto status = p.allocator().free(dptr)) return *status;
  return p.driver()->cuMemFree_v2(dptr);
}

UMSWAP_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                          size_t height, unsigned element_size) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  const bool valid = dptr && pitch && width && height &&
                     (element_size == 4 || element_size == 8 || element_size == 16);
  if (umswap::VmmAllocator* vmm = vmm_for_allocation(p); vmm && valid) {
    ReentryGuard guard;
    return vmm->allocate_pitch(Preload::api_or(AllocApi::cuMemAllocPitch), width, height,
                               umswap::vmm_pitch_alignment(*p.driver()), p.call_site(), dptr,
                               pitch);
  }
  if (skip(p) || !valid) {
    return p.driver()->cuMemAllocPitch_v2(dptr, pitch, width, height, element_size);
  }
  ReentryGuard guard;
  return p.allocator().allocate_pitch(Preload::api_or(AllocApi::cuMemAllocPitch), width, height,
                                      p.call_site(), dptr, pitch);
}

UMSWAP_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (umswap::VmmAllocator* vmm = vmm_engine(p); vmm && free && total) {
    ReentryGuard guard;
    return vmm->mem_get_info(free, total);
  }
  if (skip(p) || !free || !total) return p.driver()->cuMemGetInfo_v2(free, total);
  ReentryGuard guard;
  return p.allocator().mem_get_info(free, total);
}

UMSWAP_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned flags) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (vmm_engine(p)) {
    // The program's own managed memory stays the driver's under engine vmm, on purpose (not an
    // escape for the runtime hook's check).
    umswap::RuntimeApiScope::note_left_to_driver();
    return p.driver()->cuMemAllocManaged(dptr, bytesize, flags);
  }
  if (skip(p) || !dptr || bytesize == 0)
    return p.driver()->cuMemAllocManaged(dptr, bytesize, flags);
  ReentryGuard guard;
  return p.allocator().allocate_managed(Preload::api_or(AllocApi::cuMemAllocManaged), bytesize,
                                        flags, p.call_site(), dptr);
}

UMSWAP_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                   const CUmemAllocationProp* prop, unsigned long long flags) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  const char* why_not = "";
  if (umswap::VmmAllocator* vmm = vmm_for_allocation(p);
      vmm && handle && prop &&
      !(why_not =
            not_virtualized(*prop, size, flags, vmm->device(), __builtin_return_address(0)))) {
    if (no_room(*vmm, p.virtual_handles(), size)) {
      vmm->note_refused(size);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *handle = p.virtual_handles().create(size, *prop);
    umswap::log_debug("cuMemCreate virtual handle {:#x} {} bytes", *handle, size);
    static umswap::OnceFlag once;
    if (once.first()) {
      umswap::log_notice(
          "engine vmm serves the memory the program maps itself (cuMemCreate/cuMemMap, as JAX's "
          "allocators do): a handle mapped whole is a range umswap moves");
    }
    return CUDA_SUCCESS;
  }
  const CUresult status = p.driver()->cuMemCreate(handle, size, prop, flags);
  if (status != CUDA_SUCCESS || ReentryGuard::active() || !handle) return status;
  if (prop) {
    umswap::log_debug(
        "cuMemCreate handle {:#x} {} bytes location {}:{} handle types {:#x} rdma {} "
        "compression {} usage {}",
        *handle, size, static_cast<int>(prop->location.type), prop->location.id,
        static_cast<unsigned>(prop->requestedHandleTypes),
        static_cast<unsigned>(prop->allocFlags.gpuDirectRDMACapable),
        static_cast<unsigned>(prop->allocFlags.compressionType), prop->allocFlags.usage);
  }
  // Memory on the GPU umswap manages stays there: it counts against the budget
  // (ProgramMappings). That GPU: engine vmm's, else the calling thread's current one.
  auto on_gpu = [&](std::optional<CUdevice> ours) {
    CUdevice device = 0;
    if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return false;
    if (ours) return prop->location.id == *ours;
    return p.driver()->cuCtxGetDevice && p.driver()->cuCtxGetDevice(&device) == CUDA_SUCCESS &&
           prop->location.id == device;
  };
  if (p.options().engine == umswap::Engine::vmm) {
    if (umswap::VmmAllocator* vmm = p.vmm()) {
      p.program_mappings().created(*handle, size, on_gpu(vmm->device()));
      vmm->set_program_gpu_bytes(p.program_mappings());
      static umswap::OnceFlag once;
      if (once.first()) {
        umswap::log_warning(
            "the program maps memory itself with cuMemCreate/cuMemMap that engine vmm does not "
            "serve ({}); it stays where the program put it, and what is on this GPU counts "
            "against the budget: the pool shrinks by it (stats: vmm.program_gpu_bytes_peak)",
            why_not && *why_not ? why_not : "made on another GPU");
      }
    }
  } else if (p.redirecting()) {
    p.allocator().note_unmanaged_vmm();
    p.program_mappings().created(*handle, size, on_gpu(std::nullopt));
    static umswap::OnceFlag once;
    if (once.first()) {
      umswap::log_warning(
          "the program maps memory with cuMemCreate/cuMemMap (NCCL's buffers, JAX, PyTorch's "
          "expandable_segments), which cannot be managed memory; umswap leaves it on the GPU "
          "and counts it against the budget: plans keep the rest under the budget less it "
          "(stats: program_gpu_bytes_peak). PyTorch's expandable segments are off under "
          "`umswap run` (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False)");
    }
  }
  return status;
}

// The program's handles are counted until their last release and last unmap, as the driver frees
// them (ProgramMappings); what these three do besides is the driver's.
UMSWAP_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (!p.driver()->cuMemRelease) return CUDA_ERROR_NOT_FOUND;
  if (umswap::VirtualHandles::is_virtual(handle) && !ReentryGuard::active()) {
    const std::optional<umswap::VirtualHandles::Released> r = p.virtual_handles().release(handle);
    if (!r) return CUDA_ERROR_INVALID_VALUE;
    umswap::log_debug("cuMemRelease virtual handle {:#x}", handle);
    // A materialized handle holds one reference of the driver's, released with its last.
    if (r->real == 0 || r->left > 0) return CUDA_SUCCESS;
    handle = r->real;
  }
  const CUresult status = p.driver()->cuMemRelease(handle);
  if (status != CUDA_SUCCESS || ReentryGuard::active()) return status;
  umswap::log_debug("cuMemRelease handle {:#x}", handle);
  p.program_mappings().released(handle);
  program_mappings_changed(p);
  return status;
}

UMSWAP_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                CUmemGenericAllocationHandle handle, unsigned long long flags) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (!p.driver()->cuMemMap) return CUDA_ERROR_NOT_FOUND;
  if (umswap::VirtualHandles::is_virtual(handle) && !ReentryGuard::active()) {
    using Action = umswap::VirtualHandles::MapAction;
    umswap::VirtualHandles& handles = p.virtual_handles();
    const umswap::VirtualHandles::MapDecision d = handles.map(handle, ptr, size, offset);
    CUmemGenericAllocationHandle real = 0;
    switch (d.action) {
      case Action::not_virtual:
        return CUDA_ERROR_INVALID_VALUE;  // released already
      case Action::refuse:
        return refuse_on_virtual(
            "a second cuMemMap of one handle, or one of a handle the program unmapped");
      case Action::real:
        real = d.real_handle;
        break;
      case Action::engine: {
        CUresult status = CUDA_ERROR_INVALID_VALUE;
        if (umswap::VmmAllocator* vmm = p.vmm(); vmm && flags == 0) {
          ReentryGuard guard;
          status = vmm->map_program(ptr, size, p.call_site());
        }
        if (status == CUDA_SUCCESS) {
          handles.mapped(handle, ptr);
          umswap::log_debug("cuMemMap {:#x} {} bytes virtual handle {:#x}", ptr, size, handle);
          return status;
        }
        if (status != CUDA_ERROR_OUT_OF_MEMORY) {
          handles.unclaim(handle);
          return status;
        }
        // No room in the engine's pools: the handle gets memory of its own.
        [[fallthrough]];
      }
      case Action::materialize:
        if (const CUresult r = materialize(p, handle, d.bytes, d.prop, &real); r != CUDA_SUCCESS) {
          return r;
        }
        break;
    }
    handle = real;
  }
  const CUresult status = p.driver()->cuMemMap(ptr, size, offset, handle, flags);
  if (status == CUDA_SUCCESS && !ReentryGuard::active()) {
    umswap::log_debug("cuMemMap {:#x} {} bytes offset {} handle {:#x}", ptr, size, offset, handle);
    p.program_mappings().mapped(ptr, size, handle);
  }
  return status;
}

UMSWAP_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (!p.driver()->cuMemUnmap) return CUDA_ERROR_NOT_FOUND;
  if (umswap::VmmAllocator* vmm = vmm_engine(p)) {
    const umswap::VirtualHandles::Covered c = p.virtual_handles().covering(ptr, size);
    if (c.cuts) return refuse_on_virtual("cuMemUnmap of part of one mapping");
    if (!c.whole.empty()) {
      // The driver unmaps the rest of the interval first, if any: when it refuses, the engine's
      // mappings stay as they are and the program gets its error.
      bool unmapped = false;
      for (const auto& [from, to] : c.others) {
        if (const CUresult r = p.driver()->cuMemUnmap(from, to - from); r != CUDA_SUCCESS) {
          if (unmapped) program_mappings_changed(p);
          return r;
        }
        p.program_mappings().unmapped(from, to - from);
        unmapped = true;
      }
      if (unmapped) program_mappings_changed(p);
      CUresult first = CUDA_SUCCESS;
      for (const auto& [base, bytes] : c.whole) {
        ReentryGuard guard;
        const std::optional<CUresult> r = vmm->unmap_program(base);
        p.virtual_handles().unmapped(base);
        if (r && *r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = *r;
        umswap::log_debug("cuMemUnmap {:#x} {} bytes (engine vmm's)", base, bytes);
      }
      return first;
    }
  }
  const CUresult status = p.driver()->cuMemUnmap(ptr, size);
  if (status != CUDA_SUCCESS || ReentryGuard::active()) return status;
  umswap::log_debug("cuMemUnmap {:#x} {} bytes", ptr, size);
  p.program_mappings().unmapped(ptr, size);
  program_mappings_changed(p);
  return status;
}

UMSWAP_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                   void* addr) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (!p.driver()->cuMemRetainAllocationHandle) return CUDA_ERROR_NOT_FOUND;
  if (handle && vmm_engine(p)) {
    if (const std::optional<CUmemGenericAllocationHandle> h =
            p.virtual_handles().retain(reinterpret_cast<CUdeviceptr>(addr))) {
      *handle = *h;
      return CUDA_SUCCESS;
    }
  }
  const CUresult status = p.driver()->cuMemRetainAllocationHandle(handle, addr);
  if (status == CUDA_SUCCESS && handle && !ReentryGuard::active()) {
    p.program_mappings().retained(*handle);
  }
  return status;
}

// Access to memory engine vmm maps for the program is the engine's: given to its device when it
// maps a range. The program asking for that is answered yes; for another device, no (the engine
// maps its ranges for its own GPU only). Over memory that is not the engine's, the driver answers.
UMSWAP_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                      size_t count) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (!p.driver()->cuMemSetAccess) return CUDA_ERROR_NOT_FOUND;
  if (umswap::VmmAllocator* vmm = vmm_engine(p)) {
    const umswap::VirtualHandles::Covered c = p.virtual_handles().covering(ptr, size);
    if (c.cuts) return refuse_on_virtual("cuMemSetAccess over part of one mapping");
    if (!c.whole.empty()) {
      if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
      for (size_t i = 0; i < count; ++i) {
        const bool ours = desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
                          desc[i].location.id == vmm->device();
        if (!ours || desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
          return refuse_on_virtual("cuMemSetAccess for another device or other rights");
        }
      }
      for (const auto& [from, to] : c.others) {  // the driver's
        if (const CUresult r = p.driver()->cuMemSetAccess(from, to - from, desc, count);
            r != CUDA_SUCCESS) {
          return r;
        }
      }
      return CUDA_SUCCESS;
    }
  }
  return p.driver()->cuMemSetAccess(ptr, size, desc, count);
}

// A virtual handle the engine maps cannot be exported (its memory moves between GPU and host
// chunks); one not mapped yet gets memory of its own first, and is exported as any.
UMSWAP_EXPORT CUresult cuMemExportToShareableHandle(void* shareable,
                                                    CUmemGenericAllocationHandle handle,
                                                    CUmemAllocationHandleType type,
                                                    unsigned long long flags) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (!p.driver()->cuMemExportToShareableHandle) return CUDA_ERROR_NOT_FOUND;
  if (umswap::VirtualHandles::is_virtual(handle) && !ReentryGuard::active()) {
    using Action = umswap::VirtualHandles::MapAction;
    umswap::VirtualHandles& handles = p.virtual_handles();
    // As a mapping that is not whole would be: real, to materialize, or the engine's (refused).
    const umswap::VirtualHandles::MapDecision d = handles.map(handle, 0, 0, 0);
    CUmemGenericAllocationHandle real = d.real_handle;
    if (d.action == Action::not_virtual) return CUDA_ERROR_INVALID_VALUE;
    if (d.action == Action::refuse) {
      static umswap::OnceFlag once;
      if (once.first()) {
        umswap::log_warning(
            "engine vmm: the program exports memory it mapped with cuMemCreate/cuMemMap, which "
            "umswap moves between GPU and host and cannot share with another process "
            "(CUDA_ERROR_NOT_SUPPORTED); run without --engine vmm to share it");
      }
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (d.action == Action::materialize) {
      if (const CUresult r = materialize(p, handle, d.bytes, d.prop, &real); r != CUDA_SUCCESS) {
        return r;
      }
    }
    handle = real;
  }
  return p.driver()->cuMemExportToShareableHandle(shareable, handle, type, flags);
}

UMSWAP_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                              CUmemGenericAllocationHandle handle) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (!p.driver()->cuMemGetAllocationPropertiesFromHandle) return CUDA_ERROR_NOT_FOUND;
  if (umswap::VirtualHandles::is_virtual(handle) && !ReentryGuard::active()) {
    if (const auto real = p.virtual_handles().real(handle)) {
      handle = *real;
    } else if (const auto props = p.virtual_handles().properties(handle); props && prop) {
      *prop = *props;
      return CUDA_SUCCESS;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return p.driver()->cuMemGetAllocationPropertiesFromHandle(prop, handle);
}

// Exporting memory for another process (cudaIpcGetMemHandle; torch.multiprocessing does it to
// share a CUDA tensor) is the driver's call. On an allocation of umswap's it fails, as it does on
// any managed memory (engine vmm's chunks cannot be exported either): the program gets the
// driver's error, and the process one warning that says why and what to do (not for the program's
// own managed memory, which no driver exports).
UMSWAP_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (!p.driver()->cuIpcGetMemHandle) return CUDA_ERROR_NOT_FOUND;
  const CUresult status = p.driver()->cuIpcGetMemHandle(handle, dptr);
  if (status == CUDA_SUCCESS || ReentryGuard::active()) return status;
  // The program's own managed memory fails without umswap too: nothing to say about it.
  const std::optional<umswap::BufferRecord> record = p.registry().find(dptr);
  if (!record || record->app_managed) return status;
  static umswap::OnceFlag once;
  if (once.first()) {
    umswap::log_warning(
        "the program exports an allocation for another process (cudaIpcGetMemHandle: "
        "torch.multiprocessing sharing a CUDA tensor, NCCL with NCCL_CUMEM_ENABLE=0); umswap's "
        "allocations are managed memory (engine vmm: chunks it moves), which the driver cannot "
        "export, so the call fails with the driver's error (NCCL then goes through host "
        "memory). Share such tensors through host memory, leave NCCL_CUMEM_ENABLE unset, or "
        "run this process without umswap's allocations (`umswap run --mode passthrough`)");
  }
  return status;
}

namespace {

// A stream-ordered allocation made while its stream is captured becomes a graph memory node: the
// graph owns that memory (device memory; managed memory cannot back one), so it stays the
// driver's. A stream the driver cannot ask about is treated as captured: passing on is safe.
bool captured(Preload& p, CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const auto is_capturing = p.driver()->cuStreamIsCapturing;
  if (is_capturing && is_capturing(stream, &status) == CUDA_SUCCESS &&
      status == CU_STREAM_CAPTURE_STATUS_NONE) {
    return false;
  }
  if (umswap::VmmAllocator* vmm = p.vmm()) {
    vmm->note_captured();
  } else {
    p.allocator().note_captured();
  }
  umswap::RuntimeApiScope::note_left_to_driver();  // not an escape: left to the driver on purpose
  return true;
}

// A stream-ordered allocation under engine vmm. No call site: a stream-ordered allocator makes
// one allocation per tensor, and walking the stack of each cost about 2 ms (PyTorch's async
// backend, H200, 2026-12-01); engine um's blocks inside its slabs have none of their own either.
CUresult vmm_allocate_async(umswap::VmmAllocator& vmm, size_t bytesize, CUstream stream,
                            CUdeviceptr* dptr) {
  ReentryGuard guard;
  return vmm.allocate(Preload::api_or(AllocApi::cuMemAllocAsync), bytesize, umswap::CallSiteId{0},
                      true, dptr, stream);
}

CUresult alloc_async(CUdeviceptr* dptr, size_t bytesize, CUstream stream,
                     PFN_cuMemAllocAsync_v11020 real) {
  Preload& p = preload();
  if (umswap::VmmAllocator* vmm = vmm_for_allocation(p);
      vmm && dptr && bytesize > 0 && !captured(p, stream)) {
    return vmm_allocate_async(*vmm, bytesize, stream, dptr);
  }
  if (skip(p) || !dptr || bytesize == 0 || captured(p, stream)) {
    return real(dptr, bytesize, stream);
  }
  ReentryGuard guard;
  return p.allocator().allocate_async(
      Preload::api_or(AllocApi::cuMemAllocAsync), bytesize, stream, [&p] { return p.call_site(); },
      dptr);
}

CUresult free_async(CUdeviceptr dptr, CUstream stream, PFN_cuMemFreeAsync_v11020 real) {
  Preload& p = preload();
  if (umswap::VmmAllocator* vmm = vmm_engine(p)) {
    ReentryGuard guard;
    if (auto status = vmm->free_async(dptr, stream)) return *status;
    return real(dptr, stream);
  }
  if (skip(p)) return real(dptr, stream);
  ReentryGuard guard;
  if (auto status = p.allocator().free_async(dptr, stream)) return *status;
  return real(dptr, stream);
}

// Whether `pool` is the default memory pool of the calling thread's device.
bool is_default_pool(Preload& p, CUmemoryPool pool) {
  const umswap::RealDriver& d = *p.driver();
  CUdevice device = 0;
  CUmemoryPool default_pool = nullptr;
  return d.cuCtxGetDevice(&device) == CUDA_SUCCESS &&
         d.cuDeviceGetDefaultMemPool(&default_pool, device) == CUDA_SUCCESS && default_pool == pool;
}

// The runtime's cudaMallocAsync allocates from the device's current pool, which may reach the
// driver as cuMemAllocFromPoolAsync. Allocations from the device's default pool are redirected
// like cuMemAllocAsync; a pool the program created itself is its own business and left alone.
CUresult alloc_from_pool_async(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                               CUstream stream, PFN_cuMemAllocFromPoolAsync_v11020 real) {
  Preload& p = preload();
  if (umswap::VmmAllocator* vmm = vmm_for_allocation(p);
      vmm && dptr && bytesize > 0 && is_default_pool(p, pool) && !captured(p, stream)) {
    return vmm_allocate_async(*vmm, bytesize, stream, dptr);
  }
  if (skip(p) || !dptr || bytesize == 0) return real(dptr, bytesize, pool, stream);
  if (!is_default_pool(p, pool) || captured(p, stream)) return real(dptr, bytesize, pool, stream);
  ReentryGuard guard;
  return p.allocator().allocate_async(
      Preload::api_or(AllocApi::cuMemAllocAsync), bytesize, stream, [&p] { return p.call_site(); },
      dptr);
}

}  // namespace

UMSWAP_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  const auto* d = preload().driver();
  return d ? alloc_async(dptr, bytesize, stream, d->cuMemAllocAsync) : kNoDriver;
}

UMSWAP_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  const auto* d = preload().driver();
  return d ? alloc_async(dptr, bytesize, per_thread(stream), d->cuMemAllocAsync) : kNoDriver;
}

UMSWAP_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  const auto* d = preload().driver();
  return d ? free_async(dptr, stream, d->cuMemFreeAsync) : kNoDriver;
}

UMSWAP_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  const auto* d = preload().driver();
  return d ? free_async(dptr, per_thread(stream), d->cuMemFreeAsync) : kNoDriver;
}

UMSWAP_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                               CUmemoryPool pool, CUstream stream) {
  const auto* d = preload().driver();
  return d ? alloc_from_pool_async(dptr, bytesize, pool, stream, d->cuMemAllocFromPoolAsync)
           : kNoDriver;
}

UMSWAP_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                    CUmemoryPool pool, CUstream stream) {
  const auto* d = preload().driver();
  return d ? alloc_from_pool_async(dptr, bytesize, pool, per_thread(stream),
                                   d->cuMemAllocFromPoolAsync)
           : kNoDriver;
}

// Blocks of umswap's slabs (engine vmm: ranges) that this stream freed must not wait on it, nor
// serve it, by handle once it is gone (the handle may even be reused): the allocator records
// their event first (engine vmm: the events recorded at the frees stand).
UMSWAP_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  Preload& p = preload();
  if (!p.driver()) return kNoDriver;
  if (umswap::VmmAllocator* vmm = vmm_engine(p)) {
    ReentryGuard guard;
    vmm->stream_ends(stream);
  } else if (!skip(p)) {
    ReentryGuard guard;
    p.allocator().stream_ends(stream);
  }
  return p.driver()->cuStreamDestroy_v2(stream);
}

namespace {

// Calls the real function `Real` (a member of the real-driver table) unchanged, after `first()`
// ran on the calling thread, outside the driver (not for umswap's own calls).
template <auto Real, typename First, typename... Args>
CUresult after(First first, Args... args) {
  const auto* d = preload().driver();
  if (!d) return kNoDriver;
  if (!ReentryGuard::active()) first();
  return (d->*Real)(args...);
}

// Kernel launches: a function launched for the first time has its parameter layout read here,
// before the driver's launch, not in the tracer's callback inside it, where the read waited for
// good behind another thread's driver call (tracer::prepare_launch).
template <auto Real, typename... Args>
CUresult launch(CUfunction f, Args... args) {
  return after<Real>([f] { umswap::tracer::prepare_launch(f); }, args...);
}

// Calls that hold the thread until the GPU gets somewhere: copies to the host and synchronizes.
// The advisor may need to catch up first (launches submitted wait for its words), and the wait
// is taken here, before the driver is entered: inside, the tracer's callback runs under a lock of
// the driver's, which the advisor's own calls may then wait for (tracer::before_blocking_call).
template <auto Real, typename... Args>
CUresult blocking(Args... args) {
  return after<Real>(umswap::tracer::before_blocking_call, args...);
}

}  // namespace

UMSWAP_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned grid_x, unsigned grid_y,
                                      unsigned grid_z, unsigned block_x, unsigned block_y,
                                      unsigned block_z, unsigned shared_bytes, CUstream stream,
                                      void** params, void** extra) {
  return launch<&umswap::RealDriver::cuLaunchKernel>(f, f, grid_x, grid_y, grid_z, block_x, block_y,
                                                     block_z, shared_bytes, stream, params, extra);
}

UMSWAP_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned grid_x, unsigned grid_y,
                                           unsigned grid_z, unsigned block_x, unsigned block_y,
                                           unsigned block_z, unsigned shared_bytes, CUstream stream,
                                           void** params, void** extra) {
  return launch<&umswap::RealDriver::cuLaunchKernel_ptsz>(
      f, f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params, extra);
}

namespace {

// A launch that asks to overlap the kernel ahead of it goes in stream order while umswap
// redirects the program's memory (launch_in_order.h says why); what the driver writes into the
// attributes goes back to the program's.
// The attributes are read once: apply() copies only a launch that asks, and umswap's state is
// looked at only then.
template <auto Real>
CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  umswap::LaunchInOrder in_order;
  const CUlaunchConfig* copy = in_order.apply(config);
  if (copy == config) return launch<Real>(f, config, f, params, extra);
  Preload& p = preload();
  if (skip(p)) return launch<Real>(f, config, f, params, extra);
  p.note_launch_in_order();
  const CUresult r = launch<Real>(f, copy, f, params, extra);
  in_order.write_back(config);
  return r;
}

}  // namespace

UMSWAP_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                        void** extra) {
  return launch_ex<&umswap::RealDriver::cuLaunchKernelEx>(config, f, params, extra);
}

UMSWAP_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                             void** params, void** extra) {
  return launch_ex<&umswap::RealDriver::cuLaunchKernelEx_ptsz>(config, f, params, extra);
}

UMSWAP_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned grid_x, unsigned grid_y,
                                                 unsigned grid_z, unsigned block_x,
                                                 unsigned block_y, unsigned block_z,
                                                 unsigned shared_bytes, CUstream stream,
                                                 void** params) {
  return launch<&umswap::RealDriver::cuLaunchCooperativeKernel>(
      f, f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params);
}

UMSWAP_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned grid_x,
                                                      unsigned grid_y, unsigned grid_z,
                                                      unsigned block_x, unsigned block_y,
                                                      unsigned block_z, unsigned shared_bytes,
                                                      CUstream stream, void** params) {
  return launch<&umswap::RealDriver::cuLaunchCooperativeKernel_ptsz>(
      f, f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params);
}

// Copies to the host and synchronizes: the advisor catches up first (blocking<>, above).

UMSWAP_EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  return blocking<&umswap::RealDriver::cuMemcpyDtoH_v2>(dst, src, bytes);
}

UMSWAP_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes) {
  return blocking<&umswap::RealDriver::cuMemcpyDtoH_v2_ptds>(dst, src, bytes);
}

UMSWAP_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes,
                                            CUstream stream) {
  return blocking<&umswap::RealDriver::cuMemcpyDtoHAsync_v2>(dst, src, bytes, stream);
}

UMSWAP_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes,
                                                 CUstream stream) {
  return blocking<&umswap::RealDriver::cuMemcpyDtoHAsync_v2_ptsz>(dst, src, bytes, stream);
}

UMSWAP_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  return blocking<&umswap::RealDriver::cuCtxSynchronize_v2>(ctx);
}

UMSWAP_EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  return blocking<&umswap::RealDriver::cuStreamSynchronize>(stream);
}

UMSWAP_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream stream) {
  return blocking<&umswap::RealDriver::cuStreamSynchronize_ptsz>(stream);
}

UMSWAP_EXPORT CUresult cuEventSynchronize(CUevent event) {
  return blocking<&umswap::RealDriver::cuEventSynchronize>(event);
}
