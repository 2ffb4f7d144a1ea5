// Registry: range lookups at the edges, overlap rejection, snapshots, and readers racing writers.
#include "umswap/allocator/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <latch>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace umswap {
namespace {

BufferRecord rec(uint64_t base, uint64_t size, BufferId id = 1) {
  return BufferRecord{.base = base, .size = size, .id = id, .call_site = id * 7};
}

// Every record the registry holds, as (base, size, id).
std::vector<std::tuple<uint64_t, uint64_t, BufferId>> contents(const Registry& r) {
  std::vector<std::tuple<uint64_t, uint64_t, BufferId>> out;
  for (const auto& x : r.snapshot()->records()) out.emplace_back(x.base, x.size, x.id);
  return out;
}

TEST(BufferRecord, ContainsIsHalfOpen) {
  const BufferRecord r = rec(0x1000, 0x100);
  EXPECT_TRUE(r.contains(0x1000));
  EXPECT_TRUE(r.contains(0x10ff));
  EXPECT_FALSE(r.contains(0x1100));
  EXPECT_FALSE(r.contains(0xfff));
  EXPECT_FALSE(r.contains(0));
  EXPECT_EQ(r.end(), 0x1100u);
}

TEST(AllocApi, EveryValueHasItsOwnName) {
  std::set<std::string> names;
  for (int i = 0; i < kAllocApiCount; ++i) names.insert(to_string(static_cast<AllocApi>(i)));
  EXPECT_EQ(names.size(), static_cast<size_t>(kAllocApiCount));
  EXPECT_FALSE(names.contains("unknown"));
  EXPECT_STREQ(to_string(AllocApi::cudaMallocAsync), "cudaMallocAsync");
  EXPECT_STREQ(to_string(AllocApi::cuMemAllocPitch), "cuMemAllocPitch");
}

TEST(Registry, EmptyFindsNothing) {
  Registry r;
  EXPECT_EQ(r.size(), 0u);
  EXPECT_FALSE(r.find(0));
  EXPECT_FALSE(r.find(0x7f0000000000));
  EXPECT_FALSE(r.contains(UINT64_MAX));
  EXPECT_EQ(r.snapshot()->find(0x1000), nullptr);
}

TEST(Registry, FindAtTheBoundaries) {
  Registry r;
  const uint64_t base = 0x7f0000000000, size = 0x200000;
  ASSERT_TRUE(r.insert(rec(base, size, 5)));
  for (uint64_t a : {base, base + 1, base + size / 2, base + size - 1}) {
    const auto found = r.find(a);
    ASSERT_TRUE(found) << std::hex << a;
    EXPECT_EQ(found->base, base);
    EXPECT_EQ(found->size, size);
    EXPECT_EQ(found->id, 5u);
    EXPECT_EQ(found->call_site, 35u);
    EXPECT_TRUE(r.contains(a));
  }
  for (uint64_t a : {base - 1, base + size, base + size + 1}) {
    EXPECT_FALSE(r.find(a)) << std::hex << a;
    EXPECT_FALSE(r.contains(a)) << std::hex << a;
    EXPECT_EQ(r.snapshot()->find(a), nullptr);
  }
}

TEST(Registry, RecordIsStoredWhole) {
  Registry r;
  const BufferRecord in{.base = 0x5000,
                        .size = 12,
                        .id = 77,
                        .call_site = 0xabcdef,
                        .api = AllocApi::cuMemAllocAsync,
                        .from_pool = true,
                        .app_managed = true};
  ASSERT_TRUE(r.insert(in));
  const auto out = r.find(0x5005);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->id, 77u);
  EXPECT_EQ(out->call_site, 0xabcdefu);
  EXPECT_EQ(out->api, AllocApi::cuMemAllocAsync);
  EXPECT_TRUE(out->from_pool);
  EXPECT_TRUE(out->app_managed);
}

TEST(Registry, OverlappingInsertsAreRejectedAndChangeNothing) {
  Registry r;
  ASSERT_TRUE(r.insert(rec(0x10000, 0x1000, 1)));  // [0x10000, 0x11000)
  const auto before = contents(r);
  const std::pair<uint64_t, uint64_t> overlapping[] = {
      {0x10000, 0x1000},  // exact
      {0x0f800, 0x1000},  // partial front: ends inside
      {0x10800, 0x1000},  // partial back: starts inside
      {0x0f000, 0x4000},  // contains it
      {0x10400, 0x100},   // contained
      {0x10fff, 1},       // last byte
      {0x0f000, 0x1001},  // first byte
      {0x10000, 1},       // same base, smaller
  };
  for (const auto& [base, size] : overlapping) {
    EXPECT_FALSE(r.insert(rec(base, size, 2))) << std::hex << base << "+" << size;
    EXPECT_EQ(contents(r), before);
  }
  EXPECT_EQ(r.find(0x10000)->id, 1u);
}

