// VirtualHandles (engine vmm's handles for the program's cuMemCreate): which cuMemMap the engine
// serves, what gets real memory, the intervals unmap and set-access cover, references and
// retains as the driver counts them.
#include "umswap/allocator/virtual_handles.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace umswap {
namespace {

using Action = VirtualHandles::MapAction;
constexpr uint64_t MiB = 1024 * 1024;
constexpr CUdeviceptr kVa = 0x7f0000000000;

CUmemAllocationProp device_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

TEST(VirtualHandlesTest, AWholeFirstMappingIsTheEnginesOthersGetRealMemory) {
  VirtualHandles v;
  const CUmemGenericAllocationHandle h = v.create(20 * MiB, device_prop());
  EXPECT_TRUE(VirtualHandles::is_virtual(h));
  EXPECT_FALSE(VirtualHandles::is_virtual(0x7f362b8b5bb0));  // a driver handle (a host address)
  EXPECT_EQ(v.map(0x7f362b8b5bb0, kVa, 20 * MiB, 0).action, Action::not_virtual);
  EXPECT_EQ(v.pending_bytes(), 20 * MiB);
  EXPECT_EQ(v.map(h, kVa, 20 * MiB, 0).action, Action::engine);
  // Claimed by that map until it ends: another thread's map or export of it is refused, and
  // its bytes no longer count as to come.
  EXPECT_EQ(v.map(h, kVa, 20 * MiB, 0).action, Action::refuse);
  EXPECT_EQ(v.map(h, 0, 0, 0).action, Action::refuse);
  EXPECT_EQ(v.pending_bytes(), 0u);
  v.unclaim(h);  // that map failed
  EXPECT_EQ(v.pending_bytes(), 20 * MiB);
  // Part of it, or at an offset: real memory, with the handle's size and properties.
  const VirtualHandles::MapDecision part = v.map(h, kVa, 2 * MiB, 0);
  EXPECT_EQ(part.action, Action::materialize);
  EXPECT_EQ(part.bytes, 20 * MiB);
  EXPECT_EQ(part.prop.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  v.unclaim(h);
  EXPECT_EQ(v.map(h, kVa, 18 * MiB, 2 * MiB).action, Action::materialize);
  v.unclaim(h);
  EXPECT_EQ(v.map(h, kVa, 20 * MiB, 0).action, Action::engine);
  v.mapped(h, kVa);
  EXPECT_EQ(v.pending_bytes(), 0u);
  EXPECT_EQ(v.map(h, kVa + 64 * MiB, 20 * MiB, 0).action, Action::refuse);  // twice

  const CUmemGenericAllocationHandle g = v.create(4 * MiB, device_prop());
  EXPECT_FALSE(v.real(g));
  EXPECT_EQ(v.map(g, 0, 0, 0).action, Action::materialize);  // as an export asks
  EXPECT_EQ(v.set_real(g, 0x5555), 0x5555u);
  EXPECT_EQ(v.set_real(g, 0x6666), 0x5555u);  // set before: the first stands
  EXPECT_EQ(v.set_real(h, 0x7777), 0u);       // mapped by the engine: no real memory
  EXPECT_EQ(v.real(g), 0x5555u);
  EXPECT_EQ(v.pending_bytes(), 0u);
  const VirtualHandles::MapDecision real = v.map(g, kVa + 64 * MiB, 4 * MiB, 0);
  EXPECT_EQ(real.action, Action::real);
  EXPECT_EQ(real.real_handle, 0x5555u);
  EXPECT_EQ(v.materialized(), 1u);
}

// The engine's range goes with the program's unmap; a handle still referenced then cannot be
// mapped or exported again (its contents are gone), and says so instead of handing out a fresh,
// empty range. A materialized handle's real one is released only with its last reference.
TEST(VirtualHandlesTest, UnmappedByTheProgramItsContentsAreGone) {
  VirtualHandles v;
  const CUmemGenericAllocationHandle h = v.create(20 * MiB, device_prop());
  v.mapped(h, kVa);
  EXPECT_EQ(v.retain(kVa), h);
  v.unmapped(kVa);
  EXPECT_EQ(v.live(), 1u);
  EXPECT_EQ(v.map(h, kVa, 20 * MiB, 0).action, Action::refuse);
  EXPECT_EQ(v.map(h, 0, 0, 0).action, Action::refuse);  // as an export asks
  EXPECT_EQ(v.pending_bytes(), 0u);
  EXPECT_EQ(v.release(h)->left, 1u);
  EXPECT_EQ(v.release(h)->left, 0u);
  EXPECT_EQ(v.live(), 0u);

  // A materialized handle with two references: its real one comes with the last release.
  const CUmemGenericAllocationHandle m = v.create(2 * MiB, device_prop());
  ASSERT_EQ(v.set_real(m, 0x77), 0x77u);
  v.mapped(m, kVa + 64 * MiB);  // (as the engine never does for a real one: only to retain it)
  ASSERT_EQ(v.retain(kVa + 64 * MiB), m);
  v.unmapped(kVa + 64 * MiB);
  const std::optional<VirtualHandles::Released> first = v.release(m);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->left, 1u);
  const std::optional<VirtualHandles::Released> last = v.release(m);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->left, 0u);
  EXPECT_EQ(last->real, 0x77u);
  EXPECT_FALSE(v.release(m));
  EXPECT_EQ(v.live(), 0u);
}

