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

namespace {

using umswap::advisor::copy_kernel_fits;
using umswap::advisor::copy_kernel_ptx;
using umswap::advisor::kCopyKernelName;

TEST(CopyKernel, PtxDeclaresTheEntryPoint) {
  const std::string ptx(copy_kernel_ptx());
  EXPECT_EQ(ptx.c_str()[ptx.size()], '\0');  // cuModuleLoadData reads a C string
  EXPECT_NE(ptx.find(std::string(".visible .entry ") + kCopyKernelName + "("), std::string::npos);
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
