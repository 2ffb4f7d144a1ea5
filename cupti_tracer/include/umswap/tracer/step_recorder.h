// The step recorder: what the launch path does once it knows a launch's function. It scans the
// parameters against a registry snapshot, appends the step to the launch log, feeds the iteration
// detector and tells the observer (the advisor). The CUPTI subscriber (tracer_callback.cpp) calls
// it from its callbacks; tests and bench/launch_path_bench.cpp call it directly, without CUDA.
//
// Contract:
//   * record_kernel(), record_copy() and mark() may be called from any thread. They serialize on
//     the launch mutex, which nothing else takes except stop(): the log's readers (the advisor)
//     never wait for a launch, and a launch never waits for a reader. In steady state (the log's
//     current chunk has room, every buffer touched was seen before, the detector is locked on a
//     period) they do not allocate.
//   * The observer's on_step() runs under the launch mutex, once per step seen, logged or not, in
//     launch order: index = how many steps were seen before.
//   * log(), key_name(), recording(), boundaries(): any thread, no lock.
//   * intern(): any thread; a new name takes the names mutex (never taken by readers).
//   * stop(): ends recording (later steps are seen, observed, neither logged nor counted) and
//     returns what the trace needs besides the log, which stays readable.
// Steps dropped while recording (log full, or no memory for a chunk) are counted.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "umswap/allocator/registry.h"
#include "umswap/core/trace.h"
#include "umswap/tracer/iteration_detector.h"
#include "umswap/tracer/launch_log.h"
#include "umswap/tracer/param_scanner.h"

namespace umswap::tracer {

// Who else wants to see each launch (the advisor). Calls come from the launching threads.
class LaunchObserver {
 public:
  virtual ~LaunchObserver() = default;
  // Launch `index` (0-based count of every step the tracer saw, logged or not) with step `key`
  // on `stream`, at API entry, with the pointers into buffers its parameters hold (null when the
  // tracer no longer records, and so did not look). Serialized: called under the tracer's launch
  // mutex. Must be cheap.
  virtual void on_step(uint64_t index, uint32_t key, CUstream stream,
                       const std::vector<PointerHit>* hits) = 0;
  // The same launch after the driver call returned (API exit), on the same thread, outside the
  // tracer's lock: the work is in the stream, so an event recorded now completes after it.
  virtual void after_step(uint64_t index, CUstream stream) = 0;
  // finish() calls this first, before the final flush: stop using CUDA.
  virtual void on_finish() = 0;
  // A driver call whose memory accesses the tracer cannot know (a CUDA graph launch, a host
  // function: `what` names it) on `stream`, at API entry on the calling thread, outside the
  // tracer's locks; not a step. The default ignores it.
  virtual void on_opaque(CUstream stream, const char* what) {
    (void)stream;
    (void)what;
  }
  // The same opaque call after the driver call returned (API exit), on the same thread, outside
  // the tracer's locks; also the exit of a capture begin (stream null). The default ignores it.
  virtual void after_opaque(CUstream stream) { (void)stream; }
  // A stream capture begins (cuStreamBeginCapture*, at API entry, outside the tracer's locks);
  // after_opaque() follows at its exit, once the tracer counts the capture as open. The default
  // ignores it.
  virtual void on_capture_begin() {}
  // A call that blocks its thread until the GPU gets somewhere (cuCtxSynchronize,
  // cuStreamSynchronize, cuEventSynchronize, and a copy that may have host memory on one side,
  // after its on_step), at API entry on the calling thread, outside the tracer's locks, before
  // the driver is entered. The default ignores it.
  virtual void before_blocking() {}
};

class StepRecorder {
 public:
  struct Options {
    LaunchObserver* observer = nullptr;  // outlives the recorder; may be null
    LaunchLog::Limits log_limits = {};
  };

  // What the trace needs besides the log, as of stop().
  struct Recording {
    std::vector<std::string> names;     // by key
    std::vector<BufferRecord> buffers;  // every buffer a logged step touched, by id
    std::vector<uint64_t> marks;        // steps that begin an iteration by marker
    trace::Detection detection;         // from the markers, else from the whole logged sequence
    uint64_t dropped_steps = 0;
  };

  explicit StepRecorder(const Options& options);
  ~StepRecorder();
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;

  // A kernel launch: parameters as kernelParams (`params`, one pointer per parameter) or, when
  // `params` is null, packed (`packed`). Returns the launch index.
  uint64_t record_kernel(const FunctionLayout& function, const void* const* params,
                         std::span<const std::byte> packed, CUstream stream, uint32_t correlation,
                         const Registry::Snapshot& snapshot);
  // A memcpy, memset or stream memory operation touching `pointers` (0 = none; each is taken
  // once). Returns the launch index.
  uint64_t record_copy(trace::StepKind kind, uint32_t key, CUstream stream, uint32_t correlation,
                       std::span<const uint64_t> pointers, const Registry::Snapshot& snapshot);
  // The next step begins an iteration (`source`: "api", "nvtx:<name>").
  void mark(std::string_view source);

  // The key for `name`, interning it on first use.
  uint32_t intern(std::string_view name);
  // The name a key stands for; empty if unknown.
  std::string key_name(uint32_t key) const;
  // The same without a copy (the string lives as long as the recorder); empty if unknown.
  std::string_view key_view(uint32_t key) const;

  const LaunchLog& log() const { return log_; }
  bool recording() const { return recording_.load(std::memory_order_relaxed); }
  // A launch's pointers are looked up while recording, and after it for an observer (the
  // advisor's launch path needs them for as long as the program runs: resident_launches.h).
  bool scans() const { return recording() || options_.observer != nullptr; }
  // Iteration boundaries seen so far (markers and detected ones): a change says an iteration
  // ended.
  uint64_t boundaries() const { return boundaries_.load(std::memory_order_relaxed); }

  Recording stop();

 private:
  uint64_t record(const LoggedStep& step, CUstream stream, const Registry::Snapshot& snapshot);
  void remember_buffers(const Registry::Snapshot& snapshot);
  void after_append(uint32_t key);

  const Options options_;
  LaunchLog log_;
  std::atomic<bool> recording_{true};
  std::atomic<uint64_t> boundaries_{0};

  // The launch path's state, guarded by launch_mutex_.
  std::mutex launch_mutex_;
  std::vector<PointerHit> scratch_;  // this launch's hits; keeps its capacity
  IterationDetector detector_;
  std::vector<uint64_t> marks_;
  std::vector<uint64_t> seen_;  // bit per BufferId (ids are allocation order, dense from 1)
  std::vector<BufferRecord> buffers_;
  uint64_t launches_ = 0;
  uint64_t dropped_steps_ = 0;

  // Names by key: written under names_mutex_, published through names_published_ like the log.
  mutable std::mutex names_mutex_;
  std::unordered_map<std::string, uint32_t> name_ids_;  // guarded by names_mutex_
  detail::ChunkedArray<const std::string*> names_;      // owned strings
  std::atomic<uint32_t> names_published_{0};
  uint32_t overflow_key_ = UINT32_MAX;  // guarded by names_mutex_
};

}  // namespace umswap::tracer
