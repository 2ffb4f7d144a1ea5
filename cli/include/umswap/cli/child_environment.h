// What `umswap run` changes in the command's environment: LD_PRELOAD, PyTorch's and JAX's
// allocator settings and the UMSWAP_* options given as flags.
//
// Pure: the caller passes the current values in and applies the result with setenv, so all of
// it is unit-tested without starting a process.
#pragma once

#include "umswap/cli/run_flags.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace umswap::cli {

struct EnvVar {
  std::string name;
  std::string value;
  bool operator==(const EnvVar&) const = default;
};

struct AllocConfMerge {
  std::string value;     // the setting to export
  std::string replaced;  // the user's expandable_segments value, when it was not False
};

// Puts `expandable_segments:False` into a PyTorch allocator setting (PYTORCH_CUDA_ALLOC_CONF:
// comma-separated `key:value` entries; a value may be a bracketed list holding commas). Other
// entries keep their text (trimmed) and their order; an existing expandable_segments entry is
// rewritten in place, or the entry is appended. Unset or blank input gives just the entry.
// Why: expandable segments are mapped with cuMemCreate/cuMemMap, which managed memory cannot
// back, so umswap could not manage them.
AllocConfMerge merge_pytorch_alloc_conf(std::optional<std::string_view> current);

// `library` first, then the entries of `current` (split at ':' and blanks, as ld.so does) in
// their order, without empty entries or other copies of `library`; joined with ':'.
std::string prepend_ld_preload(std::string_view library, std::optional<std::string_view> current);

// The parts of the user's environment that the plan depends on (nullopt = unset).
struct CurrentEnv {
  std::optional<std::string> ld_preload;
  std::optional<std::string> pytorch_cuda_alloc_conf;
  std::optional<std::string> pytorch_alloc_conf;  // PyTorch >= 2.9's name for the same setting
  std::optional<std::string> xla_allocator = std::nullopt;    // XLA_PYTHON_CLIENT_ALLOCATOR
  std::optional<std::string> xla_preallocate = std::nullopt;  // XLA_PYTHON_CLIENT_PREALLOCATE
  std::optional<std::string> umswap_mode = std::nullopt;      // UMSWAP_MODE (without --mode)
};

struct ChildEnvironment {
  std::vector<EnvVar> set;         // LD_PRELOAD, PYTORCH_*ALLOC_CONF, XLA_PYTHON_CLIENT_*, UMSWAP_*
  std::vector<std::string> unset;  // variables to remove (compare clears what a run must not see)
  std::vector<std::string> warnings;  // one sentence each, without the `umswap: warning: ` prefix
};

// The variables to set for the command. `library_path` must be absolute. PYTORCH_CUDA_ALLOC_CONF
// is always set (in every mode, so passthrough stays a like-for-like baseline); it starts from the
// user's PYTORCH_CUDA_ALLOC_CONF, or from PYTORCH_ALLOC_CONF when only that is set, so the user's
// other keys survive whichever of the two PyTorch reads. PYTORCH_ALLOC_CONF is rewritten only
// when the user set it.
// JAX (XLA), in every mode but passthrough (--mode, else the user's UMSWAP_MODE):
// XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async, whatever the user set (with a warning when it was
// something else), and XLA_PYTHON_CLIENT_PREALLOCATE=false unless the user set it. In
// passthrough both are the user's own (set back, or unset when the user had none: compare applies
// one run's plan after another's), so that JAX runs as it does without umswap. XLA's
// other allocators (its default BFC pool, `platform`) map their memory with cuMemCreate/cuMemMap,
// which umswap cannot manage (JAX 0.11 maps 75% of the GPU as one handle); `cuda_async` makes one
// stream-ordered allocation per buffer, which umswap serves and plans like PyTorch's async
// backend; preallocation would make that pool's first allocation 75% of the memory. Other
// programs do not read these variables.
// `umswap replay` sets UMSWAP_MODE=replay and UMSWAP_REPLAY=<flags.replay_trace, made absolute>.
ChildEnvironment plan_child_environment(const RunFlags& flags, const CurrentEnv& current,
                                        std::string_view library_path);

// Not pure: this process's LD_PRELOAD, PyTorch and XLA allocator settings and UMSWAP_MODE.
CurrentEnv read_current_env();

// Not pure: removes `env.unset` from this process's environment and sets `env.set` (the command
// inherits them). Returns the name of the first variable that could not be set, or "" when all
// were.
std::string apply_child_environment(const ChildEnvironment& env);

}  // namespace umswap::cli
