#include "vmm_observer.h"

#include <algorithm>
#include <chrono>

#include "umswap/core/log.h"
#include "umswap/tracer/memory_calls.h"
#include "umswap/tracer/tracer.h"
#include "vmm_driver_timing.h"

namespace umswap {
namespace {

// Longer than any single call's trip through the driver; a call whose API exit never reaches us
// (the tracer stopped between its entry and exit) must not hang the program.
constexpr std::chrono::milliseconds kOpenWait{10000};

uint64_t ns_between(std::chrono::steady_clock::time_point from,
                    std::chrono::steady_clock::time_point to) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}

}  // namespace

VmmObserver::VmmObserver(const VmmObserverDriver& driver, VmmAllocator* (*allocator)())
    : driver_(driver), allocator_(allocator) {}

void VmmObserver::on_step(uint64_t index, uint32_t key, CUstream /*stream*/,
                          const std::vector<tracer::PointerHit>* hits) {
  launches_seen_.store(index + 1, std::memory_order_relaxed);
  const auto entered = std::chrono::steady_clock::now();
  if (!finished_.load(std::memory_order_relaxed)) {
    VmmAllocator* allocator = allocator_cached_;
    if (!allocator) {
      allocator = allocator_cached_ = allocator_();  // made once, never freed
      // The first step the tracer sees: work submitted before the tracer ran (the program's
      // start, or another thread's launches while it was starting) went unseen.
      if (allocator) allocator->residency().unseen_work();
    }
    if (allocator) {
      bases_.clear();
      if (hits) {
        for (const tracer::PointerHit& hit : *hits) {
          if (std::find(bases_.begin(), bases_.end(), hit.base) == bases_.end()) {
            bases_.push_back(hit.base);
          }
        }
      }
      const bool begins = detector_.push(key);
      if (allocator->residency().touch(key, bases_, begins)) window(*allocator, index);
    }
  }
  step_ns_.fetch_add(ns_between(entered, std::chrono::steady_clock::now()),
                     std::memory_order_relaxed);
  hold_.enter();
}

void VmmObserver::window(VmmAllocator& allocator, uint64_t launch) {
  // Synchronizing the context would invalidate a capture in the global mode: while one is open
  // the step reaches its ranges where they are (over the link). Asked before the hold (no wait
  // for nothing) and again once it is open (a capture begun meanwhile).
  auto capture_open = [this] {
    if (!tracer::capture_open()) return false;
    skipped_for_capture_.fetch_add(1, std::memory_order_relaxed);
    return true;
  };
  const auto started = std::chrono::steady_clock::now();
  if (gave_up_.load(std::memory_order_relaxed) || capture_open()) return;
  if (!hold_.open(kOpenWait)) {
    gave_up_.store(true, std::memory_order_relaxed);
    log_warning(
        "engine vmm: a call of the program did not come back from the driver within {} s; no "
        "range moves from now on (each stays where it is, reached over the link)",
        kOpenWait.count() / 1000);
    return;
  }
  const auto opened = std::chrono::steady_clock::now();
  if (capture_open()) {
    hold_.close();
    return;
  }
  const auto drain = std::chrono::steady_clock::now();
  const CUresult drained = driver_.ctx_synchronize();
  const auto idle = std::chrono::steady_clock::now();
  if (drained != CUDA_SUCCESS) {
    // The context has failed (an earlier launch's error): nothing may move; the program hears of
    // the error from its own calls.
    drains_failed_.fetch_add(1, std::memory_order_relaxed);
    hold_.close();
    return;
  }
  if (!stream_ && driver_.stream_create(&stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    stream_ = nullptr;  // the copies go on the legacy stream: the GPU is idle either way
  }
  const auto [in_before, out_before] = allocator.bytes_moved();
  vmm_driver_in_window(true);
  allocator.residency().make_resident(bases_, stream_);
  vmm_driver_in_window(false);
  allocator.note_peaks();
  const auto [in_after, out_after] = allocator.bytes_moved();
  hold_.close();
  // Windows that moved, in all and by part (one abandoned or skipped counts in none).
  const uint64_t ns = ns_between(started, std::chrono::steady_clock::now());
  window_ns_.fetch_add(ns, std::memory_order_relaxed);
  log_.add({launch, ns, in_after - in_before, out_after - out_before});
  open_ns_.fetch_add(ns_between(started, opened), std::memory_order_relaxed);
  drain_ns_.fetch_add(ns_between(drain, idle), std::memory_order_relaxed);
}

void VmmObserver::after_step(uint64_t /*index*/, CUstream /*stream*/) {
  hold_.leave();
}

void VmmObserver::on_finish() {
  finished_.store(true, std::memory_order_relaxed);
}

void VmmObserver::on_opaque(CUstream /*stream*/, const char* what) {
  if (what && what == tracer::kGraphLaunch) graph_launches_.fetch_add(1, std::memory_order_relaxed);
  // Work the tracer cannot see into may write any range: none made before it is unwritten.
  if (VmmAllocator* allocator = allocator_()) allocator->residency().unseen_work();
  hold_.enter();
}

void VmmObserver::after_opaque(CUstream /*stream*/) {
  hold_.leave();
}

void VmmObserver::on_capture_begin() {
  hold_.enter();
}

VmmWindowStats VmmObserver::stats() const {
  VmmWindowStats s;
  s.windows = hold_.windows();
  s.windows_abandoned = hold_.windows_abandoned();
  s.drains_failed = drains_failed_.load(std::memory_order_relaxed);
  s.skipped_for_capture = skipped_for_capture_.load(std::memory_order_relaxed);
  s.graph_launches = graph_launches_.load(std::memory_order_relaxed);
  auto ms = [](const std::atomic<uint64_t>& ns) {
    return static_cast<double>(ns.load(std::memory_order_relaxed)) / 1e6;
  };
  s.window_ms = ms(window_ns_);
  s.open_ms = ms(open_ns_);
  s.drain_ms = ms(drain_ns_);
  s.step_ms = ms(step_ns_);
  return s;
}

}  // namespace umswap
