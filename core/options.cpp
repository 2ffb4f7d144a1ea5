#include "umswap/core/options.h"

#include <fmt/format.h>

#include "umswap/core/log.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>

namespace umswap {
namespace {

constexpr std::array kModes = {std::pair{Mode::online, std::string_view("online")},
                               std::pair{Mode::replay, std::string_view("replay")},
                               std::pair{Mode::managed, std::string_view("managed")},
                               std::pair{Mode::passthrough, std::string_view("passthrough")}};

constexpr std::array kEngines = {std::pair{Engine::um, std::string_view("um")},
                                 std::pair{Engine::vmm, std::string_view("vmm")}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// An experiment or a diagnostic (OptionInfo::advanced): only `umswap --help-all` lists it.
constexpr bool kAdvanced = true;

// Every option: its values, default and meaning. parse_options(), the help text and
// docs/options.md (cli/options_doc.cpp) all read this, so they cannot drift apart.
constexpr std::array kOptionTable = {
    OptionInfo{"UMSWAP_MODE", "online|replay|managed|passthrough", "online",
               "online: managed memory, advice learned from the first steady iteration; replay: "
               "advice planned from UMSWAP_REPLAY's trace; managed: managed memory, no advice; "
               "passthrough: hooks only"},
    OptionInfo{"UMSWAP_ENGINE", "um|vmm", "um",
               "um: managed memory, moved by the advisor; vmm (experimental): ranges mapped to "
               "GPU chunks up to the budget, host chunks after it, moved when a step reaches "
               "host chunks; no advisor (online and managed run the same; replay and --verify "
               "need um)",
               kAdvanced},
    OptionInfo{"UMSWAP_BUDGET", "SIZE", "0",
               "GPU-resident bytes to stay under (size or % of GPU memory); 0 = no budget"},
    OptionInfo{"UMSWAP_MANAGED_LIMIT", "SIZE", "0",
               "hard cap on managed bytes allocated (size or % of GPU memory); past it an "
               "allocation fails with out-of-memory; 0 = no cap"},
    OptionInfo{"UMSWAP_STATS", "PATH", "",
               "write a JSON stats file here at exit (`%p` is replaced by the process id)"},
    OptionInfo{"UMSWAP_VERBOSE", "quiet|0|1|2", "0",
               "quiet: warnings only (umswap run --quiet); 0: also one line when the first plan "
               "takes effect; 1: resolved options and notable events; 2: debug"},
    OptionInfo{"UMSWAP_CALLSITE_DEPTH", "0-32", "8",
               "stack frames hashed into an allocation's call-site identity (0-32; 0 = off)",
               kAdvanced},
    OptionInfo{"UMSWAP_TRACE", "PATH", "",
               "record an access trace (kernels, buffers, iterations) to this file at exit"},
    OptionInfo{"UMSWAP_TRACE_ITERATIONS", "N", "0",
               "write only the first N iterations to the trace file (0 = the whole run); the "
               "whole run is traced either way"},
    OptionInfo{"UMSWAP_ITERATION_MARKER", "NAME", "",
               "NVTX range name that starts an iteration (instead of detecting the period)"},
    OptionInfo{"UMSWAP_CUPTI_LIBRARY", "PATH", "", "libcupti.so to load (default: search)"},
    OptionInfo{"UMSWAP_REPLAY", "PATH", "",
               "trace to plan from in replay mode (`umswap replay` sets it)"},
    OptionInfo{"UMSWAP_PREFETCH_WAIT", "BOOL", "1",
               "1: a launch whose data the plan prefetches waits for that prefetch instead of "
               "taking page faults (a 2 s stall turns the waits off); 0: it faults the data in",
               kAdvanced},
    OptionInfo{"UMSWAP_EVICT_WAIT", "BOOL", "0",
               "1 (experimental): a launch waits for the evictions whose room it needs, so that "
               "the GPU holds the budget (with UMSWAP_PREFETCH_WAIT=1; docs/advisor.md); 0: "
               "evictions run beside the program",
               kAdvanced},
    OptionInfo{"UMSWAP_EVICT_COPY", "BOOL", "0",
               "0: evictions are the driver's migrations to the host, which keep every access "
               "correct, foreseen or not; 1 (fast, not safe for every program): copies to pinned "
               "host memory (52 GB/s against the driver's 11-18), the GPU pages discarded, both "
               "waits on: a kernel that reaches a discarded range through a pointer umswap cannot "
               "see (a pointer table in device memory) reads garbage; check a program with "
               "`umswap run --verify` first; docs/advisor.md"},
    OptionInfo{"UMSWAP_VERIFY", "BOOL", "0",
               "set by `umswap run --verify`: with UMSWAP_EVICT_COPY, each range copied to the "
               "host is hashed on the GPU as it leaves and once it is back, and the two must "
               "agree (the stats' advisor.evict_copy.round_trips)",
               kAdvanced},
    OptionInfo{"UMSWAP_LEARN_EVICT", "BOOL", "1",
               "1: while the advisor learns (no plan in force yet), each launch first sends the "
               "least recently used 2 MiB blocks to the host, on its own stream, until the blocks "
               "counted on the GPU with its own fit in the budget, then prefetches its own; 0: "
               "the learning iterations fault the whole footprint in (docs/advisor.md)",
               kAdvanced},
    OptionInfo{"UMSWAP_DEBUG", "hang-stacks,op-log,keep-pages", "",
               "diagnostics, any of them, comma-separated; hang-stacks: with the watchdog's "
               "stall report (launches held 2 s by the advisor, 10 s while copies are live, or "
               "one launch 30 s in umswap's launch path), every thread of the program prints its "
               "call stack to stderr; op-log: the advisor's calls on each stream are followed by "
               "a write of their number, and a stall report says which call each stream is held "
               "at; keep-pages: with UMSWAP_EVICT_COPY=1, the same copies out and back, the GPU "
               "pages kept (a wrong result with copies that keep-pages does not show came from a "
               "read of a discarded range; docs/advisor.md)",
               kAdvanced},
    OptionInfo{"UMSWAP_ASYNC_SLABS", "BOOL", "1",
               "1: cudaMallocAsync allocations are blocks of umswap's managed slabs (exact "
               "extents for the advisor); 0: the driver's managed memory pool",
               kAdvanced},
    OptionInfo{"UMSWAP_LIFETIMES", "BOOL", "1",
               "1: the advisor plans with the allocations and frees of slab blocks: dead data "
               "is discarded at its free, not moved; 0: every byte a kernel touched is live",
               kAdvanced},
    OptionInfo{"UMSWAP_PLACEMENT", "BOOL", "1",
               "1 (with UMSWAP_LIFETIMES): once an iteration repeats, its large slab blocks go "
               "to planned addresses packed in one arena; 0: first fit in slabs",
               kAdvanced},
};

}  // namespace

std::string_view to_string(Mode mode) {
  for (const auto& [m, name] : kModes) {
    if (m == mode) return name;
  }
  return "unknown";
}

std::optional<Mode> parse_mode(std::string_view text) {
  const std::string t = lower(trim(text));
  for (const auto& [m, name] : kModes) {
    if (t == name) return m;
  }
  return std::nullopt;
}

std::string_view to_string(Engine engine) {
  for (const auto& [e, name] : kEngines) {
    if (e == engine) return name;
  }
  return "unknown";
}

std::optional<Engine> parse_engine(std::string_view text) {
  const std::string t = lower(trim(text));
  for (const auto& [e, name] : kEngines) {
    if (t == name) return e;
  }
  return std::nullopt;
}

uint64_t SizeSpec::resolve(uint64_t total) const {
  if (!is_percent) return bytes;
  const long double b = static_cast<long double>(total) * percent / 100.0L;
  return b >= 18446744073709551615.0L ? UINT64_MAX : static_cast<uint64_t>(b);
}

std::string SizeSpec::to_string() const {
  if (is_percent) {
    // Shortest fixed-point text that parses back to the same double (no exponent: parse_size
    // takes none).
    char text[400];
    const auto [end, ec] =
        std::to_chars(text, text + sizeof(text), percent, std::chars_format::fixed);
    return ec == std::errc() ? std::string(text, end) + "%" : fmt::format("{:f}%", percent);
  }
  if (bytes == 0) return "0";
  constexpr std::array kSuffixes = {'T', 'G', 'M', 'K'};
  for (size_t i = 0; i < kSuffixes.size(); ++i) {
    const uint64_t unit = uint64_t{1} << (10 * (kSuffixes.size() - i));
    if (bytes % unit == 0) return fmt::format("{}{}", bytes / unit, kSuffixes[i]);
  }
  return fmt::format("{}", bytes);
}

std::optional<SizeSpec> parse_size(std::string_view text, std::string* error) {
  auto fail = [&](std::string why) -> std::optional<SizeSpec> {
    if (error) *error = std::move(why);
    return std::nullopt;
  };
  const std::string_view t = trim(text);
  if (t.empty()) return fail("is empty (examples: 16G, 512M, 75%)");

  // Number part: digits with an optional fraction. No sign, no exponent.
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  const std::string_view number = t.substr(0, i);
  const std::string unit = lower(trim(t.substr(i)));
  double value = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size() ||
      !std::isfinite(value)) {
    return fail("is not a size (examples: 16G, 512M, 75%)");
  }

