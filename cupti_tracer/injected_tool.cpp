#include "umswap/tracer/injected_tool.h"

#include <fmt/format.h>

#include <string_view>

namespace umswap::tracer {
namespace {

std::string_view base_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string tool_name(std::string_view library) {
  const std::string_view base = base_name(library);
  if (base.find("sanitizer") != std::string_view::npos) return "compute-sanitizer";
  if (base.find("ToolsInjection") != std::string_view::npos) return "Nsight Systems";
  if (base.find("nsight") != std::string_view::npos ||
      base.find("Nsight") != std::string_view::npos) {
    return "an Nsight tool";
  }
  return "a CUDA tool";
}

}  // namespace

std::optional<std::string> injected_cuda_tool(const char* cuda_injection,
                                              const char* nvtx_injection) {
  if (cuda_injection && *cuda_injection) {
    return fmt::format("{} (CUDA_INJECTION64_PATH={})", tool_name(cuda_injection), cuda_injection);
  }
  if (nvtx_injection && *nvtx_injection && !base_name(nvtx_injection).starts_with("libcupti")) {
    return fmt::format("{} (NVTX_INJECTION64_PATH={})", tool_name(nvtx_injection), nvtx_injection);
  }
  return std::nullopt;
}

}  // namespace umswap::tracer
