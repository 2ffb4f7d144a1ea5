// HostCopies: the bookkeeping of evictions umswap copies to pinned host memory itself.
#include "umswap/advisor/host_copies.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace umswap::advisor {
namespace {

// Host memory as numbers: each allocation gets a distinct range; frees are recorded.
struct FakeHost {
  uint64_t next = 1ull << 40;
  std::map<uint64_t, uint64_t> live;  // host -> bytes
  uint64_t freed = 0;
  bool fail = false;
  HostCopies make(uint64_t limit) {
    return HostCopies(
        [this](uint64_t bytes) -> uint64_t {
          if (fail) return 0;
          const uint64_t h = next;
          next += bytes + 4096;
          live[h] = bytes;
          return h;
        },
        [this](uint64_t host, uint64_t) {
          live.erase(host);
          ++freed;
        },
        limit);
  }
};

constexpr uint64_t kMiB = 1 << 20;

// Issue 36: a range given back (its copy back queued, not yet seen done) and taken again for a
// copy out. Its GPU pages hold nothing until the copy back lands, so the advisor must order the
// copy out after it: copy_back_pending() names that copy back, for every kind of give back, a
// stop's give_back_all() included (untracked by the guard, which was how BERT lost data after a
// plan switch), until retire() sees it done.
TEST(HostCopies, ACopyBackOnItsWayIsNamedUntilSeenDone) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(100 * kMiB, 8 * kMiB, 1));
  c.copied(1);
  EXPECT_EQ(c.copy_back_pending(100 * kMiB, 108 * kMiB), 0u);  // held, not on its way back
  // A stop gives everything back (ticket 5); the new plan takes part of it again at once.
  ASSERT_EQ(c.give_back_all(5).copy_in.size(), 1u);
  EXPECT_FALSE(c.returning(100 * kMiB, 108 * kMiB));  // the guard does not track a stop's
  EXPECT_EQ(c.copy_back_pending(104 * kMiB, 106 * kMiB), 5u);
  EXPECT_EQ(c.copy_back_pending(108 * kMiB, 110 * kMiB), 0u);  // past the range
  EXPECT_EQ(c.copy_back_pending(90 * kMiB, 100 * kMiB), 0u);   // before it
  ASSERT_TRUE(c.take(104 * kMiB, 2 * kMiB, 2));
  c.copied(2);
  // A plan's give back of that part (ticket 6) while the stop's is still on its way: the newest.
  ASSERT_EQ(c.give_back(104 * kMiB, 2 * kMiB, 6, 40).copy_in.size(), 1u);
  EXPECT_EQ(c.copy_back_pending(100 * kMiB, 108 * kMiB), 6u);
  EXPECT_EQ(c.copy_back_pending(100 * kMiB, 102 * kMiB), 5u);
  c.retire(2, 5);  // the stop's copies back are done
  EXPECT_EQ(c.copy_back_pending(100 * kMiB, 102 * kMiB), 0u);
  EXPECT_EQ(c.copy_back_pending(100 * kMiB, 108 * kMiB), 6u);
  c.retire(2, 6);
  EXPECT_EQ(c.copy_back_pending(100 * kMiB, 108 * kMiB), 0u);
  // Given back because its memory was freed (ticket 0): no copy back comes.
  ASSERT_TRUE(c.take(200 * kMiB, 2 * kMiB, 3));
  c.copied(3);
  c.give_back(200 * kMiB, 2 * kMiB, 0, HostCopies::kUntracked);
  EXPECT_EQ(c.copy_back_pending(200 * kMiB, 202 * kMiB), 0u);
}

