// Call-site identity of an allocation: a hash of the caller's stack as (module file name, offset
// in module) pairs, so it does not change with ASLR or between two runs of the same program.
//
// Unwinds with libunwind (LLVM's, linked statically). Frames in umswap itself and in the CUDA
// runtime/driver libraries are skipped, so the identity names the program's own call path.
// Thread-safe; allocates (dladdr, small vectors), so not for CUPTI callback hot paths.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "umswap/allocator/registry.h"

namespace umswap {

struct CallSiteOptions {
  int depth = 8;                      // frames hashed after skipping; 0 disables (id 0)
  int skip_innermost = 0;             // frames to drop first (the capture call itself, ...)
  const void* skip_module = nullptr;  // an address inside a module whose frames are skipped
};

struct CallSiteFrame {
  std::string module;  // file name without directories
  uint64_t offset = 0;
};

// Captures the current stack and returns its frames after skipping (at most `depth`).
std::vector<CallSiteFrame> capture_call_site_frames(const CallSiteOptions& options);
// Hash (64-bit FNV-1a) of frames; 0 only when `frames` is empty.
CallSiteId hash_call_site(const std::vector<CallSiteFrame>& frames);
// capture + hash.
CallSiteId capture_call_site(const CallSiteOptions& options);
// `libfoo.so+0x1234 <- app+0x99 ...` for logs and reports.
std::string describe_call_site(const std::vector<CallSiteFrame>& frames);

}  // namespace umswap
