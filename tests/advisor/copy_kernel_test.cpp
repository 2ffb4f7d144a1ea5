// umswap's copy kernel (copy_kernel.h): its PTX assembles for the GPUs umswap runs on (ptxas, where
// the CUDA toolkit has it; UMSWAP_PTXAS names it), and which copies it takes. That it copies the
// right bytes is checked on a GPU (gpu_advisor_loop's kernel run: the checksum equals native's).
#include "umswap/advisor/copy_kernel.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

using umswap::advisor::copy_kernel_fits;
using umswap::advisor::copy_kernel_ptx;
using umswap::advisor::copy_thread_hash;
using umswap::advisor::kCopyKernelName;
using umswap::advisor::kPageBytes;
using umswap::advisor::kPageHashKernelName;
using umswap::advisor::kPageHashThreads;
using umswap::advisor::page_hash;

TEST(CopyKernel, PtxDeclaresTheEntryPoint) {
  const std::string ptx(copy_kernel_ptx());
  EXPECT_EQ(ptx.c_str()[ptx.size()], '\0');  // cuModuleLoadData reads a C string
  EXPECT_NE(ptx.find(std::string(".visible .entry ") + kCopyKernelName + "("), std::string::npos);
  EXPECT_NE(ptx.find(std::string(".visible .entry ") + kPageHashKernelName + "("),
            std::string::npos);
  EXPECT_NE(ptx.find(".address_size 64"), std::string::npos);
  EXPECT_EQ(ptx.find('\0'), std::string::npos);
}

// Assembles the PTX for `arch` with ptxas; the result is ptxas's exit status and output.
std::pair<int, std::string> assemble(const std::string& ptxas, const std::string& arch) {
  char dir[] = "/tmp/umswap_copy_kernel_XXXXXX";
  if (!mkdtemp(dir)) return {-1, "mkdtemp failed"};
  const std::string src = std::string(dir) + "/copy.ptx", out = std::string(dir) + "/copy.cubin",
                    log = std::string(dir) + "/log.txt";
  std::ofstream(src) << copy_kernel_ptx();
  const std::string cmd =
      "'" + ptxas + "' -arch=" + arch + " '" + src + "' -o '" + out + "' > '" + log + "' 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(src.c_str());
  std::remove(out.c_str());
  std::remove(log.c_str());
  rmdir(dir);
  return {status == -1 ? -1 : WEXITSTATUS(status), text};
}

TEST(CopyKernel, PtxAssemblesForTheGpusUmswapRunsOn) {
  const char* ptxas = std::getenv("UMSWAP_PTXAS");
  if (!ptxas || !*ptxas || access(ptxas, X_OK) != 0) {
    GTEST_SKIP() << "no ptxas (UMSWAP_PTXAS unset: the CUDA toolkit has none here)";
  }
  for (const char* arch : {"sm_75", "sm_80", "sm_90"}) {
    const auto [status, output] = assemble(ptxas, arch);
    EXPECT_EQ(status, 0) << arch << ": " << output;
  }
}

TEST(CopyKernel, TakesSixteenByteAlignedCopiesOnly) {
  EXPECT_TRUE(copy_kernel_fits(0x200000, 0x7f0000001000, 2 << 20));
  EXPECT_TRUE(copy_kernel_fits(16, 32, 16));
  EXPECT_FALSE(copy_kernel_fits(16, 32, 0));
  EXPECT_FALSE(copy_kernel_fits(8, 32, 64));
  EXPECT_FALSE(copy_kernel_fits(16, 40, 64));
  EXPECT_FALSE(copy_kernel_fits(16, 32, 72));
}

}  // namespace

// The hash each thread of umswap_hash_pages computes before the page's folds (page_hash(); the
// GPU's are compared with page_hash() on a GPU: tests/gpu/copy_hash_test.cpp).
TEST(CopyKernel, ThreadHashCoversItsOwnUnitsAndSeesEveryChangedWord) {
  constexpr uint64_t kUnits = 1000, kThreads = 64;
  std::vector<uint64_t> words(kUnits * 2);
  for (size_t i = 0; i < words.size(); ++i) words[i] = i * 0x9e3779b97f4a7c15ull;
  std::vector<uint64_t> before(kThreads);
  for (uint64_t t = 0; t < kThreads; ++t)
    before[t] = copy_thread_hash(words.data(), kUnits, t, kThreads);
  // Unit 5*64+7's second word belongs to thread 7 only.
  const uint64_t unit = 5 * kThreads + 7;
  for (const uint64_t flip : {uint64_t{1}, uint64_t{1} << 63, ~uint64_t{0}}) {
    words[unit * 2 + 1] ^= flip;
    for (uint64_t t = 0; t < kThreads; ++t) {
      EXPECT_EQ(copy_thread_hash(words.data(), kUnits, t, kThreads) != before[t], t == 7)
          << "thread " << t << ", flip " << flip;
    }
    words[unit * 2 + 1] ^= flip;
  }
  // Order matters: two of thread 3's units swapped.
  std::swap(words[3 * 2], words[(kThreads + 3) * 2]);
  EXPECT_NE(copy_thread_hash(words.data(), kUnits, 3, kThreads), before[3]);
  std::swap(words[3 * 2], words[(kThreads + 3) * 2]);
  // A thread with no units keeps the offset basis; so does every thread over no units.
  EXPECT_EQ(copy_thread_hash(words.data(), 10, 20, kThreads), 0xcbf29ce484222325ull);
  EXPECT_EQ(copy_thread_hash(words.data(), 0, 0, kThreads), 0xcbf29ce484222325ull);
}

// umswap run --verify's page hash (round_trips.h): one value per 2 MiB page, which changes with
// any word of it and with the order of its words.
TEST(CopyKernel, PageHashSeesEveryChangedWordAndItsOrder) {
  EXPECT_NE(copy_kernel_ptx().find(std::string(".entry ") + kPageHashKernelName + "("),
            std::string_view::npos);
  static_assert(kPageHashThreads == 1024);
  std::vector<uint64_t> words(kPageBytes / 8);
  for (size_t i = 0; i < words.size(); ++i) words[i] = i * 0x9e3779b97f4a7c15ull + 1;
  const uint64_t before = page_hash(words.data());
  EXPECT_EQ(page_hash(words.data()), before);
  for (const size_t at : {size_t{0}, size_t{4321}, words.size() - 1}) {
    words[at] ^= 1;
    EXPECT_NE(page_hash(words.data()), before) << at;
    words[at] ^= 1;
  }
  std::swap(words[10], words[12]);
  EXPECT_NE(page_hash(words.data()), before);
}
