#include "umswap/advisor/resident_gate.h"

#include <algorithm>

#include "umswap/advisor/advisor_common.h"
#include "umswap/advisor/resident_launches.h"
#include "umswap/allocator/driver_api.h"

namespace umswap::advisor {

namespace {
thread_local bool t_open = false;  // this thread is between make_resident() and close() of one
}  // namespace

bool ResidentGate::set_up(CUstream advisor_stream) {
  stream_ = advisor_stream;
  if (d_.event_create(&before_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return false;
  ready_.store(true, std::memory_order_release);
  return true;
}

bool ResidentGate::needs(uint32_t key) const {
  if (key >= kKeys) return needs_resident_memory(steps_.key_view(key));
  std::atomic<uint8_t>& known = keys_[key];
  uint8_t v = known.load(std::memory_order_relaxed);
  if (v == 0) {
    v = needs_resident_memory(steps_.key_view(key)) ? 2 : 1;
    known.store(v, std::memory_order_relaxed);
  }
  return v == 2;
}

// The launch starts once it is all there (stream order), the plan's evictions of a range wait for
// its last user to finish, and the learning evictor's run on this stream before it.
void ResidentGate::make_resident(const std::vector<tracer::PointerHit>* hits, CUstream s,
                                 CUdevice device) {
  launches_.fetch_add(1, std::memory_order_relaxed);
  // Another thread's capture in the global mode must not end because of these calls (this
  // launch's stream is not capturing: the tracer hands no captured launch to the advisor).
  const RelaxedCaptureScope relaxed(d_.thread_exchange_capture_mode);
  // The launch waits for the advisor's migrations issued before it (none issued before set_up).
  if (ready_.load(std::memory_order_acquire)) {
    std::lock_guard lock(mutex_);
    if (!t_open) {
      ++open_;
      t_open = true;
      if (d_.event_record(before_, stream_) != CUDA_SUCCESS ||
          d_.stream_wait_event(s, before_, 0) != CUDA_SUCCESS) {
        gate_failures_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  if (!hits) {  // not scanned (the tracer stopped recording)
    unscanned_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  thread_local std::vector<LaunchReach> reaches;
  thread_local std::vector<ResidentRange> ranges;
  reaches.clear();
  for (const tracer::PointerHit& h : *hits) {
    reaches.push_back({h.pointer, h.reach_end(), h.base, h.base + h.size});
  }
  resident_ranges(reaches, ranges, kPage);
  CUmemLocation gpu{};
  gpu.type = CU_MEM_LOCATION_TYPE_DEVICE;
  gpu.id = device;
  const int64_t before = now_ns();
  for (const ResidentRange& r : ranges) {
    if (d_.mem_prefetch_async(r.address, r.length, gpu, 0, s) == CUDA_SUCCESS) {
      calls_.fetch_add(1, std::memory_order_relaxed);
      bytes_.fetch_add(r.length, std::memory_order_relaxed);
      residency_.note_launch_populate(r.address, r.length);
    } else {
      failures_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  call_ns_.fetch_add(static_cast<uint64_t>(now_ns() - before), std::memory_order_relaxed);
}

CUevent ResidentGate::take_event() {
  if (!spare_.empty()) {
    CUevent e = spare_.back();
    spare_.pop_back();
    return e;
  }
  // On the launching thread: another thread's capture in the global mode must not end.
  const RelaxedCaptureScope relaxed(d_.thread_exchange_capture_mode);
  CUevent e = nullptr;
  return d_.event_create(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS ? e : nullptr;
}

void ResidentGate::order_after(CUevent e) {
  if (d_.stream_wait_event(stream_, e, 0) != CUDA_SUCCESS) {
    gate_failures_.fetch_add(1, std::memory_order_relaxed);
  }
  spare_.push_back(e);  // the wait took the record it had: it may be recorded again
}

bool ResidentGate::deferring() const {
  const Progress* w = words_.load(std::memory_order_acquire);
  return w && !w->waits_off.load(std::memory_order_acquire) &&
         w->waits_from.load(std::memory_order_acquire) != UINT64_MAX;
}

void ResidentGate::note_counter_wait(CUstream s, uint64_t covered) {
  if (!words_.load(std::memory_order_relaxed)) return;  // closes never wait in the list
  std::lock_guard lock(mutex_);
  for (auto& [stream, b] : covered_) {
    if (stream == s) {
      b = std::max(b, covered);
      return;
    }
  }
  covered_.emplace_back(s, covered);
}

// The advisor's migrations issued after it wait for it: from now on, or from those for a launch
// past what its stream waited for (the contract above).
void ResidentGate::close(CUstream s) {
  if (!t_open) return;
  std::lock_guard lock(mutex_);
  t_open = false;
  --open_;
  CUevent e = take_event();
  if (!e || d_.event_record(e, s) != CUDA_SUCCESS) {
    if (e) spare_.push_back(e);
    gate_failures_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const auto waited =
      std::find_if(covered_.begin(), covered_.end(),
                   [s](const std::pair<CUstream, uint64_t>& c) { return c.first == s; });
  if (!deferring() || waited == covered_.end()) {
    order_after(e);
    return;
  }
  pending_.emplace_back(waited->second, e);
  deferred_.fetch_add(1, std::memory_order_relaxed);
  if (pending_.size() > most_pending_.load(std::memory_order_relaxed)) {
    most_pending_.store(pending_.size(), std::memory_order_relaxed);
  }
}

std::unique_lock<std::mutex> ResidentGate::hold(uint64_t g) {
  std::unique_lock lock(mutex_);
  if (open_ > 0) {
    gate_waits_.fetch_add(1, std::memory_order_relaxed);
    const int64_t start = now_ns();
    while (open_ > 0) {
      lock.unlock();
      sleep_us(10);
      lock.lock();
      if (now_ns() - start > 1'000'000'000) {
        gate_timeouts_.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
  }
  // Under the same lock as the wait above, held until the migration is issued: a launch opening
  // from here on waits for this migration (make_resident), so only those closed so far count.
  if (!pending_.empty()) {
    const bool all = !deferring();
    std::erase_if(pending_, [&](const std::pair<uint64_t, CUevent>& c) {
      // Migrations for launches up to B run before the launch (its stream waited for them):
      // waiting for it there would deadlock the two streams.
      if (!all && c.first >= g) return false;
      order_after(c.second);
      return true;
    });
  }
  return lock;
}

nlohmann::json ResidentGate::stats_json() const {
  return {{"launches", launches_.load()},
          {"prefetch_calls", calls_.load()},
          {"prefetched_bytes", bytes_.load()},
          {"failed_calls", failures_.load()},
          {"unscanned_launches", unscanned_.load()},
          {"migrations_held", gate_waits_.load()},
          {"hold_timeouts", gate_timeouts_.load()},
          {"order_failures", gate_failures_.load()},
          {"closes_deferred", deferred_.load()},
          {"most_closes_pending", most_pending_.load()},
          {"call_seconds", call_ns_.load() * 1e-9}};
}

}  // namespace umswap::advisor
