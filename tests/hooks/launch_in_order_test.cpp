// LaunchInOrder (hooks/launch_in_order.h): a launch that asks to overlap the kernel ahead of it
// (programmatic dependent launch) gets a copy of its configuration that does not; every other
// launch keeps its own configuration, and every other attribute is kept.
#include "launch_in_order.h"

#include <gtest/gtest.h>

#include <vector>

namespace umswap {
namespace {

CUlaunchAttribute overlap(int allowed) {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  a.value.programmaticStreamSerializationAllowed = allowed;
  return a;
}

CUlaunchAttribute priority(int p) {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  a.value.priority = p;
  return a;
}

CUlaunchConfig config(std::vector<CUlaunchAttribute>& attrs) {
  CUlaunchConfig c{};
  c.gridDimX = 7;
  c.blockDimX = 128;
  c.sharedMemBytes = 4096;
  c.hStream = reinterpret_cast<CUstream>(0x1234);
  c.attrs = attrs.empty() ? nullptr : attrs.data();
  c.numAttrs = static_cast<unsigned>(attrs.size());
  return c;
}

TEST(LaunchInOrder, LeavesLaunchesThatAskNoOverlapAlone) {
  LaunchInOrder l;
  EXPECT_EQ(l.apply(nullptr), nullptr);
  std::vector<CUlaunchAttribute> none, off{overlap(0), priority(2)};
  const CUlaunchConfig a = config(none), b = config(off);
  EXPECT_EQ(l.apply(&a), &a);
  EXPECT_EQ(l.apply(&b), &b);
}

TEST(LaunchInOrder, CopiesAnOverlappingLaunchWithoutTheOverlap) {
  std::vector<CUlaunchAttribute> attrs{priority(3), overlap(1)};
  const CUlaunchConfig c = config(attrs);
  LaunchInOrder l;
  const CUlaunchConfig* out = l.apply(&c);
  ASSERT_NE(out, &c);
  EXPECT_EQ(out->gridDimX, 7u);
  EXPECT_EQ(out->blockDimX, 128u);
  EXPECT_EQ(out->sharedMemBytes, 4096u);
  EXPECT_EQ(out->hStream, c.hStream);
  ASSERT_EQ(out->numAttrs, 2u);
  EXPECT_EQ(out->attrs[0].id, CU_LAUNCH_ATTRIBUTE_PRIORITY);
  EXPECT_EQ(out->attrs[0].value.priority, 3);
  EXPECT_EQ(out->attrs[1].id, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  EXPECT_EQ(out->attrs[1].value.programmaticStreamSerializationAllowed, 0);
  // The program's own configuration is not written to.
  EXPECT_EQ(c.attrs[1].value.programmaticStreamSerializationAllowed, 1);
}

TEST(LaunchInOrder, HandlesMoreAttributesThanItsSmallArray) {
  std::vector<CUlaunchAttribute> attrs;
  for (int i = 0; i < 20; ++i) attrs.push_back(i == 17 ? overlap(1) : priority(i));
  const CUlaunchConfig c = config(attrs);
  LaunchInOrder l;
  const CUlaunchConfig* out = l.apply(&c);
  ASSERT_NE(out, &c);
  ASSERT_EQ(out->numAttrs, 20u);
  for (int i = 0; i < 20; ++i) {
    if (i == 17) {
      EXPECT_EQ(out->attrs[i].value.programmaticStreamSerializationAllowed, 0);
    } else {
      EXPECT_EQ(out->attrs[i].id, CU_LAUNCH_ATTRIBUTE_PRIORITY);
      EXPECT_EQ(out->attrs[i].value.priority, i);
    }
  }
}

// The copy's own array holds 8; 8 and 9 attributes, and two that ask, each keep every id.
TEST(LaunchInOrder, KeepsEveryAttributeAroundItsArraysSize) {
  for (const int n : {1, 8, 9}) {
    std::vector<CUlaunchAttribute> attrs;
    for (int i = 0; i < n; ++i) attrs.push_back(i % 4 == 0 ? overlap(1) : priority(i));
    const CUlaunchConfig c = config(attrs);
    LaunchInOrder l;
    const CUlaunchConfig* out = l.apply(&c);
    ASSERT_NE(out, &c) << n;
    ASSERT_EQ(out->numAttrs, static_cast<unsigned>(n));
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(out->attrs[i].id, attrs[i].id) << n << " " << i;
      if (i % 4 == 0) {
        EXPECT_EQ(out->attrs[i].value.programmaticStreamSerializationAllowed, 0);
      } else {
        EXPECT_EQ(out->attrs[i].value.priority, i);
      }
    }
  }
}

TEST(LaunchInOrder, AttributesWithoutAnArrayAreLeftAlone) {
  CUlaunchConfig c{};
  c.numAttrs = 3;  // and attrs null: nothing to read
  LaunchInOrder l;
  EXPECT_FALSE(LaunchInOrder::overlaps(&c));
  EXPECT_EQ(l.apply(&c), &c);
}

// What the driver writes into the copy (a device-updatable node's handle) reaches the program's
// attributes; the overlap the program asked for stays as it asked.
TEST(LaunchInOrder, WritesTheDriversAnswersBack) {
  CUlaunchAttribute node{};
  node.id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
  node.value.deviceUpdatableKernelNode.deviceUpdatable = 1;
  std::vector<CUlaunchAttribute> attrs{overlap(1), node};
  const CUlaunchConfig c = config(attrs);
  LaunchInOrder l;
  const CUlaunchConfig* out = l.apply(&c);
  ASSERT_NE(out, &c);
  out->attrs[1].value.deviceUpdatableKernelNode.devNode =
      reinterpret_cast<CUgraphDeviceNode>(0xabc0);
  l.write_back(&c);
  EXPECT_EQ(attrs[1].value.deviceUpdatableKernelNode.devNode,
            reinterpret_cast<CUgraphDeviceNode>(0xabc0));
  EXPECT_EQ(attrs[0].value.programmaticStreamSerializationAllowed, 1);
  // Nothing copied, nothing written.
  LaunchInOrder none;
  std::vector<CUlaunchAttribute> plain{priority(5)};
  const CUlaunchConfig d = config(plain);
  EXPECT_EQ(none.apply(&d), &d);
  none.write_back(&d);
  EXPECT_EQ(plain[0].value.priority, 5);
}

}  // namespace
}  // namespace umswap
