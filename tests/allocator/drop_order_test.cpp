// DropOrder (drop_order.h) over fake events: a discard and a migration of the same 2 MiB page
// never run at once; a discard waits on the GPU only for prefetches, never for an eviction.
#include "umswap/allocator/drop_order.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "umswap/allocator/discard_pages.h"

namespace umswap {
namespace {

constexpr uint64_t kPage = kDiscardPage;
constexpr uint64_t kBase = uint64_t{1} << 40;

// Each event is a number; finished once the test says so.
struct FakeEvents {
  uintptr_t next = 1;
  std::map<uintptr_t, bool> done;          // recorded events: finished?
  std::map<uintptr_t, CUstream> recorded;  // on which stream
  bool fail_record = false;
  int created = 0;
  std::vector<std::pair<CUstream, uintptr_t>> waits;  // cuStreamWaitEvent calls
  bool capturing = false, fail_wait = false;
};
FakeEvents* g = nullptr;

CUresult CUDAAPI fake_create(CUevent* e, unsigned) {
  ++g->created;
  *e = reinterpret_cast<CUevent>(g->next++);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_record(CUevent e, CUstream s) {
  if (g->fail_record) return CUDA_ERROR_INVALID_VALUE;
  g->done[reinterpret_cast<uintptr_t>(e)] = false;
  g->recorded[reinterpret_cast<uintptr_t>(e)] = s;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_query(CUevent e) {
  return g->done.at(reinterpret_cast<uintptr_t>(e)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI fake_wait(CUstream s, CUevent e, unsigned) {
  if (g->fail_wait) return CUDA_ERROR_INVALID_VALUE;
  g->waits.emplace_back(s, reinterpret_cast<uintptr_t>(e));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI fake_is_capturing(CUstream, CUstreamCaptureStatus* status) {
  *status = g->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

const CUstream kProgram = reinterpret_cast<CUstream>(uintptr_t{0x10});
const CUstream kAdvisor = reinterpret_cast<CUstream>(uintptr_t{0x20});

class DropOrderTest : public testing::Test {
 protected:
  void SetUp() override {
    g = &events_;
    DropOrder::Driver d;
    d.event_create = &fake_create;
    d.event_record = &fake_record;
    d.event_query = &fake_query;
    d.stream_wait_event = &fake_wait;
    d.stream_is_capturing = &fake_is_capturing;
    ASSERT_TRUE(d.complete());
    order_ = std::make_unique<DropOrder>(d);
  }
  void TearDown() override { g = nullptr; }

  // Finishes every event recorded so far.
  void finish_all() {
    for (auto& [e, done] : events_.done) done = true;
  }
  // The discard of pages [first, first + count) as a free makes it, if they may be discarded.
  bool discard(uint64_t first, uint64_t count) {
    std::unique_lock<std::mutex> held;
    for (uint64_t p = 0; p < count; ++p) {
      if (!order_->may_discard(kBase + (first + p) * kPage, held)) return false;
    }
    order_->discarded({kBase + first * kPage}, {count * kPage}, kProgram);
    return true;
  }
  // A free's discard that may wait for a prefetch: whether every page may go; `wait` as filled.
  bool discard_after(uint64_t first, uint64_t count, DropOrder::Wait* wait) {
    std::unique_lock<std::mutex> held;
    *wait = DropOrder::Wait{};
    wait->stream = kProgram;
    for (uint64_t p = 0; p < count; ++p) {
      if (!order_->may_discard(kBase + (first + p) * kPage, held, wait)) return false;
    }
    if (!order_->wait_for(*wait)) return false;
    order_->discarded({kBase + first * kPage}, {count * kPage}, kProgram);
    return true;
  }
  std::vector<DropOrder::Range> migrate(uint64_t address, uint64_t length, bool end = true,
                                        bool to_gpu = false) {
    std::vector<DropOrder::Range> parts;
    const uint64_t ticket = order_->begin_migration(address, length, to_gpu, &parts);
    if (end) order_->end_migration(ticket, kAdvisor);
    return parts;
  }

  FakeEvents events_;
  std::unique_ptr<DropOrder> order_;
};

TEST_F(DropOrderTest, AMigrationNotSeenFinishedKeepsItsPagesFromBeingDiscarded) {
  // Pages 2 and 3 (the range ends inside page 3).
  migrate(kBase + 2 * kPage, kPage + 4096);
  {
    std::unique_lock<std::mutex> held;
    EXPECT_TRUE(order_->may_discard(kBase + kPage, held));
    EXPECT_FALSE(order_->may_discard(kBase + 2 * kPage, held));
    EXPECT_FALSE(order_->may_discard(kBase + 3 * kPage, held));
    EXPECT_TRUE(order_->may_discard(kBase + 4 * kPage, held));
  }
  EXPECT_EQ(order_->stats().pages_kept, 2u);
  finish_all();
  EXPECT_TRUE(discard(2, 1));
  EXPECT_EQ(order_->stats().migrations_pending, 0u);  // seen finished, let go
}

TEST_F(DropOrderTest, AMigrationWhoseCallsAreStillBeingMadeCountsAsUnfinished) {
  std::vector<DropOrder::Range> parts;
  const uint64_t ticket = order_->begin_migration(kBase, kPage, false, &parts);
  finish_all();  // nothing recorded for it yet
  EXPECT_FALSE(discard(0, 1));
  order_->end_migration(ticket, kAdvisor);
  EXPECT_FALSE(discard(0, 1));  // its event is recorded, not finished
  finish_all();
  EXPECT_TRUE(discard(0, 1));
}

TEST_F(DropOrderTest, AMigrationLeavesOutThePagesOfDiscardsNotSeenFinished) {
  ASSERT_TRUE(discard(2, 2));  // pages 2 and 3
  ASSERT_TRUE(discard(6, 1));  // page 6
  const uint64_t from = kBase + kPage + 100, to = kBase + 8 * kPage;
  const std::vector<DropOrder::Range> parts = migrate(from, to - from);
  const std::vector<DropOrder::Range> want = {
      {from, kBase + 2 * kPage}, {kBase + 4 * kPage, kBase + 6 * kPage}, {kBase + 7 * kPage, to}};
  EXPECT_EQ(parts, want);
  EXPECT_EQ(order_->stats().migrations_cut, 1u);
  EXPECT_EQ(order_->stats().pages_left_out, 3u);
  // The discards' events are on the freeing stream, the migration's on the advisor's.
  std::vector<CUstream> streams;
  for (const auto& [e, s] : events_.recorded) streams.push_back(s);
  EXPECT_EQ(streams, (std::vector<CUstream>{kProgram, kProgram, kAdvisor}));
  finish_all();
  EXPECT_EQ(migrate(from, to - from), std::vector<DropOrder::Range>({{from, to}}));
  EXPECT_EQ(order_->stats().discards_pending, 0u);
}

TEST_F(DropOrderTest, AMigrationInsideADiscardedPageMovesNothing) {
  ASSERT_TRUE(discard(0, 1));
  EXPECT_TRUE(migrate(kBase + 4096, 8192).empty());
  EXPECT_TRUE(migrate(kBase + 2 * kPage, 4096).size() == 1);  // another page
}

TEST_F(DropOrderTest, EventsAreReusedOnceSeenFinished) {
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(discard(i, 1));
    migrate(kBase + 20 * kPage, kPage);
    finish_all();
  }
  EXPECT_LE(events_.created, 4);
}

// Without an event a discard is never seen finished: its pages stay out of migrations.
TEST_F(DropOrderTest, ADiscardWithoutAnEventKeepsItsPagesOutOfMigrationsForGood) {
  events_.fail_record = true;
  ASSERT_TRUE(discard(0, 1));
  events_.fail_record = false;
  EXPECT_EQ(order_->stats().event_failures, 1u);
  finish_all();
  EXPECT_EQ(migrate(kBase, 2 * kPage),
            std::vector<DropOrder::Range>({{kBase + kPage, kBase + 2 * kPage}}));
  EXPECT_EQ(order_->stats().discards_pending, 1u);
  // And no page is discarded any more; migrations are no longer tracked.
  EXPECT_TRUE(order_->stats().stopped);
  EXPECT_FALSE(discard(8, 1));
  migrate(kBase + 10 * kPage, kPage, false);
  EXPECT_EQ(order_->stats().migrations_pending, 0u);
}

// Without an event a migration is never seen finished, and no page is discarded any more.
TEST_F(DropOrderTest, AMigrationWithoutAnEventStopsTheDiscards) {
  events_.fail_record = true;
  migrate(kBase, kPage);
  events_.fail_record = false;
  EXPECT_EQ(order_->stats().event_failures, 1u);
  EXPECT_TRUE(order_->stats().stopped);
  EXPECT_FALSE(discard(0, 1));
  finish_all();
  EXPECT_FALSE(discard(4, 1));
  EXPECT_EQ(order_->stats().migrations_pending, 1u);
}

// A page that only prefetches not seen finished cover is discarded after the discard's stream
// waits for the latest of their events, once a discard (one stream runs them in order), while the
// advisor allows waits. Any eviction over a page keeps it, before or after a prefetch, and so
// does a prefetch whose calls are being made.
TEST_F(DropOrderTest, ADiscardWaitsForTheLatestPrefetchButNeverForAnEviction) {
  migrate(kBase, 2 * kPage, true, true);           // a prefetch of pages 0 and 1
  migrate(kBase + kPage, kPage, true, true);       // another of page 1: the latest
  migrate(kBase + 4 * kPage, kPage, true, false);  // an eviction of page 4
  const uintptr_t latest = events_.recorded.rbegin()->first - 1;
  DropOrder::Wait wait;
  EXPECT_FALSE(discard_after(0, 2, &wait)) << "waits are not allowed yet";
  bool allowed = true;
  order_->allow_waits([&] { return allowed; });
  ASSERT_TRUE(discard_after(0, 2, &wait));
  ASSERT_EQ(events_.waits.size(), 1u);
  EXPECT_EQ(events_.waits[0].first, kProgram);
  EXPECT_EQ(events_.waits[0].second, latest);
  EXPECT_FALSE(discard_after(4, 1, &wait));
  EXPECT_EQ(wait.event, nullptr);
  // Without a Wait (a sweep's discard) a prefetch keeps its pages too; so with waits disallowed.
  EXPECT_FALSE(discard(0, 1));
  allowed = false;
  EXPECT_FALSE(discard_after(1, 1, &wait));
  allowed = true;
  const DropOrder::Stats s = order_->stats();
  EXPECT_EQ(s.pages_after_waits, 2u);
  EXPECT_EQ(s.stream_waits, 1u);
  EXPECT_EQ(s.kept_by_evictions, 1u);
  EXPECT_EQ(s.pages_kept, 4u);  // page 0 before allowed, 4, 0 without a Wait, 1 disallowed
  std::vector<DropOrder::Range> parts;
  order_->begin_migration(kBase + 8 * kPage, kPage, true, &parts);  // its calls not yet ended
  EXPECT_FALSE(discard_after(8, 1, &wait));
  // An eviction over a page keeps it, after a prefetch or before one.
  migrate(kBase + 10 * kPage, kPage, true, true);
  migrate(kBase + 10 * kPage, kPage, true, false);
  EXPECT_FALSE(discard_after(10, 1, &wait));
  migrate(kBase + 12 * kPage, kPage, true, false);
  migrate(kBase + 12 * kPage, kPage, true, true);
  EXPECT_FALSE(discard_after(12, 1, &wait));
  EXPECT_EQ(wait.event, nullptr);
  const DropOrder::Stats kept = order_->stats();
  EXPECT_EQ(kept.kept_by_evictions, 3u);
  EXPECT_EQ(kept.kept_prefetched_after, 1u);    // page 12: its eviction, then a prefetch
  EXPECT_EQ(kept.kept_eviction_last, 2u);       // pages 4 and 10
  EXPECT_EQ(kept.most_migrations_pending, 8u);  // every migration above, none seen finished
}

TEST_F(DropOrderTest, NoWaitOnAStreamBeingCapturedAndAFailedWaitStopsTheDiscards) {
  order_->allow_waits([] { return true; });
  migrate(kBase, kPage, true, true);
  DropOrder::Wait wait;
  events_.capturing = true;
  EXPECT_FALSE(discard_after(0, 1, &wait));
  EXPECT_TRUE(events_.waits.empty());
  EXPECT_EQ(order_->stats().kept_capturing, 1u);
  EXPECT_FALSE(order_->stats().stopped);
  events_.capturing = false;
  events_.fail_wait = true;
  EXPECT_FALSE(discard_after(0, 1, &wait));
  EXPECT_EQ(order_->stats().event_failures, 1u);
  EXPECT_TRUE(order_->stats().stopped);
  events_.fail_wait = false;
  finish_all();
  EXPECT_FALSE(discard(2, 1));
}

}  // namespace
}  // namespace umswap
