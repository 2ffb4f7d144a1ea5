// VmmResidency (engine vmm's moves) over the vmm tests' fake driver, which simulates physical
// memory (tests/vmm/fake_vmm_driver.h): a step reaching a range on the host gets a window, the
// window brings it onto the GPU and evicts the least recently used range the step does not reach,
// data survives every move, the pool is never exceeded, what cannot fit stays on the host and is
// not retried until something is freed, bases outside the arena are ignored, and (stream-ordered
// allocations) a window leaves an eighth of the pool free for the allocations that follow. Without
// a table, once the steps repeat, the range used furthest ahead goes out and what comes next comes
// in.
// Once two iterations repeat, the plan's table moves ranges ahead in fewer windows; a stack of
// identical layers is not taken for the iteration, and a table whose keys stop matching, or that
// takes more windows than the residency alone, is dropped. With a table in force, a window for a
// step's own ranges evicts what the table's iteration uses furthest ahead and makes no room beyond
// it; a slab made in one iteration and not the next does not keep the two from making a table.
#include "umswap/allocator/vmm_residency.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "../vmm/fake_vmm_driver.h"

namespace umswap {
namespace {

using vmm::fake::g_fake;
constexpr uint64_t kChunk = vmm::kChunk;
const CUstream kStream = reinterpret_cast<CUstream>(uintptr_t{0x5a});

class VmmResidencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake = std::make_unique<vmm::fake::Fake>();
    g_fake->stream = kStream;
    // A pool of 4 chunks on the GPU, 16 on the host.
    arena_ = std::make_unique<vmm::ChunkArena>(vmm::fake::fake_driver(), g_fake->device, 4 * kChunk,
                                               16 * kChunk);
    residency_ = std::make_unique<VmmResidency>(*arena_);
  }
  void TearDown() override {
    residency_.reset();
    arena_.reset();
    EXPECT_EQ(g_fake->live_handles(), 0u);
    EXPECT_EQ(g_fake->bad_streams, 0u);
    g_fake.reset();
  }
  // A range announced to the residency, then written by work it does not see.
  CUdeviceptr allocate(uint64_t bytes, uint8_t seed) {
    CUdeviceptr p = 0;
    EXPECT_EQ(arena_->allocate(bytes, &p), CUDA_SUCCESS);
    residency_->allocated(p);
    EXPECT_TRUE(g_fake->kernel_write(p, bytes, seed));
    residency_->unseen_work();
    return p;
  }
  bool on_gpu(CUdeviceptr p) { return arena_->on_gpu(p); }
  // A step: touch, and the window it asks for.
  // The step's key defaults to a fresh one and no iteration begins: no plan is made and the
  // window evicts the least recently used.
  bool step(std::vector<CUdeviceptr> bases, uint32_t key = 0, bool begins = false) {
    if (!residency_->touch(key ? key : next_key_++, bases, begins)) return false;
    residency_->make_resident(bases, kStream);
    return true;
  }
  uint32_t next_key_ = 1u << 20;
  // The program's allocations as fill_sixteen()'s set_mostly_ordered() counts them.
  uint64_t ordered_ = 0, plain_ = 0;
  // A pool of 16 chunks (blocks of one chunk) for a program of stream-ordered allocations, filled
  // by eight ranges of 2 chunks (seeds 20-27), each reached by a step in turn: the first is the
  // least recently used. `spare`: what set_spare() says.
  std::vector<CUdeviceptr> fill_sixteen(uint64_t spare) {
    residency_.reset();
    arena_ = std::make_unique<vmm::ChunkArena>(vmm::fake::fake_driver(), g_fake->device,
                                               16 * kChunk, 16 * kChunk);
    residency_ = std::make_unique<VmmResidency>(*arena_);
    residency_->set_mostly_ordered([this] { return ordered_ > plain_; });
    ordered_ = 1;
    residency_->set_spare([spare] { return spare; });
    EXPECT_EQ(arena_->block_bytes(), kChunk);
    std::vector<CUdeviceptr> r;
    for (int i = 0; i < 8; ++i) r.push_back(allocate(2 * kChunk, static_cast<uint8_t>(20 + i)));
    for (CUdeviceptr p : r) EXPECT_FALSE(step({p}));
    return r;
  }
  // After fill_sixteen(): a new range of 2 chunks (seed 30) and r[7] in one step. Its window
  // brings the new range in and evicts the least recently used range alone (no room made).
  void expect_a_step_that_evicts_only_its_own_room(const std::vector<CUdeviceptr>& r) {
    const CUdeviceptr full = allocate(2 * kChunk, 30);
    EXPECT_TRUE(step({r[7], full}));
    EXPECT_TRUE(on_gpu(full));
    EXPECT_FALSE(on_gpu(r[0]));
    for (int i = 1; i < 8; ++i) EXPECT_TRUE(on_gpu(r[static_cast<size_t>(i)]));
    EXPECT_EQ(residency_->stats().ranges_evicted, 1u);
  }

  std::unique_ptr<vmm::ChunkArena> arena_;
  std::unique_ptr<VmmResidency> residency_;
};

TEST_F(VmmResidencyTest, AStepOnTheGpuWantsNoWindow) {
  const CUdeviceptr a = allocate(2 * kChunk, 1);
  EXPECT_FALSE(step({a}));
  EXPECT_EQ(residency_->stats().steps_held, 0u);
}

