// A stand-in for libcuda.so.1 on a machine without a GPU: enough of the driver for libumswap.so
// to load it, redirect allocations to "managed memory" (host memory here) and start its tracer.
// Device memory is malloc'ed; virtual memory (cuMemCreate, cuMemMap) is host memory mapped for
// real (below), so engine vmm runs here; everything else succeeds and does nothing. Used only by
// preload_faults_test's probe, which finds it through its RUNPATH (this file's directory holds
// nothing else), so libumswap's dlopen("libcuda.so.1", RTLD_NOLOAD) gets this one.
#include <cuda.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>

namespace {

// The implementations are internal: an exported cuMemAlloc_v2 taken by address here would be
// libumswap's (preloaded, so first in the global scope), and the "real" driver would call the hook.
CUresult mem_alloc(CUdeviceptr* p, size_t bytes) {
  void* m = std::malloc(bytes ? bytes : 1);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<CUdeviceptr>(m);
  return CUDA_SUCCESS;
}
void forget_managed(CUdeviceptr p);
CUresult mem_free(CUdeviceptr p) {
  forget_managed(p);
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
}
// Managed allocations are remembered (the first 64) so that exporting one fails, as it does on
// the driver; device memory exports.
struct FakeRange {
  CUdeviceptr base;
  size_t bytes;
};
FakeRange g_managed[64] = {};
CUresult mem_alloc_managed(CUdeviceptr* p, size_t bytes, unsigned) {
  const CUresult status = mem_alloc(p, bytes);
  if (status != CUDA_SUCCESS) return status;
  for (FakeRange& r : g_managed) {
    if (r.base == 0) {
      r = {*p, bytes};
      break;
    }
  }
  return status;
}
void forget_managed(CUdeviceptr p) {
  for (FakeRange& r : g_managed) {
    if (r.base == p) r = {};
  }
}
CUresult ipc_get_mem_handle(CUipcMemHandle* handle, CUdeviceptr p) {
  for (const FakeRange& r : g_managed) {
    if (r.base != 0 && p - r.base < r.bytes) return CUDA_ERROR_INVALID_VALUE;
  }
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle->reserved, &p, sizeof p);
  return CUDA_SUCCESS;
}
CUresult mem_alloc_pitch(CUdeviceptr* p, size_t* pitch, size_t width, size_t height, unsigned) {
  *pitch = (width + 511) / 512 * 512;
  return mem_alloc(p, *pitch * height);
}
CUresult mem_get_info(size_t* free, size_t* total) {
  *total = size_t{16} << 30;
  *free = size_t{15} << 30;
  return CUDA_SUCCESS;
}
int g_pool;
CUresult mem_get_default_mem_pool(CUmemoryPool* pool, CUmemLocation*, CUmemAllocationType) {
  *pool = reinterpret_cast<CUmemoryPool>(&g_pool);
  return CUDA_SUCCESS;
}
CUresult device_get_default_mem_pool(CUmemoryPool* pool, CUdevice) {
  *pool = reinterpret_cast<CUmemoryPool>(&g_pool);
  return CUDA_SUCCESS;
}
CUresult mem_alloc_from_pool_async(CUdeviceptr* p, size_t bytes, CUmemoryPool, CUstream) {
  return mem_alloc(p, bytes);
}
CUresult mem_alloc_async(CUdeviceptr* p, size_t bytes, CUstream) {
  return mem_alloc(p, bytes);
}
CUresult mem_free_async(CUdeviceptr p, CUstream) {
  return mem_free(p);
}
CUresult stream_synchronize(CUstream) {
  return CUDA_SUCCESS;
}
CUresult ctx_get_device(CUdevice* d) {
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult device_get(CUdevice* d, int ordinal) {
  *d = ordinal;
  return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
CUresult device_total_mem(size_t* bytes, CUdevice) {
  *bytes = size_t{16} << 30;
  return CUDA_SUCCESS;
}
CUresult func_get_param_info(CUfunction, size_t, size_t*, size_t*) {
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult kernel_get_param_info(CUkernel, size_t, size_t*, size_t*) {
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult func_get_name(const char** name, CUfunction) {
  *name = "fake_kernel";
  return CUDA_SUCCESS;
}
CUresult kernel_get_name(const char** name, CUkernel) {
  *name = "fake_kernel";
  return CUDA_SUCCESS;
}
CUresult ctx_get_current(CUcontext* c) {
  *c = nullptr;
  return CUDA_SUCCESS;
}
// Events and capture state for stream-ordered allocations from slabs: every event is complete.
int g_event_storage[16];
CUresult event_create(CUevent* e, unsigned) {
  static unsigned next = 0;
  *e = reinterpret_cast<CUevent>(&g_event_storage[next++ % 16]);
  return CUDA_SUCCESS;
}
CUresult event_record(CUevent, CUstream) {
  return CUDA_SUCCESS;
}
// FAKE_CUDA_STICKY_ERROR=N: every event query answers error N, as the driver's calls do once the
// context's GPU work failed (an illegal address: 700).
CUresult event_query(CUevent) {
  static const char* sticky = std::getenv("FAKE_CUDA_STICKY_ERROR");
  return sticky ? static_cast<CUresult>(std::atoi(sticky)) : CUDA_SUCCESS;
}
CUresult event_synchronize(CUevent) {
  return CUDA_SUCCESS;
}
CUresult event_destroy(CUevent) {
  return CUDA_SUCCESS;
}
CUresult ctx_synchronize() {
  return CUDA_SUCCESS;
}
int g_stream_storage[4];
CUresult stream_create(CUstream* s, unsigned) {
  static unsigned next = 0;
  *s = reinterpret_cast<CUstream>(&g_stream_storage[next++ % 4]);
  return CUDA_SUCCESS;
}
CUresult stream_destroy(CUstream) {
  return CUDA_SUCCESS;
}
CUresult stream_is_capturing(CUstream, CUstreamCaptureStatus* status) {
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

// The driver's virtual memory functions. A handle is a small number (its slot + 1; the driver's
// are host addresses: neither has the top bit set) backed by a memfd of its size. Mapped at an
// address inside a reservation made here (cuMemAddressReserve), it is mapped for real, so that an
// engine mapping chunks into ranges and copying between them (engine vmm) works here as on a GPU:
// the fake's "device" is host memory. At any other address (one a probe made up) a mapping is
// bookkeeping only, for cuMemRetainAllocationHandle.
struct FakeHandle {
  bool live = false;
  int fd = -1;
  size_t bytes = 0;
  CUmemAllocationProp prop{};
};
FakeHandle g_handles[16384];
struct FakeMapping {
  CUdeviceptr address;
  size_t bytes;
  CUmemGenericAllocationHandle handle;
};
FakeMapping g_mappings[4096] = {};
struct Reservation {
  uintptr_t base;
  size_t bytes;
};
Reservation g_reservations[256] = {};
std::mutex g_vm_mutex;

bool reserved(CUdeviceptr ptr, size_t bytes) {  // g_vm_mutex held
  for (const Reservation& r : g_reservations) {
    if (r.bytes != 0 && ptr >= r.base && ptr + bytes <= r.base + r.bytes) return true;
  }
  return false;
}
// Some of [ptr, ptr + bytes) in a reservation, but not all of it.
bool partly_reserved(CUdeviceptr ptr, size_t bytes) {  // g_vm_mutex held
  for (const Reservation& r : g_reservations) {
    if (r.bytes != 0 && ptr < r.base + r.bytes && r.base < ptr + bytes) {
      return !(ptr >= r.base && ptr + bytes <= r.base + r.bytes);
    }
  }
  return false;
}
// Whether mappings cover [ptr, ptr + bytes) without a gap.
bool covered(CUdeviceptr ptr, size_t bytes) {  // g_vm_mutex held
  CUdeviceptr at = ptr;
  for (bool grew = true; grew && at < ptr + bytes;) {
    grew = false;
    for (const FakeMapping& m : g_mappings) {
      if (m.handle != 0 && m.address <= at && at < m.address + m.bytes) {
        at = m.address + m.bytes;
        grew = true;
      }
    }
  }
  return at >= ptr + bytes;
}
// A handle value with the top bit set is one of umswap's virtual handles: it must never reach
// the driver. Said on stderr, which the tests read.
bool virtual_reached(CUmemGenericAllocationHandle h, const char* call) {
  if ((h >> 63) == 0) return false;
  std::fprintf(stderr, "fake_cuda: virtual handle %#llx reached %s\n",
               static_cast<unsigned long long>(h), call);
  return true;
}
FakeHandle* handle_of(CUmemGenericAllocationHandle h) {  // g_vm_mutex held
  return h >= 1 && h <= std::size(g_handles) && g_handles[h - 1].live ? &g_handles[h - 1] : nullptr;
}
CUresult mem_address_reserve(CUdeviceptr* ptr, size_t bytes, size_t alignment, CUdeviceptr,
                             unsigned long long) {
  const size_t align = std::max<size_t>(alignment, size_t{2} << 20);
  void* m =
      ::mmap(nullptr, bytes + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const uintptr_t raw = reinterpret_cast<uintptr_t>(m);
  const uintptr_t base = (raw + align - 1) / align * align;
  if (base > raw) ::munmap(m, base - raw);
  ::munmap(reinterpret_cast<void*>(base + bytes), raw + align - base);  // the tail past it
  std::lock_guard lock(g_vm_mutex);
  for (Reservation& r : g_reservations) {
    if (r.bytes == 0) {
      r = {base, bytes};
      *ptr = base;
      return CUDA_SUCCESS;
    }
  }
  ::munmap(reinterpret_cast<void*>(base), bytes);
  return CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult mem_address_free(CUdeviceptr ptr, size_t bytes) {
  std::lock_guard lock(g_vm_mutex);
  for (const FakeMapping& m : g_mappings) {
    if (m.handle != 0 && m.address < ptr + bytes && ptr < m.address + m.bytes) {
      return CUDA_ERROR_INVALID_VALUE;  // still mapped: the driver refuses too
    }
  }
  for (Reservation& r : g_reservations) {
    if (r.bytes != 0 && r.base == ptr && r.bytes == bytes) {
      ::munmap(reinterpret_cast<void*>(ptr), bytes);
      r = {};
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult mem_create(CUmemGenericAllocationHandle* handle, size_t bytes,
                    const CUmemAllocationProp* prop, unsigned long long) {
  std::lock_guard lock(g_vm_mutex);
  // Values are never reused, as the driver's are not while their memory is mapped.
  static size_t next = 0;
  if (next >= std::size(g_handles)) return CUDA_ERROR_OUT_OF_MEMORY;
  // No memfd (a sandbox without memfd_create): a handle of bookkeeping only, which cannot be
  // mapped into a reservation.
  int fd = static_cast<int>(::syscall(SYS_memfd_create, "fake_cuda", 1u /* CLOEXEC */));
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    fd = -1;
  }
  g_handles[next] = {true, fd, bytes, prop ? *prop : CUmemAllocationProp{}};
  *handle = ++next;
  return CUDA_SUCCESS;
}
CUresult mem_release(CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(g_vm_mutex);
  FakeHandle* h = handle_of(handle);
  if (virtual_reached(handle, "cuMemRelease") || !h) return CUDA_ERROR_INVALID_VALUE;
  if (h->fd >= 0) ::close(h->fd);  // its mappings keep the memory, as the driver's do
  *h = {};
  return CUDA_SUCCESS;
}
CUresult mem_map(CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
                 unsigned long long flags) {
  std::lock_guard lock(g_vm_mutex);
  const FakeHandle* h = handle_of(handle);
  if (virtual_reached(handle, "cuMemMap") || !h || offset + bytes > h->bytes ||
      partly_reserved(ptr, bytes) || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (const FakeMapping& m : g_mappings) {
    if (m.handle != 0 && m.address < ptr + bytes && ptr < m.address + m.bytes) {
      return CUDA_ERROR_INVALID_VALUE;  // over a mapping: the driver refuses too
    }
  }
  if (reserved(ptr, bytes) && h->fd < 0) return CUDA_ERROR_NOT_SUPPORTED;
  for (FakeMapping& m : g_mappings) {
    if (m.handle != 0) continue;
    if (reserved(ptr, bytes) &&
        ::mmap(reinterpret_cast<void*>(ptr), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd,
               static_cast<off_t>(offset)) == MAP_FAILED) {
      return CUDA_ERROR_UNKNOWN;
    }
    m = {ptr, bytes, handle};
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult mem_set_access(CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count) {
  std::lock_guard lock(g_vm_mutex);
  if (count == 0 || !desc || partly_reserved(ptr, bytes)) return CUDA_ERROR_INVALID_VALUE;
  if (!reserved(ptr, bytes)) return CUDA_SUCCESS;  // bookkeeping only (a made-up address)
  // The driver gives access only where something is mapped.
  if (!covered(ptr, bytes)) return CUDA_ERROR_INVALID_VALUE;
  const int prot = desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
                   : desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                                       : PROT_NONE;
  return ::mprotect(reinterpret_cast<void*>(ptr), bytes, prot) == 0 ? CUDA_SUCCESS
                                                                    : CUDA_ERROR_INVALID_VALUE;
}
CUresult mem_unmap(CUdeviceptr ptr, size_t bytes) {
  std::lock_guard lock(g_vm_mutex);
  for (const FakeMapping& m : g_mappings) {
    // Through a mapping (part of one): the driver refuses.
    const bool overlaps = m.handle != 0 && m.address < ptr + bytes && ptr < m.address + m.bytes;
    if (overlaps && (m.address < ptr || m.address + m.bytes > ptr + bytes)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (FakeMapping& m : g_mappings) {
    if (m.handle != 0 && m.address >= ptr && m.address < ptr + bytes) m = {};
  }
  if (reserved(ptr, bytes) &&
      ::mmap(reinterpret_cast<void*>(ptr), bytes, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
    return CUDA_ERROR_UNKNOWN;
  }
  return CUDA_SUCCESS;
}
CUresult mem_retain_allocation_handle(CUmemGenericAllocationHandle* handle, void* addr) {
  std::lock_guard lock(g_vm_mutex);
  const CUdeviceptr a = reinterpret_cast<CUdeviceptr>(addr);
  for (const FakeMapping& m : g_mappings) {
    if (m.handle != 0 && a >= m.address && a < m.address + m.bytes) {
      *handle = m.handle;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult mem_get_allocation_properties_from_handle(CUmemAllocationProp* prop,
                                                   CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(g_vm_mutex);
  const FakeHandle* h = handle_of(handle);
  if (virtual_reached(handle, "cuMemGetAllocationPropertiesFromHandle") || !h) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *prop = h->prop;
  return CUDA_SUCCESS;
}
CUresult mem_export_to_shareable_handle(void* shareable, CUmemGenericAllocationHandle handle,
                                        CUmemAllocationHandleType, unsigned long long) {
  std::lock_guard lock(g_vm_mutex);
  const FakeHandle* h = handle_of(handle);
  if (virtual_reached(handle, "cuMemExportToShareableHandle") || !h || h->fd < 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A descriptor of the caller's own, as the driver's.
  const int fd = ::fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}
CUresult mem_get_allocation_granularity(size_t* granularity, const CUmemAllocationProp*,
                                        CUmemAllocationGranularity_flags) {
  *granularity = size_t{2} << 20;
  return CUDA_SUCCESS;
}
CUresult memcpy_dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream) {
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

struct Entry {
  const char* name;
  void* fn;
};
const Entry kEntries[] = {
    {"cuMemAlloc", reinterpret_cast<void*>(&mem_alloc)},
    {"cuMemFree", reinterpret_cast<void*>(&mem_free)},
    {"cuMemAllocManaged", reinterpret_cast<void*>(&mem_alloc_managed)},
    {"cuMemAllocPitch", reinterpret_cast<void*>(&mem_alloc_pitch)},
    {"cuMemGetInfo", reinterpret_cast<void*>(&mem_get_info)},
    {"cuMemGetDefaultMemPool", reinterpret_cast<void*>(&mem_get_default_mem_pool)},
    {"cuDeviceGetDefaultMemPool", reinterpret_cast<void*>(&device_get_default_mem_pool)},
    {"cuMemAllocFromPoolAsync", reinterpret_cast<void*>(&mem_alloc_from_pool_async)},
    {"cuMemAllocAsync", reinterpret_cast<void*>(&mem_alloc_async)},
    {"cuMemFreeAsync", reinterpret_cast<void*>(&mem_free_async)},
    {"cuStreamSynchronize", reinterpret_cast<void*>(&stream_synchronize)},
    {"cuCtxGetDevice", reinterpret_cast<void*>(&ctx_get_device)},
    {"cuDeviceGet", reinterpret_cast<void*>(&device_get)},
    {"cuDeviceTotalMem", reinterpret_cast<void*>(&device_total_mem)},
    {"cuFuncGetParamInfo", reinterpret_cast<void*>(&func_get_param_info)},
    {"cuKernelGetParamInfo", reinterpret_cast<void*>(&kernel_get_param_info)},
    {"cuFuncGetName", reinterpret_cast<void*>(&func_get_name)},
    {"cuKernelGetName", reinterpret_cast<void*>(&kernel_get_name)},
    {"cuCtxGetCurrent", reinterpret_cast<void*>(&ctx_get_current)},
    {"cuEventCreate", reinterpret_cast<void*>(&event_create)},
    {"cuEventRecord", reinterpret_cast<void*>(&event_record)},
    {"cuEventQuery", reinterpret_cast<void*>(&event_query)},
    {"cuEventSynchronize", reinterpret_cast<void*>(&event_synchronize)},
    {"cuEventDestroy", reinterpret_cast<void*>(&event_destroy)},
    {"cuCtxSynchronize", reinterpret_cast<void*>(&ctx_synchronize)},
    {"cuStreamIsCapturing", reinterpret_cast<void*>(&stream_is_capturing)},
    {"cuStreamCreate", reinterpret_cast<void*>(&stream_create)},
    {"cuStreamDestroy", reinterpret_cast<void*>(&stream_destroy)},
    {"cuMemCreate", reinterpret_cast<void*>(&mem_create)},
    {"cuMemRelease", reinterpret_cast<void*>(&mem_release)},
    {"cuMemMap", reinterpret_cast<void*>(&mem_map)},
    {"cuMemUnmap", reinterpret_cast<void*>(&mem_unmap)},
    {"cuMemRetainAllocationHandle", reinterpret_cast<void*>(&mem_retain_allocation_handle)},
    {"cuMemAddressReserve", reinterpret_cast<void*>(&mem_address_reserve)},
    {"cuMemAddressFree", reinterpret_cast<void*>(&mem_address_free)},
    {"cuMemSetAccess", reinterpret_cast<void*>(&mem_set_access)},
    {"cuMemGetAllocationPropertiesFromHandle",
     reinterpret_cast<void*>(&mem_get_allocation_properties_from_handle)},
    {"cuMemExportToShareableHandle", reinterpret_cast<void*>(&mem_export_to_shareable_handle)},
    {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&mem_get_allocation_granularity)},
    {"cuMemcpyDtoDAsync", reinterpret_cast<void*>(&memcpy_dtod_async)},
    {"cuIpcGetMemHandle", reinterpret_cast<void*>(&ipc_get_mem_handle)},
};

}  // namespace

extern "C" {

// Answers by base name; version and flags are ignored (one ABI per function here).
__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int, cuuint64_t, CUdriverProcAddressQueryResult* status) {
  // FAKE_CUDA_NO_VMM=1: a driver without what engine vmm needs (its reservations, access, copies).
  static const bool no_vmm = std::getenv("FAKE_CUDA_NO_VMM") != nullptr;
  const bool hidden = no_vmm && (std::strcmp(symbol, "cuMemAddressReserve") == 0 ||
                                 std::strcmp(symbol, "cuMemAddressFree") == 0 ||
                                 std::strcmp(symbol, "cuMemSetAccess") == 0 ||
                                 std::strcmp(symbol, "cuMemcpyDtoDAsync") == 0);
  for (const Entry& e : kEntries) {
    if (hidden) break;
    if (std::strcmp(e.name, symbol) == 0) {
      *pfn = e.fn;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  *pfn = nullptr;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

// What a program linked with -lcuda calls; under LD_PRELOAD libumswap's hooks come first.
__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  return mem_alloc(p, bytes);
}
__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr p) {
  return mem_free(p);
}
__attribute__((visibility("default"))) CUresult cuMemCreate(CUmemGenericAllocationHandle* h,
                                                            size_t size,
                                                            const CUmemAllocationProp* prop,
                                                            unsigned long long flags) {
  return mem_create(h, size, prop, flags);
}
__attribute__((visibility("default"))) CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  return mem_release(h);
}
__attribute__((visibility("default"))) CUresult cuMemMap(CUdeviceptr ptr, size_t size,
                                                         size_t offset,
                                                         CUmemGenericAllocationHandle h,
                                                         unsigned long long flags) {
  return mem_map(ptr, size, offset, h, flags);
}
__attribute__((visibility("default"))) CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return mem_unmap(ptr, size);
}
__attribute__((visibility("default"))) CUresult cuMemRetainAllocationHandle(
    CUmemGenericAllocationHandle* h, void* addr) {
  return mem_retain_allocation_handle(h, addr);
}
__attribute__((visibility("default"))) CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size,
                                                                    size_t alignment,
                                                                    CUdeviceptr addr,
                                                                    unsigned long long flags) {
  return mem_address_reserve(ptr, size, alignment, addr, flags);
}
__attribute__((visibility("default"))) CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return mem_address_free(ptr, size);
}
__attribute__((visibility("default"))) CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
                                                               const CUmemAccessDesc* desc,
                                                               size_t count) {
  return mem_set_access(ptr, size, desc, count);
}
__attribute__((visibility("default"))) CUresult cuMemGetAllocationPropertiesFromHandle(
    CUmemAllocationProp* prop, CUmemGenericAllocationHandle h) {
  return mem_get_allocation_properties_from_handle(prop, h);
}
__attribute__((visibility("default"))) CUresult cuMemExportToShareableHandle(
    void* shareable, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
    unsigned long long flags) {
  return mem_export_to_shareable_handle(shareable, h, type, flags);
}
__attribute__((visibility("default"))) CUresult cuMemAllocManaged(CUdeviceptr* p, size_t bytes,
                                                                  unsigned flags) {
  return mem_alloc_managed(p, bytes, flags);
}
__attribute__((visibility("default"))) CUresult cuIpcGetMemHandle(CUipcMemHandle* h,
                                                                  CUdeviceptr p) {
  return ipc_get_mem_handle(h, p);
}

}  // extern "C"
