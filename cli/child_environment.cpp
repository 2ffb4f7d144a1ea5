#include "umswap/cli/child_environment.h"
#include "umswap/cli/compare.h"

#include "umswap/core/environment.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <filesystem>

#include <stdlib.h>

namespace umswap::cli {
namespace {

constexpr std::string_view kExpandableKey = "expandable_segments";
constexpr std::string_view kExpandableOff = "expandable_segments:False";
constexpr std::string_view kXlaAllocator = "cuda_async";

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// PyTorch's lexer drops every blank, so `expandable_segments : True` means what it says.
std::string without_blanks(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (!is_blank(c)) out += c;
  }
  return out;
}

// Splits at commas outside brackets: `roundup_power2_divisions:[256:1,512:2]` is one entry.
std::vector<std::string_view> split_entries(std::string_view text) {
  std::vector<std::string_view> entries;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size()) {
      if (text[i] == '[') ++depth;
      if (text[i] == ']' && depth > 0) --depth;
      if (text[i] != ',' || depth > 0) continue;
    }
    const std::string_view entry = trim(text.substr(start, i - start));
    if (!entry.empty()) entries.push_back(entry);
    start = i + 1;
  }
  return entries;
}

// XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async (warning when the user's was another) and, unless the
// user set it, XLA_PYTHON_CLIENT_PREALLOCATE=false: plan_child_environment's comment says why.
void add_xla_settings(ChildEnvironment& env, const CurrentEnv& current) {
  const std::string xla_allocator_text = current.xla_allocator.value_or("");
  const std::string_view xla_allocator = trim(xla_allocator_text);
  if (!xla_allocator.empty() && xla_allocator != kXlaAllocator) {
    env.warnings.push_back(fmt::format(
        "XLA_PYTHON_CLIENT_ALLOCATOR is {}; umswap sets it to {} because JAX's other allocators "
        "map their memory with cuMemCreate/cuMemMap, which umswap cannot manage",
        xla_allocator, kXlaAllocator));
  }
  env.set.push_back({"XLA_PYTHON_CLIENT_ALLOCATOR", std::string(kXlaAllocator)});
  if (!current.xla_preallocate || trim(*current.xla_preallocate).empty()) {
    env.set.push_back({"XLA_PYTHON_CLIENT_PREALLOCATE", "false"});
  }
}

// The user's own XLA_PYTHON_CLIENT_* values, or none: `umswap compare` applies each run's plan to
// its own environment, so a native run after a managed one must not inherit add_xla_settings().
void restore_xla_settings(ChildEnvironment& env, const CurrentEnv& current) {
  const std::pair<const char*, const std::optional<std::string>*> vars[] = {
      {"XLA_PYTHON_CLIENT_ALLOCATOR", &current.xla_allocator},
      {"XLA_PYTHON_CLIENT_PREALLOCATE", &current.xla_preallocate}};
  for (const auto& [name, value] : vars) {
    if (*value) {
      env.set.push_back({name, **value});
    } else {
      env.unset.emplace_back(name);
    }
  }
}

}  // namespace

AllocConfMerge merge_pytorch_alloc_conf(std::optional<std::string_view> current) {
  AllocConfMerge merge;
  bool placed = false;
  std::vector<std::string> out;
  for (const std::string_view entry : split_entries(current.value_or(""))) {
    const size_t colon = entry.find(':');
    const std::string key = without_blanks(entry.substr(0, colon));
    if (key != kExpandableKey) {
      out.emplace_back(entry);
      continue;
    }
    const std::string value =
        colon == std::string_view::npos ? std::string() : without_blanks(entry.substr(colon + 1));
    if (value != "False" && merge.replaced.empty()) merge.replaced = value.empty() ? "''" : value;
    if (!placed) {
      // A False entry keeps the user's own spelling; anything else is rewritten. Later
      // duplicates are dropped (PyTorch would let the last one win).
      out.emplace_back(value == "False" ? std::string(entry) : std::string(kExpandableOff));
      placed = true;
    }
  }
  if (!placed) out.emplace_back(kExpandableOff);
  merge.value = fmt::format("{}", fmt::join(out, ","));
  return merge;
}