TEST(HostCopies, TakeCopyDiscardGiveBack) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  const auto taken = c.take(100 * kMiB, 8 * kMiB, 1);
  ASSERT_TRUE(taken);
  ASSERT_EQ(taken->size(), 1u);
  EXPECT_EQ((*taken)[0].address, 100 * kMiB);
  EXPECT_EQ((*taken)[0].length, 8 * kMiB);
  EXPECT_EQ(c.held_bytes(), 8 * kMiB);
  EXPECT_TRUE(c.holds(107 * kMiB, 109 * kMiB));
  EXPECT_FALSE(c.holds(108 * kMiB, 120 * kMiB));
  EXPECT_FALSE(c.holds(90 * kMiB, 100 * kMiB));
  // Nothing is discarded before its copy is seen done.
  EXPECT_TRUE(c.copied(0).empty());
  const auto discard = c.copied(1);
  ASSERT_EQ(discard.size(), 1u);
  EXPECT_EQ(discard[0].host, (*taken)[0].host);
  EXPECT_TRUE(c.copied(5).empty());  // once
  // Given back in two parts: each copies in from its own offset of the same block.
  const auto first = c.give_back(104 * kMiB, 4 * kMiB, 1);
  ASSERT_EQ(first.copy_in.size(), 1u);
  EXPECT_EQ(first.copy_in[0].address, 104 * kMiB);
  EXPECT_EQ(first.copy_in[0].host, (*taken)[0].host + 4 * kMiB);
  EXPECT_EQ(c.held_bytes(), 4 * kMiB);
  const auto second = c.give_back(96 * kMiB, 10 * kMiB, 2);
  ASSERT_EQ(second.copy_in.size(), 1u);
  EXPECT_EQ(second.copy_in[0].address, 100 * kMiB);
  EXPECT_EQ(second.copy_in[0].length, 4 * kMiB);
  EXPECT_EQ(c.held_bytes(), 0u);
}

TEST(HostCopies, ReachesTellsWhetherAPieceComesBackAfterALaunch) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(0, 4 * kMiB, 1, /*due=*/100));
  ASSERT_TRUE(c.take(8 * kMiB, 4 * kMiB, 2, /*due=*/200));
  EXPECT_FALSE(c.reaches(0, 4 * kMiB, 100));  // back by launch 100: covered
  EXPECT_TRUE(c.reaches(0, 4 * kMiB, 99));
  EXPECT_TRUE(c.reaches(2 * kMiB, 10 * kMiB, 150));  // the second piece comes at 200
  EXPECT_FALSE(c.reaches(2 * kMiB, 10 * kMiB, 200));
  EXPECT_FALSE(c.reaches(4 * kMiB, 8 * kMiB, 0));  // between the pieces
  // A split keeps the launch.
  c.give_back(0, 2 * kMiB, 1);
  EXPECT_TRUE(c.reaches(2 * kMiB, 3 * kMiB, 99));
  EXPECT_FALSE(c.reaches(2 * kMiB, 3 * kMiB, 100));
}

TEST(HostCopies, ReturningRangesReachLaunchesCoveredOnlyBeforeTheirCopyBack) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(100 * kMiB, 8 * kMiB, 1, /*due=*/50));
  c.copied(1);
  // Given back at launch 50 (its wait: restored >= 51) with copy-in ticket 3.
  const auto back = c.give_back(100 * kMiB, 8 * kMiB, 3, /*back_by=*/50);
  ASSERT_EQ(back.copy_in.size(), 1u);
  EXPECT_FALSE(c.holds(100 * kMiB, 108 * kMiB));  // not held: the plan does not take it twice
  EXPECT_EQ(c.returning_count(), 1u);
  // A launch covered up to 49 would run before the copy back; up to 50, after it.
  EXPECT_TRUE(c.reaches(106 * kMiB, 107 * kMiB, 49));
  EXPECT_FALSE(c.reaches(106 * kMiB, 107 * kMiB, 50));
  EXPECT_TRUE(c.reaches(106 * kMiB, 107 * kMiB, UINT64_MAX));  // a launch with no cover
  EXPECT_FALSE(c.reaches(108 * kMiB, 120 * kMiB, 0));          // past its end
  EXPECT_FALSE(c.reaches(90 * kMiB, 100 * kMiB, 0));           // before it
  // Until the copy in is seen done.
  c.retire(1, 2);
  EXPECT_TRUE(c.reaches(100 * kMiB, 101 * kMiB, 10));
  c.retire(1, 3);
  EXPECT_EQ(c.returning_count(), 0u);
  EXPECT_FALSE(c.reaches(100 * kMiB, 101 * kMiB, 10));
}

