// Call-site identity: stable across runs and load addresses, distinct between call sites, bounded
// by the depth, and blind to CUDA library frames.
#include "umswap/allocator/call_site.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#ifndef UMSWAP_TEST_CALL_SITE_PROBE
#error "UMSWAP_TEST_CALL_SITE_PROBE must name the call_site_probe program"
#endif

extern "C" void umswap_test_relay_cuda(void (*callback)(void*), void* context);
extern "C" void umswap_test_relay_plain(void (*callback)(void*), void* context);

namespace umswap {
namespace {

// --- in this process ---------------------------------------------------------------------------

// Each helper is its own call site; noinline and the asm after the call keep its frame.
[[gnu::noinline]] std::vector<CallSiteFrame> frames_here(int depth) {
  auto frames = capture_call_site_frames(CallSiteOptions{.depth = depth});
  asm volatile("" ::: "memory");
  return frames;
}

volatile int g_elsewhere_calls = 0;

// Not identical to frames_here(), so the compiler cannot fold the two into one function.
[[gnu::noinline]] std::vector<CallSiteFrame> frames_elsewhere(int depth) {
  g_elsewhere_calls = g_elsewhere_calls + 1;
  auto frames = capture_call_site_frames(CallSiteOptions{.depth = depth});
  asm volatile("" ::: "memory");
  return frames;
}

std::string this_program_name() {
  return std::filesystem::read_symlink("/proc/self/exe").filename().string();
}

TEST(CallSite, DepthZeroMeansOff) {
  EXPECT_TRUE(frames_here(0).empty());
  EXPECT_TRUE(frames_here(-3).empty());
  EXPECT_EQ(capture_call_site(CallSiteOptions{.depth = 0}), 0u);
}

TEST(CallSite, DepthBoundsTheNumberOfFrames) {
  for (int depth = 1; depth <= 6; ++depth) {
    const auto frames = frames_here(depth);
    EXPECT_LE(frames.size(), static_cast<size_t>(depth));
    EXPECT_GE(frames.size(), 1u) << "depth " << depth;
  }
  // A test body is called from deep inside GoogleTest: 4 frames are always there.
  EXPECT_EQ(frames_here(4).size(), 4u);
}

TEST(CallSite, InnermostFrameIsTheCallerInThisProgram) {
  const auto frames = frames_here(1);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].module, this_program_name());
  EXPECT_EQ(frames[0].module.find('/'), std::string::npos);
  EXPECT_GT(frames[0].offset, 0u);
}

TEST(CallSite, SameCallSiteGivesTheSameIdEveryTime) {
  std::vector<CallSiteId> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(hash_call_site(frames_here(8)));
  EXPECT_NE(ids[0], 0u);
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[1], ids[2]);
}

TEST(CallSite, DifferentCallSitesGiveDifferentIds) {
  const auto a = frames_here(8);
  const auto b = frames_elsewhere(8);
  EXPECT_NE(hash_call_site(a), hash_call_site(b));
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_NE(a[0].offset, b[0].offset);
}

// Both captures are made inside one helper call, so skipping one frame drops exactly the helper's
// own frame and leaves the same frames above it.
[[gnu::noinline]] std::pair<std::vector<CallSiteFrame>, std::vector<CallSiteFrame>>
frames_with_and_without_skip() {
  auto all = capture_call_site_frames(CallSiteOptions{.depth = 4, .skip_innermost = 0});
  auto skipped = capture_call_site_frames(CallSiteOptions{.depth = 3, .skip_innermost = 1});
  asm volatile("" ::: "memory");
  return {std::move(all), std::move(skipped)};
}

TEST(CallSite, SkipInnermostDropsFrames) {
  const auto [all, skipped] = frames_with_and_without_skip();
  ASSERT_EQ(all.size(), 4u);
  ASSERT_EQ(skipped.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(skipped[i].module, all[i + 1].module) << i;
    EXPECT_EQ(skipped[i].offset, all[i + 1].offset) << i;
  }
}

[[gnu::noinline]] void marker_function() {
  asm volatile("");
}