TEST_F(VmmResidencyTest, ARangeOnTheHostComesInAndTheLeastRecentlyUsedGoesOut) {
  const CUdeviceptr a = allocate(2 * kChunk, 1);
  const CUdeviceptr b = allocate(2 * kChunk, 2);
  const CUdeviceptr c = allocate(2 * kChunk, 3);  // the pool is full: on the host
  ASSERT_TRUE(on_gpu(a));
  ASSERT_TRUE(on_gpu(b));
  ASSERT_FALSE(on_gpu(c));
  EXPECT_FALSE(step({a}));
  EXPECT_FALSE(step({b}));  // a is now the least recently used
  EXPECT_TRUE(step({c}));
  EXPECT_TRUE(on_gpu(c));
  EXPECT_FALSE(on_gpu(a));
  EXPECT_TRUE(on_gpu(b));
  EXPECT_LE(arena_->gpu_bytes_in_use(), 4 * kChunk);
  // And back: a in, b (used before c) out.
  EXPECT_TRUE(step({a}));
  EXPECT_TRUE(on_gpu(a));
  EXPECT_FALSE(on_gpu(b));
  EXPECT_TRUE(on_gpu(c));
  EXPECT_EQ(g_fake->kernel_mismatches(a, 2 * kChunk, 1), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(b, 2 * kChunk, 2), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(c, 2 * kChunk, 3), 0u);
  const ResidencyStats s = residency_->stats();
  EXPECT_EQ(s.steps_held, 2u);
  EXPECT_EQ(s.ranges_restored, 2u);
  EXPECT_EQ(s.ranges_evicted, 2u);
  EXPECT_EQ(s.bytes_short, 0u);
  EXPECT_EQ(s.move_failures, 0u);
}

// A range allocated since the last step holds nothing anyone wrote: the full pool put it on the
// host, and the step that enters next brings it in by remapping alone (no copy), while the range
// it evicts is copied out as usual.
TEST_F(VmmResidencyTest, ARangeNoStepHasReachedYetComesInWithNoCopy) {
  const CUdeviceptr a = allocate(2 * kChunk, 1);
  const CUdeviceptr b = allocate(2 * kChunk, 2);
  EXPECT_FALSE(step({a}));
  EXPECT_FALSE(step({b}));
  CUdeviceptr c = 0;
  ASSERT_EQ(arena_->allocate(2 * kChunk, &c), CUDA_SUCCESS);
  residency_->allocated(c);
  ASSERT_FALSE(on_gpu(c));
  const uint64_t copies = g_fake->copies_run;
  EXPECT_TRUE(step({c}));
  EXPECT_TRUE(on_gpu(c));
  EXPECT_FALSE(on_gpu(a));
  EXPECT_EQ(g_fake->copies_run - copies, 2u);  // a's two chunks out, none in
  EXPECT_EQ(arena_->stats().bytes_not_copied, 2 * kChunk);
  EXPECT_EQ(arena_->stats().bytes_to_gpu, 0u);
  EXPECT_EQ(residency_->stats().ranges_unwritten, 1u);
  EXPECT_EQ(g_fake->kernel_mismatches(a, 2 * kChunk, 1), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(b, 2 * kChunk, 2), 0u);
}

// Whatever could have written it since ends that: a step reaching other ranges (a kernel may
// reach memory through pointers the tracer does not see), or work the tracer cannot see into.
// The range then comes in with its bytes.
class VmmResidencyWrittenTest : public VmmResidencyTest,
                                public ::testing::WithParamInterface<bool> {};

TEST_P(VmmResidencyWrittenTest, AStepOrUnseenWorkSinceTheAllocationKeepsItsBytes) {
  const CUdeviceptr a = allocate(2 * kChunk, 1);
  const CUdeviceptr b = allocate(2 * kChunk, 2);
  EXPECT_FALSE(step({a}));
  CUdeviceptr c = 0;
  ASSERT_EQ(arena_->allocate(2 * kChunk, &c), CUDA_SUCCESS);
  residency_->allocated(c);
  ASSERT_FALSE(on_gpu(c));
  if (GetParam()) {
    residency_->unseen_work();
  } else {
    EXPECT_FALSE(step({b}));
  }
  ASSERT_TRUE(g_fake->kernel_write(c, 2 * kChunk, 3));  // written where it is, on the host
  EXPECT_TRUE(step({c}));
  EXPECT_TRUE(on_gpu(c));
  EXPECT_EQ(g_fake->kernel_mismatches(c, 2 * kChunk, 3), 0u);
  EXPECT_EQ(arena_->stats().bytes_not_copied, 0u);
  EXPECT_EQ(residency_->stats().ranges_unwritten, 0u);
}

INSTANTIATE_TEST_SUITE_P(AfterAStepOrUnseenWork, VmmResidencyWrittenTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "UnseenWork" : "AnotherStep";
                         });

// The pool shrank under ranges already on the GPU (the program mapped GPU memory of its own):
// the next window, which brings the step's own range in, moves out what is past the pool too
// (room is counted against the shrunk pool).
TEST_F(VmmResidencyTest, AWindowMovesOutWhatIsPastAShrunkPool) {
  const CUdeviceptr a = allocate(2 * kChunk, 1);
  const CUdeviceptr b = allocate(2 * kChunk, 2);
  EXPECT_FALSE(step({a}));
  EXPECT_FALSE(step({b}));
  arena_->set_gpu_limit_bytes(2 * kChunk);
  EXPECT_EQ(arena_->gpu_bytes_in_use(), 4 * kChunk);  // past the pool until a window
  const CUdeviceptr c = allocate(kChunk, 3);          // on the host: the pool is past its limit
  ASSERT_FALSE(on_gpu(c));
  EXPECT_TRUE(step({c}));  // c in; a (least recently used) and b out to make the pool hold
  EXPECT_LE(arena_->gpu_bytes_in_use(), 2 * kChunk);
  EXPECT_TRUE(on_gpu(c));
  EXPECT_FALSE(on_gpu(a));
  EXPECT_EQ(g_fake->kernel_mismatches(a, 2 * kChunk, 1), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(b, 2 * kChunk, 2), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(c, kChunk, 3), 0u);
  EXPECT_EQ(residency_->stats().move_failures, 0u);
  // The chunks the moves freed past the pool were released at the window's end.
  EXPECT_LE(arena_->gpu_bytes_held(), 2 * kChunk);
  // And a pool that shrinks again between windows is trimmed on request.
  arena_->set_gpu_limit_bytes(0);
  residency_->trim_to_pool();
  EXPECT_EQ(arena_->gpu_bytes_held(), arena_->gpu_bytes_in_use());
}

