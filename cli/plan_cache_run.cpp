#include "umswap/cli/plan_cache_run.h"

#include "umswap/core/environment.h"
#include "umswap/core/log.h"

#include <fmt/format.h>

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <system_error>

namespace umswap::cli {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kTracePattern = "trace-%p.umtrace";

void say(std::string_view text) {
  std::fputs(fmt::format("umswap: {}\n", text).c_str(), stderr);
}

}  // namespace

PlanCacheRun::~PlanCacheRun() {
  std::error_code ec;
  if (!temp_dir_.empty()) fs::remove_all(temp_dir_, ec);
}

void PlanCacheRun::begin(RunFlags* flags) {
  if (const std::optional<std::string> why = plan_cache_skip_reason(*flags, env_get)) {
    if (flags->verbose) say(fmt::format("plan cache: not used ({})", *why));
    return;
  }
  const std::optional<fs::path> dir = plan_cache_dir(env_get("XDG_CACHE_HOME"), env_get("HOME"));
  if (!dir) {
    if (flags->verbose) {
      say("plan cache: not used (neither XDG_CACHE_HOME nor HOME is an absolute path)");
    }
    return;
  }
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  identity_.command = flags->command;
  identity_.cwd = ec ? std::string() : cwd.string();
  identity_.alloc_conf =
      identity_alloc_conf(env_get("PYTORCH_CUDA_ALLOC_CONF"), env_get("PYTORCH_ALLOC_CONF"));
  identity_.version = UMSWAP_CLI_VERSION;
  identity_.files = identity_files(identity_.command, identity_.cwd);
  key_ = plan_cache_key(identity_);

  std::string temp = (fs::temp_directory_path(ec) / "umswap-plan-XXXXXX").string();
  if (ec || !::mkdtemp(temp.data())) {
    log(LogLevel::warning, "plan cache: not used (cannot make a temporary folder for the trace)");
    return;
  }
  temp_dir_ = temp;
  cache_.emplace(*dir);

  std::string problem;
  hit_ = cache_->find(key_, &problem);
  if (!problem.empty()) {
    log(LogLevel::warning,
        "plan cache: the plan cached for this command was removed ({}); this run learns one",
        problem);
  }
  if (hit_) {
    flags->replay_trace = hit_->trace.string();
    if (!flags->quiet) {
      say(
          fmt::format("replaying the plan cached by an earlier run (key {}, {} UTC); "
                      "--no-cache learns afresh",
                      key_, hit_->recorded));
    }
  } else if (flags->verbose) {
    say(
        fmt::format("plan cache: no plan for this command yet (key {} in {}); this run records "
                    "its first {} iterations for the next",
                    key_, dir->string(), kPlanCacheIterations));
  }
}

std::vector<EnvVar> PlanCacheRun::environment() const {
  if (!cache_) return {};
  return {{"UMSWAP_TRACE", (fs::path(temp_dir_) / kTracePattern).string()},
          {"UMSWAP_TRACE_ITERATIONS", std::to_string(kPlanCacheIterations)}};
}

void PlanCacheRun::finish(bool quiet, bool verbose, std::optional<bool> plan_made) {
  if (!cache_) return;
  const std::string now = plan_cache_now();
  if (plan_made == false) {
    if (hit_) cache_->mark_used(*hit_, now);
    if (verbose) say("plan cache: this run's trace not cached (the run made no plan)");
    return;
  }
  std::vector<fs::path> traces;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(temp_dir_, ec)) {
    // A process killed while writing leaves `trace-<pid>.umtrace.tmp.<pid>`: not a trace.
    if (f.path().extension() == ".umtrace") traces.push_back(f.path());
  }
  std::string why;
  if (traces.size() == 1) {
    if (cache_->store(key_, identity_, traces.front(), hit_, now, &why)) {
      if (!hit_ && !quiet) {
        say(
            fmt::format("plan cached for the next run of this command (key {}; `umswap plans "
                        "list` shows the cache)",
                        key_));
      }
      return;
    }
  } else {
    why = traces.empty() ? "no process recorded a trace"
                         : fmt::format(
                               "{} processes recorded one each, and one cached plan "
                               "cannot serve them all",
                               traces.size());
  }
  if (hit_) cache_->mark_used(*hit_, now);
  if (verbose) say(fmt::format("plan cache: this run's trace not cached ({})", why));
}

}  // namespace umswap::cli
