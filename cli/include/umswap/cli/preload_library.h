// Finding libumswap.so, the library `umswap run` preloads into the command.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace umswap::cli {

// Where an umswap executable at `exe` (a real path, symlinks resolved) looks, in order:
// `<bindir>/../lib/libumswap.so` (the build tree and an installed prefix), then
// `<bindir>/libumswap.so`.
std::vector<std::filesystem::path> preload_library_candidates(const std::filesystem::path& exe);

struct PreloadLibrary {
  std::string path;   // absolute, lexically normal; empty when not found
  std::string error;  // a sentence saying where umswap looked; empty when found
};

// `override_path` is UMSWAP_LIBRARY's value (nullptr or empty: unset); when given it is the only
// place looked at (a relative path is taken from the current directory). A path holding ':' or
// blanks is refused: LD_PRELOAD cannot carry it.
PreloadLibrary find_preload_library(const char* override_path, const std::filesystem::path& exe);

}  // namespace umswap::cli