TEST_F(VmmResidencyTest, ARangeTheStepReachesIsNeverTheVictim) {
  const CUdeviceptr a = allocate(2 * kChunk, 1);
  const CUdeviceptr b = allocate(2 * kChunk, 2);
  const CUdeviceptr c = allocate(2 * kChunk, 3);
  EXPECT_FALSE(step({a}));  // a least recently used, but reached by the next step
  EXPECT_FALSE(step({b}));
  EXPECT_TRUE(step({a, c}));
  EXPECT_TRUE(on_gpu(a));
  EXPECT_TRUE(on_gpu(c));
  EXPECT_FALSE(on_gpu(b));
  EXPECT_EQ(g_fake->kernel_mismatches(b, 2 * kChunk, 2), 0u);
}

TEST_F(VmmResidencyTest, AStepReachingMoreThanThePoolGetsNoWindow) {
  const CUdeviceptr a = allocate(2 * kChunk, 1);
  const CUdeviceptr b = allocate(2 * kChunk, 2);
  const CUdeviceptr c = allocate(2 * kChunk, 3);
  // One step reaching 6 chunks through a pool of 4: no window could bring them in; the step
  // reaches c on the host.
  EXPECT_FALSE(step({a, b, c}));
  EXPECT_EQ(residency_->stats().steps_too_large, 1u);
  EXPECT_EQ(residency_->stats().steps_left_short, 1u);
  EXPECT_EQ(residency_->stats().steps_held, 0u);
  EXPECT_EQ(arena_->stats().bytes_to_gpu + arena_->stats().bytes_to_host, 0u);
  // A step that fits gets its window.
  EXPECT_TRUE(step({c}));
  EXPECT_TRUE(on_gpu(c));
  EXPECT_LE(arena_->gpu_bytes_in_use(), 4 * kChunk);
  for (auto [p, seed] : {std::pair{a, 1}, {b, 2}, {c, 3}}) {
    EXPECT_EQ(g_fake->kernel_mismatches(p, 2 * kChunk, static_cast<uint8_t>(seed)), 0u);
  }
}

TEST_F(VmmResidencyTest, WhatCannotFitStaysOnTheHostAndIsNotRetriedUntilAFree) {
  // Room on the host for one range: nothing can be evicted to make room for it on the GPU.
  residency_.reset();
  arena_ = std::make_unique<vmm::ChunkArena>(vmm::fake::fake_driver(), g_fake->device, 4 * kChunk,
                                             2 * kChunk);
  residency_ = std::make_unique<VmmResidency>(*arena_);
  const CUdeviceptr a = allocate(2 * kChunk, 1);
  const CUdeviceptr b = allocate(2 * kChunk, 2);
  const CUdeviceptr c = allocate(2 * kChunk, 3);  // on the host, which it fills
  ASSERT_FALSE(on_gpu(c));
  EXPECT_TRUE(step({c}));
  EXPECT_FALSE(on_gpu(c));
  EXPECT_EQ(residency_->stats().bytes_short, 2 * kChunk);
  // The same step again: no window (nothing would change).
  EXPECT_FALSE(step({c}));
  EXPECT_EQ(residency_->stats().steps_left_short, 1u);
  EXPECT_EQ(residency_->stats().steps_too_large, 0u);
  // A free made room: tried again, and c comes in.
  ASSERT_EQ(arena_->release(b), CUDA_SUCCESS);
  residency_->forget(b);
  EXPECT_TRUE(step({c}));
  EXPECT_TRUE(on_gpu(c));
  for (auto [p, seed] : {std::pair{a, 1}, {c, 3}}) {
    EXPECT_EQ(g_fake->kernel_mismatches(p, 2 * kChunk, static_cast<uint8_t>(seed)), 0u);
  }
}

TEST_F(VmmResidencyTest, AReleasedRangeIsForgottenAndANewOneAtItsAddressIsLookedAtAgain) {
  const CUdeviceptr a = allocate(2 * kChunk, 1);
  const CUdeviceptr b = allocate(2 * kChunk, 2);
  EXPECT_FALSE(step({a, b}));
  ASSERT_EQ(arena_->release(a), CUDA_SUCCESS);
  residency_->forget(a);
  const CUdeviceptr c = allocate(2 * kChunk, 3);  // on the GPU again (a's chunks came back)
  const CUdeviceptr d = allocate(2 * kChunk, 4);  // on the host
  ASSERT_FALSE(on_gpu(d));
  EXPECT_TRUE(step({d}));
  EXPECT_TRUE(on_gpu(d));
  EXPECT_EQ(g_fake->kernel_mismatches(c, 2 * kChunk, 3), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(d, 2 * kChunk, 4), 0u);
}

TEST_F(VmmResidencyTest, BasesOutsideTheArenaAreIgnored) {
  const CUdeviceptr a = allocate(2 * kChunk, 1);
  EXPECT_FALSE(step({0x1000, a + kChunk}));  // not a base of any range either
  EXPECT_EQ(residency_->stats().steps_held, 0u);
}