TEST(VirtualHandlesTest, IntervalsCoverWholeMappingsOrCutOne) {
  VirtualHandles v;
  std::vector<CUmemGenericAllocationHandle> hs;
  for (int i = 0; i < 3; ++i) {  // three 20 MiB segments side by side, as PyTorch maps them
    hs.push_back(v.create(20 * MiB, device_prop()));
    v.mapped(hs.back(), kVa + i * 20 * MiB);
  }
  VirtualHandles::Covered c = v.covering(kVa, 60 * MiB);
  EXPECT_FALSE(c.cuts);
  ASSERT_EQ(c.whole.size(), 3u);
  EXPECT_EQ(c.whole[1], std::make_pair(kVa + 20 * MiB, 20 * MiB));
  c = v.covering(kVa + 20 * MiB, 20 * MiB);
  EXPECT_FALSE(c.cuts);
  EXPECT_EQ(c.whole.size(), 1u);
  c = v.covering(kVa + 10 * MiB, 20 * MiB);  // halves of two
  EXPECT_TRUE(c.cuts);
  EXPECT_TRUE(c.whole.empty());
  c = v.covering(kVa + 60 * MiB, 20 * MiB);  // none
  EXPECT_FALSE(c.cuts);
  EXPECT_TRUE(c.whole.empty());
  c = v.covering(kVa - 20 * MiB, 50 * MiB);  // memory before, one whole, part of the next
  EXPECT_TRUE(c.cuts);
  EXPECT_EQ(c.whole.size(), 1u);
  // Around and between whole mappings, the rest of the interval is the driver's.
  c = v.covering(kVa - 4 * MiB, 68 * MiB);
  EXPECT_FALSE(c.cuts);
  EXPECT_EQ(c.whole.size(), 3u);
  ASSERT_EQ(c.others.size(), 2u);
  EXPECT_EQ(c.others[0], std::make_pair(kVa - 4 * MiB, kVa));
  EXPECT_EQ(c.others[1], std::make_pair(kVa + 60 * MiB, kVa + 64 * MiB));
  EXPECT_TRUE(v.covering(kVa, 60 * MiB).others.empty());
}

TEST(VirtualHandlesTest, AHandleGoesWithItsLastReferenceAndMapping) {
  VirtualHandles v;
  const CUmemGenericAllocationHandle h = v.create(20 * MiB, device_prop());
  v.mapped(h, kVa);
  // Retained through any byte of its mapping; not outside it.
  EXPECT_EQ(v.retain(kVa + 20 * MiB - 1), h);
  EXPECT_FALSE(v.retain(kVa + 20 * MiB));
  EXPECT_EQ(v.release(h)->left, 1u);
  EXPECT_EQ(v.release(h)->left, 0u);  // created + retained: two references
  EXPECT_FALSE(v.release(h));
  EXPECT_EQ(v.live(), 1u);  // still mapped: the driver keeps the memory too
  // With no reference left, the program may not use the value (the driver refuses it).
  EXPECT_FALSE(v.properties(h));
  EXPECT_EQ(v.map(h, kVa + 64 * MiB, 20 * MiB, 0).action, Action::not_virtual);
  v.unmapped(kVa);
  EXPECT_EQ(v.live(), 0u);
  EXPECT_FALSE(v.properties(h));
  EXPECT_EQ(v.map(h, kVa, 20 * MiB, 0).action, Action::not_virtual);

  // Released before it is ever mapped: gone at once. A materialized one: gone at its release.
  const CUmemGenericAllocationHandle g = v.create(2 * MiB, device_prop());
  EXPECT_EQ(v.release(g)->left, 0u);
  EXPECT_EQ(v.live(), 0u);
  const CUmemGenericAllocationHandle m = v.create(2 * MiB, device_prop());
  v.set_real(m, 0x77);
  EXPECT_EQ(v.release(m)->real, 0x77u);
  EXPECT_EQ(v.live(), 0u);
}

}  // namespace
}  // namespace umswap
