// `umswap compare` of a torchrun command: which commands are launchers, and one run's output and
// stats files split into one outcome per rank.
#include "umswap/cli/compare.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <set>

namespace umswap::cli {
namespace {

std::string file_name(std::string_view path) {
  return std::filesystem::path(path).filename().string();
}

bool is_python(std::string_view path) {
  const std::string name = file_name(path);
  return name.starts_with("python");
}

}  // namespace

bool is_torchrun_command(const std::vector<std::string>& command) {
  if (command.empty()) return false;
  if (file_name(command[0]) == "torchrun") return true;
  if (!is_python(command[0])) return false;
  // python's own options come before -m; the module is the word after it.
  for (size_t i = 1; i + 1 < command.size(); ++i) {
    const std::string& arg = command[i];
    if (arg == "-m") {
      return command[i + 1] == "torch.distributed.run" ||
             command[i + 1] == "torch.distributed.launch";
    }
    if (arg.empty() || arg[0] != '-' || arg == "-c") return false;  // a script or a -c program
    if (arg == "-X" || arg == "-W") ++i;                            // options with a value
  }
  return false;
}

std::pair<std::optional<int>, std::string_view> strip_rank_prefix(std::string_view line) {
  const auto none = std::pair<std::optional<int>, std::string_view>{std::nullopt, line};
  if (line.empty() || line[0] != '[') return none;
  const size_t close = line.find("]:");
  if (close == std::string_view::npos || close < 2) return none;
  const std::string_view name = line.substr(1, close - 1);
  size_t digits = name.size();
  while (digits > 0 && name[digits - 1] >= '0' && name[digits - 1] <= '9') --digits;
  if (digits == name.size() || name.size() - digits > 6) return none;
  for (size_t i = 0; i < digits; ++i) {
    const char c = name[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return none;
  }
  int rank = 0;
  std::from_chars(name.data() + digits, name.data() + name.size(), rank);
  return {rank, line.substr(close + 2)};
}

std::map<int, std::string> split_rank_output(std::string_view text) {
  std::map<int, std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const auto [rank, rest] = strip_rank_prefix(text.substr(start, end - start));
    if (rank) {
      std::string& lines = out[*rank];
      lines.append(rest);
      lines.push_back('\n');
    }
    start = end + 1;
  }
  return out;
}

std::vector<ModeOutcome> split_by_rank(const ModeOutcome& whole, std::string_view stdout_text,
                                       const std::vector<StatsFigures>& stats_files) {
  const std::map<int, std::string> outputs = split_rank_output(stdout_text);
  std::set<int> ranks;
  for (const auto& [rank, lines] : outputs) ranks.insert(rank);
  for (const StatsFigures& s : stats_files) {
    if (s.rank && *s.rank <= static_cast<uint64_t>(INT32_MAX))
      ranks.insert(static_cast<int>(*s.rank));
  }
  if (ranks.empty()) {
    ModeOutcome o = whole;
    o.stats.reset();
    if (o.stats_error.empty()) {
      o.stats_error = "no rank printed a line or left a stats file";
    }
    return {o};
  }
  std::vector<ModeOutcome> out;
  for (const int rank : ranks) {
    ModeOutcome o = whole;
    o.rank = rank;
    const auto lines = outputs.find(rank);
    o.output = parse_program_output(lines == outputs.end() ? std::string_view() : lines->second);
    o.stats.reset();
    o.stats_error.clear();
    const auto file = std::find_if(stats_files.begin(), stats_files.end(), [&](const auto& s) {
      return s.rank && *s.rank == static_cast<uint64_t>(rank);
    });
    if (file != stats_files.end()) {
      o.stats = *file;
    } else {
      o.stats_error = "no stats file from this rank";
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace umswap::cli
