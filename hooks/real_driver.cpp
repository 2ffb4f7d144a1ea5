#include <dlfcn.h>

#include "real_driver.h"

namespace umswap {
namespace {

DlsymFn g_real_dlsym = nullptr;

DlsymFn resolve_real_dlsym() {
  // dlvsym is not interposed. glibc 2.34 moved dlsym into libc with a new version; older
  // binaries bind to the 2.2.5 one, which is the same function.
  void* f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!f) f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  return reinterpret_cast<DlsymFn>(f);
}

}  // namespace

// Read by the dlsym trampoline (dlsym_hook.cpp) without a call.
extern "C" __attribute__((visibility("hidden"))) DlsymFn umswap_real_dlsym_ptr;
DlsymFn umswap_real_dlsym_ptr = nullptr;

DlsymFn real_dlsym() {
  if (!g_real_dlsym) g_real_dlsym = resolve_real_dlsym();
  umswap_real_dlsym_ptr = g_real_dlsym;
  return g_real_dlsym;
}

bool load_real_driver(RealDriver* d, const char** reason) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!library) library = dlopen("libcuda.so.1", RTLD_NOW);
  if (!library) {
    *reason = "libcuda.so.1 cannot be loaded";
    return false;
  }
  d->library = library;
  d->cuGetProcAddress_v2 =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(real_dlsym()(library, "cuGetProcAddress_v2"));
  if (!d->cuGetProcAddress_v2) {
    *reason = "libcuda.so.1 has no cuGetProcAddress_v2 (driver older than CUDA 12)";
    return false;
  }
  auto resolve = [&](const char* base, int version, bool per_thread, void** out) {
    CUdriverProcAddressQueryResult found{};
    const cuuint64_t flags =
        per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    if (d->cuGetProcAddress_v2(base, out, version, flags, &found) != CUDA_SUCCESS) *out = nullptr;
  };
#define UMSWAP_RESOLVE(name, base, version, per_thread, pfn) \
  resolve(#base, version, per_thread, reinterpret_cast<void**>(&d->name));
  UMSWAP_DRIVER_HOOKS(UMSWAP_RESOLVE)
#undef UMSWAP_RESOLVE
#define UMSWAP_RESOLVE(name, base, version, pfn) \
  resolve(#base, version, false, reinterpret_cast<void**>(&d->name));
  UMSWAP_DRIVER_USED(UMSWAP_RESOLVE)
#undef UMSWAP_RESOLVE
  if (!d->cuMemAlloc_v2 || !d->cuMemFree_v2) {
    *reason = "the driver did not resolve cuMemAlloc/cuMemFree";
    return false;
  }
  return true;
}

}  // namespace umswap

namespace umswap {
namespace {
__attribute__((constructor(101))) void resolve_at_load() {
  real_dlsym();
}
}  // namespace
}  // namespace umswap
