// Helper program for call_site_test: prints the call-site identity of two places in its own code,
// so the test can compare them across separate runs (and load addresses).
//
// Output, one per line:
//   site1 <hex id>
//   site2 <hex id>
//   frames <describe_call_site of site1's frames>
//   base <hex address of a function in this program: moves when the program is loaded elsewhere>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "umswap/allocator/call_site.h"

namespace {

using umswap::CallSiteFrame;
using umswap::CallSiteOptions;

// noinline and followed by code, so each keeps its own frame (no inlining, no tail call, no
// folding of the two into one).
[[gnu::noinline]] std::vector<CallSiteFrame> frames_at_site1() {
  std::vector<CallSiteFrame> frames = umswap::capture_call_site_frames(CallSiteOptions{.depth = 8});
  asm volatile("" ::: "memory");
  return frames;
}

[[gnu::noinline]] std::vector<CallSiteFrame> frames_at_site2(int depth) {
  std::vector<CallSiteFrame> frames =
      umswap::capture_call_site_frames(CallSiteOptions{.depth = depth});
  asm volatile("" ::: "memory");
  return frames;
}

}  // namespace

int main() {
  const std::vector<CallSiteFrame> site1 = frames_at_site1();
  const std::vector<CallSiteFrame> site2 = frames_at_site2(8);
  std::printf("site1 %llx\n", static_cast<unsigned long long>(umswap::hash_call_site(site1)));
  std::printf("site2 %llx\n", static_cast<unsigned long long>(umswap::hash_call_site(site2)));
  std::printf("frames %s\n", umswap::describe_call_site(site1).c_str());
  std::printf("base %llx\n",
              static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(&frames_at_site1)));
  return 0;
}
