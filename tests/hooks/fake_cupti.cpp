// A stand-in for libcupti on a machine without a GPU, loaded through UMSWAP_CUPTI_LIBRARY: every
// function libumswap's tracer resolves succeeds and records nothing, so the tracer "runs" and
// writes an empty trace at exit. With UMSWAP_TEST_CUPTI_BUSY=1 in the environment, cuptiSubscribe
// fails as it does when a profiler (torch.profiler, Nsight) already holds CUPTI. As the real one,
// it takes one subscriber at a time: a second cuptiSubscribe before cuptiUnsubscribe fails.
// Keep it in step with the functions cupti_tracer/cupti_library.cpp resolves: when one is missing
// here, preload_faults_test's first test fails with "tracing is off: libcupti has no <name>".
#include <cupti.h>

#include <cstdlib>
#include <ctime>

namespace {
int g_subscriber;
bool g_subscribed = false;
}  // namespace

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc,
                                       void*) {
  const char* busy = std::getenv("UMSWAP_TEST_CUPTI_BUSY");
  if ((busy && busy[0] == '1') || g_subscribed)
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  g_subscribed = true;
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(&g_subscriber);
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle) {
  g_subscribed = false;
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult cuptiEnableCallback(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                            CUpti_CallbackId) {
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult cuptiEnableDomain(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain) {
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char** text) {
  *text = result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
              ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
              : "fake CUPTI result";
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind) {
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult cuptiActivityEnableContext(CUcontext, CUpti_ActivityKind) {
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind) {
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc,
                                                       CUpti_BuffersCallbackCompleteFunc) {
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t*, size_t, CUpti_Activity**) {
  return CUPTI_ERROR_MAX_LIMIT_REACHED;
}
FAKE_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t) {
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  *dropped = 0;
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult
cuptiActivityConfigureUnifiedMemoryCounter(CUpti_ActivityUnifiedMemoryCounterConfig*, uint32_t) {
  return CUPTI_SUCCESS;
}
FAKE_EXPORT CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  *timestamp = static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
  return CUPTI_SUCCESS;
}
