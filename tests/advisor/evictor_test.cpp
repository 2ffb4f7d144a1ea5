// The evictor interface's driver evictor, and the order the advisor asks its evictors in
// (evictor.h): the first that does not decline decides; "kept" stops the chain without a move.
#include "umswap/advisor/evictor.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

namespace umswap::advisor {
namespace {

struct Move {
  uint64_t address, length;
  bool to_gpu;
  uint64_t launch;
  bool operator==(const Move&) const = default;
};

class FakeHost final : public EvictorHost {
 public:
  std::vector<Move> moves;
  void migrate(uint64_t address, uint64_t length, bool to_gpu, uint64_t launch) override {
    moves.push_back({address, length, to_gpu, launch});
  }
  void wait_reached(uint64_t, CUstream) override {}
  void count(bool, uint64_t, uint64_t) override {}
  void note_doing(const char*) override {}
  void issued_call() override {}
  uint64_t launches_seen() const override { return 0; }
  uint64_t waits_start() const override { return 0; }
  bool stopping() const override { return false; }
};

// An evictor that answers as told and counts what it was offered.
class Scripted final : public Evictor {
 public:
  Outcome answer = Outcome::declined;
  bool restores = false;
  int offered = 0, finished = 0;
  Outcome evict(uint64_t, uint64_t, uint64_t, uint64_t, bool, uint64_t) override {
    ++offered;
    return answer;
  }
  bool restore(uint64_t, uint64_t, uint64_t) override {
    ++offered;
    return restores;
  }
  void finish_launch(uint64_t, bool) override { ++finished; }
};

// The advisor's loop (AdvisorImpl::apply) over an evictor chain.
template <size_t N>
void evict(std::array<Evictor*, N>& chain, uint64_t address, uint64_t length, uint64_t g) {
  for (Evictor* e : chain) {
    if (e->evict(address, length, g, g - 1, true, g + 5) != Evictor::Outcome::declined) break;
  }
}

TEST(DriverEvictor, EvictsAndRestoresThroughTheDriverAtTheLaunchGiven) {
  FakeHost host;
  DriverEvictor driver(host);
  EXPECT_EQ(driver.evict(0x200000, 4096, 7, 6, false, UINT64_MAX), Evictor::Outcome::taken);
  EXPECT_TRUE(driver.restore(0x400000, 8192, 9));
  ASSERT_EQ(host.moves.size(), 2u);
  EXPECT_EQ(host.moves[0], (Move{0x200000, 4096, false, 7}));
  EXPECT_EQ(host.moves[1], (Move{0x400000, 8192, true, 9}));
}

TEST(EvictorChain, TheDriverTakesWhatTheFirstDeclines) {
  FakeHost host;
  Scripted first;
  DriverEvictor driver(host);
  std::array<Evictor*, 2> chain{&first, &driver};
  evict(chain, 0x600000, 1 << 21, 3);
  EXPECT_EQ(first.offered, 1);
  ASSERT_EQ(host.moves.size(), 1u);
  EXPECT_EQ(host.moves[0], (Move{0x600000, 1u << 21, false, 3}));
}

TEST(EvictorChain, TakenOrKeptStopsTheChain) {
  for (const Evictor::Outcome answer : {Evictor::Outcome::taken, Evictor::Outcome::kept}) {
    FakeHost host;
    Scripted first;
    first.answer = answer;
    DriverEvictor driver(host);
    std::array<Evictor*, 2> chain{&first, &driver};
    evict(chain, 0x600000, 1 << 21, 3);
    EXPECT_EQ(first.offered, 1);
    EXPECT_TRUE(host.moves.empty()) << "a kept or taken eviction must not also go to the driver";
  }
}

}  // namespace
}  // namespace umswap::advisor
