// How the hooks are found. The CUDA runtime (shared or linked into the program) does
// dlopen("libcuda.so.1") + dlsym(handle, "cuGetProcAddress_v2") and then resolves every driver
// function through cuGetProcAddress; such a dlsym searches libcuda only, so exporting the driver
// symbols is not enough (../shared/reference/cuda13-cupti-notes.md §2). umswap therefore
// interposes dlsym itself: asked for cuGetProcAddress it answers with its wrapper, and the
// wrapper answers with umswap's hook for every function in UMSWAP_DRIVER_HOOKS.
//
// A substitution is made only when the driver's own answer is the very function the hook stands
// in for (same pointer as resolved for that ABI), so a request for another ABI version can never
// receive a hook of the wrong signature. CUPTI's and NVML's own look-ups are answered unchanged.
#include <dlfcn.h>

#include <cstring>
#include <string_view>

#include "hook_table.h"
#include "preload.h"

#undef cuGetProcAddress  // cuda.h maps it to _v2; the 4-argument v1 is exported below as well

#define UMSWAP_EXPORT extern "C" __attribute__((visibility("default")))

// The exported shims of driver_hooks.cpp; the _ptsz ones are declared by no CUDA header.
#define UMSWAP_DECLARE(name, base, version, per_thread, pfn) \
  extern "C" std::remove_pointer_t<pfn> name;
UMSWAP_DRIVER_HOOKS(UMSWAP_DECLARE)
#undef UMSWAP_DECLARE

UMSWAP_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                           cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* symbol_status);
UMSWAP_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                        cuuint64_t flags);

namespace umswap {
namespace {

struct HookEntry {
  const char* exported_name;
  const char* base_name;
  void* hook;
  void* (*real)(const RealDriver&);
};

const HookEntry kHooks[] = {
#define UMSWAP_ENTRY(name, base, version, per_thread, pfn) \
  {#name, #base, reinterpret_cast<void*>(&::name),         \
   [](const RealDriver& d) { return reinterpret_cast<void*>(d.name); }},
    UMSWAP_DRIVER_HOOKS(UMSWAP_ENTRY)
#undef UMSWAP_ENTRY
};

}  // namespace

std::string_view module_of(const void* address) {
  Dl_info info{};
  if (!address || !dladdr(address, &info) || !info.dli_fname) return {};
  const char* slash = std::strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

// Profiling and management libraries resolve the driver for their own use: give them the real
// functions (answering them with hooks breaks them), and umswap itself never asks through here.
bool caller_wants_real(const void* caller) {
  static const int kAnchor = 0;
  Dl_info self{}, info{};
  if (dladdr(&kAnchor, &self) && dladdr(caller, &info) && info.dli_fbase == self.dli_fbase) {
    return true;
  }
  const std::string_view module = module_of(caller);
  return module.starts_with("libcupti") || module.starts_with("libnvidia-ml") ||
         module.starts_with("libnvperf");
}

namespace {

// The hook standing in for `real_answer` (what the driver gave for `symbol`), or nullptr.
void* hook_for_driver_answer(const char* symbol, void* real_answer, const void* caller) {
  const RealDriver* d = preload().driver();
  if (!d || !real_answer) return nullptr;
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    if (caller_wants_real(caller)) return nullptr;
    if (real_answer == reinterpret_cast<void*>(d->cuGetProcAddress_v2)) {
      return reinterpret_cast<void*>(&::cuGetProcAddress_v2);
    }
    if (real_answer == reinterpret_cast<void*>(d->cuGetProcAddress_v1)) {
      return reinterpret_cast<void*>(&::cuGetProcAddress);
    }
    return nullptr;
  }
  for (const HookEntry& e : kHooks) {
    if (std::strcmp(symbol, e.base_name) == 0 && e.real(*d) == real_answer) {
      return caller_wants_real(caller) ? nullptr : e.hook;
    }
  }
  return nullptr;
}

}  // namespace

// dlsym, after the real one answered: substitute when a driver entry point was asked for by name
// from libcuda (cuGetProcAddress, or a hooked function such as cuMemAlloc_v2).
extern "C" __attribute__((visibility("hidden"))) void* umswap_dlsym_impl(void* handle,
                                                                         const char* symbol) {
  // Reached by a jump from the trampoline, so this is the original caller's return address.
  const void* caller = __builtin_return_address(0);
  void* result = real_dlsym()(handle, symbol);
  if (!result || !symbol || symbol[0] != 'c' || symbol[1] != 'u') return result;
  const std::string_view module = module_of(result);
  if (!module.starts_with("libcuda.so")) return result;
  const std::string_view name(symbol);
  if (name == "cuGetProcAddress_v2" || name == "cuGetProcAddress") {
    const RealDriver* d = preload().driver();
    if (!d || caller_wants_real(caller)) return result;
    return name == "cuGetProcAddress_v2" ? reinterpret_cast<void*>(&::cuGetProcAddress_v2)
                                         : reinterpret_cast<void*>(&::cuGetProcAddress);
  }
  for (const HookEntry& e : kHooks) {
    if (name == e.exported_name) {
      return (preload().driver() && !caller_wants_real(caller)) ? e.hook : result;
    }
  }
  return result;
}

}  // namespace umswap