TEST_F(VmmResidencyTest, AFailedEvictionIsCountedAndLosesNothing) {
  const CUdeviceptr a = allocate(2 * kChunk, 1);
  const CUdeviceptr b = allocate(2 * kChunk, 2);
  const CUdeviceptr c = allocate(2 * kChunk, 3);
  EXPECT_FALSE(step({a}));
  EXPECT_FALSE(step({b}));
  g_fake->fail_nth(vmm::fake::kMap, 1);
  EXPECT_TRUE(step({c}));
  EXPECT_GE(residency_->stats().move_failures, 1u);
  EXPECT_LE(arena_->gpu_bytes_in_use(), 4 * kChunk);
  for (auto [p, seed] : {std::pair{a, 1}, {b, 2}, {c, 3}}) {
    EXPECT_EQ(g_fake->kernel_mismatches(p, 2 * kChunk, static_cast<uint8_t>(seed)), 0u);
  }
}

// A range with a hole (a failed move's rollback left a slot unmapped) is mapped again by the
// window it asks for, and asks for no more.
TEST_F(VmmResidencyTest, ARangeWithAHoleIsRepairedOnceNotAtEveryStep) {
  const CUdeviceptr p = allocate(kChunk, 9);
  // A round trip first, so that a host chunk exists and the failing move gets as far as the slot.
  ASSERT_EQ(arena_->evict(p, kChunk, kStream).bytes, kChunk);
  ASSERT_EQ(arena_->restore(p, kChunk, kStream).bytes, kChunk);
  g_fake->fail_every(vmm::fake::kMap, true);
  EXPECT_NE(arena_->evict(p, kChunk, kStream).result, CUDA_SUCCESS);
  g_fake->fail_every(vmm::fake::kMap, false);
  ASSERT_EQ(arena_->range(p)->unmapped_bytes, kChunk);
  EXPECT_TRUE(step({p}));
  EXPECT_TRUE(on_gpu(p));
  EXPECT_FALSE(step({p}));
  EXPECT_EQ(residency_->stats().steps_held, 1u);
  EXPECT_EQ(g_fake->kernel_mismatches(p, kChunk, 9), 0u);
}

// Five one-chunk ranges used in turn through a pool of four: the least recently used is always
// the next one needed (a window at every step), while once two iterations have repeated, the
// table moves ranges ahead of use and every window is one of its own.
TEST_F(VmmResidencyTest, OnceTwoIterationsRepeatThePlanMovesAheadInFewerWindows) {
  CUdeviceptr r[5];
  for (int i = 0; i < 5; ++i) r[i] = allocate(kChunk, static_cast<uint8_t>(10 + i));
  constexpr int kPeriod = 10;  // each range twice an iteration: 0 1 2 3 4 0 1 2 3 4
  auto iteration = [&] {
    const ResidencyStats before = residency_->stats();
    const uint64_t in = arena_->stats().bytes_to_gpu;
    for (int at = 0; at < kPeriod; ++at) {
      step({r[at % 5]}, static_cast<uint32_t>(1 + at), at == 0);
      EXPECT_LE(arena_->gpu_bytes_in_use(), 4 * kChunk);
    }
    const ResidencyStats after = residency_->stats();
    return std::tuple{after.steps_held - before.steps_held,
                      after.windows_from_plan - before.windows_from_plan,
                      arena_->stats().bytes_to_gpu - in};
  };
  const auto [lru_windows, lru_planned, lru_in] = iteration();
  EXPECT_EQ(lru_planned, 0u);
  EXPECT_GE(lru_windows, 6u);               // every step from the fifth on misses
  for (int i = 0; i < 3; ++i) iteration();  // recorded twice alike: a table
  EXPECT_EQ(residency_->stats().plans, 1u);
  EXPECT_EQ(residency_->stats().period, static_cast<uint64_t>(kPeriod));
  const auto [windows, planned, in] = iteration();
  EXPECT_EQ(windows, planned);  // no step missed what the plan brought in
  EXPECT_LT(windows, lru_windows);
  EXPECT_LT(in, lru_in);
  EXPECT_GT(residency_->stats().ranges_prefetched, 0u);
  EXPECT_EQ(residency_->stats().plan_moves_skipped, 0u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(r[i], kChunk, static_cast<uint8_t>(10 + i)), 0u);
  }
}

// Ranges allocated in the iteration (activations: a new range each time, freed later in it) are
// named by their place among the iteration's allocations: the table made from one iteration
// finds the next one's ranges.
TEST_F(VmmResidencyTest, TheTableFindsTheNextIterationsOwnAllocations) {
  constexpr int kLayers = 4;
  CUdeviceptr w[kLayers];
  for (int i = 0; i < kLayers; ++i) w[i] = allocate(kChunk, static_cast<uint8_t>(50 + i));
  for (int it = 0; it < 8; ++it) {
    // Forward: each layer makes an activation; backward reads them in reverse and frees them.
    CUdeviceptr act[kLayers];
    for (int i = 0; i < kLayers; ++i) {
      // Made, then written by the step that reaches it first (as a kernel writes its output).
      ASSERT_EQ(arena_->allocate(kChunk, &act[i]), CUDA_SUCCESS);
      residency_->allocated(act[i]);
      step({w[i], act[i]}, static_cast<uint32_t>(1 + i), i == 0);
      ASSERT_TRUE(g_fake->kernel_write(act[i], kChunk, static_cast<uint8_t>(60 + i)));
    }
    for (int i = kLayers - 1; i >= 0; --i) {
      step({w[i], act[i]}, static_cast<uint32_t>(10 + i));
      EXPECT_EQ(g_fake->kernel_mismatches(act[i], kChunk, static_cast<uint8_t>(60 + i)), 0u);
      ASSERT_EQ(arena_->release(act[i]), CUDA_SUCCESS);
      residency_->forget(act[i]);
    }
    EXPECT_LE(arena_->gpu_bytes_in_use(), 4 * kChunk);
  }
  const ResidencyStats s = residency_->stats();
  EXPECT_EQ(s.plans, 1u);
  EXPECT_EQ(s.period, 2u * kLayers);
  EXPECT_GT(s.windows_from_plan, 0u);
  EXPECT_EQ(s.plan_moves_skipped, 0u);
  for (int i = 0; i < kLayers; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(w[i], kChunk, static_cast<uint8_t>(50 + i)), 0u);
  }
}