TEST(CallSite, SkipModuleDropsEveryFrameOfThatModule) {
  const auto frames = capture_call_site_frames(
      CallSiteOptions{.depth = 32, .skip_module = reinterpret_cast<const void*>(&marker_function)});
  for (const auto& f : frames) EXPECT_NE(f.module, this_program_name()) << f.module;
  const auto unfiltered = frames_here(32);
  EXPECT_LT(frames.size(), unfiltered.size());
}

// Both ways of taking an id skip the helper's own frame, so both start at its caller: equal only
// if capture_call_site() drops its own wrapper frame as well.
[[gnu::noinline]] std::pair<CallSiteId, CallSiteId> id_both_ways() {
  const CallSiteOptions options{.depth = 3, .skip_innermost = 1};
  const CallSiteId wrapped = capture_call_site(options);
  const CallSiteId direct = hash_call_site(capture_call_site_frames(options));
  asm volatile("" ::: "memory");
  return {wrapped, direct};
}

TEST(CallSite, CaptureCallSiteSkipsItsOwnFrame) {
  const auto [wrapped, direct] = id_both_ways();
  EXPECT_NE(wrapped, 0u);
  EXPECT_EQ(wrapped, direct);
}

// Frames of libraries named like the CUDA runtime/driver are skipped; others are kept.
struct RelayContext {
  std::vector<CallSiteFrame> frames;
};

[[gnu::noinline]] void capture_into(void* context) {
  static_cast<RelayContext*>(context)->frames =
      capture_call_site_frames(CallSiteOptions{.depth = 3});
  asm volatile("" ::: "memory");
}

TEST(CallSite, FramesOfCudaLibrariesAreSkipped) {
  RelayContext plain, cuda;
  umswap_test_relay_plain(&capture_into, &plain);
  umswap_test_relay_cuda(&capture_into, &cuda);
  ASSERT_EQ(plain.frames.size(), 3u);
  ASSERT_EQ(cuda.frames.size(), 3u);
  EXPECT_EQ(plain.frames[0].module, this_program_name());           // capture_into
  EXPECT_EQ(plain.frames[1].module, UMSWAP_TEST_RELAY_PLAIN_NAME);  // the relay is kept
  EXPECT_EQ(cuda.frames[0].module, this_program_name());
  for (const auto& f : cuda.frames) {
    EXPECT_NE(f.module, UMSWAP_TEST_RELAY_CUDA_NAME) << describe_call_site(cuda.frames);
  }
  EXPECT_EQ(cuda.frames[1].module, this_program_name());  // the test body, past the relay
}

// --- hash and description ----------------------------------------------------------------------

TEST(HashCallSite, EmptyIsZero) {
  EXPECT_EQ(hash_call_site({}), 0u);
}

TEST(HashCallSite, DeterministicAndSensitiveToEveryPart) {
  const std::vector<CallSiteFrame> base = {{"app", 0x1234}, {"libfoo.so", 0x99}};
  EXPECT_EQ(hash_call_site(base), hash_call_site(base));
  EXPECT_EQ(hash_call_site(base), hash_call_site({{"app", 0x1234}, {"libfoo.so", 0x99}}));
  EXPECT_NE(hash_call_site(base), 0u);

  auto offset_changed = base;
  offset_changed[1].offset = 0x9a;
  EXPECT_NE(hash_call_site(offset_changed), hash_call_site(base));
  auto module_changed = base;
  module_changed[0].module = "app2";
  EXPECT_NE(hash_call_site(module_changed), hash_call_site(base));
  const std::vector<CallSiteFrame> reversed = {base[1], base[0]};
  EXPECT_NE(hash_call_site(reversed), hash_call_site(base));
  const std::vector<CallSiteFrame> shorter = {base[0]};
  EXPECT_NE(hash_call_site(shorter), hash_call_site(base));
  // The module name and offset are kept apart: moving a character across does not collide.
  EXPECT_NE(hash_call_site({{"ab", 0}, {"c", 0}}), hash_call_site({{"a", 0}, {"bc", 0}}));
}

