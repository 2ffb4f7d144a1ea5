// `umswap compare` of a torchrun command: which commands are launchers, and one run's output and
// stats files split into one outcome per rank.
#include "umswap/cli/compare.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

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
  const std::optional<int> rank = parse_number<int>(name.substr(digits));
  if (!rank) return none;
  return {*rank, line.substr(close + 2)};
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

std::map<int, std::string> read_rank_logs(const std::string& log_dir) {
  namespace fs = std::filesystem;
  std::map<int, std::pair<int, fs::path>> newest;  // local rank -> (attempt, file)
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(log_dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path& file = it->path();
    if (file.filename() != "stdout.log") continue;
    const std::string rank_name = file.parent_path().filename().string();
    const std::string attempt_name = file.parent_path().parent_path().filename().string();
    const std::optional<int> rank = parse_number<int>(rank_name);
    const std::optional<int> attempt =
        attempt_name.starts_with("attempt_")
            ? parse_number<int>(std::string_view(attempt_name).substr(8))
            : std::nullopt;
    if (!rank || !attempt) continue;
    const auto found = newest.find(*rank);
    if (found == newest.end() || *attempt > found->second.first) newest[*rank] = {*attempt, file};
  }
  std::map<int, std::string> out;
  for (const auto& [rank, entry] : newest) {
    std::ifstream in(entry.second, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    out[rank] = text.str();
  }
  return out;
}

std::vector<ModeOutcome> split_by_rank(const ModeOutcome& whole,
                                       const std::map<int, std::string>& outputs,
                                       const std::vector<StatsFigures>& stats_files) {
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
    // A child of the rank that used CUDA (a compile worker) inherits its RANK and writes a
    // file too: the rank's own is the one with the most iterations traced.
    const StatsFigures* file = nullptr;
    for (const StatsFigures& s : stats_files) {
      if (s.rank && *s.rank == static_cast<uint64_t>(rank) &&
          (!file || s.iterations.size() > file->iterations.size())) {
        file = &s;
      }
    }
    if (file) {
      o.stats = *file;
    } else {
      o.stats_error = "no stats file from this rank";
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace umswap::cli
