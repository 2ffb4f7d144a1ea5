#include "umswap/cli/preload_library.h"

#include <fmt/format.h>

#include <system_error>

namespace umswap::cli {
namespace {

constexpr const char* kLibraryName = "libumswap.so";

bool is_file(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);  // follows symlinks
}

std::filesystem::path absolute_normal(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  return (ec ? path : abs).lexically_normal();
}

// ld.so splits LD_PRELOAD at ':' and blanks, so such a path cannot be preloaded.
PreloadLibrary checked(const std::filesystem::path& path) {
  const std::string text = path.string();
  if (text.find_first_of(": \t\n") != std::string::npos) {
    return {.path = {},
            .error = fmt::format("cannot preload '{}': LD_PRELOAD cannot carry a path holding "
                                 "':' or blanks; move or link libumswap.so elsewhere",
                                 text)};
  }
  return {.path = text, .error = {}};
}

}  // namespace

std::vector<std::filesystem::path> preload_library_candidates(const std::filesystem::path& exe) {
  const std::filesystem::path bindir = exe.parent_path();
  return {(bindir / ".." / "lib" / kLibraryName).lexically_normal(),
          (bindir / kLibraryName).lexically_normal()};
}

PreloadLibrary find_preload_library(const char* override_path, const std::filesystem::path& exe) {
  if (override_path && *override_path) {
    const std::filesystem::path path = absolute_normal(override_path);
    if (!is_file(path)) {
      const std::string resolved =
          path.string() == override_path ? std::string() : fmt::format(" ({})", path.string());
      return {.path = {},
              .error = fmt::format("UMSWAP_LIBRARY='{}' is not a file{}", override_path, resolved)};
    }
    return checked(path);
  }
  const std::vector<std::filesystem::path> candidates = preload_library_candidates(exe);
  for (const auto& path : candidates) {
    if (is_file(path)) return checked(path);
  }
  return {
      .path = {},
      .error = fmt::format("cannot find {} (looked at {} and {}); set UMSWAP_LIBRARY to its path",
                           kLibraryName, candidates[0].string(), candidates[1].string())};
}

}  // namespace umswap::cli