UMSWAP_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                           cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* symbol_status) {
  const void* caller = __builtin_return_address(0);
  const umswap::RealDriver* d = umswap::preload().driver();
  if (!d) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult status = d->cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, symbol_status);
  if (status == CUDA_SUCCESS && symbol && pfn) {
    if (void* hook = umswap::hook_for_driver_answer(symbol, *pfn, caller)) *pfn = hook;
  }
  return status;
}

UMSWAP_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                        cuuint64_t flags) {
  const void* caller = __builtin_return_address(0);
  const umswap::RealDriver* d = umswap::preload().driver();
  if (!d || !d->cuGetProcAddress_v1) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult status = d->cuGetProcAddress_v1(symbol, pfn, cuda_version, flags);
  if (status == CUDA_SUCCESS && symbol && pfn) {
    if (void* hook = umswap::hook_for_driver_answer(symbol, *pfn, caller)) *pfn = hook;
  }
  return status;
}

// For the dlsym trampoline: the real dlsym, resolved now if libumswap's constructor has not run
// yet (another preloaded library's constructor can call dlsym(RTLD_NEXT, ...) first). Never
// instrumented: under AddressSanitizer this can run before the sanitizer's runtime is set up.
extern "C" __attribute__((visibility("hidden"), no_sanitize("address", "undefined"))) void*
umswap_dlsym_for_trampoline() {
  return reinterpret_cast<void*>(umswap::real_dlsym());
}

// dlsym itself. glibc's dlsym(RTLD_NEXT, ...) looks up "the next object after the caller", found
// from its return address, so a C wrapper would make every RTLD_NEXT look-up in the process
// relative to libumswap. The trampoline therefore *jumps* to the real dlsym for RTLD_NEXT (the
// caller's return address is untouched) and to umswap_dlsym_impl otherwise. Before the real
// dlsym is known it calls umswap_dlsym_for_trampoline, keeping the two arguments (and the stack
// 16-byte aligned for the call), then jumps.
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
dlsym:
  cmpq $-1, %rdi
  jne 1f
  movq umswap_real_dlsym_ptr(%rip), %rax
  testq %rax, %rax
  jne 2f
  pushq %rdi
  pushq %rsi
  subq $8, %rsp
  call umswap_dlsym_for_trampoline
  addq $8, %rsp
  popq %rsi
  popq %rdi
  testq %rax, %rax
  je 1f
2:
  jmp *%rax
1:
  jmp umswap_dlsym_impl
  .size dlsym, .-dlsym
)");