TEST(HashCallSite, KnownValue) {
  // FNV-1a over "x", a 0 byte and the 8 bytes of offset 0: guards the format across versions,
  // since ids are compared between runs and stored in plans.
  uint64_t h = 14695981039346656037ull;
  const unsigned char bytes[10] = {'x', 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (unsigned char b : bytes) {
    h ^= b;
    h *= 1099511628211ull;
  }
  EXPECT_EQ(hash_call_site({{"x", 0}}), h);
}

TEST(DescribeCallSite, FormatsFramesInnermostFirst) {
  EXPECT_EQ(describe_call_site({}), "");
  EXPECT_EQ(describe_call_site({{"libfoo.so", 0x1234}}), "libfoo.so+0x1234");
  EXPECT_EQ(describe_call_site({{"libfoo.so", 0x1234}, {"app", 0x99}}),
            "libfoo.so+0x1234 <- app+0x99");
}

// --- across processes --------------------------------------------------------------------------

std::map<std::string, std::string> run_probe(const std::string& command) {
  std::map<std::string, std::string> out;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char line[4096];
  while (std::fgets(line, sizeof(line), pipe)) {
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    const size_t space = s.find(' ');
    if (space != std::string::npos) out[s.substr(0, space)] = s.substr(space + 1);
  }
  EXPECT_EQ(pclose(pipe), 0) << command;
  return out;
}

TEST(CallSiteAcrossRuns, IdsAreStableAcrossProcessesAndLoadAddresses) {
  const std::string probe = UMSWAP_TEST_CALL_SITE_PROBE;
  const auto run1 = run_probe(probe);
  const auto run2 = run_probe(probe);
  for (const auto* run : {&run1, &run2}) {
    ASSERT_TRUE(run->contains("site1") && run->contains("site2") && run->contains("frames") &&
                run->contains("base"))
        << "unexpected probe output";
  }
  EXPECT_EQ(run1.at("site1"), run2.at("site1"));
  EXPECT_EQ(run1.at("site2"), run2.at("site2"));
  EXPECT_NE(run1.at("site1"), run1.at("site2"));
  EXPECT_NE(std::stoull(run1.at("site1"), nullptr, 16), 0u);
  EXPECT_NE(std::stoull(run1.at("site2"), nullptr, 16), 0u);

  // Frames name the probe by file name, not by path; its offsets are what makes ids stable.
  const std::string& frames = run1.at("frames");
  EXPECT_EQ(frames.rfind("call_site_probe+0x", 0), 0u) << frames;
  EXPECT_EQ(frames.find('/'), std::string::npos) << frames;
  EXPECT_EQ(frames, run2.at("frames"));

  if (run1.at("base") != run2.at("base")) {
    RecordProperty("aslr", "active: ids equal across different load addresses");
    std::printf("probe loaded at %s and %s; ids equal\n", run1.at("base").c_str(),
                run2.at("base").c_str());
  } else {
    RecordProperty("aslr", "inactive: both runs loaded at the same address");
    std::printf(
        "note: ASLR is off here (both probe runs at %s): ids were compared without a move\n",
        run1.at("base").c_str());
  }
}

// BUG: dladdr() names the main program after argv[0] (glibc: dli_fname = _dl_argv[0] for the
// executable), so the ids of its frames depend on the name it was started by.
// The same program started under another name (a symlink, as `python` -> `python3.11` is) is
// still the same program: its call sites must not change.
TEST(CallSiteAcrossRuns, IdsDoNotDependOnTheNameTheProgramWasStartedBy) {
  namespace fs = std::filesystem;
  std::string dir_pattern = (fs::temp_directory_path() / "umswap_probe.XXXXXX").string();
  ASSERT_NE(mkdtemp(dir_pattern.data()), nullptr);
  const fs::path link = fs::path(dir_pattern) / "probe_alias";
  fs::create_symlink(UMSWAP_TEST_CALL_SITE_PROBE, link);
  const auto direct = run_probe(UMSWAP_TEST_CALL_SITE_PROBE);
  const auto aliased = run_probe(link.string());
  fs::remove_all(dir_pattern);
  ASSERT_TRUE(direct.contains("site1") && aliased.contains("site1"));
  EXPECT_EQ(direct.at("site1"), aliased.at("site1"))
      << "frames: " << direct.at("frames") << "\n vs " << aliased.at("frames");
}

}  // namespace
}  // namespace umswap