std::string prepend_ld_preload(std::string_view library, std::optional<std::string_view> current) {
  std::string out(library);
  const std::string_view rest = current.value_or("");
  size_t start = 0;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i < rest.size() && rest[i] != ':' && !is_blank(rest[i])) continue;
    const std::string_view entry = rest.substr(start, i - start);
    start = i + 1;
    if (entry.empty() || entry == library) continue;
    out += ':';
    out += entry;
  }
  return out;
}

ChildEnvironment plan_child_environment(const RunFlags& flags, const CurrentEnv& current,
                                        std::string_view library_path) {
  ChildEnvironment env;
  env.set.push_back({"LD_PRELOAD", prepend_ld_preload(library_path, current.ld_preload)});

  // `source` names the variable the text came from, for the warning.
  auto merge_into = [&](const char* name, const char* source,
                        const std::optional<std::string>& base) {
    const AllocConfMerge merge = merge_pytorch_alloc_conf(base);
    if (!merge.replaced.empty()) {
      env.warnings.push_back(fmt::format(
          "{} has expandable_segments:{}; umswap sets expandable_segments:False: engine um "
          "cannot back expandable segments (cuMemCreate/cuMemMap memory) with managed memory, "
          "and under engine vmm a tensor across several of their handles is reached partly over "
          "the link, which changes what cuDNN's dropout attention computes (docs/pytorch.md)",
          source, merge.replaced));
    }
    env.set.push_back({name, merge.value});
  };
  // Expandable segments are off under both engines: engine um cannot back them with managed
  // memory; under engine vmm a tensor across several of their handles would be found by its first
  // only, and the rest read over the link, which changed cuDNN's dropout attention's output on an
  // H200 (run 216, docs/lab/2026-12-02-vmm-handles-checked-and-windows.md), so the library leaves
  // PyTorch's handles to the driver (hooks/driver_hooks.cpp, not_virtualized()).
  if (current.pytorch_cuda_alloc_conf || !current.pytorch_alloc_conf) {
    merge_into("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF",
               current.pytorch_cuda_alloc_conf);
    if (current.pytorch_alloc_conf) {
      merge_into("PYTORCH_ALLOC_CONF", "PYTORCH_ALLOC_CONF", current.pytorch_alloc_conf);
    }
  } else {
    // Only PYTORCH_ALLOC_CONF is set: both variables get its merged text, so the user's keys
    // survive whichever of the two this PyTorch version reads first.
    merge_into("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", current.pytorch_alloc_conf);
    env.set.push_back({"PYTORCH_ALLOC_CONF", env.set.back().value});
  }

  // JAX's allocator, but in passthrough (JAX as it runs without umswap: compare's native row).
  // (`umswap replay` sets UMSWAP_MODE=replay below, whatever the user's variable says.)
  const bool passthrough =
      !flags.replay_trace && (flags.mode ? *flags.mode == Mode::passthrough
                                         : parse_mode(current.umswap_mode.value_or("")) ==
                                               std::optional<Mode>(Mode::passthrough));
  if (passthrough) {
    restore_xla_settings(env, current);
  } else {
    add_xla_settings(env, current);
  }

  if (flags.mode) env.set.push_back({"UMSWAP_MODE", std::string(to_string(*flags.mode))});
  if (flags.engine) env.set.push_back({"UMSWAP_ENGINE", std::string(to_string(*flags.engine))});
  if (flags.budget) env.set.push_back({"UMSWAP_BUDGET", flags.budget->to_string()});
  if (flags.managed_limit) {
    env.set.push_back({"UMSWAP_MANAGED_LIMIT", flags.managed_limit->to_string()});
  }
  if (flags.stats_path) env.set.push_back({"UMSWAP_STATS", *flags.stats_path});
  if (flags.verbose) env.set.push_back({"UMSWAP_VERBOSE", "1"});
  if (flags.quiet) env.set.push_back({"UMSWAP_VERBOSE", "quiet"});
  if (flags.verify) {
    env.set.push_back({"UMSWAP_EVICT_COPY", "1"});
    env.set.push_back({"UMSWAP_VERIFY", "1"});
  }
  if (flags.record) {
    // Absolute: the program may change directory before it exits and writes the trace.
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(flags.record->output, ec);
    env.set.push_back({"UMSWAP_TRACE", ec ? flags.record->output : absolute.string()});
    env.set.push_back({"UMSWAP_TRACE_ITERATIONS", std::to_string(flags.record->iterations)});
    if (!flags.record->marker.empty()) {
      env.set.push_back({"UMSWAP_ITERATION_MARKER", flags.record->marker});
    }
  }
  if (flags.replay_trace) {
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(*flags.replay_trace, ec);
    env.set.push_back({"UMSWAP_MODE", "replay"});
    env.set.push_back({"UMSWAP_REPLAY", ec ? *flags.replay_trace : absolute.string()});
  }
  return env;
}

