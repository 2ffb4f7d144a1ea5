// The plan cache: the access trace of a run of `umswap run`, kept under the user's cache folder
// so that the next run of the same command has a plan from its second iteration (replay)
// instead of learning one online. Issue 39, "plans persist"; docs/cli.md, "The plan cache".
//
// An entry is two files in the cache folder: `<key>.umtrace`, the trace (the first
// kPlanCacheIterations iterations of the run that last used the entry), and `<key>.json`, what
// the entry is for and when it was used. The key is a hash of the run's identity (PlanIdentity):
// the same command in the same folder with the same PyTorch allocator setting and umswap version.
// The budget is not in it: a replay plans from the trace for the budget it is given.
//
// Nothing here is used by the preload library: `umswap run` decides, sets UMSWAP_REPLAY (a hit)
// and UMSWAP_TRACE (every run records its first iterations), and stores the trace after the
// program ends (plan_cache_run.h). Not thread-safe; two umswap processes may share a folder:
// every file is written to a temporary name and renamed into place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "umswap/cli/run_flags.h"

namespace umswap::cli {

// Iterations a run records for the cache (UMSWAP_TRACE_ITERATIONS): enough for online learning's
// plan to be in force in them on the models measured (iteration 4-8 on 2026-11-30's runs), few
// enough that the trace stays a few MB.
inline constexpr uint64_t kPlanCacheIterations = 16;
// Entries kept, and their traces' bytes together; storing one more removes the least recently
// used past either (never the one stored).
inline constexpr size_t kPlanCacheMaxEntries = 32;
inline constexpr uint64_t kPlanCacheMaxBytes = uint64_t{2} << 30;

// $XDG_CACHE_HOME/umswap/plans when that is an absolute path, else $HOME/.cache/umswap/plans when
// HOME is; nullopt when neither is (arguments: the variables' values, null when unset).
std::optional<std::filesystem::path> plan_cache_dir(const char* xdg_cache_home, const char* home);

struct PlanIdentity {
  std::vector<std::string> command;  // argv, as given after `--`
  std::string cwd;                   // the folder it runs in
  std::string alloc_conf;            // the user's PyTorch allocator setting (below), or ""
  std::string version;               // umswap's
  std::string files;                 // identity_files(), or ""
};

// Files the command names whose contents are part of its identity: those at most this large
// (a script, a config; not an interpreter or a data set).
inline constexpr uint64_t kPlanCacheFileBytes = uint64_t{1} << 20;

// A hash (16 hex digits) of the contents of every argument of `command` that names a regular file
// of at most kPlanCacheFileBytes (relative to `cwd` unless absolute), with the argument: an
// edited `train.py` makes another identity, so its run learns rather than replays the old one's
// plan. "" when no argument names such a file.
std::string identity_files(std::span<const std::string> command, const std::filesystem::path& cwd);

// The user's PyTorch allocator setting as the identity holds it: PYTORCH_CUDA_ALLOC_CONF's value,
// else PYTORCH_ALLOC_CONF's, else "".
std::string identity_alloc_conf(const char* pytorch_cuda_alloc_conf,
                                const char* pytorch_alloc_conf);

// 16 lowercase hex digits (FNV-1a, 64 bits, over every field with its length), the same on every
// machine and run for the same identity.
std::string plan_cache_key(const PlanIdentity& identity);

// Whether `text` could be the start of a key: 1 to 16 lowercase hex digits (`umswap plans clear
// KEY`; a whole key is 16).
bool is_plan_key_prefix(std::string_view text);

// Why `umswap run` with `flags` neither reads nor writes the cache, as a phrase
// ("--no-cache was given"); nullopt when it uses it. `env` reads the user's environment (null
// when unset). The cache serves online runs with a budget on engine um, whose trace and replay
// the user has not set up by hand: not record or replay, not --verify, not a torchrun command
// (is_torchrun_command(): a trace per rank, and one plan cannot serve them all).
std::optional<std::string> plan_cache_skip_reason(
    const RunFlags& flags, const std::function<const char*(const char*)>& env);

struct PlanCacheEntry {
  std::string key;
  std::filesystem::path trace;  // <dir>/<key>.umtrace
  PlanIdentity identity;
  std::string recorded;  // when its trace was recorded (UTC, "2026-11-30 07:10:02")
  std::string used;      // when a run last used the entry (learned or replayed it)
  uint64_t runs = 0;     // runs that used it
  uint64_t bytes = 0;    // the trace file's size
  uint64_t iterations = 0;
  uint64_t period = 0;  // launches an iteration
};

class PlanCache {
 public:
  explicit PlanCache(std::filesystem::path dir) : dir_(std::move(dir)) {}
  const std::filesystem::path& dir() const { return dir_; }

  // `key`'s entry, if its trace reads and holds an iteration of its period. An entry whose files
  // do not read (damaged, another trace version, no usable iteration) is removed and `problem`
  // says why; nullopt with `problem` empty when there is none.
  std::optional<PlanCacheEntry> find(const std::string& key, std::string* problem) const;

  // Makes `trace` (a trace file umswap wrote) `key`'s entry, replacing one there; `runs` counts
  // on from `previous`. The trace must hold an iteration of its period, and no fewer iterations
  // than `previous` (a run of the same command stopped early: its trace does not replace a
  // longer one), else false and `error`.
  // Then removes the least recently used entries past kPlanCacheMaxEntries or kPlanCacheMaxBytes
  // (`max_bytes`, for tests). `now`: the time to record (UTC text, as PlanCacheEntry's).
  bool store(const std::string& key, const PlanIdentity& identity,
             const std::filesystem::path& trace, const std::optional<PlanCacheEntry>& previous,
             const std::string& now, std::string* error,
             uint64_t max_bytes = kPlanCacheMaxBytes) const;

  // Counts a run that used `entry` without storing a new trace (its program recorded none).
  void mark_used(const PlanCacheEntry& entry, const std::string& now) const;

  // Every entry whose description reads, the most recently used first (a trace is not read).
  std::vector<PlanCacheEntry> list() const;

  // Removes the entries whose keys start with one of `prefixes` (every entry when it is empty);
  // returns the keys removed. Files the cache did not write are left alone.
  std::vector<std::string> remove(std::span<const std::string> prefixes) const;

 private:
  std::filesystem::path dir_;
};

// The current time as PlanCacheEntry's fields hold it (UTC).
std::string plan_cache_now();

}  // namespace umswap::cli
