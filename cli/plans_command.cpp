// `umswap plans [list]` and `umswap plans clear [KEY...]`: the plan cache (plan_cache.h) as a
// user sees it.
#include "umswap/cli/cli_main.h"
#include "umswap/cli/plan_cache.h"
#include "umswap/core/environment.h"
#include "umswap/core/log.h"
#include "umswap/core/options.h"

#include <fmt/format.h>

#include <cstdio>

namespace umswap::cli {
namespace {

// An argument as a shell would need it: quoted when it holds anything but plain characters.
std::string shell_word(const std::string& arg) {
  const bool plain = !arg.empty() && arg.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyz"
                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_./=:,+%@") == std::string::npos;
  if (plain) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string plans_list_text(const std::vector<PlanCacheEntry>& entries,
                            const std::filesystem::path& dir) {
  if (entries.empty()) {
    return fmt::format(
        "umswap: no cached plans in {} (a `umswap run --budget B` of a command caches one)\n",
        dir.string());
  }
  uint64_t total = 0;
  for (const PlanCacheEntry& e : entries) total += e.bytes;
  std::string out =
      fmt::format("umswap: {} cached plan{} in {} ({}), the last used first\n", entries.size(),
                  entries.size() == 1 ? "" : "s", dir.string(), format_bytes(total));
  out += fmt::format("{:<16}  {:<19}  {:>4}  {:>9}  {:>21}  {}\n", "key", "last used", "runs",
                     "size", "iterations x launches", "command (folder)");
  for (const PlanCacheEntry& e : entries) {
    std::string command;
    for (const std::string& arg : e.identity.command) {
      if (!command.empty()) command += ' ';
      command += shell_word(arg);
    }
    out += fmt::format("{:<16}  {:<19}  {:>4}  {:>9}  {:>21}  {} ({})\n", e.key, e.used, e.runs,
                       format_bytes(e.bytes), fmt::format("{} x {}", e.iterations, e.period),
                       command, e.identity.cwd);
    if (!e.identity.alloc_conf.empty()) {
      out += fmt::format("{:<77}PYTORCH_CUDA_ALLOC_CONF={}\n", "", e.identity.alloc_conf);
    }
  }
  return out;
}

int plans_command(const PlansFlags& flags) {
  const std::optional<std::filesystem::path> dir =
      plan_cache_dir(env_get("XDG_CACHE_HOME"), env_get("HOME"));
  if (!dir) {
    log(LogLevel::error,
        "plans: no cache folder: neither XDG_CACHE_HOME nor HOME is an absolute path");
    return kUsageErrorExitCode;
  }
  const PlanCache cache(*dir);
  if (!flags.clear) {
    std::fputs(plans_list_text(cache.list(), *dir).c_str(), stdout);
    return 0;
  }
  // Each KEY must name one entry; nothing is removed unless all do. No KEY: every entry.
  std::vector<std::string> keys;
  const std::vector<PlanCacheEntry> entries = cache.list();
  for (const std::string& prefix : flags.keys) {
    std::vector<std::string> matches;
    for (const PlanCacheEntry& e : entries) {
      if (e.key.starts_with(prefix)) matches.push_back(e.key);
    }
    if (matches.size() != 1) {
      log(LogLevel::error, "plans clear: {} (`umswap plans list` shows the keys); nothing removed",
          matches.empty()
              ? fmt::format("no cached plan's key starts with '{}'", prefix)
              : fmt::format("'{}' starts {} keys: give more of the key", prefix, matches.size()));
      return 1;
    }
    keys.push_back(matches.front());
  }
  const std::vector<std::string> removed = cache.remove(keys);
  std::fputs(fmt::format("umswap: removed {} cached plan{} from {}\n", removed.size(),
                         removed.size() == 1 ? "" : "s", dir->string())
                 .c_str(),
             stdout);
  return 0;
}

}  // namespace umswap::cli