TEST(HostCopies, ReturningRangesOfARescueReachEveryLaunch) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(0, 64 * kMiB, 1, 10));
  c.copied(1);
  // A short range given back untracked, a long one for no launch's cover.
  c.give_back(0, 2 * kMiB, 2);
  c.give_back(8 * kMiB, 32 * kMiB, 3, HostCopies::kNoLaunch);
  EXPECT_EQ(c.returning_count(), 1u);
  EXPECT_FALSE(c.reaches(kMiB, 2 * kMiB, 5));  // untracked
  // Found from an address near the long range's end (it starts far before).
  EXPECT_TRUE(c.reaches(39 * kMiB, 41 * kMiB, 1000000));
  // Past its end the piece still held is back by launch 10.
  EXPECT_FALSE(c.reaches(40 * kMiB, 41 * kMiB, 10));
}

TEST(HostCopies, ReturningTellsWhetherACopyBackInFlightOverlaps) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(100 * kMiB, 8 * kMiB, 1, 50));
  c.copied(1);
  EXPECT_FALSE(c.returning(100 * kMiB, 108 * kMiB));  // held, not returning
  c.give_back(102 * kMiB, 2 * kMiB, 2, 50);
  EXPECT_TRUE(c.returning(103 * kMiB, 110 * kMiB));
  EXPECT_TRUE(c.returning(90 * kMiB, 103 * kMiB));
  EXPECT_FALSE(c.returning(104 * kMiB, 108 * kMiB));
  EXPECT_FALSE(c.returning(90 * kMiB, 102 * kMiB));
  c.retire(1, 2);
  EXPECT_FALSE(c.returning(100 * kMiB, 108 * kMiB));
}

// The program frees an allocation whose range is held (Advisor::before_free): given back with
// ticket 0 and untracked, nothing is copied back, nothing stays held or returning, and the block
// is reused once the copy out is seen done.
TEST(HostCopies, AFreedRangeIsDroppedWithoutACopyBack) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(100 * kMiB, 8 * kMiB, 1, 50));
  c.copied(1);
  const auto r = c.give_back(100 * kMiB, 8 * kMiB, 0, HostCopies::kUntracked);
  ASSERT_EQ(r.copy_in.size(), 1u);  // the caller drops these instead of copying them in
  EXPECT_EQ(c.held_bytes(), 0u);
  EXPECT_FALSE(c.reaches(100 * kMiB, 108 * kMiB, UINT64_MAX));
  EXPECT_EQ(c.returning_count(), 0u);
  c.retire(1, 0);
  const auto again = c.take(200 * kMiB, 8 * kMiB, 2);
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)[0].host, r.copy_in[0].host);  // the same block, reused
  EXPECT_EQ(host.live.size(), 1u);
}

TEST(HostCopies, GivingBackACopyInFlightForgetsIt) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(0, 4 * kMiB, 1));
  const auto r = c.give_back(0, 4 * kMiB, 1);
  EXPECT_TRUE(r.copy_in.empty());  // the GPU pages were never discarded
  EXPECT_EQ(r.forgotten_bytes, 4 * kMiB);
  EXPECT_TRUE(c.copied(10).empty());  // and never will be
}

TEST(HostCopies, TakesOnlyWhatIsNotHeld) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(4 * kMiB, 2 * kMiB, 1));
  const auto t = c.take(0, 10 * kMiB, 2);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].address, 0u);
  EXPECT_EQ((*t)[0].length, 4 * kMiB);
  EXPECT_EQ((*t)[1].address, 6 * kMiB);
  EXPECT_EQ((*t)[1].length, 4 * kMiB);
  EXPECT_EQ((*t)[1].host, (*t)[0].host + 4 * kMiB);  // one block, packed
  EXPECT_EQ(c.held_bytes(), 10 * kMiB);
  const auto all = c.take(0, 10 * kMiB, 3);
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->empty());
}