  if (unit == "%") {
    if (value > 1000.0) return fail("is more than 1000% of GPU memory");
    return SizeSpec{.bytes = 0, .percent = value, .is_percent = true};
  }
  int shift = -1;
  if (unit.empty() || unit == "b") shift = 0;
  constexpr std::string_view kLetters = "kmgtp";
  for (size_t k = 0; k < kLetters.size() && shift < 0; ++k) {
    const char c = kLetters[k];
    if (unit == std::string{c} || unit == std::string{c} + "b" || unit == std::string{c} + "ib") {
      shift = static_cast<int>(10 * (k + 1));
    }
  }
  if (shift < 0) return fail("has an unknown unit (use K, M, G, T, P or %)");
  const long double bytes = std::ldexp(static_cast<long double>(value), shift);
  if (bytes >= 18446744073709551615.0L) return fail("is too large");
  if (shift == 0 && value != std::floor(value)) return fail("is a fraction of a byte");
  return SizeSpec{.bytes = static_cast<uint64_t>(bytes), .percent = 0.0, .is_percent = false};
}

std::optional<bool> parse_bool(std::string_view text) {
  const std::string t = lower(trim(text));
  if (t == "1" || t == "on" || t == "true" || t == "yes") return true;
  if (t == "0" || t == "off" || t == "false" || t == "no") return false;
  return std::nullopt;
}

std::string format_bytes(uint64_t bytes) {
  constexpr std::array kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  size_t u = 0;
  // 1023.996 KiB prints as 1024.00 KiB with two decimals: move to the next unit first.
  while (v >= 1023.995 && u + 1 < kUnits.size()) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {}", v, kUnits[u]);
}

constexpr std::array kDebugWords = {
    std::pair{std::string_view("hang-stacks"), &DebugOptions::hang_stacks},
    std::pair{std::string_view("op-log"), &DebugOptions::op_log},
    std::pair{std::string_view("keep-pages"), &DebugOptions::keep_pages}};

std::optional<DebugOptions> parse_debug(std::string_view text, std::string* error) {
  DebugOptions debug;
  for (std::string_view rest = text;;) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    if (!item.empty()) {
      const std::string word = lower(item);
      bool known = false;
      for (const auto& [name, field] : kDebugWords) {
        if (word == name) {
          debug.*field = true;
          known = true;
        }
      }
      if (!known) {
        if (error) {
          *error = fmt::format(
              "has an unknown word '{}' (use hang-stacks, op-log or keep-pages, comma-separated)",
              item);
        }
        return std::nullopt;
      }
    }
    if (comma == std::string_view::npos) return debug;
    rest.remove_prefix(comma + 1);
  }
}

