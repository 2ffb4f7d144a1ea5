// Launch log: steps and their hits come back as appended, a step's hits never cross a chunk,
// bounds drop rather than grow, and a reader copying while a writer appends sees only complete
// steps, in order.
#include "umswap/tracer/launch_log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

namespace umswap::tracer {
namespace {

// Step i of the synthetic sequences below: every field derived from i, hits included, so that a
// reader can check a copied step without knowing what the writer did.
LoggedStep step_for(uint64_t i) {
  return {.stream = i * 3 + 1,
          .key = static_cast<uint32_t>(i),
          .correlation = static_cast<uint32_t>(i * 7),
          .kind = i % 2 ? trace::StepKind::memcpy : trace::StepKind::kernel};
}
std::vector<PointerHit> hits_for(uint64_t i, size_t count) {
  std::vector<PointerHit> hits;
  for (size_t j = 0; j < count; ++j) {
    hits.push_back({.buffer = i + 1, .base = i << 20, .size = 1 << 20, .pointer = (i << 20) + j});
  }
  return hits;
}
bool hits_match(uint64_t i, std::span<const PointerHit> hits) {
  const auto expected = hits_for(i, hits.size());
  return std::equal(hits.begin(), hits.end(), expected.begin(), expected.end());
}

TEST(LaunchLog, StepsAndHitsComeBackAsAppended) {
  LaunchLog log;
  EXPECT_EQ(log.size(), 0u);
  for (uint64_t i = 0; i < 100; ++i) ASSERT_TRUE(log.append(step_for(i), hits_for(i, i % 4)));
  ASSERT_EQ(log.size(), 100u);
  for (uint64_t i = 0; i < 100; ++i) {
    const LoggedStep& s = log.step(i);
    EXPECT_EQ(s.key, i);
    EXPECT_EQ(s.stream, i * 3 + 1);
    EXPECT_EQ(s.correlation, i * 7);
    EXPECT_EQ(s.kind, i % 2 ? trace::StepKind::memcpy : trace::StepKind::kernel);
    EXPECT_EQ(s.hit_count, i % 4);
    EXPECT_TRUE(hits_match(i, log.hits(s))) << i;
  }

  const std::vector<uint32_t> keys = log.copy_keys(95);
  EXPECT_EQ(keys, (std::vector<uint32_t>{95, 96, 97, 98, 99}));
  EXPECT_EQ(log.copy_keys(10, 2), (std::vector<uint32_t>{10, 11}));
  EXPECT_TRUE(log.copy_keys(100).empty());

  StepLog out;
  ASSERT_TRUE(log.copy_steps(10, 3, &out));
  EXPECT_EQ(out.keys, (std::vector<uint32_t>{10, 11, 12}));
  EXPECT_EQ(out.streams, (std::vector<uint64_t>{31, 34, 37}));
  ASSERT_EQ(out.first_hit, (std::vector<uint64_t>{0, 2, 5, 5}));
  EXPECT_TRUE(hits_match(10, std::span(out.hits).subspan(0, 2)));
  EXPECT_TRUE(hits_match(11, std::span(out.hits).subspan(2, 3)));
  EXPECT_FALSE(log.copy_steps(98, 3, &out));  // not all logged
  EXPECT_EQ(out.keys.size(), 3u);             // untouched
  ASSERT_TRUE(log.copy_steps(100, 0, &out));
  EXPECT_TRUE(out.keys.empty());
  EXPECT_EQ(out.first_hit, (std::vector<uint64_t>{0}));
}

TEST(LaunchLog, AStepsHitsStayInOneChunkAndChunksNeverMove) {
  LaunchLog log({.chunk_log2 = 4, .max_steps = 1000, .max_hits = 1000});  // 16 hits a chunk
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(log.append(step_for(i), hits_for(i, 5)));
  const LoggedStep* first_step = &log.step(0);
  const PointerHit* first_hit = log.hits(log.step(0)).data();
  // 15 hits used: the next 5 do not fit in the first chunk and start the second.
  ASSERT_TRUE(log.append(step_for(3), hits_for(3, 5)));
  EXPECT_EQ(log.step(3).first_hit, 16u);
  EXPECT_TRUE(hits_match(3, log.hits(log.step(3))));
  // A full chunk's worth fits; one more hit than a chunk holds cannot be logged at all.
  EXPECT_TRUE(log.append(step_for(4), hits_for(4, 16)));
  EXPECT_EQ(log.step(4).first_hit, 32u);
  EXPECT_FALSE(log.append(step_for(5), hits_for(5, 17)));
  EXPECT_EQ(log.size(), 5u);
  for (uint64_t i = 5; i < 200; ++i) ASSERT_TRUE(log.append(step_for(i), hits_for(i, 1)));
  EXPECT_EQ(&log.step(0), first_step);
  EXPECT_EQ(log.hits(log.step(0)).data(), first_hit);
  for (uint64_t i = 0; i < 200; ++i) EXPECT_EQ(log.step(i).key, i);
}

TEST(LaunchLog, FullLogDropsRatherThanGrows) {
  LaunchLog steps_bound({.chunk_log2 = 4, .max_steps = 20, .max_hits = 1000});
  for (uint64_t i = 0; i < 20; ++i) ASSERT_TRUE(steps_bound.append(step_for(i), {}));
  EXPECT_FALSE(steps_bound.append(step_for(20), {}));
  EXPECT_EQ(steps_bound.size(), 20u);

  LaunchLog hits_bound({.chunk_log2 = 4, .max_steps = 1000, .max_hits = 32});
  ASSERT_TRUE(hits_bound.append(step_for(0), hits_for(0, 16)));
  ASSERT_TRUE(hits_bound.append(step_for(1), hits_for(1, 10)));
  // 7 more cross into a third chunk, past 32 hits; 6 fill the second exactly.
  EXPECT_FALSE(hits_bound.append(step_for(2), hits_for(2, 7)));
  ASSERT_TRUE(hits_bound.append(step_for(2), hits_for(2, 6)));
  ASSERT_TRUE(hits_bound.append(step_for(3), {}));  // no hits: still room
  EXPECT_EQ(hits_bound.size(), 4u);
  EXPECT_TRUE(hits_match(2, hits_bound.hits(hits_bound.step(2))));
}

// The advisor's situation: launches append while another thread copies recent steps. Small
// chunks, so that many chunks are allocated and published during the race.
TEST(LaunchLog, ReaderCopyingWhileAWriterAppendsSeesCompleteStepsInOrder) {
  constexpr uint64_t kSteps = 200000;
  LaunchLog log({.chunk_log2 = 8, .max_steps = kSteps, .max_hits = kSteps * 4});
  std::atomic<bool> done{false};
  std::atomic<uint64_t> wrong{0};
  std::atomic<uint64_t> checked{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      StepLog out;
      uint64_t last_size = 0;
      for (bool last = false; !last;) {
        last = done.load();  // one more pass once the writer is done
        const uint64_t n = log.size();
        if (n < last_size) wrong.fetch_add(1);  // the published count never goes back
        last_size = n;
        const uint64_t first = n > 1000 ? n - 1000 : 0;
        if (t == 0) {
          if (!log.copy_steps(first, n - first, &out)) {
            wrong.fetch_add(1);
            continue;
          }
          for (uint64_t k = 0; k < out.keys.size(); ++k) {
            const uint64_t i = first + k;
            const std::span<const PointerHit> hits(out.hits.data() + out.first_hit[k],
                                                   out.first_hit[k + 1] - out.first_hit[k]);
            if (out.keys[k] != i || out.streams[k] != i * 3 + 1 || hits.size() != i % 5 ||
                !hits_match(i, hits)) {
              wrong.fetch_add(1);
            }
          }
          checked.fetch_add(out.keys.size(), std::memory_order_relaxed);
        } else {
          const std::vector<uint32_t> keys = log.copy_keys(first);
          for (uint64_t k = 0; k < keys.size(); ++k) {
            if (keys[k] != first + k) wrong.fetch_add(1);
          }
          // Steps past what copy_keys saw may have been published since, never fewer.
          if (first + keys.size() > log.size()) wrong.fetch_add(1);
          checked.fetch_add(keys.size(), std::memory_order_relaxed);
        }
      }
    });
  }
  for (uint64_t i = 0; i < kSteps; ++i) ASSERT_TRUE(log.append(step_for(i), hits_for(i, i % 5)));
  done = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(checked.load(), 0u);
  ASSERT_EQ(log.size(), kSteps);
  StepLog all;
  ASSERT_TRUE(log.copy_steps(0, kSteps, &all));
  for (uint64_t i = 0; i < kSteps; ++i) ASSERT_EQ(all.keys[i], i);
}

}  // namespace
}  // namespace umswap::tracer