// A detector that first takes one layer of a stack of identical layers (the same kernels on other
// ranges) for the iteration: no table from it; the loop around it gets one.
TEST_F(VmmResidencyTest, IdenticalLayersOnOtherRangesMakeNoTable) {
  CUdeviceptr r[8];
  for (int i = 0; i < 8; ++i) r[i] = allocate(kChunk, static_cast<uint8_t>(40 + i));
  // An iteration: 8 layers of the same 4 kernels, layer j on range j.
  constexpr int kLayer = 4, kLayers = 8, kPeriod = kLayer * kLayers;
  for (int i = 0; i < 4 * kPeriod; ++i) {
    const int at = i % kPeriod;
    step({r[at / kLayer]}, static_cast<uint32_t>(1 + at % kLayer), at % kLayer == 0);
  }
  EXPECT_EQ(residency_->stats().plans, 0u);
  for (int i = 0; i < 4 * kPeriod; ++i) {
    const int at = i % kPeriod;
    step({r[at / kLayer]}, static_cast<uint32_t>(1 + at % kLayer), at == 0);
  }
  EXPECT_EQ(residency_->stats().plans, 1u);
  EXPECT_EQ(residency_->stats().period, static_cast<uint64_t>(kPeriod));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(r[i], kChunk, static_cast<uint8_t>(40 + i)), 0u);
  }
}

// A step whose range alternates between two from one iteration to the next (an input batch in
// one of two blocks) does not keep the iteration from being planned.
TEST_F(VmmResidencyTest, AStepWhoseRangeAlternatesStillGetsATable) {
  CUdeviceptr r[5];
  for (int i = 0; i < 5; ++i) r[i] = allocate(kChunk, static_cast<uint8_t>(20 + i));
  const CUdeviceptr input[2] = {allocate(kChunk, 30), allocate(kChunk, 31)};
  constexpr int kPeriod = 10;
  for (int i = 0; i < 6 * kPeriod; ++i) {
    const int at = i % kPeriod;
    const CUdeviceptr b = at == 0 ? input[(i / kPeriod) % 2] : r[at % 5];
    step({b}, static_cast<uint32_t>(1 + at), at == 0);
  }
  EXPECT_EQ(residency_->stats().plans, 1u);
  EXPECT_EQ(residency_->stats().period, static_cast<uint64_t>(kPeriod));
}

// Once the program's steps stop matching the table (another loop), the table goes: its moves
// would bring in what nobody uses.
TEST_F(VmmResidencyTest, ATableWhoseKeysStopMatchingIsDropped) {
  CUdeviceptr r[5];
  for (int i = 0; i < 5; ++i) r[i] = allocate(kChunk, static_cast<uint8_t>(70 + i));
  constexpr int kPeriod = 10;
  for (int i = 0; i < 5 * kPeriod; ++i) {
    step({r[i % 5]}, static_cast<uint32_t>(1 + i % kPeriod), i % kPeriod == 0);
  }
  ASSERT_EQ(residency_->stats().period, static_cast<uint64_t>(kPeriod));
  for (int i = 0; i < 2 * kPeriod; ++i) step({r[i % 5]}, static_cast<uint32_t>(100 + i % 3));
  EXPECT_EQ(residency_->stats().period, 0u);
  const uint64_t planned = residency_->stats().windows_from_plan;
  for (int i = 0; i < 2 * kPeriod; ++i) step({r[i % 5]}, static_cast<uint32_t>(100 + i % 3));
  EXPECT_EQ(residency_->stats().windows_from_plan, planned);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(r[i], kChunk, static_cast<uint8_t>(70 + i)), 0u);
  }
}

// Three ranges used in turn through a pool of two: the least recently used is always the next
// one needed (every step a window), while once the period is found the range used furthest
// ahead goes out and every other step finds its range in place.
TEST_F(VmmResidencyTest, OnceTheStepsRepeatTheRangeUsedFurthestAheadGoesOut) {
  const CUdeviceptr r[3] = {allocate(2 * kChunk, 1), allocate(2 * kChunk, 2),
                            allocate(2 * kChunk, 3)};
  int early = 0, late = 0;
  for (int i = 0; i < 300; ++i) {
    const bool held = step({r[i % 3]}, static_cast<uint32_t>(1 + i % 3));
    if (i < 30) early += held;
    if (i >= 210) late += held;
  }
  EXPECT_EQ(early, 28);  // before the period: every step but the first two (placed on the GPU)
  EXPECT_LE(late, 46);   // of 90: about half
  const ResidencyStats s = residency_->stats();
  EXPECT_EQ(s.own_period, 3u);
  EXPECT_GT(s.windows_predicted, 0u);
  EXPECT_LE(arena_->gpu_bytes_in_use(), 4 * kChunk);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(r[i], 2 * kChunk, static_cast<uint8_t>(i + 1)), 0u);
  }
}