TEST(Registry, OverlapIsCheckedAgainstNeighboursOnBothSides) {
  Registry r;
  ASSERT_TRUE(r.insert(rec(0x1000, 0x1000, 1)));
  ASSERT_TRUE(r.insert(rec(0x4000, 0x1000, 2)));
  ASSERT_TRUE(r.insert(rec(0x8000, 0x1000, 3)));
  EXPECT_FALSE(r.insert(rec(0x4800, 0x3000, 9)));  // tail of 2 up to the head of 3
  EXPECT_FALSE(r.insert(rec(0x1800, 0x1000, 9)));  // tail of 1 into the gap
  EXPECT_FALSE(r.insert(rec(0x3000, 0x6000, 9)));  // swallows 2 and the head of 3
  EXPECT_TRUE(r.insert(rec(0x2000, 0x2000, 4)));   // fills the gap between 1 and 2 exactly
  EXPECT_EQ(r.size(), 4u);
}

TEST(Registry, EmptyAndWrappingRangesAreRejected) {
  Registry r;
  EXPECT_FALSE(r.insert(rec(0x1000, 0)));
  EXPECT_FALSE(r.insert(rec(UINT64_MAX - 0xf, 0x100)));  // base + size wraps around
  EXPECT_FALSE(r.insert(rec(0x1000, UINT64_MAX)));
  EXPECT_EQ(r.size(), 0u);
  EXPECT_FALSE(r.find(0x1000));
}

TEST(Registry, RangeAtTheTopOfTheAddressSpace) {
  Registry r;
  ASSERT_TRUE(r.insert(rec(UINT64_MAX - 0x1000, 0x1000, 3)));  // ends at UINT64_MAX
  EXPECT_TRUE(r.find(UINT64_MAX - 1));
  EXPECT_FALSE(r.find(UINT64_MAX));
  EXPECT_TRUE(r.find(UINT64_MAX - 0x1000));
  EXPECT_FALSE(r.find(UINT64_MAX - 0x1001));
}

TEST(Registry, RemoveReturnsTheRecord) {
  Registry r;
  ASSERT_TRUE(r.insert(rec(0x10000, 0x1000, 11)));
  ASSERT_TRUE(r.insert(rec(0x20000, 0x1000, 12)));
  const auto removed = r.remove(0x10000);
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->id, 11u);
  EXPECT_EQ(removed->base, 0x10000u);
  EXPECT_EQ(removed->size, 0x1000u);
  EXPECT_FALSE(r.find(0x10000));
  EXPECT_TRUE(r.find(0x20000));
  EXPECT_EQ(r.size(), 1u);
  EXPECT_FALSE(r.remove(0x10000));  // already gone
}

TEST(Registry, RemoveOfANonBaseOrUnknownAddressChangesNothing) {
  Registry r;
  ASSERT_TRUE(r.insert(rec(0x10000, 0x1000, 1)));
  const auto before = contents(r);
  for (uint64_t a : {uint64_t{0x10001}, uint64_t{0x10fff}, uint64_t{0xffff}, uint64_t{0x11000},
                     uint64_t{0}, UINT64_MAX}) {
    EXPECT_FALSE(r.remove(a)) << std::hex << a;
  }
  EXPECT_EQ(contents(r), before);
}

TEST(Registry, AdjacentBuffersAreDistinct) {
  Registry r;
  ASSERT_TRUE(r.insert(rec(0x1000, 0x1000, 1)));
  ASSERT_TRUE(r.insert(rec(0x2000, 0x1000, 2)));
  ASSERT_TRUE(r.insert(rec(0x0800, 0x0800, 3)));  // adjacent below the first
  EXPECT_EQ(r.find(0x0fff)->id, 3u);
  EXPECT_EQ(r.find(0x1000)->id, 1u);
  EXPECT_EQ(r.find(0x1fff)->id, 1u);
  EXPECT_EQ(r.find(0x2000)->id, 2u);
  EXPECT_EQ(r.find(0x2fff)->id, 2u);
  EXPECT_FALSE(r.find(0x3000));
  EXPECT_FALSE(r.find(0x07ff));
}

