// What `umswap run` does with the plan cache (plan_cache.h) around the program: before it, look
// the command up and make the run a replay of the cached trace when there is one; during it,
// record the first kPlanCacheIterations iterations into a temporary folder (UMSWAP_TRACE, one
// file per process); after it, cache that trace when exactly one process wrote one that can be
// replayed and the run made a plan, so the next run of the command finds this run's own trace.
//
// Used by run_command() on its one thread.
#pragma once

#include "umswap/cli/child_environment.h"
#include "umswap/cli/plan_cache.h"
#include "umswap/cli/run_flags.h"

#include <optional>
#include <string>
#include <vector>

namespace umswap::cli {

class PlanCacheRun {
 public:
  PlanCacheRun() = default;
  PlanCacheRun(const PlanCacheRun&) = delete;
  PlanCacheRun& operator=(const PlanCacheRun&) = delete;
  ~PlanCacheRun();  // removes the temporary folder

  // Decides for `flags`, reading the user's environment: when the cache serves this run and holds
  // the command's plan, sets flags->replay_trace to it and says so on stderr (unless quiet). An
  // entry that does not read is removed with a warning. Why the cache is off for a run is said
  // with --verbose only.
  void begin(RunFlags* flags);

  // Variables the command gets on top of plan_child_environment(): UMSWAP_TRACE (a `%p` pattern
  // in the temporary folder) and UMSWAP_TRACE_ITERATIONS; none when the cache is off.
  std::vector<EnvVar> environment() const;

  // After the program: caches the trace it recorded, unless `plan_made` is false (the run's stats
  // say no process put a plan in force: a trace from which the run itself found no plan is not
  // one to replay; nullopt, when no stats say, caches). Says so when a first plan was cached
  // (unless quiet); why none was, with --verbose.
  void finish(bool quiet, bool verbose, std::optional<bool> plan_made = std::nullopt);

  bool hit() const { return hit_.has_value(); }

 private:
  std::optional<PlanCache> cache_;  // set when the cache serves this run
  std::string key_;
  PlanIdentity identity_;
  std::optional<PlanCacheEntry> hit_;
  std::string temp_dir_;  // where the program's traces go
};

}  // namespace umswap::cli