// A step whose range alternates between two from one iteration to the next (an input batch
// in one of two blocks) does not hide the period.
TEST_F(VmmResidencyTest, AStepWhoseRangeAlternatesDoesNotHideThePeriod) {
  CUdeviceptr r[5];
  for (int i = 0; i < 5; ++i) r[i] = allocate(kChunk, static_cast<uint8_t>(20 + i));
  const CUdeviceptr input[2] = {allocate(kChunk, 30), allocate(kChunk, 31)};
  constexpr int kPeriod = 10;
  for (int i = 0; i < 60 * kPeriod; ++i) {
    const int at = i % kPeriod;
    const CUdeviceptr b = at == 0 ? input[(i / kPeriod) % 2] : r[at % 5];
    step({b}, static_cast<uint32_t>(1 + at));
  }
  const ResidencyStats s = residency_->stats();
  EXPECT_EQ(s.own_period, static_cast<uint64_t>(kPeriod));
  EXPECT_GT(s.windows_predicted, 0u);
}

// A run of identical layers (the same kernels on other ranges) is not the period: the loop
// around it is.
TEST_F(VmmResidencyTest, IdenticalLayersOnOtherRangesAreNotThePeriod) {
  CUdeviceptr r[8];
  for (int i = 0; i < 8; ++i) r[i] = allocate(kChunk, static_cast<uint8_t>(40 + i));
  // An iteration: 8 layers of the same 4 kernels, layer j on range j.
  constexpr int kLayer = 4, kLayers = 8, kPeriod = kLayer * kLayers;
  for (int i = 0; i < 12 * kPeriod; ++i) {
    const int at = i % kPeriod;
    step({r[at / kLayer]}, static_cast<uint32_t>(1 + at % kLayer));
  }
  EXPECT_EQ(residency_->stats().own_period, static_cast<uint64_t>(kPeriod));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(r[i], kChunk, static_cast<uint8_t>(40 + i)), 0u);
  }
}

// Four one-chunk ranges and a step that reaches none of them between uses: a window brings in
// what the coming steps use, as far as the pool allows without evicting a range used sooner.
TEST_F(VmmResidencyTest, AWindowBringsInWhatTheNextStepsUse) {
  CUdeviceptr r[6];
  for (int i = 0; i < 6; ++i) r[i] = allocate(kChunk, static_cast<uint8_t>(10 + i));
  for (int i = 0; i < 600; ++i) step({r[i % 6]}, static_cast<uint32_t>(1 + i % 6));
  const ResidencyStats s = residency_->stats();
  EXPECT_EQ(s.own_period, 6u);
  EXPECT_GT(s.ranges_prefetched, 0u);
  EXPECT_LE(arena_->gpu_bytes_in_use(), 4 * kChunk);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(r[i], kChunk, static_cast<uint8_t>(10 + i)), 0u);
  }
}

// After a stretch of other steps drops the table (its keys stop matching), the loop coming back
// gets a table again: only a table that loses on windows over its own loop turns tables off.
TEST_F(VmmResidencyTest, ALoopComingBackAfterOtherStepsGetsATableAgain) {
  CUdeviceptr r[5];
  for (int i = 0; i < 5; ++i) r[i] = allocate(kChunk, static_cast<uint8_t>(80 + i));
  constexpr int kPeriod = 10;
  auto loop = [&](int iterations) {
    for (int i = 0; i < iterations * kPeriod; ++i) {
      step({r[i % 5]}, static_cast<uint32_t>(1 + i % kPeriod), i % kPeriod == 0);
    }
  };
  loop(5);
  ASSERT_EQ(residency_->stats().plans, 1u);
  // Another phase: other kernels on the same ranges, many windows (validation, a checkpoint).
  for (int i = 0; i < 4 * kPeriod; ++i) {
    step({r[(i * 3) % 5], r[(i * 3 + 1) % 5], r[(i * 3 + 2) % 5]},
         static_cast<uint32_t>(200 + i % 7), i % 7 == 0);
  }
  EXPECT_EQ(residency_->stats().period, 0u);
  loop(6);
  const ResidencyStats s = residency_->stats();
  EXPECT_EQ(s.plans, 2u);
  EXPECT_EQ(s.plans_dropped, 0u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(r[i], kChunk, static_cast<uint8_t>(80 + i)), 0u);
  }
}

// A pool of nothing (the program's own mappings took the whole budget): no table is made, and
// nothing throws out of touch() (it runs in a launch callback).
TEST_F(VmmResidencyTest, NoTableForAnEmptyPool) {
  CUdeviceptr r[5];
  for (int i = 0; i < 5; ++i) r[i] = allocate(kChunk, static_cast<uint8_t>(90 + i));
  arena_->set_gpu_limit_bytes(0);
  constexpr int kPeriod = 10;
  for (int i = 0; i < 6 * kPeriod; ++i) {
    EXPECT_NO_THROW(step({r[i % 5]}, static_cast<uint32_t>(1 + i % kPeriod), i % kPeriod == 0));
  }
  EXPECT_EQ(residency_->stats().plans, 0u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(r[i], kChunk, static_cast<uint8_t>(90 + i)), 0u);
  }
}

