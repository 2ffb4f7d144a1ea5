// A CUDA tool injected into the program (compute-sanitizer, Nsight Systems) takes CUPTI when it
// initializes, and that can come after umswap's tracer has subscribed: the tool then loses CUPTI
// and checks or records nothing (compute-sanitizer: "Target application terminated before first
// instrumented API call"). So the tracer stays off when the environment names an injected tool.
#pragma once

#include <optional>
#include <string>

namespace umswap::tracer {

// The injected tool the two variables name, for a message ("compute-sanitizer
// (NVTX_INJECTION64_PATH=libsanitizer-collection.so)"); nullopt when neither names one. An NVTX
// injection of libcupti (`umswap record --marker` sets it) is umswap's own.
std::optional<std::string> injected_cuda_tool(const char* cuda_injection,
                                              const char* nvtx_injection);

}  // namespace umswap::tracer