TEST(HostCopies, BlocksAreReusedOnlyOnceTheirCopiesAreDone) {
  FakeHost host;
  HostCopies c = host.make(8 * kMiB);
  const auto a = c.take(0, 8 * kMiB, 1);
  ASSERT_TRUE(a);
  c.copied(1);
  c.give_back(0, 8 * kMiB, 7);  // copy in, ticket 7
  // The limit is used up by a block whose copy in may still read it.
  EXPECT_FALSE(c.take(64 * kMiB, 8 * kMiB, 2));
  c.retire(1, 6);
  EXPECT_FALSE(c.take(64 * kMiB, 8 * kMiB, 2));
  c.retire(1, 7);
  const auto b = c.take(64 * kMiB, 8 * kMiB, 2);
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0].host, (*a)[0].host);  // the same block again
  EXPECT_EQ(c.blocks_allocated(), 1u);
}

TEST(HostCopies, CachedBlocksOfOtherSizesAreFreedForRoom) {
  FakeHost host;
  HostCopies c = host.make(8 * kMiB);
  ASSERT_TRUE(c.take(0, 6 * kMiB, 1));
  c.copied(1);
  c.give_back(0, 6 * kMiB, 1);
  c.retire(1, 1);
  EXPECT_EQ(c.host_bytes(), 6 * kMiB);
  ASSERT_TRUE(c.take(0, 4 * kMiB, 2));  // 6 + 4 > 8: the cached block goes
  EXPECT_EQ(host.freed, 1u);
  EXPECT_EQ(c.host_bytes(), 4 * kMiB);
}

TEST(HostCopies, FailedAllocationTakesNothing) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  host.fail = true;
  EXPECT_FALSE(c.take(0, 2 * kMiB, 1));
  EXPECT_EQ(c.held_bytes(), 0u);
  EXPECT_FALSE(c.holds(0, 2 * kMiB));
}

TEST(HostCopies, FrozenTakesNothingAndKeepsItsBlocks) {
  FakeHost host;
  {
    HostCopies c = host.make(64 * kMiB);
    ASSERT_TRUE(c.take(0, 2 * kMiB, 1));
    c.copied(1);
    c.freeze();
    EXPECT_FALSE(c.take(8 * kMiB, 2 * kMiB, 2));
    const auto r = c.give_back_all(3);
    ASSERT_EQ(r.copy_in.size(), 1u);
    c.retire(10, 10);
  }
  // A stalled stream may still copy into it: never freed.
  EXPECT_EQ(host.freed, 0u);
}

TEST(HostCopies, UnfrozenTakesAgainAndReusesBlocksOnceTheirCopiesAreDone) {
  FakeHost host;
  HostCopies c = host.make(8 * kMiB);
  ASSERT_TRUE(c.take(0, 8 * kMiB, 1));
  c.copied(1);
  c.freeze();
  EXPECT_EQ(c.give_back_all(2).copy_in.size(), 1u);
  c.unfreeze();
  c.retire(0, 0);  // the copies are not seen done: the block is not reused yet
  EXPECT_FALSE(c.take(64 * kMiB, 8 * kMiB, 3));
  c.retire(1, 2);
  EXPECT_TRUE(c.take(64 * kMiB, 8 * kMiB, 3));
  EXPECT_EQ(c.blocks_allocated(), 1u);
}

TEST(HostCopies, GiveBackAllReturnsEveryDiscardedPiece) {
  FakeHost host;
  HostCopies c = host.make(64 * kMiB);
  ASSERT_TRUE(c.take(0, 2 * kMiB, 1));
  ASSERT_TRUE(c.take(10 * kMiB, 2 * kMiB, 2));
  ASSERT_TRUE(c.take(20 * kMiB, 2 * kMiB, 3));
  EXPECT_EQ(c.copied(2).size(), 2u);
  const auto r = c.give_back_all(1);
  EXPECT_EQ(r.copy_in.size(), 2u);
  EXPECT_EQ(r.forgotten_bytes, 2 * kMiB);
  EXPECT_EQ(c.held_bytes(), 0u);
}

// The bytes, not just the bookkeeping: GPU memory, host blocks and two in-order streams are
// simulated, and random takes, gives back, stops, program writes and stream progress run against
// HostCopies as the advisor drives it (advisor.cpp: copies out and their discards on one stream;
// copies back on another, after every discard issued before them; a range taken only once its
// copy back ran, as the last-use event orders it; tickets seen done feed retire()). Every copy
// back must restore exactly the bytes the program last wrote there: a host block reused while a
// copy still read it, or a piece copied in from the wrong offset, would restore other bytes.
class SimulatedCopies {
 public:
  static constexpr uint64_t kUnits = 96;  // managed memory: one byte a unit
  static constexpr uint64_t kGarbage = ~uint64_t{0};

