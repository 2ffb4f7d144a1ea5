#include "umswap/advisor/copy_evictor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "umswap/advisor/copy_kernel.h"
#include "umswap/core/driver_lock.h"
#include "umswap/core/log.h"
#include "umswap/core/stats_schema.h"

namespace umswap::advisor {

std::vector<std::pair<CUstream, const char*>> CopyEvictor::streams() const {
  return {
      {restore_stream_, "restore"}, {populate_stream_, "populate"}, {discard_stream_, "discard"}};
}

CopyEvictor::Outcome CopyEvictor::evict(uint64_t address, uint64_t length, uint64_t g, uint64_t j,
                                        bool ordered, uint64_t due) {
  // A copy out is followed by a discard: only after the last use is known done.
  if (live_.load(std::memory_order_relaxed)) {
    if (!ordered) ++copy_skipped_unordered_;
    if (due == UINT64_MAX) ++copy_skipped_not_back_;
  }
  if (!ordered || due == UINT64_MAX) return Outcome::declined;
  const Outcome out = evict_by_copy(address, length, g, j, due);
  // Kept: a launch the program has already submitted uses the range again before a copy back
  // could be waited for: the driver's eviction would only race that launch, which then faults
  // the pages back. The range stays on the GPU, over the budget until its next use (the cuDNN
  // sample at batch 64, H200 2026-11-26: 186-194 faults an iteration instead of 1,766-16,153,
  // and faster; docs/advisor.md).
  if (out == Outcome::kept) kept_reached_bytes_ += length;
  return out;
}

// Launches that wait for g's prefetches wait for its copies back too (none: the value only).
void CopyEvictor::finish_launch(uint64_t g, bool wait_reached) {
  if (!live_.load(std::memory_order_relaxed)) return;
  issue_restore(true, wait_reached, {g, pending_ticket_, std::move(pending_in_)});
  pending_in_.clear();
  if (copy_back_failed_) stop("a copy back to the GPU failed");
}

void CopyEvictor::take_requests() {
  if (!rescue_asked_.exchange(false)) return;
  const uint64_t caught = guard_launch_.load();
  if (const char* what = opaque_call_.load()) {
    stop(fmt::format("the program issued {}, whose memory accesses the tracer cannot see", what));
  } else if (caught == UINT64_MAX) {
    stop("launches waited 2 s for the advisor");
  } else {
    stop(fmt::format(
        "launch {} ({}) reaches memory copied to the host (and the tracer cannot say where)",
        caught, steps_.step_name(caught)));
  }
}

void CopyEvictor::settle_at_exit() {
  if (trips_ && restore_stream_ && d_.stream_synchronize(restore_stream_) == CUDA_SUCCESS) {
    tend();  // --verify: the last round trips compared
  }
}

// The word is read before live_: stop() releases the word in use (after every copy back) and
// turns copies off before it hands out a fresh one. Read again after live_: a fresh word handed
// out and copies turned on again between the two reads (a relearned plan takes over at once)
// would otherwise pair the new epoch's copies with the released word, whose wait passes at once.
bool CopyEvictor::begin_launch(CUdeviceptr* restored) {
  bool live = false;
  do {
    *restored = restored_device_.load(std::memory_order_seq_cst);
    live = live_.load(std::memory_order_seq_cst);
  } while (live && restored_device_.load(std::memory_order_seq_cst) != *restored);
  return live;
}

// Kept by launch index (covered_at_) for the advisor's scan (submitted_reach()).
uint64_t CopyEvictor::cover(uint64_t own, uint64_t index, CUstream on) {
  uint64_t result = UINT64_MAX;
  for (StreamCover& e : stream_cover_) {
    if (!e.used || e.stream == on) {
      e.used = true;
      e.stream = on;
      if (own != UINT64_MAX) e.covered = e.covered == UINT64_MAX ? own : std::max(e.covered, own);
      result = e.covered;
      break;
    }
  }
  const size_t slot = index % kCoverRing;
  covered_at_[slot].first.store(index, std::memory_order_relaxed);
  covered_at_[slot].second.store(result, std::memory_order_release);
  return result;
}

uint64_t CopyEvictor::covered_launch(uint64_t index) const {
  const auto& e = covered_at_[index % kCoverRing];
  const uint64_t c = e.second.load(std::memory_order_acquire);
  return e.first.load(std::memory_order_relaxed) == index ? c : UINT64_MAX;
}

void CopyEvictor::wait_for_stop(CUstream on) {
  uint64_t pending = stopped_pending_.load(std::memory_order_acquire);
  if (pending == 0) return;
  if (d_.event_query(stopped_event_) == CUDA_SUCCESS) {
    // Done: the stop read above, or a later one recorded since (then still pending: kept).
    stopped_pending_.compare_exchange_strong(pending, 0, std::memory_order_acq_rel);
  } else {
    d_.stream_wait_event(on, stopped_event_, 0);
  }
}

// The copies it waits for need nothing from the launch path.
void CopyEvictor::wait_on_host(CUdeviceptr word, uint64_t value, uint64_t index) {
  if (!copy_words_ || word < restored_base_) return;
  const volatile uint64_t* w = copy_words_ + (word - restored_base_) / sizeof(uint64_t);
  if (warned_wait_failure_.first()) {
    log_warning(
        "UMSWAP_EVICT_COPY: launch {} could not wait on the GPU for its copies back; it waits "
        "on the host (and so do later ones that fail the same way)",
        index);
  }
  while (*w < value && !host_.stopping()) sleep_us(20);
}

std::optional<uint64_t> CopyEvictor::epoch_of(CUdeviceptr word) const {
  if (!copy_words_ || word < restored_base_) return std::nullopt;
  return (word - restored_base_) / sizeof(uint64_t);
}

std::optional<std::pair<uint64_t, uint64_t>> CopyEvictor::word_now() const {
  if (!copy_words_) return std::nullopt;
  const CUdeviceptr r = restored_device_.load();
  if (r < restored_base_) return std::nullopt;
  const uint64_t e = (r - restored_base_) / sizeof(uint64_t);
  return std::pair{e, copy_words_[e]};
}

void CopyEvictor::on_opaque(const char* what, uint64_t launched, CUstream on) {
  if (live_.load(std::memory_order_seq_cst)) {
    const char* none = nullptr;
    opaque_call_.compare_exchange_strong(none, what);
    // No pointers: everything comes back and copies stop; returns once they have.
    guard(launched, nullptr, UINT64_MAX, on);
  }
  wait_for_stop(on);
}

void CopyEvictor::before_free(uint64_t base, uint64_t size) {
  // Without copies in force nothing is held (a stop gives everything back).
  if (!live_.load(std::memory_order_acquire)) return;
  const uint64_t end = base + size;
  bool in_flight = false;
  {
    std::lock_guard lock(copies_mutex_);
    if (!copies_) return;
    in_flight = copies_->returning(base, end);
    if (!in_flight && !copies_->holds(base, end)) return;
    // Ticket 0: no copy back is issued for these; their host blocks are reused once the copies
    // out already issued are seen done, as for any range given back.
    const HostCopies::Returned r = copies_->give_back(base, size, 0, HostCopies::kUntracked);
    in_flight = in_flight || r.forgotten_bytes > 0;  // a copy out still reading it
    uint64_t bytes = r.forgotten_bytes;
    for (const HostCopies::Segment& s : r.copy_in) bytes += s.length;
    freed_held_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  if (!in_flight) return;
  freed_waits_.fetch_add(1, std::memory_order_relaxed);
  for (CUstream s : {stream_, discard_stream_, populate_stream_, restore_stream_}) {
    if (s) d_.stream_synchronize(s);
  }
}

nlohmann::json CopyEvictor::stats_json(const tracer::RunSummary* summary) const {
  nlohmann::json j = {
      {"used", copies_ != nullptr},
      {stats_schema::advisor::evict_copy::kOffReason.name(),
       copy_off_reason_.empty() ? nlohmann::json(nullptr) : nlohmann::json(copy_off_reason_)},
      {stats_schema::advisor::evict_copy::kCopiedOutBytes.name(), copied_out_bytes_},
      {stats_schema::advisor::evict_copy::kCopiedInBytes.name(), copied_in_bytes_},
      {"discarded_bytes", copy_discarded_bytes_},
      {"forgotten_bytes", copy_forgotten_bytes_},
      {"copy_calls", copy_calls_},
      {"driver_fallbacks", copy_fallbacks_},
      // Not copied because a launch already submitted reaches the range: left on the GPU.
      {stats_schema::advisor::evict_copy::kKeptReached.name(),
       {{stats_schema::advisor::evict_copy::kept_reached::kEvictions.name(), copy_reached_},
        {stats_schema::advisor::evict_copy::kept_reached::kBytes.name(), kept_reached_bytes_}}},
      {"copies_out_after_copy_back", copies_out_after_back_},
      {"left_to_driver",
       {{"unordered", copy_skipped_unordered_},
        {"copy_back_not_issued", copy_out_unordered_back_},
        {"not_brought_back_whole", copy_skipped_not_back_},
        {"before_the_waits", copy_skipped_early_}}},
      {"rescues", copy_rescues_},
      {"guard_hits", copy_guard_hits_},
      {"rescued_bytes", copy_rescued_bytes_},
      {"guard_kernels", guard_kernels_},
      {"failures", copy_failures_},
      {stats_schema::advisor::evict_copy::kLostBytes.name(), copy_lost_bytes_},
      {"freed_while_held_bytes", freed_held_bytes_.load()},
      {"frees_waiting_for_copies", freed_waits_.load()},
      {"side_streams", populate_stream_ != nullptr},
      {"path", copy_fn_ ? "kernel" : "engine"},
      {"kernel_off", copy_kernel_off_},
      {"kernel_copies", kernel_copies_},
      {"engine_copies", engine_copies_},
      {"host_bytes", copies_ ? copies_->host_bytes() : 0},
  };
  if (config_.verify)
    j[stats_schema::advisor::evict_copy::kRoundTrips.name()] = round_trips_json(summary);
  return j;
}

void CopyEvictor::set_up(CUstream stream, CUdevice device, bool have_counter) {
  stream_ = stream;
  device_ = device;
  if (!config_.evict_copy) return;
  const auto off = [this](const char* why) {
    copy_off_reason_ = why;
    log_warning("UMSWAP_EVICT_COPY: {}; evictions go through the driver", why);
  };
  if (!have_counter || !config_.prefetch_wait) {
    return off("needs the prefetch wait's counter (UMSWAP_PREFETCH_WAIT)");
  }
  if (!d_.can_copy()) return off("the CUDA driver lacks the copy, discard or event functions");
  // Pinned memory and the copy kernel's module (driver_lock.h).
  const std::lock_guard setting_up(driver_setup_mutex());
  void* words = nullptr;
  if (d_.stream_create(&restore_stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d_.event_create(&discarded_event_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
      d_.event_create(&stopped_event_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
      d_.event_create(&rescue_event_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
      d_.mem_host_alloc(&words, kEpochs * sizeof(uint64_t),
                        CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS ||
      d_.mem_host_get_device_pointer(&restored_base_, words, 0) != CUDA_SUCCESS) {
    return off("could not create its stream, event or counters");
  }
  copy_words_ = static_cast<volatile uint64_t*>(words);
  for (uint32_t i = 0; i < kEpochs; ++i) copy_words_[i] = 0;
  restored_device_.store(restored_base_, std::memory_order_release);
  // The copy kernel's module only with a budget asked for: without one umswap evicts only past
  // the GPU's whole memory (copy engines copy then), and loading a module is a context-wide call
  // that must not come while a program thread captures a CUDA graph (a global-mode capture fails
  // on it).
  if (!config_.budget.is_zero()) {
    set_up_copy_kernel();
  } else {
    copy_kernel_off_ = "no budget was set (copy engines copy)";
  }
  if (d_.stream_create(&populate_stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
      d_.event_create(&populated_event_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
      d_.stream_create(&discard_stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    // Populates and discards run on their copies' streams.
    populate_stream_ = discard_stream_ = nullptr;
  }
  // Pinned host memory: at most half of the machine's memory.
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  const uint64_t limit = pages > 0 && page_size > 0
                             ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) / 2
                             : uint64_t{16} << 30;
  copies_ = std::make_unique<HostCopies>(
      [this](uint64_t bytes) -> uint64_t {
        void* host = nullptr;
        host_.note_doing("allocating pinned memory");
        // The copy kernel reads and writes it at its host address (unified addressing).
        const unsigned flags =
            CU_MEMHOSTALLOC_PORTABLE | (copy_fn_ ? CU_MEMHOSTALLOC_DEVICEMAP : 0u);
        const std::lock_guard driver(driver_setup_mutex());
        return d_.mem_host_alloc(&host, bytes, flags) == CUDA_SUCCESS
                   ? reinterpret_cast<uint64_t>(host)
                   : 0;
      },
      [this](uint64_t host, uint64_t) {
        const std::lock_guard driver(driver_setup_mutex());
        d_.mem_free_host(reinterpret_cast<void*>(host));
      },
      limit);
  if (config_.verify && !trips_ && trips_off_.empty()) {
    trips_off_ = "the copy kernel is off: " + copy_kernel_off_;
  }
  log_info("UMSWAP_EVICT_COPY: evictions are copied to pinned host memory (up to {}){}",
           format_bytes(limit),
           config_.keep_pages ? " (keep-pages: a diagnostic, the GPU pages are not discarded)"
                              : " and their GPU pages discarded");
}

// Loads the copy kernel (copy_kernel.h) into the program's context; if it cannot be, says so
// once and leaves the copies to the copy engines.
void CopyEvictor::set_up_copy_kernel() {
  const auto off = [this](std::string why) {
    copy_kernel_off_ = std::move(why);
    log_warning("UMSWAP_EVICT_COPY: the copy kernel: {}; copy engines copy", copy_kernel_off_);
  };
  if (!d_.module_load_data || !d_.module_get_function || !d_.launch_kernel) {
    return off("the CUDA driver lacks cuModuleLoadData, cuModuleGetFunction or cuLaunchKernel");
  }
  CUmodule module = nullptr;
  if (const CUresult r = d_.module_load_data(&module, copy_kernel_ptx().data());
      r != CUDA_SUCCESS) {
    return off(fmt::format("the driver did not load its PTX (error {})", static_cast<int>(r)));
  }
  // The module stays loaded for the life of the context: the kernel may run until the end.
  if (const CUresult r = d_.module_get_function(&copy_fn_, module, kCopyKernelName);
      r != CUDA_SUCCESS) {
    copy_fn_ = nullptr;
    return off(fmt::format("{} was not found in its module (error {})", kCopyKernelName,
                           static_cast<int>(r)));
  }
  if (config_.verify) set_up_round_trips(module);
}

// umswap run --verify: the page hash kernel from the copy kernel's module and its slots; without
// them the round trips are not hashed (the stats say why).
void CopyEvictor::set_up_round_trips(CUmodule module) {
  void* memory = nullptr;
  if (const CUresult r = d_.module_get_function(&hash_fn_, module, kPageHashKernelName);
      r != CUDA_SUCCESS) {
    hash_fn_ = nullptr;
    trips_off_ = fmt::format("{} was not found in the copy kernel's module (error {})",
                             kPageHashKernelName, static_cast<int>(r));
  } else if (const CUresult m = d_.mem_host_alloc(
                 &memory, kTripSlots * 8, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
             m != CUDA_SUCCESS) {
    trips_off_ = fmt::format("no pinned memory for the hashes (error {})", static_cast<int>(m));
  } else {
    trip_memory_ = static_cast<const volatile uint64_t*>(memory);
    trips_ = std::make_unique<RoundTrips>(kTripSlots);
    return;
  }
  log_warning("umswap run --verify: {}; the round trips are not hashed", trips_off_);
}

void CopyEvictor::hash_pages(uint64_t address, uint64_t length, bool leaving, uint64_t ticket,
                             uint64_t g, CUstream s) {
  if (!trips_) return;
  const auto [lo, hi] = whole_pages(address, length);
  if (hi <= lo) return;
  const uint64_t pages = (hi - lo) / kPage;
  const std::optional<uint64_t> first =
      leaving ? trips_->leave(lo, pages, ticket, g) : trips_->back(lo, pages, ticket, g);
  if (!first) return;
  uint64_t src = lo, hashes = reinterpret_cast<uint64_t>(trip_memory_) + *first * 8;
  void* args[] = {&src, &hashes};
  CUresult r = CUDA_SUCCESS;
  {
    const Timed timed(times_.copy_call_s);
    r = d_.launch_kernel(hash_fn_, static_cast<unsigned>(pages), 1, 1, kPageHashThreads, 1, 1, 0, s,
                         args, nullptr);
  }
  if (r != CUDA_SUCCESS) {
    // Its slots will hold no hash: no round trip is compared from here on (a false mismatch
    // would be worse than none). The memory stays: hashes launched before may still write it.
    trips_off_ = fmt::format("a launch of the hash kernel failed (error {})", static_cast<int>(r));
    trips_.reset();
    log_warning("umswap run --verify: {}; round trips are no longer hashed", trips_off_);
  }
}

// Compares the round trips whose copies are seen done (tend()).
void CopyEvictor::settle_round_trips() {
  if (!trips_) return;
  const size_t had = trips_->mismatches().size();
  trips_->settle(out_done_, in_done_, [&](uint64_t slot) { return trip_memory_[slot]; });
  const auto name = [this](uint64_t launch) { return steps_.step_name(launch); };
  for (size_t i = had; i < trips_->mismatches().size(); ++i) {
    const RoundTrips::Mismatch& m = trips_->mismatches()[i];
    mismatch_kernels_.emplace_back(name(m.left_at), name(m.back_at));
    log_warning(
        "umswap run --verify: the 2 MiB page at {:#x} came back different from what left the "
        "GPU (copied out at launch {}, {}; back at launch {}, {})",
        m.page, m.left_at, mismatch_kernels_.back().first, m.back_at,
        mismatch_kernels_.back().second);
  }
}

nlohmann::json CopyEvictor::round_trips_json(const tracer::RunSummary* summary) const {
  nlohmann::json j = {
      {stats_schema::advisor::evict_copy::round_trips::kHashed.name(), trips_ != nullptr},
      {stats_schema::advisor::evict_copy::round_trips::kOffReason.name(),
       trips_off_.empty() ? nlohmann::json(nullptr) : nlohmann::json(trips_off_)}};
  if (!trips_) return j;
  const RoundTrips::Counts& c = trips_->counts();
  nlohmann::json first = nlohmann::json::array();
  for (size_t i = 0; i < trips_->mismatches().size(); ++i) {
    const RoundTrips::Mismatch& m = trips_->mismatches()[i];
    nlohmann::json x = {
        {std::string(
             stats_schema::advisor::evict_copy::round_trips::first_mismatches::kPage.name()),
         fmt::format("{:#x}", m.page)},
        {stats_schema::advisor::evict_copy::round_trips::first_mismatches::kLeftAtLaunch.name(),
         m.left_at},
        {stats_schema::advisor::evict_copy::round_trips::first_mismatches::kBackAtLaunch.name(),
         m.back_at},
        {"left_hash", fmt::format("{:#018x}", m.left_hash)},
        {"back_hash", fmt::format("{:#018x}", m.back_hash)}};
    if (i < mismatch_kernels_.size()) {
      x[std::string(
          stats_schema::advisor::evict_copy::round_trips::first_mismatches::kLeftKernel.name())] =
          mismatch_kernels_[i].first;
      x[std::string(
          stats_schema::advisor::evict_copy::round_trips::first_mismatches::kBackKernel.name())] =
          mismatch_kernels_[i].second;
    }
    if (summary) {
      const auto& bufs = summary->trace.buffers;
      for (size_t b = 0; b < bufs.size(); ++b) {
        if (bufs[b].base < m.page + kPage && m.page < bufs[b].base + bufs[b].size) {
          x[std::string(
              stats_schema::advisor::evict_copy::round_trips::first_mismatches::kBuffer.name())] = {
              {std::string(
                   stats_schema::advisor::evict_copy::round_trips::first_mismatches::buffer::kIndex
                       .name()),
               b},
              {std::string(
                   stats_schema::advisor::evict_copy::round_trips::first_mismatches::buffer::kBase
                       .name()),
               fmt::format("{:#x}", bufs[b].base)},
              {"size", bufs[b].size}};
          break;
        }
      }
    }
    first.push_back(std::move(x));
  }
  // Pages of 2 MiB.
  j.update(
      {{stats_schema::advisor::evict_copy::round_trips::kPageBytes.name(), kPage},
       {stats_schema::advisor::evict_copy::round_trips::kCheckedPages.name(), c.checked},
       {stats_schema::advisor::evict_copy::round_trips::kMismatchedPages.name(), c.mismatches},
       {stats_schema::advisor::evict_copy::round_trips::kFirstMismatches.name(), std::move(first)},
       {stats_schema::advisor::evict_copy::round_trips::kNotComparedPages.name(),
        {{std::string(
              stats_schema::advisor::evict_copy::round_trips::not_compared_pages::kNoSlot.name()),
          c.no_slot},
         {stats_schema::advisor::evict_copy::round_trips::not_compared_pages::kUnmatched.name(),
          c.unmatched},
         {std::string(
              stats_schema::advisor::evict_copy::round_trips::not_compared_pages::kAwayAtExit
                  .name()),
          trips_->away()},
         {std::string(
              stats_schema::advisor::evict_copy::round_trips::not_compared_pages::kReturningAtExit
                  .name()),
          trips_->returning()}}}});
  return j;
}

// One copy of umswap's between pinned host memory and the GPU on stream s: by the copy kernel
// when it is loaded and the copy fits it, else by a copy engine. Addresses are the process's
// (unified addressing: a pinned host block has the same address on the GPU).
CUresult CopyEvictor::copy_async(uint64_t dst, uint64_t src, uint64_t bytes, bool to_host,
                                 CUstream s) {
  if (copy_fn_ && copy_kernel_fits(dst, src, bytes)) {
    uint64_t units = bytes / 16;
    void* args[] = {&dst, &src, &units};
    ++kernel_copies_;
    return d_.launch_kernel(copy_fn_, kCopyKernelBlocks, 1, 1, kCopyKernelThreads, 1, 1, 0, s, args,
                            nullptr);
  }
  ++engine_copies_;
  return to_host ? d_.memcpy_dtoh_async(reinterpret_cast<void*>(dst), src, bytes, s)
                 : d_.memcpy_htod_async(dst, reinterpret_cast<const void*>(src), bytes, s);
}

// From the plan's first applied launch on (its waits in place).
void CopyEvictor::go_live() {
  if (!copies_ || copies_->frozen()) return;
  live_.store(true, std::memory_order_release);
}

CUevent CopyEvictor::take_event() {
  CUevent e = nullptr;
  if (!spare_events_.empty()) {
    e = spare_events_.back();
    spare_events_.pop_back();
  } else if (d_.event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    e = nullptr;
  }
  return e;
}

// The event after the copies back up to `ticket` on restore_stream, for a copy out to wait for
// (issue_restore records one after each restore): *event stays null when they are seen done.
// False: not issued yet, or issued without an event (the caller leaves the range to the driver).
bool CopyEvictor::copy_back_event(uint64_t ticket, CUevent* event) {
  *event = nullptr;
  in_done_ = poll(in_events_, in_done_);
  if (ticket <= in_done_) return true;
  for (const TicketEvent& t : in_events_) {
    if (t.ticket >= ticket) {
      *event = t.event;
      return true;
    }
  }
  return false;
}

// The highest ticket of `q` whose event is done (at least `seen`); done events go back to the
// spares.
uint64_t CopyEvictor::poll(std::deque<TicketEvent>& q, uint64_t seen) {
  while (!q.empty() && d_.event_query(q.front().event) == CUDA_SUCCESS) {
    seen = std::max(seen, q.front().ticket);
    spare_events_.push_back(q.front().event);
    q.pop_front();
  }
  return seen;
}

// Evicts [address, address + length) at launch g, ordered after launch j, by copying its whole
// 2 MiB pages to pinned host memory (the rest through the driver). declined: nothing was done,
// the next evictor is asked (the driver); kept: nothing was done, and the range must stay on the
// GPU (a launch already submitted reaches it).
// `due`: the launch whose prefetches bring it back.
CopyEvictor::Outcome CopyEvictor::evict_by_copy(uint64_t address, uint64_t length, uint64_t g,
                                                uint64_t j, uint64_t due) {
  // From waits_from on: the launches that use the range next carry their waits.
  if (!live_.load(std::memory_order_relaxed)) return Outcome::declined;
  if (g < host_.waits_start()) {
    ++copy_skipped_early_;
    return Outcome::declined;
  }
  const auto [lo, hi] = whole_pages(address, length);
  if (hi <= lo) return Outcome::declined;
  std::optional<std::vector<HostCopies::Segment>> segments;
  CUevent after_back = nullptr;
  {
    // No launch submitted after the last use may reach the range unless it waits for its copy
    // back (a plan off the mark): the copy waits for launch j only. Launches submitted after
    // this see the range held (guard()).
    std::optional<Timed> timed(times_.scan_s);
    std::lock_guard lock(copies_mutex_);
    switch (submitted_reach(j, lo, hi, due)) {
      case Reach::unknown:
        return Outcome::declined;
      case Reach::reached:
        ++copy_reached_;
        return Outcome::kept;
      case Reach::none:
        break;
    }
    // A copy back of part of the range still on its way (a stop's, a rescue's, a plan's): the
    // GPU pages hold nothing until it lands, so the copy out waits for it (issue 36).
    if (const uint64_t back = copies_->copy_back_pending(lo, hi); back != 0) {
      if (!copy_back_event(back, &after_back)) {
        ++copy_out_unordered_back_;
        return Outcome::declined;  // the driver's eviction is coherent whatever is in flight
      }
      if (after_back) ++copies_out_after_back_;
    }
    timed.emplace(times_.take_s);  // the host blocks' allocation: pinned memory the first time
    segments = copies_->take(lo, hi - lo, out_ticket_ + 1, due);
  }
  if (!segments) {
    ++copy_fallbacks_;
    return Outcome::declined;
  }
  ++out_ticket_;
  if (after_back && d_.stream_wait_event(stream_, after_back, 0) != CUDA_SUCCESS) {
    d_.stream_synchronize(restore_stream_);
  }
  if (lo > address) host_.migrate(address, lo - address, false, g);
  if (address + length > hi) host_.migrate(hi, address + length - hi, false, g);
  // The ranges copied, then discarded behind their copies in one discard (on the discard
  // stream when there is one, ordered after the copies by copied_event).
  const CUstream ds = discard_stream_ ? discard_stream_ : stream_;
  uint64_t bytes = 0;
  uint32_t last_copy = 0;  // the correlation id of the last copy
  for (const HostCopies::Segment& s : *segments) {
    const auto t0 = std::chrono::steady_clock::now();
    const CUresult r = copy_async(s.host, s.address, s.length, true, stream_);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    times_.evict_call_s += took;
    times_.copy_call_s += took;
    host_.issued_call();
    if (r != CUDA_SUCCESS) {
      ++copy_failures_;
      // Not discarded (its copy is not seen done); every held range goes back, copies stop.
      stop(fmt::format("a copy to the host failed (error {})", static_cast<int>(r)));
      return Outcome::taken;
    }
    last_copy = residency_.last_own_copy();
    residency_.note_own_copy(last_copy, s.address, s.length, false);
    bytes += s.length;
    ++copy_calls_;
    // --verify: hashed as it leaves, after its copy and before its discard (same stream).
    hash_pages(s.address, s.length, true, out_ticket_, g, stream_);
  }
  if (!segments->empty()) {
    // The discard right behind the copies, in the GPU's order (done on the host's word, later, it
    // came after the copy back when the program ran ahead of the GPU: nothing left the GPU). Not
    // discarded when it cannot be ordered: every held range goes back (the same bytes), copies
    // stop.
    if (ds != stream_ &&
        (!record_copied() || (d_.stream_wait_event(ds, copied_event_, 0) != CUDA_SUCCESS &&
                              d_.stream_synchronize(stream_) != CUDA_SUCCESS))) {
      stop("could not order a discard after its copy to the host");
      return Outcome::taken;
    }
    discard_behind(*segments, out_ticket_, last_copy, ds);
    if (!seal_copy_out(out_ticket_, ds)) {
      stop("could not record an event after a copy to the host");
      return Outcome::taken;
    }
  }
  count_copy_out(g, bytes);
  return Outcome::taken;
}

bool CopyEvictor::record_copied() {
  if (!copied_event_ && d_.event_create(&copied_event_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    copied_event_ = nullptr;
    return false;
  }
  return d_.event_record(copied_event_, stream_) == CUDA_SUCCESS;
}

// The discard on ds of `segments`, held by copy out `ticket`, behind `copy` (the correlation id
// of the copy they follow, for the residency count).
void CopyEvictor::discard_behind(std::vector<HostCopies::Segment> segments, uint64_t ticket,
                                 uint32_t copy, CUstream ds) {
  std::vector<CUdeviceptr> starts;
  std::vector<size_t> sizes;
  for (const HostCopies::Segment& s : segments) {
    starts.push_back(s.address);
    sizes.push_back(s.length);
  }
  // UMSWAP_DEBUG=keep-pages (a diagnostic): the GPU pages stay.
  CUresult r = CUDA_SUCCESS;
  if (!config_.keep_pages) {
    const Timed timed(times_.managed_call_s);
    r = d_.mem_discard_batch_async(starts.data(), sizes.data(), starts.size(), 0, ds);
  }
  if (r != CUDA_SUCCESS) {
    ++copy_failures_;
    // The GPU and the host both hold the data: the copy back rewrites the same bytes.
    if (warned_copy_failure_.first()) {
      log_warning("advisor: cuMemDiscardBatchAsync failed (error {})", static_cast<int>(r));
    }
  } else {
    discard_notes_.push_back({ticket, copy, std::move(segments)});
  }
}

// After the discards of copy out `ticket` on ds: its event, and its pieces marked discarded, in
// the GPU's order (a copy back must come after). False: an event could not be recorded (the
// caller stops copies).
bool CopyEvictor::seal_copy_out(uint64_t ticket, CUstream ds) {
  CUevent e = take_event();
  if (!e || d_.event_record(e, ds) != CUDA_SUCCESS ||
      d_.event_record(discarded_event_, ds) != CUDA_SUCCESS) {
    return false;
  }
  discards_issued_ = true;
  out_events_.push_back({ticket, e});
  std::lock_guard lock(copies_mutex_);
  copies_->copied(ticket);
  return true;
}

void CopyEvictor::count_copy_out(uint64_t g, uint64_t bytes) {
  copied_out_.push_back({g, bytes});
  copied_out_bytes_ += bytes;
  host_.count(false, g, bytes);
}

// Whether a launch the program has submitted after launch j reaches [lo, hi) without waiting for
// the copies back up to launch `due`. Under copies_mutex: a launch submitted after this sees what
// is taken under the same lock (guard()).
CopyEvictor::Reach CopyEvictor::submitted_reach(uint64_t j, uint64_t lo, uint64_t hi,
                                                uint64_t due) {
  const uint64_t n = host_.launches_seen();
  if (n <= j + 1) return Reach::none;
  if (n - j - 1 > kScanLimit) return Reach::unknown;
  tracer::StepLog log;
  if (!steps_.copy_steps(j + 1, n - j - 1, &log)) return Reach::unknown;
  for (uint64_t i = 0; i + j + 1 < n; ++i) {
    const uint64_t covered = covered_launch(j + 1 + i);
    for (uint64_t h = log.first_hit[i]; h < log.first_hit[i + 1]; ++h) {
      const tracer::PointerHit& hit = log.hits[h];
      const uint64_t end = hit.reach_end();
      if (hit.pointer < hi && end > lo && (covered == UINT64_MAX || covered < due)) {
        return Reach::reached;
      }
    }
  }
  return Reach::none;
}

// The prefetch of [address, address + length) at launch g: the parts held on the host go back
// by copy (collected in pending_in; issue_restore() at the end of launch g); the rest goes
// through the driver. False: nothing of it is held (the caller prefetches it all).
bool CopyEvictor::restore(uint64_t address, uint64_t length, uint64_t g) {
  HostCopies::Returned r;
  {
    std::lock_guard lock(copies_mutex_);
    if (!copies_ || !copies_->holds(address, address + length)) return false;
    // Kept as returning until seen done: a launch off the plan that reaches them before launch
    // g's wait covers it is caught by the guard.
    r = copies_->give_back(address, length, in_ticket_ + 1, g);
  }
  copy_forgotten_bytes_ += r.forgotten_bytes;
  // The gaps between held parts: the driver (they may be on the host).
  uint64_t at = address;
  for (const HostCopies::Segment& s : r.copy_in) {
    if (s.address > at) host_.migrate(at, s.address - at, true, g);
    at = s.address + s.length;
  }
  if (at < address + length) host_.migrate(at, address + length - at, true, g);
  if (!r.copy_in.empty()) {
    pending_ticket_ = ++in_ticket_;
    pending_in_.insert(pending_in_.end(), r.copy_in.begin(), r.copy_in.end());
  }
  return true;
}

// Issues launch g's copies back on restore_stream, at once and ordered on the GPU (nothing is
// left for the host to issue later: a synchronous copy of the program's can hold the driver
// while its stream waits for them): after the GPU reaches launch g (p given: its "reached"
// event, as the driver's prefetches) and after every copy out and discard issued before it; then
// the restored word says g + 1.
void CopyEvictor::issue_restore(bool for_launch, bool wait_reached, Restore r) {
  const uint64_t value = r.g + 1;
  if (!r.segments.empty()) {
    // The populates' stream: every wait a copy back has is placed before its populates.
    const CUstream ps = for_launch && populate_stream_ ? populate_stream_ : restore_stream_;
    if (wait_reached) host_.wait_reached(r.g, ps);
    // After every copy out and discard issued so far (the last discard's event).
    if (discards_issued_) d_.stream_wait_event(ps, discarded_event_, 0);
    CUmemLocation gpu{};
    gpu.type = CU_MEM_LOCATION_TYPE_DEVICE;
    gpu.id = device_;
    // Populate (a prefetch of discarded pages moves nothing), then copy in. With a stream of the
    // populates' own, each copy waits for its own segment's populate (and so for those before it
    // there), not for all of them: the next segment is populated while this one is copied. On
    // one stream populates and copies run in turn whatever the order.
    const bool pipelined = ps != restore_stream_;
    const auto populate = [&](const HostCopies::Segment& s) {
      const Timed timed(times_.managed_call_s);
      d_.mem_prefetch_async(s.address, s.length, gpu, 0, ps);
    };
    if (!pipelined) {
      for (const HostCopies::Segment& s : r.segments) populate(s);
    }
    // Segments before this one are populated: copy_back() goes in order, a retry right away.
    size_t populated = pipelined ? 0 : r.segments.size();
    uint32_t first_copy = 0;
    CUresult error = CUDA_SUCCESS;
    const CopyBackOutcome out = copy_back(r.segments, [&](const HostCopies::Segment& s) {
      const size_t i = static_cast<size_t>(&s - r.segments.data());
      if (i >= populated) {
        populate(s);
        // A wait takes the event's latest record when placed: the next record does not move it.
        if (d_.event_record(populated_event_, ps) != CUDA_SUCCESS ||
            d_.stream_wait_event(restore_stream_, populated_event_, 0) != CUDA_SUCCESS) {
          // An unordered copy would land in unpopulated pages or before the room: stop, wait.
          d_.stream_synchronize(ps);
        }
        populated = i + 1;
      }
      CUresult e = CUDA_SUCCESS;
      {
        const Timed timed(times_.copy_call_s);
        e = copy_async(s.address, s.host, s.length, false, restore_stream_);
      }
      if (e != CUDA_SUCCESS) {
        ++copy_failures_;
        error = e;
        return false;
      }
      const uint32_t copy = residency_.last_own_copy();
      if (!first_copy) first_copy = copy;
      residency_.note_own_copy(copy, s.address, s.length, true);
      ++copy_calls_;
      // --verify: hashed once back, before the event and the word launches wait for.
      hash_pages(s.address, s.length, false, r.ticket, r.g, restore_stream_);
      return true;
    });
    const uint64_t bytes = out.bytes;
    if (!out.lost.empty()) {
      // Copies stop after this restore (the callers); the lost bytes cannot come back. With
      // UMSWAP_DEBUG=keep-pages the GPU still holds them.
      uint64_t lost = 0;
      for (const HostCopies::Segment& s : out.lost) lost += s.length;
      if (!config_.keep_pages) copy_lost_bytes_ += lost;
      copy_back_failed_ = true;
      if (warned_copy_failure_.first()) {
        log_warning("advisor: {} copies back ({}, the first at {:#x}) failed twice (error {}){}",
                    out.lost.size(), format_bytes(lost), out.lost.front().address,
                    static_cast<int>(error),
                    config_.keep_pages
                        ? ""
                        : ": those bytes are lost to the program, whose results from here on "
                          "must not be trusted");
      }
    }
    // The populates run right before the first copy, and on a stream of their own they run on
    // ahead of the copies (each takes a fraction of its copy's time): all are placed at the
    // first copy's start (without CUPTI's record: at launch g's GPU start, or now).
    for (const HostCopies::Segment& s : r.segments) {
      residency_.note_residency_by_copy(s.address, s.length, true, first_copy,
                                        for_launch ? r.g : UINT64_MAX);
    }
    copied_in_.push_back({r.g, bytes});
    copied_in_bytes_ += bytes;
    host_.count(true, r.g, bytes);
    if (CUevent e = take_event(); e && d_.event_record(e, restore_stream_) == CUDA_SUCCESS) {
      in_events_.push_back({r.ticket, e});
    }
  }
  if (value > restored_written_) {
    d_.stream_write_value64(restore_stream_, restored_device_.load(), value, 0);
    restored_written_ = value;
  }
}

// Notes the discards seen done in the residency count, and makes host blocks whose copies are
// done reusable.
void CopyEvictor::tend() {
  if (!copies_) return;
  out_done_ = poll(out_events_, out_done_);
  in_done_ = poll(in_events_, in_done_);
  settle_round_trips();
  // Discards seen done: the residency count takes them off the GPU where CUPTI saw the copy they
  // follow end (without its record: now, a little after they ran, and the count errs high).
  while (!discard_notes_.empty() && discard_notes_.front().ticket <= out_done_) {
    const DiscardNote& n = discard_notes_.front();
    for (const HostCopies::Segment& s : n.segments) {
      residency_.note_residency_by_copy(s.address, s.length, false, n.copy, UINT64_MAX);
      copy_discarded_bytes_ += s.length;
    }
    discard_notes_.pop_front();
  }
  std::lock_guard lock(copies_mutex_);
  copies_->retire(out_done_, in_done_);
}

// The launch path's check (UMSWAP_EVICT_COPY), before launch `index` is submitted: if it points
// into a range held on the host that its waits do not bring back first (a plan off the mark, or
// the program past its loop), it waits here until the advisor thread has brought everything
// back and stopped copying. Not in the driver: a synchronous copy waiting there could hold the
// driver from the advisor's calls.
// `covered`: the launch up to which this one waits for the copies back (UINT64_MAX: none).
void CopyEvictor::guard(uint64_t index, const std::vector<tracer::PointerHit>* hits,
                        uint64_t covered, CUstream on) {
  uint64_t serial = 0;  // 0: waits until copies stop
  {
    std::lock_guard lock(copies_mutex_);
    if (!copies_) return;
    // Frozen while still live: stop() is giving everything back. The launch waits until it
    // has (below), then for stopped_pending's event (on_step), not a moment less.
    if (copies_->frozen()) {
      log_debug("UMSWAP_EVICT_COPY: launch {} waits for copies to stop", index);
    } else if (!hits) {
      // Unknown (the tracer stopped recording): everything comes back, copies stop.
      uint64_t none = UINT64_MAX;
      guard_launch_.compare_exchange_strong(none, index);
      rescue_asked_.store(true, std::memory_order_release);
    } else {
      rescue_ranges_.clear();
      for (const tracer::PointerHit& h : *hits) {
        const uint64_t end = h.reach_end();
        if (copies_->reaches(h.pointer, end, covered)) {
          log_debug(
              "UMSWAP_EVICT_COPY: launch {} reaches [{:#x}, {:#x}) held on the host; it waits "
              "for the copies back up to launch {} (UINT64_MAX: none); held: {}",
              index, h.pointer, end, covered, copies_->describe(h.pointer, end));
          rescue_ranges_.emplace_back(h.pointer / kPage * kPage, (end + kPage - 1) / kPage * kPage);
        }
      }
      if (rescue_ranges_.empty()) return;
      serial = ++rescue_serial_;
      rescue_launch_ = index;
      rescue_wanted_.store(serial, std::memory_order_release);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  bool warned = false;
  while (live_.load(std::memory_order_acquire) && !host_.stopping() &&
         (serial == 0 || rescue_served_.load(std::memory_order_acquire) < serial)) {
    sleep_us(20);
    if (!warned && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
      warned = true;
      log_warning(
          "UMSWAP_EVICT_COPY: launch {} has waited 10 s for the advisor to bring back "
          "what it copied to the host",
          index);
    }
  }
  // Served: its stream waits for the copies back (recorded before rescue_served moved; a later
  // request re-records it only after this launch is submitted). Stopped instead: on_step makes
  // it wait for everything back.
  if (serial && rescue_served_.load(std::memory_order_acquire) >= serial) {
    d_.stream_wait_event(on, rescue_event_, 0);
  }
}

// The guard's request (guard()): the held ranges the caught launch reaches come back now, on
// restore_stream behind the discards, and rescue_event follows them. Copies go on.
void CopyEvictor::serve_rescue() {
  const uint64_t want = rescue_wanted_.load(std::memory_order_acquire);
  if (want == rescue_served_.load(std::memory_order_relaxed)) return;
  HostCopies::Returned back;
  uint64_t caught = 0;
  {
    std::lock_guard lock(copies_mutex_);
    caught = rescue_launch_;
    if (copies_ && !copies_->frozen()) {
      ++in_ticket_;
      for (const auto& [lo, hi] : rescue_ranges_) {
        HostCopies::Returned r = copies_->give_back(lo, hi - lo, in_ticket_, HostCopies::kNoLaunch);
        back.copy_in.insert(back.copy_in.end(), r.copy_in.begin(), r.copy_in.end());
        back.forgotten_bytes += r.forgotten_bytes;
      }
    }
  }
  ++copy_guard_hits_;
  uint64_t bytes = 0;
  for (const HostCopies::Segment& seg : back.copy_in) bytes += seg.length;
  copy_rescued_bytes_ += bytes;
  copy_forgotten_bytes_ += back.forgotten_bytes;
  if (guard_kernels_.size() < 8) {
    guard_kernels_.push_back(
        fmt::format("launch {} ({}): {}", caught, steps_.step_name(caught), format_bytes(bytes)));
  }
  log_debug("UMSWAP_EVICT_COPY: launch {} caught; {} come back for it", caught,
            format_bytes(bytes));
  issue_restore(
      false, false,
      {restored_written_ ? restored_written_ - 1 : 0, in_ticket_, std::move(back.copy_in)});
  if (copy_back_failed_) stop("a copy back to the GPU failed");
  if (d_.event_record(rescue_event_, restore_stream_) != CUDA_SUCCESS) {
    // The launch cannot be ordered after its copies back: everything comes back, copies stop.
    stop("could not record an event after copies back for a launch the guard caught");
  }
  rescue_served_.store(want, std::memory_order_release);
}

// Every range held on the host goes back now, and copies stop: for the rest of the run
// (`for_good`: the guard caught a launch, a copy failed, the watchdog asked, the program ends),
// or until the next plan takes effect (a plan ends or another takes over: it knows nothing of
// them). Nothing here waits on the host: restore_stream releases this epoch's word once every
// copy back queued on it is done.
void CopyEvictor::stop(const std::string& why, bool for_good) {
  if (!copies_ || copies_->frozen()) return;
  host_.note_doing("bringing everything copied back");
  if (!for_good && epoch_ + 1 >= kEpochs) for_good = true;
  ++copy_rescues_;
  if (for_good) copy_off_reason_ = why;
  // When the program ends there is nothing to warn about (the stats keep the reason).
  if (for_good && !host_.stopping()) {
    log_warning(
        "UMSWAP_EVICT_COPY: {}; everything copied to the host goes back, and evictions go "
        "through the driver from now on",
        why);
  } else {
    log_info("UMSWAP_EVICT_COPY: {}; everything copied to the host goes back", why);
  }
  out_done_ = poll(out_events_, out_done_);
  tend();  // discards seen due
  // Every held range is discarded behind its copy on `stream`: the copies back wait for the last
  // discard on restore_stream. Not for a launch: no "reached" wait.
  HostCopies::Returned r;
  {
    std::lock_guard lock(copies_mutex_);
    copies_->freeze();
    r = copies_->give_back_all(++in_ticket_);
  }
  copy_forgotten_bytes_ += r.forgotten_bytes;
  r.copy_in.insert(r.copy_in.end(), pending_in_.begin(), pending_in_.end());
  pending_in_.clear();
  issue_restore(false, false,
                {restored_written_ ? restored_written_ - 1 : 0, in_ticket_, std::move(r.copy_in)});
  // Launches place no more waits for it; those placed wait for the copies back queued so far,
  // and launches from now on wait for them all (on_step) until they are seen done.
  d_.stream_write_value64(restore_stream_, restored_device_.load(), kReleased, 0);
  restored_written_ = kReleased;
  // Its own event: a later plan's discards re-record discarded_event on `stream`, which the
  // copies back here are not ordered before.
  if (d_.event_record(stopped_event_, restore_stream_) == CUDA_SUCCESS) {
    stopped_pending_.store(++stops_recorded_, std::memory_order_release);
  }
  // Before the word changes: a launch that still sees copies live waits on the released word
  // (on_step reads the word first). Frees launches waiting in guard(), which then wait for
  // stopped_pending's event.
  live_.store(false, std::memory_order_seq_cst);
  if (!for_good) {
    // A fresh word for the next plan; host blocks are reused once their copies are seen done.
    ++epoch_;
    restored_written_ = 0;
    restored_device_.store(restored_base_ + epoch_ * sizeof(uint64_t), std::memory_order_seq_cst);
    std::lock_guard lock(copies_mutex_);
    copies_->unfreeze();
  }
}

}  // namespace umswap::advisor
