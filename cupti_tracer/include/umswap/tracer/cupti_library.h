// CUPTI, loaded at run time. libumswap.so does not link libcupti: a machine without it, or a
// process where a profiler already holds CUPTI, must still run the program (on plain managed
// memory, with one message saying why).
#pragma once

#include <cupti.h>

#include <string>

namespace umswap::tracer {

struct CuptiLibrary {
  void* handle = nullptr;
  decltype(&::cuptiSubscribe) subscribe = nullptr;
  decltype(&::cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&::cuptiEnableCallback) enable_callback = nullptr;
  decltype(&::cuptiEnableDomain) enable_domain = nullptr;
  decltype(&::cuptiGetResultString) get_result_string = nullptr;
  decltype(&::cuptiActivityEnable) activity_enable = nullptr;
  decltype(&::cuptiActivityDisable) activity_disable = nullptr;
  decltype(&::cuptiActivityRegisterCallbacks) activity_register_callbacks = nullptr;
  decltype(&::cuptiActivityGetNextRecord) activity_get_next_record = nullptr;
  decltype(&::cuptiActivityFlushAll) activity_flush_all = nullptr;
  decltype(&::cuptiActivityGetNumDroppedRecords) activity_get_num_dropped_records = nullptr;
  decltype(&::cuptiActivityConfigureUnifiedMemoryCounter) configure_unified_memory_counter =
      nullptr;
  decltype(&::cuptiGetTimestamp) get_timestamp = nullptr;

  // Loads `path` if given, else libcupti.so.13 from the loader's search path, then from the CUDA
  // toolkit next to libcuda's usual places. False with a reason when none loads or a function
  // is missing.
  bool load(const std::string& path, std::string* reason);
  std::string result_string(CUptiResult result) const;
};

}  // namespace umswap::tracer