  explicit SimulatedCopies(uint64_t limit)
      : copies_(
            [this](uint64_t bytes) -> uint64_t {
              const uint64_t h = next_host_;
              next_host_ += bytes + 64;
              blocks_[h] = std::vector<uint64_t>(bytes, kGarbage);
              return h;
            },
            [this](uint64_t host, uint64_t) { blocks_.erase(host); }, limit) {
    for (uint64_t i = 0; i < kUnits; ++i) gpu_[i] = truth_[i] = i + 1;
  }

  void step(std::mt19937_64& rng, std::string* failure) {
    const uint64_t a = rng() % kUnits;
    const uint64_t len = 1 + rng() % 12;
    const uint64_t end = std::min(kUnits, a + len);
    switch (rng() % 8) {
      case 0:
      case 1:
        take(a, end);
        break;
      case 2:
      case 3:
        give_back(a, end);
        break;
      case 4:
        if (rng() % 8 == 0) stop();
        break;
      case 5:
        write(a, end);
        break;
      default:
        progress(rng() % 4, rng() % 4, failure);
        break;
    }
    copies_.retire(out_done_, in_done_);
  }

  // Runs everything queued and gives every held range back: the bytes must all be the truth.
  void finish(std::string* failure) {
    stop();
    progress(SIZE_MAX, SIZE_MAX, failure);
    for (uint64_t i = 0; i < kUnits && failure->empty(); ++i) {
      if (gpu_[i] != truth_[i]) *failure = "at the end unit " + std::to_string(i) + " differs";
    }
  }

  uint64_t copies_in_checked = 0;

 private:
  struct Op {
    bool discard = false;
    HostCopies::Segment segment;
    uint64_t ticket = 0;
    uint64_t after_out = 0;  // a copy back: the out-stream ops queued before it (their count)
  };

  uint64_t& host_at(uint64_t host) {
    auto it = std::prev(blocks_.upper_bound(host));
    return it->second.at(host - it->first);
  }
  bool busy(uint64_t a, uint64_t end) const {
    for (uint64_t i = a; i < end; ++i) {
      if (pending_in_[i] || pending_out_[i]) return true;
    }
    return copies_.holds(a, end);
  }

  void take(uint64_t a, uint64_t end) {
    // The last-use event orders a copy out after the launch that used the range, which waited
    // for its copy back: no copy back of the range is still queued.
    for (uint64_t i = a; i < end; ++i) {
      if (pending_in_[i]) return;
    }
    const auto segments = copies_.take(a, end - a, out_ticket_ + 1);
    if (!segments) return;
    ++out_ticket_;
    for (const HostCopies::Segment& s : *segments) {
      out_.push_back({false, s, out_ticket_, 0});
      for (uint64_t i = s.address; i < s.address + s.length; ++i) ++pending_out_[i];
    }
    for (const HostCopies::Segment& s : *segments) out_.push_back({true, s, out_ticket_, 0});
    copies_.copied(out_ticket_);
  }

  void queue_in(const HostCopies::Returned& r, uint64_t ticket) {
    for (const HostCopies::Segment& s : r.copy_in) {
      in_.push_back({false, s, ticket, out_queued_ + out_.size()});
      for (uint64_t i = s.address; i < s.address + s.length; ++i) ++pending_in_[i];
    }
  }
  void give_back(uint64_t a, uint64_t end) {
    const uint64_t ticket = ++in_ticket_;
    queue_in(copies_.give_back(a, end - a, ticket), ticket);
  }
  void stop() {
    copies_.freeze();
    const uint64_t ticket = ++in_ticket_;
    queue_in(copies_.give_back_all(ticket), ticket);
    copies_.unfreeze();
  }
  // The program writes only where the guard lets it: nothing held, nothing on its way.
  void write(uint64_t a, uint64_t end) {
    if (busy(a, end)) return;
    for (uint64_t i = a; i < end; ++i) gpu_[i] = truth_[i] = ++version_;
  }

