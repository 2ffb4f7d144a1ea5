// What the tracer keeps besides the launch log, until finish() assembles it: CUPTI's activity
// records (kernel, copy and memset times, unified-memory counters), parsed from the buffers CUPTI
// hands back; the flush thread that has CUPTI hand them over after each iteration; umswap's own
// residency notes and copies; and the slab blocks' lifetimes.
#include <cupti.h>

#include <pthread.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "tracer_impl.h"
#include "umswap/tracer/lifetimes.h"
#include "umswap/tracer/residency.h"
#include "umswap/tracer/step_recorder.h"

namespace umswap::tracer::detail {
namespace {

constexpr size_t kActivityBufferBytes = 4 << 20;  // a few MB, as CUPTI's samples suggest
constexpr size_t kMaxActivityBuffers = 64;        // past this, records are dropped and counted
// How often the flush thread looks for a finished iteration: at most this many flushes a second.
constexpr auto kFlushPoll = std::chrono::milliseconds(100);
// Slab lifetimes kept for the advisor and the trace (32 bytes each).
constexpr size_t kMaxLifetimes = size_t{1} << 20;

}  // namespace

void CUPTIAPI Tracer::on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  if (!g_tracer || g_tracer->buffers_out_.fetch_add(1) >= kMaxActivityBuffers) {
    if (g_tracer) g_tracer->buffers_out_.fetch_sub(1);
    // Never wait for a buffer to come back: CUPTI drops the records and counts them, and
    // count_dropped_records() adds them up.
    *buffer = nullptr;
    *size = 0;
    return;
  }
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kActivityBufferBytes));
  *size = *buffer ? kActivityBufferBytes : 0;
  if (!*buffer) g_tracer->buffers_out_.fetch_sub(1);  // none went out: CUPTI drops and counts
}

void CUPTIAPI Tracer::on_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t,
                                          size_t valid_size) {
  if (g_tracer && buffer) {
    g_tracer->parse_activity(buffer, valid_size);
    g_tracer->buffers_out_.fetch_sub(1);
  }
  if (g_tracer) g_tracer->count_dropped_records();
  std::free(buffer);
}

// Records CUPTI dropped for want of a buffer since the last call (the query resets the count).
// Since CUDA 6 all buffers are global: context NULL, stream 0.
void Tracer::count_dropped_records() {
  size_t dropped = 0;
  if (cupti_.activity_get_num_dropped_records(nullptr, 0, &dropped) == CUPTI_SUCCESS) {
    dropped_records_.fetch_add(dropped, std::memory_order_relaxed);
  }
}

// Flushes CUPTI's activity buffers after iterations end, so that kernel times and unified-memory
// records arrive while the program runs, not all at exit. From this thread, never from a CUPTI
// callback: cuptiActivityFlushAll blocks until the completion callbacks have parsed the buffers
// (CUPTI's header: "Default flush can be done at a regular interval in a separate thread"), and
// it is never called while one of the tracer's own locks is held. Polls at kFlushPoll: a launch
// only bumps a counter (StepRecorder::boundaries), nothing on the launch path waits or wakes.
void Tracer::flush_loop() {
  pthread_setname_np(pthread_self(), "umswap-flush");
  uint64_t flushed_at = 0;
  std::unique_lock lock(flush_mutex_);
  while (!flush_stop_) {
    flush_wake_.wait_for(lock, kFlushPoll);
    if (flush_stop_) break;
    const uint64_t boundaries = recorder()->boundaries();
    if (boundaries == flushed_at) continue;
    flushed_at = boundaries;
    lock.unlock();
    cupti_.activity_flush_all(0);  // completed records only; the forced flush is at exit
    flushes_.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
  }
}

void Tracer::stop_flush_thread() {
  if (!flush_thread_.joinable()) return;
  {
    std::lock_guard lock(flush_mutex_);
    flush_stop_ = true;
  }
  flush_wake_.notify_one();
  flush_thread_.join();
}

void Tracer::parse_activity(uint8_t* buffer, size_t valid_size) {
  std::lock_guard lock(activity_mutex_);
  CUpti_Activity* record = nullptr;
  while (cupti_.activity_get_next_record(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      kernel_times_[k->correlationId] = {k->start, k->end};
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      kernel_times_[m->correlationId] = {m->start, m->end};
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      kernel_times_[m->correlationId] = {m->start, m->end};
    } else if (record->kind == CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) {
      const auto* u = reinterpret_cast<const CUpti_ActivityUnifiedMemoryCounter3*>(record);
      um_records_.push_back({u->counterKind, u->value, u->start, u->end, u->address, u->flags});
    }
  }
}

// Placed where the program's stream runs it (summarize(), own_record_time()): a discard at the
// GPU end of the step launched before it, a populate at the GPU start of the next one.
void Tracer::note_residency(uint64_t address, uint64_t bytes, bool on_gpu, uint64_t at_step,
                            uint32_t copy) {
  if (!running() || !um_counters_.load(std::memory_order_acquire) || !cupti_.get_timestamp) return;
  uint64_t now = 0;
  if (cupti_.get_timestamp(&now) != CUPTI_SUCCESS) return;
  const StepRecorder* r = recorder();
  // kNow: placed at the call's time (own_record_time's fallback); kCurrentStep and
  // kLaunchingStep: by the log (noted_before()).
  uint64_t step = at_step;
  if (at_step == kCurrentStep || at_step == kLaunchingStep) {
    step = noted_before(
        at_step == kLaunchingStep ? NotedAt::launching_step : NotedAt::between_launches,
        r && r->recording() ? r->log().size() : UINT64_MAX);
  }
  std::lock_guard lock(activity_mutex_);
  um_records_.push_back({on_gpu ? CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD
                                : CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
                         bytes, now, now, address, 0, true, step, copy});
}

void Tracer::note_own_copy(uint32_t correlation, uint64_t address, uint64_t length, bool to_gpu) {
  if (!running() || correlation == 0) return;
  std::lock_guard lock(activity_mutex_);
  if (own_copies_.size() < kMaxOwnCopies) {
    own_copies_.push_back({correlation, address, length, to_gpu});
  } else {
    ++own_copies_dropped_;
  }
}

void Tracer::note_lifetime(uint64_t address, uint64_t bytes, bool freed) {
  const StepRecorder* r = recorder();
  if (!running() || !r || !r->recording()) return;
  const uint64_t before = r->log().size();
  std::lock_guard lock(lifetime_mutex_);
  if (lifetimes_.size() >= kMaxLifetimes) {
    const auto half = static_cast<ptrdiff_t>(kMaxLifetimes / 2);
    lifetimes_.erase(lifetimes_.begin(), lifetimes_.begin() + half);
  }
  // Threads race between reading the log's size and taking the lock: keep the order monotone.
  const uint64_t at = lifetimes_.empty() ? before : std::max(before, lifetimes_.back().when);
  lifetimes_.push_back({at, address, bytes, freed});
}

std::vector<LifetimeEvent> Tracer::copy_lifetimes(uint64_t from_step, uint64_t to_step) {
  std::lock_guard lock(lifetime_mutex_);
  const auto first =
      std::lower_bound(lifetimes_.begin(), lifetimes_.end(), from_step,
                       [](const LifetimeEvent& e, uint64_t step) { return e.when < step; });
  const auto last =
      std::upper_bound(first, lifetimes_.end(), to_step,
                       [](uint64_t step, const LifetimeEvent& e) { return step < e.when; });
  return {first, last};
}

}  // namespace umswap::tracer::detail