TEST(Registry, SnapshotIsSortedWhateverTheInsertOrder) {
  Registry r;
  std::vector<uint64_t> bases;
  for (uint64_t i = 0; i < 64; ++i) bases.push_back(0x100000 + i * 0x1000);
  std::shuffle(bases.begin(), bases.end(), std::mt19937_64(42));
  for (uint64_t b : bases) ASSERT_TRUE(r.insert(rec(b, 0x800, b)));
  const auto snap = r.snapshot();
  ASSERT_EQ(snap->size(), 64u);
  for (size_t i = 1; i < snap->records().size(); ++i) {
    EXPECT_LT(snap->records()[i - 1].base, snap->records()[i].base);
  }
  for (uint64_t b : bases) {
    EXPECT_EQ(r.find(b + 0x7ff)->id, b);
    EXPECT_FALSE(r.find(b + 0x800));
  }
}

TEST(Registry, SnapshotIsImmutable) {
  Registry r;
  ASSERT_TRUE(r.insert(rec(0x10000, 0x1000, 1)));
  const auto before = r.snapshot();
  ASSERT_TRUE(r.remove(0x10000));
  ASSERT_TRUE(r.insert(rec(0x30000, 0x1000, 3)));
  // The old view still answers as it was taken...
  const BufferRecord* old = before->find(0x10010);
  ASSERT_NE(old, nullptr);
  EXPECT_EQ(old->id, 1u);
  EXPECT_EQ(before->find(0x30000), nullptr);
  EXPECT_EQ(before->size(), 1u);
  // ...while the registry has moved on.
  EXPECT_FALSE(r.find(0x10010));
  EXPECT_EQ(r.find(0x30000)->id, 3u);
  EXPECT_EQ(r.snapshot()->find(0x10010), nullptr);
}

// Writes between two reads make one snapshot, at the read: with no write between them, two reads
// share one; after several, the next holds them all, with bounds made from what is left.
TEST(Registry, WritesBetweenReadsMakeOneSnapshotAtTheRead) {
  Registry r;
  ASSERT_TRUE(r.insert(rec(0x10000, 0x1000, 1)));
  ASSERT_TRUE(r.insert(rec(0x90000, 0x1000, 2)));
  const auto first = r.snapshot();
  EXPECT_EQ(r.snapshot(), first);
  ASSERT_TRUE(r.remove(0x90000));  // the highest
  ASSERT_TRUE(r.insert(rec(0x20000, 0x1000, 3)));
  ASSERT_TRUE(r.remove(0x10000));  // the lowest
  ASSERT_TRUE(r.mark_carved(0x20000));
  const auto second = r.snapshot();
  EXPECT_NE(second, first);
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ(second->find(0x20010)->id, 3u);
  EXPECT_TRUE(second->find(0x20010)->carved);
  EXPECT_EQ(second->find(0x10010), nullptr);
  EXPECT_EQ(second->find(0x90010), nullptr);
  EXPECT_EQ(r.snapshot(), second);
  EXPECT_EQ(first->size(), 2u);  // untouched
  EXPECT_EQ(first->find(0x90010)->id, 2u);
}

TEST(Registry, SnapshotOutlivesTheRegistry) {
  std::shared_ptr<const Registry::Snapshot> snap;
  {
    Registry r;
    ASSERT_TRUE(r.insert(rec(0x10000, 0x1000, 9)));
    snap = r.snapshot();
  }
  ASSERT_NE(snap->find(0x10000), nullptr);
  EXPECT_EQ(snap->find(0x10000)->id, 9u);
}

TEST(Registry, ValuesThatAreNotAddressesMiss) {
  Registry r;
  ASSERT_TRUE(r.insert(rec(0x7f0000000000, 0x200000, 1)));
  ASSERT_TRUE(r.insert(rec(0x7f0000400000, 0x200000, 2)));
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{8}, uint64_t{4096}, uint64_t{1} << 32,
                     uint64_t{0x3f800000} /* 1.0f */, uint64_t{0x7f0000200000} /* gap */,
                     uint64_t{0x7f0000600000}, uint64_t{0xffffffff}, UINT64_MAX, UINT64_MAX - 1}) {
    EXPECT_FALSE(r.find(v)) << std::hex << v;
    EXPECT_EQ(r.snapshot()->find(v), nullptr) << std::hex << v;
  }
}