  void progress(size_t outs, size_t ins, std::string* failure) {
    for (size_t k = 0; k < outs && !out_.empty(); ++k) {
      const Op op = out_.front();
      out_.pop_front();
      ++out_queued_;
      for (uint64_t i = 0; i < op.segment.length; ++i) {
        const uint64_t unit = op.segment.address + i;
        if (op.discard) {
          gpu_[unit] = kGarbage;
        } else {
          host_at(op.segment.host + i) = gpu_[unit];
          --pending_out_[unit];
        }
      }
      if (op.discard && (out_.empty() || out_.front().ticket != op.ticket)) {
        out_done_ = std::max(out_done_, op.ticket);
      }
    }
    for (size_t k = 0; k < ins && !in_.empty() && in_.front().after_out <= out_queued_; ++k) {
      const Op op = in_.front();
      in_.pop_front();
      for (uint64_t i = 0; i < op.segment.length; ++i) {
        const uint64_t unit = op.segment.address + i;
        gpu_[unit] = host_at(op.segment.host + i);
        --pending_in_[unit];
        if (gpu_[unit] != truth_[unit] && failure->empty()) {
          *failure = "a copy back of [" + std::to_string(op.segment.address) + ", +" +
                     std::to_string(op.segment.length) + ") restored other bytes at unit " +
                     std::to_string(unit);
        }
      }
      ++copies_in_checked;
      if (in_.empty() || in_.front().ticket != op.ticket) in_done_ = std::max(in_done_, op.ticket);
    }
  }

  std::map<uint64_t, std::vector<uint64_t>> blocks_;
  uint64_t next_host_ = 1ull << 40;
  HostCopies copies_;
  std::array<uint64_t, kUnits> gpu_{}, truth_{};
  std::array<int, kUnits> pending_in_{}, pending_out_{};
  std::deque<Op> out_, in_;
  uint64_t out_queued_ = 0;  // out-stream ops run so far
  uint64_t out_ticket_ = 0, in_ticket_ = 0, out_done_ = 0, in_done_ = 0, version_ = 1000;
};

TEST(HostCopies, RandomCopiesOutAndBackRestoreTheLastWrittenBytes) {
  uint64_t checked = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    // Small limits make blocks be reused and freed; large ones keep every block.
    SimulatedCopies sim(seed % 3 == 0 ? 24 : (seed % 3 == 1 ? 64 : 1 << 20));
    std::string failure;
    for (int i = 0; i < 400 && failure.empty(); ++i) sim.step(rng, &failure);
    if (failure.empty()) sim.finish(&failure);
    ASSERT_TRUE(failure.empty()) << "seed " << seed << ": " << failure;
    checked += sim.copies_in_checked;
  }
  EXPECT_GT(checked, 1000u);  // the property was exercised, not skipped
}

TEST(CopyBack, ACopyThatFailsIsTriedOnceMoreAndOneThatFailsTwiceIsLost) {
  const std::vector<HostCopies::Segment> segments = {
      {0x200000, 4096, 0x1000}, {0x400000, 8192, 0x3000}, {0x600000, 512, 0x6000}};
  std::map<uint64_t, int> failures_left = {{0x400000, 1}, {0x600000, 2}};
  std::vector<uint64_t> tries;
  const CopyBackOutcome out = copy_back(segments, [&](const HostCopies::Segment& s) {
    tries.push_back(s.address);
    int& left = failures_left[s.address];
    if (left == 0) return true;
    --left;
    return false;
  });
  // The first goes at once, the second on its second try, the third never.
  EXPECT_EQ(tries, (std::vector<uint64_t>{0x200000, 0x400000, 0x400000, 0x600000, 0x600000}));
  EXPECT_EQ(out.bytes, 4096u + 8192u);
  EXPECT_EQ(out.retried, 2u);
  ASSERT_EQ(out.lost.size(), 1u);
  EXPECT_EQ(out.lost[0].address, 0x600000u);
  EXPECT_EQ(out.lost[0].length, 512u);

  const CopyBackOutcome none = copy_back({}, [](const HostCopies::Segment&) { return false; });
  EXPECT_EQ(none.bytes, 0u);
  EXPECT_TRUE(none.lost.empty());
}

}  // namespace
}  // namespace umswap::advisor
