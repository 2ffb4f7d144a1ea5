#include "umswap/tracer/injected_tool.h"

#include <gtest/gtest.h>

namespace umswap::tracer {
namespace {

TEST(InjectedTool, NoneWithoutEitherVariable) {
  EXPECT_FALSE(injected_cuda_tool(nullptr, nullptr));
  EXPECT_FALSE(injected_cuda_tool("", ""));
}

TEST(InjectedTool, ComputeSanitizerByItsNvtxInjection) {
  // What compute-sanitizer 2025.3 sets in the program it checks.
  const auto tool = injected_cuda_tool(nullptr, "libsanitizer-collection.so");
  ASSERT_TRUE(tool);
  EXPECT_EQ(*tool, "compute-sanitizer (NVTX_INJECTION64_PATH=libsanitizer-collection.so)");
}

TEST(InjectedTool, UmswapsOwnNvtxInjectionIsNoTool) {
  EXPECT_FALSE(injected_cuda_tool(nullptr, "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"));
  EXPECT_FALSE(injected_cuda_tool(nullptr, "libcupti.so"));
}

TEST(InjectedTool, AnyCudaInjectionIsATool) {
  auto tool = injected_cuda_tool("/opt/nsys/target-linux-x64/libToolsInjection64.so", nullptr);
  ASSERT_TRUE(tool);
  EXPECT_EQ(tool->rfind("Nsight Systems (CUDA_INJECTION64_PATH=", 0), 0u) << *tool;
  tool = injected_cuda_tool("/home/me/libmytool.so", "libcupti.so");
  ASSERT_TRUE(tool);
  EXPECT_EQ(*tool, "a CUDA tool (CUDA_INJECTION64_PATH=/home/me/libmytool.so)");
}

}  // namespace
}  // namespace umswap::tracer