std::string to_string(const DebugOptions& debug) {
  std::string out;
  for (const auto& [name, field] : kDebugWords) {
    if (!(debug.*field)) continue;
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

std::span<const OptionInfo> option_table() {
  return kOptionTable;
}

// Options that were measured, did not help and are gone (docs/lab/tried-and-removed.md): set,
// each is named in a warning and ignored.
constexpr RemovedOption kRemovedOptions[] = {
    {"UMSWAP_POPULATE_AHEAD", "populating dropped pages ahead of their use made no difference"},
    {"UMSWAP_POPULATE_SIDE", "populating dropped pages beside the program's stream did not help"},
    {"UMSWAP_DISCARD_FREED", "discarding every freed block made PyTorch 4-80x slower"},
    {"UMSWAP_ROOM_SLACK", "letting launches run ahead of the plan's evictions did not help"},
    {"UMSWAP_EVICT_COPY_CHUNK", "copying back in growing pieces did not help"},
    {"UMSWAP_EVICT_COPY_OUT_PIECE", "copying out in pieces made tens of thousands of faults"},
    {"UMSWAP_EVICT_COPY_AHEAD", "copying out before the last use did not make GPT-2 faster"},
    {"UMSWAP_MANAGED_OPS_CAP",
     "capping the advisor's waiting calls did not end the hang it was for"},
    {"UMSWAP_HOST_GATE", "waiting for launches on the host was either slow or hung"},
    {"UMSWAP_EVICT_COPY_ROOM", "copies back waiting only for their room made no difference"},
    {"UMSWAP_CLOSE_CALLS",
     "0 (no writes) let the cuDNN sample hang with copies, 1 (more writes) slowed GPT-2"},
    {"UMSWAP_EVICT_COPY_SIDE_STREAMS",
     "0 (populates and discards on each copy's stream, not streams of their own) made GPT-2 "
     "about 3% slower"},
    {"UMSWAP_EVICT_COPY_PATH",
     "copy engines made GPT-2 about 4% slower than the copy kernel (still its fallback)"},
    {"UMSWAP_HANG_STACKS", "the diagnostics are one option", "UMSWAP_DEBUG=hang-stacks"},
    {"UMSWAP_OP_LOG", "the diagnostics are one option", "UMSWAP_DEBUG=op-log"},
};

std::span<const RemovedOption> removed_options() {
  return kRemovedOptions;
}

Options parse_options(const EnvLookup& lookup, std::vector<std::string>* warnings) {
  Options options;
  for (const auto& [name, why, replacement] : kRemovedOptions) {
    const char* v = lookup ? lookup(name) : nullptr;
    if (!v || !warnings) continue;
    warnings->push_back(replacement
                            ? fmt::format("{} was replaced by {}; ignored", name, replacement)
                            : fmt::format("{} is no longer an option ({}); ignored", name, why));
  }
  auto warn = [&](const char* name, const char* value, std::string_view why,
                  std::string_view default_text) {
    if (warnings) {
      warnings->push_back(fmt::format("{}='{}' {}; using the default {}", name, value, why,
                                      default_text.empty() ? "(unset)" : default_text));
    }
  };
  auto read = [&](const char* name) -> const char* {
    const char* v = lookup ? lookup(name) : nullptr;
    return (v && !trim(v).empty()) ? v : nullptr;
  };
  // A boolean option (1/0, on/off); a bad value keeps the default and says which.
  auto read_bool = [&](const char* name, bool* field, std::string_view default_text) {
    if (const char* v = read(name)) {
      if (auto b = parse_bool(trim(v))) {
        *field = *b;
      } else {
        warn(name, v, "is not a boolean (1/0, on/off)", default_text);
      }
    }
  };
  // A whole number from lo to hi; a bad value keeps the default and says which.
  auto read_int = [&](const char* name, int lo, int hi, int* field, std::string_view default_text) {
    if (const char* v = read(name)) {
      const std::string_view t = trim(v);
      int n = lo - 1;
      const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
      if (ec == std::errc() && end == t.data() + t.size() && n >= lo && n <= hi) {
        *field = n;
      } else {
        warn(name, v, fmt::format("is not a whole number from {} to {}", lo, hi), default_text);
      }
    }
  };

  if (const char* v = read("UMSWAP_MODE")) {
    if (auto m = parse_mode(v)) {
      options.mode = *m;
    } else {
      warn("UMSWAP_MODE", v, "is not a mode (online, replay, managed, passthrough)", "online");
    }
  }
  if (const char* v = read("UMSWAP_ENGINE")) {
    if (auto e = parse_engine(v)) {
      options.engine = *e;
    } else {
      warn("UMSWAP_ENGINE", v, "is not an engine (um, vmm)", "um");
    }
  }
  for (auto [name, field] : {std::pair{"UMSWAP_BUDGET", &options.budget},
                             std::pair{"UMSWAP_MANAGED_LIMIT", &options.managed_limit}}) {
    if (const char* v = read(name)) {
      std::string why;
      if (auto s = parse_size(v, &why)) {
        *field = *s;
      } else {
        warn(name, v, why, "0");
      }
    }
  }
  if (const char* v = read("UMSWAP_STATS")) options.stats_path = std::string(trim(v));
  if (const char* v = read("UMSWAP_VERBOSE")) {
    const std::string_view t = trim(v);
    if (auto b = parse_bool(t)) {
      options.verbose = *b ? 1 : 0;
    } else if (t == "2") {
      options.verbose = 2;
    } else if (t == "quiet") {
      options.verbose = kQuietVerbosity;
    } else {
      warn("UMSWAP_VERBOSE", v, "is not quiet, 0, 1 or 2", "0");
    }
  }
  read_int("UMSWAP_CALLSITE_DEPTH", 0, 32, &options.callsite_depth, "8");
  if (const char* v = read("UMSWAP_TRACE")) options.trace_path = std::string(trim(v));
  if (const char* v = read("UMSWAP_TRACE_ITERATIONS")) {
    const std::string_view t = trim(v);
    uint64_t n = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
    if (ec == std::errc() && end == t.data() + t.size()) {
      options.trace_iterations = n;
    } else {
      warn("UMSWAP_TRACE_ITERATIONS", v, "is not a whole number", "0");
    }
  }
  if (const char* v = read("UMSWAP_ITERATION_MARKER")) options.iteration_marker = trim(v);
  if (const char* v = read("UMSWAP_CUPTI_LIBRARY")) options.cupti_library = trim(v);
  if (const char* v = read("UMSWAP_REPLAY")) options.replay_path = trim(v);
  read_bool("UMSWAP_PREFETCH_WAIT", &options.prefetch_wait, "1");
  read_bool("UMSWAP_EVICT_WAIT", &options.evict_wait, "0");
  // `keep` was a value here until UMSWAP_DEBUG took the diagnostics: a bad value that says where
  // it went.
  if (const char* v = read("UMSWAP_EVICT_COPY"); v && lower(trim(v)) == "keep") {
    warn("UMSWAP_EVICT_COPY", v,
         "is no longer a value (for the copies with their GPU pages kept set UMSWAP_EVICT_COPY=1 "
         "UMSWAP_DEBUG=keep-pages)",
         "0");
  } else {
    read_bool("UMSWAP_EVICT_COPY", &options.evict_copy, "0");
  }
  read_bool("UMSWAP_VERIFY", &options.verify, "0");
  read_bool("UMSWAP_LEARN_EVICT", &options.learn_evict, "1");
  if (const char* v = read("UMSWAP_DEBUG")) {
    std::string why;
    if (const std::optional<DebugOptions> debug = parse_debug(v, &why)) {
      options.debug = *debug;
    } else {
      warn("UMSWAP_DEBUG", v, why, "");
    }
  }
  read_bool("UMSWAP_ASYNC_SLABS", &options.async_slabs, "1");
  read_bool("UMSWAP_LIFETIMES", &options.lifetimes, "1");
  read_bool("UMSWAP_PLACEMENT", &options.placement, "1");
  if (options.mode == Mode::replay && options.replay_path.empty() && warnings) {
    warnings->push_back(
        "UMSWAP_MODE=replay needs UMSWAP_REPLAY (a trace file); learning online instead");
    options.mode = Mode::online;
  }
  // Engine vmm runs no advisor yet, so nothing it could replay or verify.
  if (options.engine == Engine::vmm && (options.mode == Mode::replay || options.verify)) {
    if (warnings) {
      warnings->push_back(fmt::format(
          "UMSWAP_ENGINE=vmm does not run the advisor yet, so it cannot {}; using engine um",
          options.mode == Mode::replay ? "replay a trace (UMSWAP_MODE=replay)"
                                       : "verify evictions (UMSWAP_VERIFY)"));
    }
    options.engine = Engine::um;
  }
  return options;
}

std::vector<std::string> describe(const Options& options) {
  return {
      fmt::format("UMSWAP_MODE={}", to_string(options.mode)),
      fmt::format("UMSWAP_ENGINE={}", to_string(options.engine)),
      fmt::format("UMSWAP_BUDGET={}", options.budget.to_string()),
      fmt::format("UMSWAP_MANAGED_LIMIT={}", options.managed_limit.to_string()),
      fmt::format("UMSWAP_STATS={}", options.stats_path),
      options.verbose == kQuietVerbosity ? std::string("UMSWAP_VERBOSE=quiet")
                                         : fmt::format("UMSWAP_VERBOSE={}", options.verbose),
      fmt::format("UMSWAP_CALLSITE_DEPTH={}", options.callsite_depth),
      fmt::format("UMSWAP_TRACE={}", options.trace_path),
      fmt::format("UMSWAP_TRACE_ITERATIONS={}", options.trace_iterations),
      fmt::format("UMSWAP_ITERATION_MARKER={}", options.iteration_marker),
      fmt::format("UMSWAP_CUPTI_LIBRARY={}", options.cupti_library),
      fmt::format("UMSWAP_REPLAY={}", options.replay_path),
      fmt::format("UMSWAP_PREFETCH_WAIT={}", options.prefetch_wait ? 1 : 0),
      fmt::format("UMSWAP_EVICT_WAIT={}", options.evict_wait ? 1 : 0),
      fmt::format("UMSWAP_EVICT_COPY={}", options.evict_copy ? 1 : 0),
      fmt::format("UMSWAP_VERIFY={}", options.verify ? 1 : 0),
      fmt::format("UMSWAP_LEARN_EVICT={}", options.learn_evict ? 1 : 0),
      fmt::format("UMSWAP_DEBUG={}", to_string(options.debug)),
      fmt::format("UMSWAP_ASYNC_SLABS={}", options.async_slabs ? 1 : 0),
      fmt::format("UMSWAP_LIFETIMES={}", options.lifetimes ? 1 : 0),
      fmt::format("UMSWAP_PLACEMENT={}", options.placement ? 1 : 0),
  };
}

}  // namespace umswap
