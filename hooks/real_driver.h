// The real libcuda functions, resolved once through the real cuGetProcAddress.
#pragma once

#include "hook_table.h"

namespace umswap {

struct RealDriver {
  void* library = nullptr;  // dlopen handle of libcuda.so.1
  PFN_cuGetProcAddress_v12000 cuGetProcAddress_v2 = nullptr;
#define UMSWAP_FIELD(name, base, version, per_thread, pfn) pfn name = nullptr;
  UMSWAP_DRIVER_HOOKS(UMSWAP_FIELD)
#undef UMSWAP_FIELD
#define UMSWAP_FIELD(name, base, version, pfn) pfn name = nullptr;
  UMSWAP_DRIVER_USED(UMSWAP_FIELD)
#undef UMSWAP_FIELD
};

// Loads libcuda.so.1 (already loaded in any process that reaches a driver hook) and resolves every
// function above. Returns false, with a reason, when there is no usable driver.
bool load_real_driver(RealDriver* driver, const char** reason);

// glibc's dlsym, not umswap's interposed one. Never null after the library's constructor ran.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym();

}  // namespace umswap