// Three ranges in turn through a pool of two, three times an iteration: the table takes a window
// at every step (9 an iteration), no fewer than the residency alone did before it. It is dropped
// and none is made again; the steps' own period then serves (about half the steps).
TEST_F(VmmResidencyTest, ATableTakingMoreWindowsThanTheResidencyAloneIsDropped) {
  const CUdeviceptr r[3] = {allocate(2 * kChunk, 1), allocate(2 * kChunk, 2),
                            allocate(2 * kChunk, 3)};
  constexpr int kPeriod = 9;
  uint64_t last = 0;
  for (int it = 0; it < 12; ++it) {
    const uint64_t before = residency_->stats().steps_held;
    for (int at = 0; at < kPeriod; ++at) step({r[at % 3]}, static_cast<uint32_t>(1 + at), at == 0);
    last = residency_->stats().steps_held - before;
    EXPECT_LE(arena_->gpu_bytes_in_use(), 4 * kChunk);
  }
  const ResidencyStats s = residency_->stats();
  EXPECT_EQ(s.plans, 1u);
  EXPECT_EQ(s.plans_dropped, 1u);
  EXPECT_EQ(s.period, 0u);
  EXPECT_EQ(s.own_period, static_cast<uint64_t>(kPeriod));
  EXPECT_LE(last, 5u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(r[i], 2 * kChunk, static_cast<uint8_t>(i + 1)), 0u);
  }
}

// With blocks, free bytes are not room: a range's whole block needs a group with nothing in use.
// Single chunks spread over both groups of the pool leave no group whole; the window evicts
// until one is, and the range comes in whole (nothing reached over the link).
TEST_F(VmmResidencyTest, WithBlocksAWindowEvictsUntilAWholeBlockFits) {
  constexpr uint64_t kBlock = 4 * kChunk;
  residency_.reset();
  arena_ = std::make_unique<vmm::ChunkArena>(vmm::fake::fake_driver(), g_fake->device, 2 * kBlock,
                                             16 * kChunk, 4);
  residency_ = std::make_unique<VmmResidency>(*arena_);
  std::vector<CUdeviceptr> small;
  for (int i = 0; i < 8; ++i) small.push_back(allocate(kChunk, static_cast<uint8_t>(10 + i)));
  for (int i = 0; i < 8; i += 2) EXPECT_EQ(arena_->release(small[i]), CUDA_SUCCESS);
  for (int i = 0; i < 8; i += 2) residency_->forget(small[i]);
  // Four chunks free, two in each group: a block does not fit, though its bytes do.
  const CUdeviceptr big = allocate(kBlock, 3);
  EXPECT_EQ(arena_->range(big)->host_bytes, kBlock);
  EXPECT_FALSE(arena_->fits_on_gpu(big));
  for (int i = 1; i < 8; i += 2) EXPECT_FALSE(step({small[i]}));
  EXPECT_TRUE(step({big}));
  EXPECT_TRUE(on_gpu(big));
  EXPECT_EQ(residency_->stats().bytes_short, 0u);
  EXPECT_LE(g_fake->gpu_bytes_peak, 2 * kBlock);
  EXPECT_EQ(g_fake->kernel_mismatches(big, kBlock, 3), 0u);
  for (int i = 1; i < 8; i += 2) {
    EXPECT_EQ(g_fake->kernel_mismatches(small[i], kChunk, static_cast<uint8_t>(10 + i)), 0u);
  }
  // Chunks 0-3 were made in one group, 4-7 in the other. The two least recently used, 1 and 3,
  // went out, which left their group with nothing in use; 5 and 7 stayed.
  EXPECT_EQ(residency_->stats().ranges_evicted, 2u);
  EXPECT_FALSE(on_gpu(small[1]));
  EXPECT_FALSE(on_gpu(small[3]));
  EXPECT_TRUE(on_gpu(small[5]));
  EXPECT_TRUE(on_gpu(small[7]));
}

// Once the program makes stream-ordered allocations, a step's window leaves an eighth of the pool
// free for what it allocates next, evicting the least recently used ranges the step does not
// reach: the next allocation is made on the GPU, not on host chunks that a window of its own
// would then bring in.
TEST_F(VmmResidencyTest, AWindowLeavesRoomForTheNextAllocations) {
  const std::vector<CUdeviceptr> r = fill_sixteen(0);
  const CUdeviceptr full = allocate(2 * kChunk, 30);  // the pool is full: on the host
  ASSERT_FALSE(on_gpu(full));
  EXPECT_TRUE(step({r[7], full}));
  EXPECT_TRUE(on_gpu(full));
  EXPECT_TRUE(on_gpu(r[7]));
  // r[0] went out for `full`, r[1] for the room: 2 of 16 chunks free.
  EXPECT_FALSE(on_gpu(r[0]));
  EXPECT_FALSE(on_gpu(r[1]));
  for (int i = 2; i < 8; ++i) EXPECT_TRUE(on_gpu(r[static_cast<size_t>(i)]));
  EXPECT_EQ(arena_->gpu_bytes_in_use(), 14 * kChunk);
  EXPECT_EQ(residency_->stats().ranges_evicted, 2u);
  EXPECT_EQ(residency_->stats().ranges_evicted_for_room, 1u);
  const CUdeviceptr next = allocate(2 * kChunk, 31);
  EXPECT_TRUE(on_gpu(next));
  EXPECT_FALSE(step({next}));  // no window for it
  EXPECT_LE(g_fake->gpu_bytes_peak, 16 * kChunk);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(r[static_cast<size_t>(i)], 2 * kChunk,
                                        static_cast<uint8_t>(20 + i)),
              0u);
  }
  EXPECT_EQ(g_fake->kernel_mismatches(full, 2 * kChunk, 30), 0u);
  EXPECT_EQ(g_fake->kernel_mismatches(next, 2 * kChunk, 31), 0u);
}

// GPU bytes that memory no range holds would give back (kept ranges: set_spare) count as the
// room: with them the same window evicts only what its step needs.
TEST_F(VmmResidencyTest, SpareBytesCountAsRoomForTheNextAllocations) {
  expect_a_step_that_evicts_only_its_own_room(fill_sixteen(2 * kChunk));
}

