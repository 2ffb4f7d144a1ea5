#include "umswap/core/stats_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace umswap {

std::string expand_stats_path(std::string_view pattern, pid_t pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      if (pattern[i + 1] == 'p') {
        out += std::to_string(pid);
        ++i;
        continue;
      }
      if (pattern[i + 1] == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

bool write_stats_file(const std::string& path, const nlohmann::json& stats, std::string* error) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    if (error) *error = fmt::format("cannot write {}: {}", tmp, std::strerror(errno));
    return false;
  }
  const std::string text = stats.dump(2) + "\n";
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    if (error) *error = fmt::format("cannot write {}: {}", tmp, std::strerror(errno));
    std::remove(tmp.c_str());
    return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    if (error) *error = fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(errno));
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

std::optional<nlohmann::json> read_stats_file(const std::string& path, std::string* error) {
  auto fail = [&](std::string why) -> std::optional<nlohmann::json> {
    if (error) *error = fmt::format("{}: {}", path, why);
    return std::nullopt;
  };
  std::ifstream in(path);
  if (!in) return fail(fmt::format("cannot open: {}", std::strerror(errno)));
  std::stringstream buffer;
  buffer << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail("not valid JSON");
  if (!j.is_object()) return fail("not a JSON object");
  const std::string_view key = stats_schema::kVersion.path;
  const auto v = j.find(key);
  if (v == j.end() || !v->is_number_integer()) return fail(fmt::format("no {} field", key));
  if (v->get<int64_t>() != kStatsFormatVersion) {
    return fail(fmt::format("stats version {} is not the supported version {}", v->get<int64_t>(),
                            kStatsFormatVersion));
  }
  return j;
}

}  // namespace umswap
