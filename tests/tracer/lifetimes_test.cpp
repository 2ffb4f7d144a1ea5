// Slab lifetimes by buffer and offset: events inside a buffer keep their order; events outside
// every buffer, past a buffer's end, or empty are left out.
#include "umswap/tracer/lifetimes.h"

#include <gtest/gtest.h>

#include <tuple>
#include <utility>
#include <vector>

namespace umswap::tracer {
namespace {

using Fields = std::tuple<uint64_t, uint32_t, uint64_t, uint64_t, bool>;
// (before_step, buffer, offset, length, freed)
Fields fields(const trace::Lifetime& l) {
  return {l.before_step, l.buffer, l.offset, l.length, l.freed};
}

TEST(Lifetimes, EventsBecomeBufferOffsetsInTheirOrder) {
  // Buffers listed out of address order: index 0 at 0x9000, index 1 at 0x1000.
  const std::vector<std::pair<uint64_t, uint64_t>> buffers = {{0x9000, 0x1000}, {0x1000, 0x2000}};
  const std::vector<LifetimeEvent> events = {
      {3, 0x9100, 0x100, false},   // buffer 0
      {3, 0x1000, 0x2000, false},  // buffer 1, all of it
      {4, 0x2f00, 0x200, true},    // runs past buffer 1's end
      {5, 0x5000, 0x10, true},     // between the buffers
      {5, 0x0800, 0x10, true},     // below every buffer
      {6, 0x9100, 0, true},        // empty
      {7, 0x9100, 0x100, true},    // buffer 0
  };
  const std::vector<trace::Lifetime> got = lifetimes_in(events, buffers);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(fields(got[0]), Fields(3, 0, 0x100, 0x100, false));
  EXPECT_EQ(fields(got[1]), Fields(3, 1, 0, 0x2000, false));
  EXPECT_EQ(fields(got[2]), Fields(7, 0, 0x100, 0x100, true));
  EXPECT_TRUE(lifetimes_in(events, {}).empty());
}

}  // namespace
}  // namespace umswap::tracer