// A program whose allocations are mostly plain (a caching allocator's segments) gets no room,
// whatever it allocates stream-ordered now and then.
TEST_F(VmmResidencyTest, NoRoomWhileMostAllocationsArePlain) {
  const std::vector<CUdeviceptr> r = fill_sixteen(0);  // one stream-ordered allocation
  plain_ += 2;
  expect_a_step_that_evicts_only_its_own_room(r);
  EXPECT_EQ(residency_->stats().ranges_evicted_for_room, 0u);
}

// Eight ranges of one chunk fill a pool of eight, each reached twice an iteration in turn (16
// steps: r[p % 8]); two iterations alike make a table, which moves nothing (all fit). Then, at
// phase 1 of the next iteration, the step reaches r[1] and a new range the full pool put on the
// host. `mostly_ordered`: what set_mostly_ordered() says. Returns the ranges and the new one.
struct TableCase {
  std::vector<CUdeviceptr> r;
  CUdeviceptr fresh = 0;
};

class VmmResidencyTableTest : public VmmResidencyTest {
 protected:
  TableCase run(bool mostly_ordered) {
    residency_.reset();
    arena_ = std::make_unique<vmm::ChunkArena>(vmm::fake::fake_driver(), g_fake->device, 8 * kChunk,
                                               16 * kChunk);
    residency_ = std::make_unique<VmmResidency>(*arena_);
    residency_->set_mostly_ordered([mostly_ordered] { return mostly_ordered; });
    EXPECT_EQ(arena_->block_bytes(), kChunk);
    TableCase c;
    for (int i = 0; i < 8; ++i) c.r.push_back(allocate(kChunk, static_cast<uint8_t>(70 + i)));
    for (int it = 0; it < 4; ++it) {
      for (int p = 0; p < 16; ++p)
        EXPECT_FALSE(step({c.r[p % 8]}, static_cast<uint32_t>(1 + p), p == 0));
    }
    EXPECT_EQ(residency_->stats().plans, 1u);
    EXPECT_FALSE(step({c.r[0]}, 1, true));
    c.fresh = allocate(kChunk, 90);
    EXPECT_FALSE(on_gpu(c.fresh));
    EXPECT_TRUE(step({c.r[1], c.fresh}, 2));
    EXPECT_TRUE(on_gpu(c.fresh));
    EXPECT_TRUE(on_gpu(c.r[1]));
    return c;
  }
  void expect_data(const TableCase& c) {
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(g_fake->kernel_mismatches(c.r[static_cast<size_t>(i)], kChunk,
                                          static_cast<uint8_t>(70 + i)),
                0u);
    }
    EXPECT_EQ(g_fake->kernel_mismatches(c.fresh, kChunk, 90), 0u);
    EXPECT_LE(g_fake->gpu_bytes_peak, 8 * kChunk);
  }
};

// The least recently used range is r[2] (last reached at phase 10 of the iteration before), which
// the next step reaches; the table's iteration reaches r[0] furthest ahead (phase 8): it goes.
TEST_F(VmmResidencyTableTest, AStepsWindowEvictsWhatTheTableUsesFurthestAhead) {
  const TableCase c = run(false);
  EXPECT_FALSE(on_gpu(c.r[0]));
  for (int i = 1; i < 8; ++i) EXPECT_TRUE(on_gpu(c.r[static_cast<size_t>(i)])) << i;
  EXPECT_EQ(residency_->stats().ranges_evicted, 1u);
  // The coming steps find their ranges in place: no window until r[0]'s.
  for (int p = 2; p < 8; ++p)
    EXPECT_FALSE(step({c.r[static_cast<size_t>(p)]}, static_cast<uint32_t>(1 + p))) << p;
  expect_data(c);
}

// A program of stream-ordered allocations gets room for its next allocations from a window made
// without a table (AWindowLeavesRoomForTheNextAllocations); with one, the table's plan counts
// them: the window evicts only what its step needs.
TEST_F(VmmResidencyTableTest, WithATableNoRoomIsMadeBeyondTheStep) {
  const TableCase c = run(true);
  EXPECT_EQ(residency_->stats().ranges_evicted, 1u);
  EXPECT_EQ(residency_->stats().ranges_evicted_for_room, 0u);
  EXPECT_EQ(arena_->gpu_bytes_in_use(), 8 * kChunk);
  expect_data(c);
}

// A slab (a range for small allocations) made in every other iteration: counted among the
// iteration's allocations, no two iterations in a row would be alike and no table made.
TEST_F(VmmResidencyTest, ASlabMadeInEveryOtherIterationStillGetsATable) {
  CUdeviceptr r[3];
  for (int i = 0; i < 3; ++i) r[i] = allocate(kChunk, static_cast<uint8_t>(20 + i));
  constexpr int kPeriod = 9;
  for (int it = 0; it < 6; ++it) {
    CUdeviceptr slab = 0;
    for (int at = 0; at < kPeriod; ++at) {
      if (at == 2 && it % 2 == 0) {
        ASSERT_EQ(arena_->allocate(kChunk, &slab), CUDA_SUCCESS);
        residency_->allocated(slab, true);
      }
      step({r[at % 3]}, static_cast<uint32_t>(1 + at), at == 0);
    }
    if (slab != 0) {
      residency_->forget(slab);
      ASSERT_EQ(arena_->release(slab), CUDA_SUCCESS);
    }
  }
  EXPECT_EQ(residency_->stats().plans, 1u);
  EXPECT_EQ(residency_->stats().period, static_cast<uint64_t>(kPeriod));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(g_fake->kernel_mismatches(r[i], kChunk, static_cast<uint8_t>(20 + i)), 0u);
  }
}

}  // namespace
}  // namespace umswap