TEST(Registry, FreedAndReusedRangeGivesTheNewRecord) {
  Registry r;
  ASSERT_TRUE(r.insert(rec(0x10000, 0x1000, 1)));
  EXPECT_EQ(r.find(0x10800)->id, 1u);  // warms this thread's cached snapshot
  ASSERT_TRUE(r.remove(0x10000));
  ASSERT_TRUE(r.insert(rec(0x10000, 0x2000, 2)));
  EXPECT_EQ(r.find(0x10800)->id, 2u);
  EXPECT_EQ(r.find(0x11800)->id, 2u);  // the bigger new buffer
  ASSERT_TRUE(r.remove(0x10000));
  ASSERT_TRUE(r.insert(rec(0x10800, 0x100, 3)));  // reused from the middle
  EXPECT_FALSE(r.find(0x10000));
  EXPECT_EQ(r.find(0x10800)->id, 3u);
}

// The per-thread snapshot cache must not let one registry answer for another.
TEST(Registry, TwoRegistriesUsedAlternatelyFromOneThread) {
  Registry a, b;
  ASSERT_TRUE(a.insert(rec(0x1000, 0x1000, 1)));
  ASSERT_TRUE(b.insert(rec(0x1000, 0x1000, 2)));
  ASSERT_TRUE(b.insert(rec(0x5000, 0x1000, 3)));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.find(0x1000)->id, 1u);
    EXPECT_EQ(b.find(0x1000)->id, 2u);
    EXPECT_FALSE(a.find(0x5000));
    EXPECT_TRUE(b.contains(0x5000));
  }
}

TEST(Registry, ANewRegistryDoesNotSeeADestroyedOnesRecords) {
  for (int i = 0; i < 10; ++i) {
    auto r = std::make_unique<Registry>();
    EXPECT_FALSE(r->find(0x1000)) << "round " << i;
    ASSERT_TRUE(r->insert(rec(0x1000, 0x1000, 1)));
    EXPECT_TRUE(r->find(0x1000));  // cached in this thread, then the registry dies
  }
}

TEST(Registry, ChangesAreVisibleAtOnceToTheWritingThread) {
  Registry r;
  for (uint64_t i = 0; i < 100; ++i) {
    const uint64_t base = 0x100000 + i * 0x1000;
    ASSERT_TRUE(r.insert(rec(base, 0x1000, i + 1)));
    ASSERT_EQ(r.find(base)->id, i + 1);
    if (i % 2 == 0) {
      ASSERT_TRUE(r.remove(base));
      ASSERT_FALSE(r.find(base));
    }
  }
  EXPECT_EQ(r.size(), 50u);
}

TEST(Registry, ChangesMadeByAnotherThreadAreSeen) {
  Registry r;
  EXPECT_FALSE(r.find(0x1000));  // caches the empty snapshot here
  std::thread([&] { ASSERT_TRUE(r.insert(rec(0x1000, 0x1000, 4))); }).join();
  ASSERT_TRUE(r.find(0x1000));
  EXPECT_EQ(r.find(0x1000)->id, 4u);
  std::thread([&] { ASSERT_TRUE(r.remove(0x1000)); }).join();
  EXPECT_FALSE(r.find(0x1000));
}

