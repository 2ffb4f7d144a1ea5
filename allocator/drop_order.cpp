#include "umswap/allocator/drop_order.h"

#include <algorithm>

#include "umswap/allocator/discard_pages.h"

namespace umswap {

namespace {

uint64_t page_down(uint64_t a) {
  return a / kDiscardPage * kDiscardPage;
}
uint64_t page_up(uint64_t a) {
  return (a + kDiscardPage - 1) / kDiscardPage * kDiscardPage;
}

}  // namespace

CUevent DropOrder::take_event() {
  if (!spare_.empty()) {
    CUevent e = spare_.back();
    spare_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  if (d_.event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  return e;
}

// The advisor's stream finishes its calls in order: the first not finished ends the pruning. One
// whose event could not be recorded is never seen finished (and stopped the discards).
void DropOrder::prune_migrations() {
  while (!migrations_.empty()) {
    Migration& m = migrations_.front();
    if (!m.ended || !m.done || !finished(m.done)) return;
    give_back(m.done);
    migrations_.pop_front();
  }
}

// A discard without an event is never seen finished: its pages stay out of every migration.
void DropOrder::prune_discards() {
  std::erase_if(discards_, [this](Discard& c) {
    if (!c.done || !finished(c.done)) return false;
    give_back(c.done);
    return true;
  });
}

bool DropOrder::may_discard(uint64_t page, std::unique_lock<std::mutex>& held, Wait* wait) {
  if (!held.owns_lock()) {
    held = std::unique_lock(mutex_);
    prune_migrations();
  }
  if (stopped_) {
    ++stats_.pages_kept;
    return false;
  }
  // Any eviction over the page, or a migration whose calls are being made, keeps it. Prefetches
  // alone: the latest (the migrations run in the order issued, on one stream) may be waited for.
  const Migration* latest = nullptr;
  bool keep = false, eviction = false;
  for (const Migration& m : migrations_) {
    if (!(page < m.pages.second && m.pages.first < page + kDiscardPage)) continue;
    latest = &m;
    eviction = eviction || !m.to_gpu;
    keep = keep || !m.to_gpu || !m.ended || !m.done;
  }
  if (!latest) return true;
  ++stats_.pages_kept;  // unless the wait below is taken
  if (eviction) {
    ++stats_.kept_by_evictions;
    const bool prefetched_after = latest->to_gpu && latest->ended && latest->done;
    ++(prefetched_after ? stats_.kept_prefetched_after : stats_.kept_eviction_last);
  }
  if (keep || !wait || !waits_allowed_ || !waits_allowed_()) return false;
  if (wait->capturing < 0) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    wait->capturing = d_.stream_is_capturing(wait->stream, &status) != CUDA_SUCCESS ||
                      status != CU_STREAM_CAPTURE_STATUS_NONE;  // an outside event ends a capture
  }
  if (wait->capturing) {
    ++stats_.kept_capturing;
    return false;
  }
  --stats_.pages_kept;
  ++stats_.pages_after_waits;
  if (latest->ticket > wait->ticket) {
    wait->ticket = latest->ticket;
    wait->event = latest->done;
  }
  return true;
}

bool DropOrder::wait_for(const Wait& wait) {
  if (!wait.event) return true;
  if (d_.stream_wait_event(wait.stream, wait.event, 0) != CUDA_SUCCESS) {
    ++stats_.event_failures;
    stopped_ = true;
    return false;
  }
  ++stats_.stream_waits;
  return true;
}

void DropOrder::allow_waits(std::function<bool()> allowed) {
  std::lock_guard lock(mutex_);
  waits_allowed_ = std::move(allowed);
}

void DropOrder::discarded(const std::vector<CUdeviceptr>& starts, const std::vector<size_t>& sizes,
                          CUstream stream) {
  if (starts.empty()) return;
  prune_discards();
  Discard c;
  c.done = take_event();
  if (!c.done || d_.event_record(c.done, stream) != CUDA_SUCCESS) {
    if (c.done) give_back(c.done);
    c.done = nullptr;
    ++stats_.event_failures;
    stopped_ = true;
  }
  for (size_t i = 0; i < starts.size(); ++i) c.pages.emplace_back(starts[i], starts[i] + sizes[i]);
  discards_.push_back(std::move(c));
}

uint64_t DropOrder::begin_migration(uint64_t address, uint64_t length, bool to_gpu,
                                    std::vector<Range>* parts) {
  parts->clear();
  std::lock_guard lock(mutex_);
  prune_discards();
  const uint64_t end = address + length;
  // The pages of pending discards inside the range, in order, merged.
  std::vector<Range> out;
  for (const Discard& c : discards_) {
    for (const Range& r : c.pages) {
      if (r.first < end && address < r.second) out.push_back(r);
    }
  }
  std::sort(out.begin(), out.end());
  uint64_t at = address;
  for (const Range& r : out) {
    if (r.first > at) parts->emplace_back(at, std::min(r.first, end));
    at = std::max(at, r.second);
  }
  if (at < end) parts->emplace_back(at, end);
  if (!out.empty()) {
    ++stats_.migrations_cut;
    uint64_t left = 0, reach = 0;
    for (const Range& r : out) {
      const uint64_t from = std::max({r.first, reach, page_down(address)});
      const uint64_t to = std::min(r.second, page_up(end));
      if (to > from) left += (to - from) / kDiscardPage;
      reach = std::max(reach, r.second);
    }
    stats_.pages_left_out += left;
  }
  if (stopped_) return 0;  // no discard comes any more: nothing to keep apart
  Migration m;
  m.pages = {page_down(address), page_up(end)};
  m.ticket = next_ticket_++;
  m.to_gpu = to_gpu;
  migrations_.push_back(m);
  stats_.most_migrations_pending =
      std::max<uint64_t>(stats_.most_migrations_pending, migrations_.size());
  return m.ticket;
}

void DropOrder::end_migration(uint64_t ticket, CUstream stream) {
  if (ticket == 0) return;
  std::lock_guard lock(mutex_);
  for (auto it = migrations_.rbegin(); it != migrations_.rend(); ++it) {
    if (it->ticket != ticket) continue;
    CUevent e = take_event();
    if (!e || d_.event_record(e, stream) != CUDA_SUCCESS) {
      if (e) give_back(e);
      ++stats_.event_failures;
      stopped_ = true;
    } else {
      it->done = e;
    }
    it->ended = true;
    break;
  }
  prune_migrations();
}

DropOrder::Stats DropOrder::stats() const {
  std::lock_guard lock(mutex_);
  Stats s = stats_;
  s.stopped = stopped_;
  s.discards_pending = discards_.size();
  s.migrations_pending = migrations_.size();
  return s;
}

}  // namespace umswap
