// The stats file: JSON written once at exit by the traced process, read by the CLI and tests.
// Its version and the fields the CLI reads: stats_schema.h.
//
// Offline code: errors come back as values with a sentence a user understands. Writing is
// atomic (a temporary file renamed into place), so a reader never sees half a file.
#pragma once

#include "umswap/core/stats_schema.h"

#include <nlohmann/json.hpp>

#include <sys/types.h>
#include <optional>
#include <string>
#include <string_view>

namespace umswap {

// Replaces each `%p` in `pattern` with `pid` (`%%` stands for one `%`).
std::string expand_stats_path(std::string_view pattern, pid_t pid);

// Writes `stats` to `path` atomically. Returns false and sets `error` on failure.
bool write_stats_file(const std::string& path, const nlohmann::json& stats, std::string* error);

// Reads and checks a stats file: JSON object with a known `umswap_stats_version`.
std::optional<nlohmann::json> read_stats_file(const std::string& path, std::string* error);

}  // namespace umswap