TEST(Registry, RacingInsertsOfOneRangeHaveOneWinner) {
  constexpr int kThreads = 8;
  for (int round = 0; round < 50; ++round) {
    Registry r;
    std::latch start(kThreads);
    std::atomic<int> winners{0};
    std::atomic<int> winner_id{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        // Different sizes, same base or overlapping: at most one can be in.
        if (r.insert(rec(0x10000 + (t % 2) * 0x800, 0x1000 + t * 0x100, t + 1))) {
          winners.fetch_add(1);
          winner_id.store(t + 1);
        }
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(winners.load(), 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r.snapshot()->records()[0].id, static_cast<BufferId>(winner_id.load()));
  }
}

// Writers own disjoint slots and toggle them; readers look up random addresses and may see
// nothing or exactly the record that owns the slot, never a torn or foreign one.
TEST(Registry, ReadersRacingWritersSeeOnlyCorrectRecords) {
  constexpr int kWriters = 8, kReaders = 4, kSlotsPerWriter = 16, kRounds = 300;
  constexpr uint64_t kStart = 0x7f0000000000, kStride = 0x10000;
  constexpr uint64_t kTotalSlots = uint64_t{kWriters} * kSlotsPerWriter;
  auto slot_base = [&](uint64_t slot) { return kStart + slot * kStride; };
  auto slot_size = [&](uint64_t slot) { return 0x1000 * (1 + slot % 7); };  // < kStride
  // An id names its slot and round, so a reader can tell whose record it got.
  auto make = [&](uint64_t slot, uint64_t round) {
    const BufferId id = (slot << 32) | (round + 1);
    return BufferRecord{.base = slot_base(slot),
                        .size = slot_size(slot),
                        .id = id,
                        .call_site = slot_base(slot) ^ id};
  };

  Registry r;
  std::atomic<bool> writers_done{false};
  std::atomic<int> bad{0};
  std::atomic<uint64_t> lookups{0};
  std::latch start(kWriters + kReaders);
  // The race is exercised by construction, not by luck (on 2 cores the writers could finish
  // before a reader ran): readers begin once every writer has published its first round, and no
  // writer finishes its rounds before each reader has made kReaderBatches batches of lookups.
  std::latch published(kWriters);
  constexpr int kReaderBatches = 8;
  std::atomic<int> reader_batches{0};

  auto check = [&](uint64_t address, const BufferRecord* found) {
    const uint64_t slot = (address - kStart) / kStride;
    const uint64_t offset = (address - kStart) % kStride;
    if (!found) return;
    const bool ok = offset < slot_size(slot) && found->base == slot_base(slot) &&
                    found->size == slot_size(slot) && (found->id >> 32) == slot &&
                    found->call_site == (found->base ^ found->id);
    if (!ok) bad.fetch_add(1);
  };

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      start.arrive_and_wait();
      bool present[kSlotsPerWriter] = {};
      for (uint64_t round = 0; round < kRounds; ++round) {
        for (int k = 0; k < kSlotsPerWriter; ++k) {
          const uint64_t slot = uint64_t(w) * kSlotsPerWriter + k;
          if ((round + k) % 3 == 0) continue;  // leave some slots alone this round
          if (present[k]) {
            const auto removed = r.remove(slot_base(slot));
            if (!removed || (removed->id >> 32) != slot) bad.fetch_add(1);
          } else if (!r.insert(make(slot, round))) {
            bad.fetch_add(1);
          }
          present[k] = !present[k];
        }
        if (round == 0) published.count_down();
        if (round + 1 == kRounds) {
          while (reader_batches.load(std::memory_order_acquire) < kReaders * kReaderBatches) {
            std::this_thread::yield();
          }
        }
      }
      // Final state: exactly the even slots, with round id kRounds.
      for (int k = 0; k < kSlotsPerWriter; ++k) {
        const uint64_t slot = uint64_t(w) * kSlotsPerWriter + k;
        if (present[k]) r.remove(slot_base(slot));
        if (k % 2 == 0 && !r.insert(make(slot, kRounds))) bad.fetch_add(1);
      }
    });
  }
  for (int t = 0; t < kReaders; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::uniform_int_distribution<uint64_t> pick(kStart - kStride,
                                                   kStart + (kTotalSlots + 1) * kStride);
      start.arrive_and_wait();
      published.wait();
      for (int batch = 0; !writers_done.load(std::memory_order_acquire); ++batch) {
        if (batch == kReaderBatches) reader_batches.fetch_add(kReaderBatches);
        for (int i = 0; i < 256; ++i) {
          const uint64_t a = pick(rng);
          lookups.fetch_add(1, std::memory_order_relaxed);
          const bool in_range = a >= kStart && a < kStart + kTotalSlots * kStride;
          if (t % 2 == 0) {
            const auto found = r.find(a);
            if (!in_range && found) bad.fetch_add(1);
            if (in_range) check(a, found ? &*found : nullptr);
          } else {
            const auto snap = r.snapshot();
            const BufferRecord* found = snap->find(a);
            if (!in_range && found) bad.fetch_add(1);
            if (in_range) check(a, found);
          }
        }
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  writers_done.store(true, std::memory_order_release);
  for (size_t i = kWriters; i < threads.size(); ++i) threads[i].join();

  EXPECT_EQ(bad.load(), 0);
  EXPECT_GE(lookups.load(), uint64_t{kReaders} * kReaderBatches * 256);
  ASSERT_EQ(r.size(), kTotalSlots / 2);
  for (uint64_t slot = 0; slot < kTotalSlots; ++slot) {
    const auto found = r.find(slot_base(slot) + slot_size(slot) - 1);
    if (slot % 2 == 0) {
      ASSERT_TRUE(found) << slot;
      EXPECT_EQ(found->id, (slot << 32) | (kRounds + 1));
    } else {
      EXPECT_FALSE(found) << slot;
    }
  }
}

}  // namespace
}  // namespace umswap
