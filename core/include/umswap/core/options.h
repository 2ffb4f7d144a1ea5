// umswap's options: one table of UMSWAP_* variables, parsed once with one grammar.
//
// Sizes: a byte count with an optional binary suffix (`512M`, `16G`, `1.5T`, `4096`), or a
// percentage of the GPU's memory (`75%`). `0` means "none" (no budget, no cap).
// Booleans: 1/0, on/off, true/false, yes/no. A bad value is never fatal: it produces one warning
// naming the variable and the default used instead.
//
// Pure code: no CUDA, no getenv (the caller passes a lookup function), so it is unit-tested on a
// machine without a GPU. Not thread-safe to parse concurrently into one Options; Options itself is
// plain data.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace umswap {

// What the preload library does with allocations.
enum class Mode {
  online,       // managed memory; the advisor learns the loop online and applies it (the default)
  replay,       // managed memory; the advisor plans from a recorded trace (UMSWAP_REPLAY)
  managed,      // every device allocation becomes CUDA managed memory, no advice
  passthrough,  // hooks are loaded, nothing is redirected: the overhead baseline
};

// Whether allocations become managed memory in this mode.
inline bool redirects(Mode mode) {
  return mode != Mode::passthrough;
}
// Whether the advisor runs in this mode.
inline bool advises(Mode mode) {
  return mode == Mode::online || mode == Mode::replay;
}

std::string_view to_string(Mode mode);
std::optional<Mode> parse_mode(std::string_view text);

// Where device allocations live (DESIGN.md, "Two engines, one invariant").
enum class Engine {
  um,   // CUDA managed memory, moved by the advisor (the default)
  vmm,  // ranges umswap maps to 2 MiB chunks on the GPU (up to the budget), then on the host
        // (vmm/README.md); for now placement only: no advisor, nothing moves
};
std::string_view to_string(Engine engine);
std::optional<Engine> parse_engine(std::string_view text);

// A size given either in bytes or as a percentage of some total (the GPU's memory).
struct SizeSpec {
  uint64_t bytes = 0;
  double percent = 0.0;  // used when is_percent
  bool is_percent = false;

  // True when the spec means "none": 0 bytes or 0%.
  bool is_zero() const { return is_percent ? percent == 0.0 : bytes == 0; }
  // Bytes this spec stands for, given the total a percentage refers to.
  uint64_t resolve(uint64_t total) const;
  // Canonical text: `16G`, `1536M`, `75%`, `0`.
  std::string to_string() const;
  bool operator==(const SizeSpec&) const = default;
};

// Parses `16G`, `512m`, `1.5T`, `4096`, `75%`, `0`. Suffixes are binary (K = 1024). On failure
// returns nullopt and, if `error` is given, a sentence saying what was expected.
std::optional<SizeSpec> parse_size(std::string_view text, std::string* error = nullptr);
std::optional<bool> parse_bool(std::string_view text);
// Formats a byte count for people: `1.50 GiB`, `512.00 MiB`, `12 B`.
std::string format_bytes(uint64_t bytes);

// UMSWAP_DEBUG: the diagnostics asked for, none by default.
struct DebugOptions {
  // hang-stacks: every thread prints its stack when the watchdog reports a stall.
  bool hang_stacks = false;
  // op-log: the advisor's calls on each stream numbered on the GPU, for stall reports (op_log.h).
  bool op_log = false;
  // keep-pages: with UMSWAP_EVICT_COPY=1, the copies out and back as ever, the GPU pages kept.
  bool keep_pages = false;
  bool operator==(const DebugOptions&) const = default;
};
// Parses a comma-separated list of `hang-stacks`, `op-log` and `keep-pages` (any order, spaces
// around words, empty items skipped; empty = none). On an unknown word returns nullopt and, if
// `error` is given, a sentence naming it.
std::optional<DebugOptions> parse_debug(std::string_view text, std::string* error = nullptr);
// `hang-stacks,op-log,keep-pages` (those set, in that order); empty for none.
std::string to_string(const DebugOptions& debug);

struct Options {
  Mode mode = Mode::online;
  Engine engine = Engine::um;  // UMSWAP_ENGINE; vmm never runs the advisor (for now)
  SizeSpec budget;             // GPU-resident target; 0 = none (used by the advisor)
  SizeSpec managed_limit;      // hard cap on managed bytes allocated; 0 = no cap
  std::string stats_path;      // JSON stats written at exit; empty = none
  int verbose = 0;         // -1 quiet (kQuietVerbosity), 0 + notices, 1 + notable events, 2 debug
  int callsite_depth = 8;  // frames hashed into a buffer's call-site identity; 0 = off
  std::string trace_path;  // record an access trace here (CUPTI tracer); empty = off
  uint64_t trace_iterations = 0;  // the trace file holds the first N iterations; 0 = all
  std::string iteration_marker;   // NVTX range name that marks an iteration; empty = detect
  std::string cupti_library;      // libcupti to load; empty = search the usual places
  std::string replay_path;        // trace the replay mode plans from
  bool prefetch_wait = true;      // a launch waits for its late prefetch rather than fault
  bool evict_wait = false;        // a launch waits for the evictions the plan makes at it
  bool evict_copy = false;        // evictions copied to pinned host memory, GPU pages discarded
  bool verify = false;            // UMSWAP_VERIFY (umswap run --verify): round trips hashed
  bool learn_evict = true;        // UMSWAP_LEARN_EVICT: LRU evictions while learning
  DebugOptions debug;             // UMSWAP_DEBUG: diagnostics
  bool async_slabs = true;        // stream-ordered allocations from slabs, not the managed pool
  bool lifetimes = true;          // slabs: plan with block lifetimes; drop dead data at frees
  bool placement = true;          // slabs with lifetimes: pack an iteration's blocks in an arena
};

// One entry of the option table, for help texts, docs/options.md and `UMSWAP_VERBOSE` output.
struct OptionInfo {
  std::string_view name;  // UMSWAP_...
  // The values it takes: SIZE, BOOL (1/0, on/off, true/false, yes/no), N (a whole number), LO-HI
  // (a whole number in that range), PATH, NAME, or words and those forms between `|`; words
  // between `,`: any of them, comma-separated.
  std::string_view grammar;
  std::string_view default_text;  // as a user would write it; empty = unset
  std::string_view meaning;       // one line
  // An experiment or a diagnostic: `umswap --help` leaves it out, `umswap --help-all` lists it.
  bool advanced = false;
};
// Options measured, found not to help and removed, or folded into another: parse_options()
// names each one that is set in a warning (with what replaced it, if anything) and ignores it.
struct RemovedOption {
  const char* name;
  const char* why;
  const char* replacement = nullptr;  // `UMSWAP_DEBUG=op-log`: what to set instead; null: none
};
std::span<const RemovedOption> removed_options();
std::span<const OptionInfo> option_table();

using EnvLookup = std::function<const char*(const char* name)>;

// Reads every option through `lookup` (nullptr result = unset). Each bad value leaves the default
// in place and appends one warning of the form
// "UMSWAP_BUDGET='12Q' is not a size (examples: 16G, 512M, 75%); using the default 0".
Options parse_options(const EnvLookup& lookup, std::vector<std::string>* warnings);

// `UMSWAP_X=value` lines of every option as resolved, for UMSWAP_VERBOSE=1.
std::vector<std::string> describe(const Options& options);

}  // namespace umswap