CurrentEnv read_current_env() {
  auto value = [](const char* name) {
    const char* v = env_get(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  return {.ld_preload = value("LD_PRELOAD"),
          .pytorch_cuda_alloc_conf = value("PYTORCH_CUDA_ALLOC_CONF"),
          .pytorch_alloc_conf = value("PYTORCH_ALLOC_CONF"),
          .xla_allocator = value("XLA_PYTHON_CLIENT_ALLOCATOR"),
          .xla_preallocate = value("XLA_PYTHON_CLIENT_PREALLOCATE"),
          .umswap_mode = value("UMSWAP_MODE")};
}

std::string apply_child_environment(const ChildEnvironment& env) {
  for (const std::string& name : env.unset) ::unsetenv(name.c_str());
  for (const EnvVar& var : env.set) {
    if (::setenv(var.name.c_str(), var.value.c_str(), 1) != 0) return var.name;
  }
  return {};
}

// `umswap compare`'s runs (compare.h).
ChildEnvironment plan_compare_environment(const CompareRunSettings& settings,
                                          const CurrentEnv& current,
                                          std::string_view library_path) {
  RunFlags flags;
  flags.engine = settings.run == CompareRun::vmm ? Engine::vmm : Engine::um;
  // Native is passthrough: JAX's own allocator settings (plan_child_environment). The user's
  // UMSWAP_MODE has no say: compare sets each run's mode itself.
  if (settings.run == CompareRun::native) flags.mode = Mode::passthrough;
  CurrentEnv without_mode = current;
  without_mode.umswap_mode.reset();
  ChildEnvironment env = plan_child_environment(flags, without_mode, library_path);
  std::string_view mode;
  switch (settings.run) {
    case CompareRun::native:
      mode = "passthrough";
      break;
    case CompareRun::managed:
      mode = "managed";
      break;
    case CompareRun::online:
    case CompareRun::record:
    case CompareRun::vmm:
      mode = "online";
      break;
    case CompareRun::replay:
      mode = "replay";
      break;
  }
  if (!flags.mode) env.set.push_back({"UMSWAP_MODE", std::string(mode)});
  env.set.push_back({"UMSWAP_STATS", settings.stats_path});
  const bool budgeted = settings.run == CompareRun::online || settings.run == CompareRun::record ||
                        settings.run == CompareRun::replay || settings.run == CompareRun::vmm;
  if (budgeted && settings.budget_bytes) {
    env.set.push_back({"UMSWAP_BUDGET", std::to_string(*settings.budget_bytes)});
  } else {
    env.unset.push_back("UMSWAP_BUDGET");
  }
  if (settings.run == CompareRun::record) {
    env.set.push_back({"UMSWAP_TRACE", settings.trace_path});
  } else {
    env.unset.push_back("UMSWAP_TRACE");
  }
  if (settings.run == CompareRun::replay) {
    env.set.push_back({"UMSWAP_REPLAY", settings.trace_path});
  } else {
    env.unset.push_back("UMSWAP_REPLAY");
  }
  if (settings.managed_limit_bytes) {
    env.set.push_back({"UMSWAP_MANAGED_LIMIT", std::to_string(*settings.managed_limit_bytes)});
  }
  if (!settings.torchrun_log_dir.empty()) {
    env.set.push_back({"PET_TEE", "1"});
    env.set.push_back({"PET_LOG_DIR", settings.torchrun_log_dir});
    env.set.push_back({"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", std::string(kRankPrefixTemplate)});
  }
  return env;
}

}  // namespace umswap::cli
