// Engine vmm's launch observer (issue 38): it holds the program at a step where VmmResidency
// wants a window (the plan's moves, or a step that reaches a range with chunks on the host) and
// has the moves made first. It tells VmmResidency where iterations begin: an IterationDetector
// on the step keys (marks the program sets, UMSWAP_ITERATION_MARKER, are not used here yet).
//
// Each step (launch, copy, memset) and each opaque call (graph launch, host function) is in
// flight in the SubmissionHold from its API entry to its API exit. At a step's entry
// (on_step, under the tracer's launch mutex, so no other step enters meanwhile) that wants one,
// a window: the hold opened (no call enters; the ones in flight have put
// their work in their streams), the context synchronized (the GPU idle), make_resident() on
// umswap's own stream, the hold closed. Then the step goes on to the driver.
//
// While a CUDA graph capture is open anywhere in the process, no window opens (the context's
// synchronization would invalidate a capture in the global mode): the step reaches its ranges
// where they are. A capture's begin is in flight like a step, so none begins during a window.
// After a window abandoned for a call that never left, no window opens again (each would wait
// as long).
//
// Known risk (not seen in the runs): the window runs inside the driver's launch callback, which
// holds a driver lock; a driver call made there can wait behind another thread's call that
// waits for that lock (tracer::prepare_launch's cuMemHostAlloc hang). Windows belong before the
// driver is entered, in umswap's launch hooks: the next step.
//
// What it costs: every window drains the GPU and the program's run-ahead; the moves cross the
// link at about 55 GB/s plus the remaps (docs/lab/2026-11-29-vmm-window.md). A window that cannot
// open (a call whose exit never came) or whose synchronization fails moves nothing: the data stays
// where it is, reached over the link, and the count says so.
//
// An opaque call tells VmmResidency (unseen_work()): ranges made before it may have been written;
// so does the first step the tracer sees (the work before it went unseen).
//
// Threads: on_step from the launching threads, serialized by the tracer; the rest from any.
// Never throws but std::bad_alloc.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "umswap/allocator/submission_hold.h"
#include "umswap/allocator/vmm_allocator.h"
#include "umswap/allocator/vmm_window_log.h"
#include "umswap/tracer/iteration_detector.h"
#include "umswap/tracer/step_recorder.h"

namespace umswap {

struct VmmObserverDriver {
  PFN_cuCtxSynchronize_v2000 ctx_synchronize = nullptr;
  PFN_cuStreamCreate_v2000 stream_create = nullptr;
};

struct VmmWindowStats {
  uint64_t windows = 0;
  uint64_t windows_abandoned = 0;    // the hold could not open
  uint64_t drains_failed = 0;        // the context's synchronization failed: nothing moved
  uint64_t skipped_for_capture = 0;  // steps that wanted one while a graph capture was open
  uint64_t graph_launches = 0;       // opaque calls that were CUDA graph launches
  double window_ms = 0;              // the program held, in all
  // Of it: waiting for the calls in flight to leave (the hold opening), and for the GPU to drain.
  double open_ms = 0;
  double drain_ms = 0;
  double step_ms = 0;  // in on_step, windows included
};

class VmmObserver final : public tracer::LaunchObserver {
 public:
  // `allocator` is asked at each step with ranges (nullptr: nothing to do).
  VmmObserver(const VmmObserverDriver& driver, VmmAllocator* (*allocator)());

  void on_step(uint64_t index, uint32_t key, CUstream stream,
               const std::vector<tracer::PointerHit>* hits) override;
  void after_step(uint64_t index, CUstream stream) override;
  void on_finish() override;
  void on_opaque(CUstream stream, const char* what) override;
  void after_opaque(CUstream stream) override;
  void on_capture_begin() override;

  VmmWindowStats stats() const;
  // Each window that moved: the launch it held, its time and bytes (stats iterations[].vmm_*).
  const WindowLog& log() const { return log_; }
  // Steps seen (the tracer's launch count): the trace's step numbers are these only while the
  // tracer logged every step, which the stats check before summing windows per iteration.
  uint64_t launches_seen() const { return launches_seen_.load(std::memory_order_relaxed); }

 private:
  void window(VmmAllocator& allocator, uint64_t launch);

  const VmmObserverDriver driver_;
  VmmAllocator* (*const allocator_)();
  SubmissionHold hold_;
  std::atomic<bool> finished_{false};
  std::atomic<bool> gave_up_{false};  // a window was abandoned: none opens again
  // Under the tracer's launch mutex (on_step).
  VmmAllocator* allocator_cached_ = nullptr;  // allocator_()'s answer once it is not null
  tracer::IterationDetector detector_;        // where iterations begin, for the plan
  std::vector<CUdeviceptr> bases_;
  CUstream stream_ = nullptr;
  std::atomic<uint64_t> drains_failed_{0};
  std::atomic<uint64_t> skipped_for_capture_{0};
  std::atomic<uint64_t> graph_launches_{0};
  std::atomic<uint64_t> window_ns_{0};
  std::atomic<uint64_t> open_ns_{0};
  std::atomic<uint64_t> drain_ns_{0};
  std::atomic<uint64_t> step_ns_{0};  // in on_step
  WindowLog log_;
  std::atomic<uint64_t> launches_seen_{0};
};

}  // namespace umswap
