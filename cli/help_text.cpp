// The help text. Flags come from detail::kRunFlags, variables from umswap::option_table(), so
// the text always matches what the parser and the library accept.
#include "umswap/cli/command_line.h"
#include "umswap/cli/detail/compare_flag_table.h"
#include "umswap/cli/detail/run_flag_table.h"
#include "umswap/cli/detail/trace_command_usage.h"

#include <fmt/format.h>

#include <algorithm>

namespace umswap::cli {
namespace {

constexpr size_t kWidth = 100;

// Appends `text` word-wrapped to kWidth, the first line after `first` (which is padded to
// `indent` columns), the following lines indented by `indent`.
void append_wrapped(std::string& out, std::string_view first, size_t indent,
                    std::string_view text) {
  std::string line(first);
  if (line.size() + 1 > indent) {  // label too wide: the text starts on the next line
    out += line + "\n";
    line.clear();
  }
  line.resize(indent, ' ');
  bool line_has_words = false;
  while (!text.empty()) {
    const size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    if (line_has_words && line.size() + 1 + word.size() > kWidth) {
      out += line + "\n";
      line.assign(indent, ' ');
      line_has_words = false;
    }
    if (line_has_words) line += ' ';
    line += word;
    line_has_words = true;
  }
  out += line + "\n";
}

std::string_view default_of(std::string_view variable) {
  for (const OptionInfo& option : option_table()) {
    if (option.name == variable) return option.default_text;
  }
  return {};
}

}  // namespace

std::string help_text(bool all) {
  std::string out;
  out += fmt::format(
      "umswap {} - run an unmodified CUDA program with more memory than the GPU has.\n"
      "It preloads libumswap.so, which turns the program's device allocations into CUDA managed\n"
      "memory and can record which kernels touch which buffers in each training iteration.\n\n",
      UMSWAP_CLI_VERSION);
  out += fmt::format(
      "Usage:\n  {}\n  {}\n  {}\n  {}\n  {}\n  {}\n  {}\n  umswap --help | --help-all | "
      "--version\n\n",
      detail::kRunUsage, detail::kRecordUsage, detail::kReplayUsage, detail::kCompareUsage,
      detail::kReportUsage, detail::kTimelineUsage, detail::kPlansUsage);
  out += "Commands:\n";
  append_wrapped(out, "  run", 18, "run a command with libumswap.so preloaded");
  append_wrapped(out, "  record", 18,
                 "run it and record an access trace (CUPTI): -o FILE (required), --iterations N "
                 "(write only the first N iterations; 0 = all), --marker NAME (iterations start at "
                 "the NVTX mark or range NAME instead of being detected); takes run's options too");
  append_wrapped(out, "  replay", 18,
                 "run it with UMSWAP_MODE=replay and UMSWAP_REPLAY=TRACE (made absolute): the "
                 "advisor follows the recorded trace; the trace is read first, and one that "
                 "cannot be read (missing, damaged, another version) stops it with exit 1; takes "
                 "run's options except --mode");
  append_wrapped(out, "  compare", 18,
                 "run one command natively, on plain managed memory, with the online advisor and "
                 "with a recorded-then-replayed plan, and print one table (see below)");
  append_wrapped(out, "  report", 18,
                 "print what a trace file holds: iterations, kernels, buffers, working set, and "
                 "per iteration the bytes touched, faults and bytes moved");
  append_wrapped(out, "  timeline", 18,
                 "write a trace file's timeline as Chrome trace / Perfetto JSON (-o, --output "
                 "OUT.json; never the trace itself): one track per stream, iterations, page "
                 "faults, transfers each way; --iterations A-B (or N, from 0) draws only those "
                 "iterations, for traces too large to open whole");
  append_wrapped(out, "  plans", 18,
                 "list the plans `umswap run` cached (key, last use, runs, size, the command and "
                 "its folder), or clear them: all, or the KEYs given (each the start of one key)");
  out += "\nOptions of run:\n";
  for (const auto& flag : detail::kRunFlags) {
    const std::string label = flag.value_name.empty()
                                  ? fmt::format("  {}", flag.name)
                                  : fmt::format("  {} {}", flag.name, flag.value_name);
    std::string meaning(flag.meaning);
    if (flag.variable.empty()) {
      // A flag of umswap's own: no variable to name.
    } else if (flag.value_name.empty()) {
      meaning += fmt::format(" [sets {}={}]", flag.variable, flag.sets);
    } else {
      const std::string_view def = default_of(flag.variable);
      meaning += fmt::format(" [sets {}; default: {}]", flag.variable, def.empty() ? "none" : def);
    }
    append_wrapped(out, label, 18, meaning);
  }
  append_wrapped(out, "  -h, --help", 18, "print this text");
  out += "\nOptions of compare:\n";
  for (const auto& flag : detail::kCompareFlags) {
    const std::string label = flag.value_name.empty()
                                  ? fmt::format("  {}", flag.name)
                                  : fmt::format("  {} {}", flag.name, flag.value_name);
    append_wrapped(out, label, 18, flag.meaning);
  }
  out += "\n";
  append_wrapped(
      out, "", 2,
      "The runs: native (UMSWAP_MODE=passthrough), managed, online (UMSWAP_BUDGET), replay "
      "(a record run with UMSWAP_TRACE, then UMSWAP_MODE=replay), and when asked for, vmm "
      "(UMSWAP_ENGINE=vmm at the budget; the others get UMSWAP_ENGINE=um). Each child gets "
      "UMSWAP_STATS "
      "and keeps your UMSWAP_MANAGED_LIMIT; its output goes to a temporary directory, kept when "
      "a run fails. Without a command, compare runs the bundled cudnn_vgg16 next to umswap, at "
      "the largest batch of 64, 32, 16, 8 whose footprint fits in 80% of the GPU's free memory "
      "(and under UMSWAP_MANAGED_LIMIT), for --steps-hint steps (20); it refuses when even batch "
      "8 does not fit, and sets UMSWAP_MANAGED_LIMIT to that bound when you have not.");
  out += "\n";
  append_wrapped(
      out, "", 2,
      "Baselines: --baselines offload,checkpoint runs the command natively again with --offload "
      "or --checkpoint appended (PyTorch's save_on_cpu and activation checkpointing; the "
      "bundled PyTorch samples accept both), after the modes. Each gets a row, and a line under "
      "the table: umswap's speed-up over save_on_cpu only when umswap's peak GPU-resident bytes "
      "are at or below the offload run's peak_allocated_bytes (else it says the comparison is "
      "not at equal memory), and how much faster or slower checkpointing is than umswap.");
  out += "\n";
  append_wrapped(
      out, "", 2,
      "torchrun: with a command `torchrun ...` or `python -m torch.distributed.run ...`, each "
      "rank gets its own rows (`online r1`), from its own lines (compare sets PET_TEE=1 and "
      "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE so torchrun puts the rank before each line) and "
      "its own stats file, compared with native's same rank; the budget is each rank's. replay "
      "is skipped for torchrun.");
  out += "\n";
  append_wrapped(
      out, "", 2,
      "Safety: on a shared GPU, set UMSWAP_MANAGED_LIMIT below the GPU's free memory before "
      "comparing your own command; managed memory past the GPU's capacity can hang the GPU "
      "for everyone on it.");
  out += "\nColumns of compare's table (- where a figure is not known):\n";
  for (const auto& column : detail::kCompareColumns) {
    append_wrapped(out, fmt::format("  {}", column.header), 14, column.meaning);
  }
  out +=
      "\nSIZE is a byte count with an optional binary suffix (512M, 16G, 1.5T) or a percentage of\n"
      "the GPU's memory (75%). A flag that is not given leaves your own UMSWAP_* variable as it "
      "is.\n\n";
  out += "Modes:\n";
  append_wrapped(out, "  online", 18,
                 "every device allocation becomes CUDA managed memory; the advisor learns the "
                 "training loop from its first repeated iterations and then prefetches and evicts "
                 "ahead of each kernel to keep GPU-resident memory under --budget (the default)");
  append_wrapped(out, "  replay", 18,
                 "as online, but planned from a recorded trace from the first iteration (set by "
                 "`umswap replay`); relearned from the program itself where the trace's buffers "
                 "are not found");
  append_wrapped(out, "  managed", 18,
                 "every device allocation becomes CUDA managed memory, moved by the driver's page "
                 "faults only (no advice)");
  append_wrapped(out, "  passthrough", 18,
                 "the library is loaded but redirects nothing: the baseline to compare with");
  out += "\nEnvironment read by libumswap.so in the command (default in brackets):\n";
  size_t name_width = 0, advanced = 0;
  for (const OptionInfo& option : option_table()) {
    name_width = std::max(name_width, option.name.size());
    if (option.advanced) ++advanced;
  }
  const auto list = [&](bool advanced_ones) {
    for (const OptionInfo& option : option_table()) {
      if (option.advanced != advanced_ones) continue;
      const std::string label =
          fmt::format("  {:<{}} [{}]", option.name, name_width,
                      option.default_text.empty() ? "unset" : option.default_text);
      append_wrapped(out, label, name_width + 14, option.meaning);
    }
  };
  list(false);
  if (all) {
    out +=
        "\nExperiments and diagnostics (the defaults are what was measured best; change them "
        "to\nmeasure, or when a report asks you to):\n";
    list(true);
  } else {
    out += fmt::format(
        "  ({} more, experiments and diagnostics whose defaults you need not change: umswap "
        "--help-all)\n",
        advanced);
  }
  out += "\nRead by umswap itself:\n";
  append_wrapped(out, fmt::format("  {:<{}}", "UMSWAP_LIBRARY", name_width), name_width + 14,
                 "libumswap.so to preload [default: <bindir>/../lib/libumswap.so, then "
                 "<bindir>/libumswap.so]");
  out +=
      "\numswap puts libumswap.so first in LD_PRELOAD and adds expandable_segments:False to\n"
      "PYTORCH_CUDA_ALLOC_CONF (memory mapped with cuMemCreate/cuMemMap cannot be managed\n"
      "memory; under --engine vmm a tensor across such mappings is partly read over the link).\n"
      "With PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync every tensor is one allocation and\n"
      "umswap knows where each begins and ends (docs/advisor.md says what that gains and what\n"
      "PyTorch then no longer supports). For JAX, but in passthrough, it sets\n"
      "XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async and, unless set,\n"
      "XLA_PYTHON_CLIENT_PREALLOCATE=false (docs/jax.md).\n\n";
  out += "Exit codes of run:\n";
  append_wrapped(out, "  N", 10, "the command's own exit code");
  append_wrapped(out, "  128+N", 10, "the command was killed by signal N (143: SIGTERM)");
  append_wrapped(out, "  126", 10, "the command was found but could not be run");
  append_wrapped(out, "  127", 10, "the command was not found");
  append_wrapped(out, "  2", 10,
                 "usage error: a bad flag or value, no command, libumswap.so not found");
  append_wrapped(out, "  3", 10,
                 "--verify: the command succeeded, but the check found an access to a range "
                 "while it was away, a copy out that overtook its copy back, or nothing evicted "
                 "to check (the report above says which)");
  out += "\nExit codes of report and timeline:\n";
  append_wrapped(out, "  0", 10, "done");
  append_wrapped(out, "  1", 10,
                 "the trace cannot be read (missing, damaged, a version this umswap does not "
                 "read) or the output cannot be written; one line names the file and the "
                 "problem");
  append_wrapped(out, "  2", 10, "usage error: no file, no -o, -o naming the trace itself");
  out += "\nExit codes of replay: those of run, and 1 when the trace cannot be read.\n";
  out += "\nExit codes of compare:\n";
  append_wrapped(out, "  0", 10,
                 "the native run succeeded (other modes may have failed: see their rows)");
  append_wrapped(out, "  1", 10,
                 "the native run failed, --json could not be written, or the default command "
                 "cannot run here (no GPU, too little free memory)");
  append_wrapped(out, "  2", 10, "usage error: a bad flag or value, libumswap.so not found");
  out +=
      "\nExamples:\n"
      "  umswap run --limit 60G -- python train.py\n"
      "  umswap run --budget 40G --limit 100G --stats stats-%p.json -- ./trainer --epochs 1\n"
      "  umswap replay run.umtrace --budget 40G -- python train.py\n"
      "  umswap compare --budget 50% --json compare.json -- python train.py\n"
      "  umswap report run.umtrace\n"
      "  umswap timeline run.umtrace -o run.json\n";
  return out;
}

}  // namespace umswap::cli
