#include "umswap/tracer/cupti_library.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include "umswap/core/cupti_paths.h"

namespace umswap::tracer {

bool CuptiLibrary::load(const std::string& path, std::string* reason) {
  if (!path.empty()) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  } else {
    // The loader's search path first, then the toolkit's usual places.
    handle = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
    for (const char* c : kCuptiLibraryPaths) {
      if (handle) break;
      handle = dlopen(c, RTLD_NOW | RTLD_LOCAL);
    }
  }
  if (!handle) {
    *reason = path.empty() ? "libcupti.so.13 was not found (set UMSWAP_CUPTI_LIBRARY)"
                           : fmt::format("{} cannot be loaded: {}", path, dlerror());
    return false;
  }
  bool complete = true;
  auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (!fn) {
      complete = false;
      *reason = fmt::format("libcupti has no {}", name);
    }
  };
  get(subscribe, "cuptiSubscribe");
  get(unsubscribe, "cuptiUnsubscribe");
  get(enable_callback, "cuptiEnableCallback");
  get(enable_domain, "cuptiEnableDomain");
  get(get_result_string, "cuptiGetResultString");
  get(activity_enable, "cuptiActivityEnable");
  get(activity_disable, "cuptiActivityDisable");
  get(activity_register_callbacks, "cuptiActivityRegisterCallbacks");
  get(activity_get_next_record, "cuptiActivityGetNextRecord");
  get(activity_flush_all, "cuptiActivityFlushAll");
  get(activity_get_num_dropped_records, "cuptiActivityGetNumDroppedRecords");
  get(configure_unified_memory_counter, "cuptiActivityConfigureUnifiedMemoryCounter");
  get(get_timestamp, "cuptiGetTimestamp");
  return complete;
}

std::string CuptiLibrary::result_string(CUptiResult result) const {
  const char* text = nullptr;
  if (get_result_string && get_result_string(result, &text) == CUPTI_SUCCESS && text) {
    return fmt::format("{} ({})", text, static_cast<int>(result));
  }
  return fmt::format("CUPTI error {}", static_cast<int>(result));
}

}  // namespace umswap::tracer
