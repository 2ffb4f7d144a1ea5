#include "umswap/allocator/call_site.h"

#include <dlfcn.h>
#include <libunwind.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cstring>
#include <string_view>

#include <fmt/format.h>

namespace umswap {
namespace {

// Frames of the CUDA runtime and driver differ between versions and static/shared builds; they
// say nothing about which of the program's buffers this is.
bool is_cuda_library(std::string_view name) {
  return name.starts_with("libcuda.") || name.starts_with("libcudart.") ||
         name.starts_with("libcuda-") || name.starts_with("libnvidia-");
}

// The main executable's file name. dladdr reports it as argv[0], which depends on how the program
// was started (a symlink, `exec -a`), so it is read from /proc/self/exe instead, once.
const std::string& main_program_name() {
  static const std::string name = [] {
    char path[4096];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0) return std::string();
    path[n] = '\0';
    const char* slash = std::strrchr(path, '/');
    return std::string(slash ? slash + 1 : path);
  }();
  return name;
}

void* main_program_base() {
  static void* const base = [] {
    Dl_info info{};
    const auto entry = reinterpret_cast<void*>(getauxval(AT_ENTRY));
    return dladdr(entry, &info) ? info.dli_fbase : nullptr;
  }();
  return base;
}

std::string_view base_name(const char* path) {
  if (!path) return {};
  const char* slash = std::strrchr(path, '/');
  return slash ? std::string_view(slash + 1) : std::string_view(path);
}

}  // namespace

__attribute__((noinline)) std::vector<CallSiteFrame> capture_call_site_frames(
    const CallSiteOptions& options) {
  std::vector<CallSiteFrame> frames;
  if (options.depth <= 0) return frames;
  void* skip_base = nullptr;
  if (options.skip_module) {
    Dl_info info{};
    if (dladdr(options.skip_module, &info)) skip_base = info.dli_fbase;
  }
  unw_context_t context;
  unw_cursor_t cursor;
  if (unw_getcontext(&context) != 0 || unw_init_local(&cursor, &context) != 0) return frames;
  int index = 0;
  constexpr int kMaxWalk = 128;  // bounded walk: deep recursion must not make this slow
  do {
    if (index++ < options.skip_innermost + 1) continue;  // +1: this function's own frame
    unw_word_t ip = 0;
    if (unw_get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) break;
    // A return address points after the call; step back one byte so it names the call itself.
    const uint64_t pc = static_cast<uint64_t>(ip) - 1;
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(pc), &info) || !info.dli_fbase) continue;
    if (skip_base && info.dli_fbase == skip_base) continue;
    const std::string_view module = info.dli_fbase == main_program_base()
                                        ? std::string_view(main_program_name())
                                        : base_name(info.dli_fname);
    if (is_cuda_library(module)) continue;
    frames.push_back({std::string(module), pc - reinterpret_cast<uint64_t>(info.dli_fbase)});
    if (static_cast<int>(frames.size()) >= options.depth) break;
  } while (index < kMaxWalk && unw_step(&cursor) > 0);
  return frames;
}

CallSiteId hash_call_site(const std::vector<CallSiteFrame>& frames) {
  if (frames.empty()) return 0;
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  };
  for (const auto& f : frames) {
    mix(f.module.data(), f.module.size());
    mix("\0", 1);
    mix(&f.offset, sizeof(f.offset));
  }
  return h == 0 ? 1 : h;
}

__attribute__((noinline)) CallSiteId capture_call_site(const CallSiteOptions& options) {
  CallSiteOptions inner = options;
  inner.skip_innermost += 1;  // this wrapper's frame
  return hash_call_site(capture_call_site_frames(inner));
}

std::string describe_call_site(const std::vector<CallSiteFrame>& frames) {
  std::string out;
  for (const auto& f : frames) {
    if (!out.empty()) out += " <- ";
    out += fmt::format("{}+{:#x}", f.module, f.offset);
  }
  return out;
}

}  // namespace umswap
