// The CUPTI calls a profiler starts with. CUPTI serves one client per process: one subscriber, one
// pair of activity-buffer callbacks. umswap's tracer calls CUPTI through its own handle
// (cupti_tracer/cupti_library.cpp), never through these exports, so a call that arrives here comes
// from the program: torch.profiler's kineto, or any tool linked into it. The profiler wins: before
// the tracer starts it will not start, and while it runs it steps aside (tracer.h, yield_cupti),
// then the call goes on to the real CUPTI. A profiler that dlopens CUPTI privately and calls it
// through dlsym on its own handle is not seen here; it finds the subscriber taken, as before.
#include <cupti.h>
#include <dlfcn.h>

#include <fmt/format.h>

#include "preload.h"
#include "real_driver.h"
#include "umswap/tracer/tracer.h"

#define UMSWAP_EXPORT extern "C" __attribute__((visibility("default")))

namespace umswap {
namespace {

// The real function: the program's libcupti (next in the search order after libumswap), else the
// one the tracer loaded.
template <typename Fn>
Fn real_cupti(const char* name) {
  void* f = real_dlsym()(RTLD_NEXT, name);
  if (!f) f = tracer::cupti_symbol(name);
  return reinterpret_cast<Fn>(f);
}

// Called by the program (not by CUPTI itself or umswap): the tracer makes way first.
void program_calls(const char* name, const void* caller) {
  if (caller_wants_real(caller)) return;
  const std::string_view module = module_of(caller);
  tracer::yield_cupti(fmt::format("{} called from {}", name,
                                  module.empty() ? std::string_view("the program") : module));
}

}  // namespace
}  // namespace umswap

#define UMSWAP_CUPTI_FORWARD(name, ...)                      \
  umswap::program_calls(#name, __builtin_return_address(0)); \
  auto real = umswap::real_cupti<decltype(&::name)>(#name);  \
  return real ? real(__VA_ARGS__) : CUPTI_ERROR_NOT_INITIALIZED

UMSWAP_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber,
                                         CUpti_CallbackFunc callback, void* userdata) {
  UMSWAP_CUPTI_FORWARD(cuptiSubscribe, subscriber, callback, userdata);
}

UMSWAP_EXPORT CUptiResult cuptiActivityRegisterCallbacks(
    CUpti_BuffersCallbackRequestFunc requested, CUpti_BuffersCallbackCompleteFunc completed) {
  UMSWAP_CUPTI_FORWARD(cuptiActivityRegisterCallbacks, requested, completed);
}

UMSWAP_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  UMSWAP_CUPTI_FORWARD(cuptiActivityEnable, kind);
}

UMSWAP_EXPORT CUptiResult cuptiActivityEnableContext(CUcontext context, CUpti_ActivityKind kind) {
  UMSWAP_CUPTI_FORWARD(cuptiActivityEnableContext, context, kind);
}
