// `umswap compare`: probe the links, size the default command, run each mode with its output
// captured, then print the table (compare_parse.cpp reads what the runs left, compare_rows.cpp
// makes the rows, compare_sizing.cpp the budget and batch, compare_render.cpp the table and JSON).
#include "umswap/cli/child_environment.h"
#include "umswap/cli/child_process.h"
#include "umswap/cli/cli_main.h"
#include "umswap/cli/compare.h"
#include "umswap/cli/preload_library.h"
#include "umswap/core/environment.h"
#include "umswap/core/log.h"
#include "umswap/core/stats_file.h"
#include "umswap/core/trace_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

namespace umswap::cli {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kDefaultSample = "cudnn_vgg16";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The last non-blank line of `text`, cut to 200 characters.
std::string last_line(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  const size_t nl = text.rfind('\n');
  std::string line(nl == std::string_view::npos ? text : text.substr(nl + 1));
  if (line.size() > 200) line = line.substr(0, 197) + "...";
  return line;
}

void say(const std::string& text) {
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

// Runs one command after another with captured output and progress lines `[k/n] name: ...`.
class Runner {
 public:
  Runner(fs::path dir, size_t total, uint64_t steps_hint)
      : dir_(std::move(dir)),
        total_(total),
        steps_hint_(steps_hint),
        tty_(::isatty(STDERR_FILENO) == 1) {}

  struct Result {
    int exit_code = 0;
    double wall_s = 0;
    std::string stdout_text;
    std::string last_stderr_line;
  };

  // One step more than planned (native's second run, which compare decides on late).
  void add_step() { ++total_; }

  // Prints `[k/n] name: <text>` as its own line, taking up step k.
  void skip(std::string_view name, std::string_view text) {
    ++index_;
    say(fmt::format("[{}/{}] {}: {}\n", index_, total_, name, text));
  }

  Result run(std::string_view name, const std::vector<std::string>& command) {
    ++index_;
    const std::string prefix = fmt::format("[{}/{}] {}", index_, total_, name);
    if (tty_) say(fmt::format("\r\033[K{}: starting", prefix));
    size_t lines_seen = 0;
    // A torchrun's lines carry their rank in front: the progress follows the first rank that
    // prints one. (Declared here: the callback runs after the block below has closed.)
    std::optional<int> followed;
    ChildCapture capture{
        .stdout_path = (dir_ / fmt::format("{}.out", name)).string(),
        .stderr_path = (dir_ / fmt::format("{}.err", name)).string(),
        .on_stdout_line = {},
    };
    if (tty_) {
      capture.on_stdout_line = [&](std::string_view line) {
        const auto [rank, text] = strip_rank_prefix(line);
        const std::optional<IterationLine> it = parse_iteration_line(text);
        if (!it) return;
        if (rank) {
          if (!followed) followed = rank;
          if (rank != followed) return;
        }
        ++lines_seen;
        const std::string of =
            steps_hint_ ? fmt::format(", {} of {}", lines_seen, steps_hint_) : std::string();
        say(fmt::format("\r\033[K{}: {}iter {} ({:.1f} ms{})", prefix,
                        rank ? fmt::format("rank {} ", *rank) : std::string(), it->index, it->ms,
                        of));
      };
    }
    const auto start = std::chrono::steady_clock::now();
    Result r;
    r.exit_code = run_child_captured(command, capture);
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.stdout_text = read_text(capture.stdout_path);
    r.last_stderr_line = last_line(read_text(capture.stderr_path));
    if (r.last_stderr_line.empty() && (r.exit_code == 126 || r.exit_code == 127)) {
      r.last_stderr_line = fmt::format("cannot run '{}'", command.empty() ? "" : command[0]);
    }
    const std::string clear = tty_ ? "\r\033[K" : "";
    if (r.exit_code == 0) {
      say(fmt::format("{}{}: done in {:.1f} s\n", clear, prefix, r.wall_s));
    } else {
      say(fmt::format("{}{}: failed (exit {}){}\n", clear, prefix, r.exit_code,
                      r.last_stderr_line.empty() ? "" : ": " + r.last_stderr_line));
    }
    return r;
  }

  // A run that does not need the library (the default command's footprint).
  Result run_quiet(std::string_view name, const std::vector<std::string>& command) {
    const ChildCapture capture{.stdout_path = (dir_ / fmt::format("{}.out", name)).string(),
                               .stderr_path = (dir_ / fmt::format("{}.err", name)).string(),
                               .on_stdout_line = {}};
    Result r;
    r.exit_code = run_child_captured(command, capture);
    r.stdout_text = read_text(capture.stdout_path);
    r.last_stderr_line = last_line(read_text(capture.stderr_path));
    return r;
  }

 private:
  fs::path dir_;
  size_t total_;
  uint64_t steps_hint_;
  bool tty_;
  size_t index_ = 0;
};

// What a finished run left: status, program output, stats.
ModeOutcome outcome_of(CompareMode mode, const Runner::Result& r, const fs::path& stats_path) {
  ModeOutcome o;
  o.mode = mode;
  o.exit_code = r.exit_code;
  o.wall_s = r.wall_s;
  o.output = parse_program_output(r.stdout_text);
  if (r.exit_code == 0) {
    o.status = ModeStatus::ok;
  } else {
    o.status = ModeStatus::failed;
    o.reason = failure_reason(r.exit_code, r.last_stderr_line);
  }
  std::string error;
  if (const std::optional<nlohmann::json> stats = read_stats_file(stats_path.string(), &error)) {
    o.stats = parse_stats_figures(*stats);
  } else {
    o.stats_error = error;
  }
  return o;
}

// The stats files of a torchrun run, one per process that used CUDA: `<run>.<pid>.json` in
// `dir`. A file that cannot be read is named in a warning and left out.
std::vector<StatsFigures> read_rank_stats(const fs::path& dir, std::string_view run_name) {
  std::vector<StatsFigures> out;
  std::error_code ec;
  const std::string head = std::string(run_name) + ".";
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(head) || !name.ends_with(".json")) continue;
    const std::string_view pid =
        std::string_view(name).substr(head.size(), name.size() - head.size() - 5);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string_view::npos) continue;
    std::string error;
    if (const std::optional<nlohmann::json> stats =
            read_stats_file(entry.path().string(), &error)) {
      out.push_back(parse_stats_figures(*stats));
    } else {
      log(LogLevel::warning, "compare: {}", error);
    }
  }
  return out;
}

// torchrun's copies of the ranks' output for the run `run_name` (PET_LOG_DIR).
fs::path torchrun_logs(const fs::path& dir, std::string_view run_name) {
  return dir / "torchrun-logs" / std::string(run_name);
}

// outcome_of(), one per rank for a torchrun command: each rank's lines from the files torchrun
// kept (whole lines), else from its stdout by their prefixes.
std::vector<ModeOutcome> outcomes_of(CompareMode mode, const Runner::Result& r,
                                     const fs::path& stats_path, bool torchrun,
                                     std::string_view run_name) {
  const ModeOutcome whole = outcome_of(mode, r, stats_path);
  if (!torchrun) return {whole};
  const fs::path dir = stats_path.parent_path();
  std::map<int, std::string> outputs = read_rank_logs(torchrun_logs(dir, run_name).string());
  if (outputs.empty()) outputs = split_rank_output(r.stdout_text);
  return split_by_rank(whole, outputs, read_rank_stats(dir, run_name));
}

ModeOutcome not_run(CompareMode mode, ModeStatus status, std::string reason) {
  ModeOutcome o;
  o.mode = mode;
  o.status = status;
  o.reason = std::move(reason);
  return o;
}

std::optional<uint64_t> summary_peak(const ModeOutcome& o) {
  if (o.status != ModeStatus::ok || !o.output.summary.is_object()) return std::nullopt;
  const auto it = o.output.summary.find("peak_allocated_bytes");
  if (it == o.output.summary.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return v > 0 ? std::optional<uint64_t>(static_cast<uint64_t>(v)) : std::nullopt;
}

// The largest of `get(o)` over the outcomes of `mode` (one per rank under torchrun).
template <typename Get>
std::optional<uint64_t> largest(const std::vector<ModeOutcome>& outcomes, CompareMode mode,
                                Get get) {
  std::optional<uint64_t> best;
  for (const ModeOutcome& o : outcomes) {
    if (o.mode != mode) continue;
    if (const std::optional<uint64_t> v = get(o); v && (!best || *v > *best)) best = v;
  }
  return best;
}

std::string join_command(const std::vector<std::string>& command) {
  std::string out;
  for (const std::string& arg : command) {
    if (!out.empty()) out += ' ';
    out += arg;
  }
  return out;
}

}  // namespace

int compare_command(const CompareFlags& flags) {
  return compare_command(flags, probe_link);
}

int compare_command(const CompareFlags& flags, const LinkProber& probe) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const PreloadLibrary library = find_preload_library(env_get("UMSWAP_LIBRARY"), exe);
  if (!library.error.empty()) {
    log(LogLevel::error, "{}", library.error);
    return kUsageErrorExitCode;
  }

  // The user's UMSWAP_MANAGED_LIMIT stays in every run's environment; it also bounds the default
  // command's size. A bad value is what the library would ignore too.
  std::optional<SizeSpec> user_limit;
  if (const char* text = env_get("UMSWAP_MANAGED_LIMIT")) {
    std::string why;
    user_limit = parse_size(text, &why);
    if (!user_limit) {
      log(LogLevel::warning, "UMSWAP_MANAGED_LIMIT='{}' {}; compare ignores it", text, why);
    } else if (user_limit->is_zero()) {
      user_limit.reset();
    }
  }

  std::string dir_pattern = (fs::temp_directory_path(ec) / "umswap-compare.XXXXXX").string();
  if (!::mkdtemp(dir_pattern.data())) {
    log(LogLevel::error, "cannot create a directory for the runs' outputs ({}): {}", dir_pattern,
        std::strerror(errno));
    return 1;
  }
  const fs::path dir = dir_pattern;
  auto give_up = [&](int code) {
    fs::remove_all(dir, ec);
    return code;
  };

  say("compare: measuring the GPU's links...\n");
  const LinkProbeResult probed = probe();

  const bool has_replay =
      std::find(flags.modes.begin(), flags.modes.end(), CompareMode::replay) != flags.modes.end();
  Runner runner(dir, flags.modes.size() + (has_replay ? 1 : 0) + flags.baselines.size(),
                flags.steps_hint);

  std::vector<std::string> command = flags.command;
  std::optional<uint64_t> footprint_estimate;
  std::optional<uint64_t> limit_to_set;
  if (command.empty()) {
    if (!probed.probe) {
      log(LogLevel::error,
          "compare: the default command ({}) needs a GPU, and there is none here: {}; give a "
          "command after --",
          kDefaultSample, probed.error);
      return give_up(1);
    }
    const fs::path sample = exe.parent_path() / kDefaultSample;
    if (!fs::is_regular_file(sample, ec)) {
      log(LogLevel::error,
          "compare: cannot find the bundled sample {} (it is built with the samples); give a "
          "command after --",
          sample.string());
      return give_up(1);
    }
    const LinkProbe& gpu = *probed.probe;
    const uint64_t allowed = allowed_memory(gpu.free_bytes, gpu.total_bytes, user_limit);
    const BatchChoice choice = choose_batch(allowed, [&](int batch, std::string* error) {
      const Runner::Result r = runner.run_quiet(
          fmt::format("footprint-{}", batch),
          {sample.string(), "--print-footprint", "--batch", std::to_string(batch)});
      const std::optional<uint64_t> footprint = parse_footprint_output(r.stdout_text);
      if (r.exit_code != 0 || !footprint) {
        *error = fmt::format("{} --print-footprint --batch {} {}", sample.string(), batch,
                             r.exit_code != 0 ? failure_reason(r.exit_code, r.last_stderr_line)
                                              : std::string("printed no footprint_bytes line"));
      }
      return r.exit_code == 0 ? footprint : std::nullopt;
    });
    if (!choice.batch) {
      log(LogLevel::error, "compare: {}", choice.error);
      return give_up(1);
    }
    const uint64_t steps = flags.steps_hint ? flags.steps_hint : kDefaultSteps;
    command = {sample.string(), "--batch", std::to_string(*choice.batch), "--steps",
               std::to_string(steps)};
    footprint_estimate = choice.footprint_bytes;
    // A second guard behind the footprint estimate: the library refuses allocations past this.
    if (!user_limit) limit_to_set = allowed;
    const BudgetChoice estimate =
        resolve_budget(flags.budget, std::nullopt, std::nullopt, footprint_estimate);
    say(fmt::format("compare: {} --batch {} --steps {} (footprint {}, budget {}{}{})\n",
                    kDefaultSample, *choice.batch, steps, format_bytes(choice.footprint_bytes),
                    flags.budget.is_percent ? flags.budget.to_string() + " = " : "",
                    format_bytes(estimate.bytes.value_or(0)),
                    limit_to_set
                        ? fmt::format("; UMSWAP_MANAGED_LIMIT={}", format_bytes(*limit_to_set))
                        : std::string()));
  } else if (probed.probe && !user_limit) {
    say(fmt::format(
        "compare: note: UMSWAP_MANAGED_LIMIT is not set; on a shared GPU set it below the free "
        "memory ({} free now) so no run can oversubscribe the GPU\n",
        format_bytes(probed.probe->free_bytes)));
  }

  // torchrun starts one process per GPU: one stats file each (`%p`), and each rank's lines with
  // its rank in front (compare.h, "Launchers").
  const bool torchrun = is_torchrun_command(command);
  if (torchrun) say("compare: a torchrun command: one row per rank\n");
  const CurrentEnv current = read_current_env();
  std::set<std::string> warned;  // each warning once, from whichever run's plan first has it
  // Sets the environment of one run; false (after saying why) when a variable cannot be set.
  auto stats_path = [&](std::string_view run_name) {
    return dir /
           (torchrun ? fmt::format("{}.%p.json", run_name) : fmt::format("{}.json", run_name));
  };
  auto prepare = [&](CompareRun run, std::optional<uint64_t> budget, const std::string& trace,
                     const fs::path& stats) {
    // The run's name is its stats file's up to the first dot (stats_path()).
    const std::string name =
        stats.filename().string().substr(0, stats.filename().string().find('.'));
    const ChildEnvironment env = plan_compare_environment(
        {.run = run,
         .budget_bytes = budget,
         .stats_path = stats.string(),
         .trace_path = trace,
         .managed_limit_bytes = limit_to_set,
         .torchrun_log_dir = torchrun ? torchrun_logs(dir, name).string() : std::string()},
        current, library.path);
    for (const std::string& warning : env.warnings) {
      if (warned.insert(warning).second) log(LogLevel::warning, "{}", warning);
    }
    if (const std::string failed = apply_child_environment(env); !failed.empty()) {
      log(LogLevel::error, "cannot set {}", failed);
      return false;
    }
    return true;
  };

  std::vector<ModeOutcome> outcomes;
  auto add = [&](std::vector<ModeOutcome> more) {
    for (ModeOutcome& o : more) outcomes.push_back(std::move(o));
  };
  std::optional<BudgetChoice> budget;
  // A percentage is of the largest rank's peak: every rank gets the same budget.
  auto resolved_budget = [&]() -> const BudgetChoice& {
    if (!budget) {
      const std::optional<uint64_t> managed_peak =
          largest(outcomes, CompareMode::managed, [](const ModeOutcome& o) {
            return o.status == ModeStatus::ok && o.stats ? o.stats->managed_bytes_peak
                                                         : std::nullopt;
          });
      const std::optional<uint64_t> native_peak = largest(
          outcomes, CompareMode::native, [](const ModeOutcome& o) { return summary_peak(o); });
      budget = resolve_budget(flags.budget, managed_peak, native_peak, footprint_estimate);
      if (budget->bytes) say(fmt::format("compare: budget {}\n", budget->description));
    }
    return *budget;
  };

  std::vector<ModeOutcome> baselines;
  // A command killed by SIGINT or SIGQUIT was most likely stopped from the terminal (which sends
  // them to umswap too; umswap ignores them while a command runs): run no more modes.
  auto interrupted = [&] {
    auto stopped = [](const ModeOutcome& o) {
      return o.exit_code == 128 + SIGINT || o.exit_code == 128 + SIGQUIT ||
             o.record_exit_code == 128 + SIGINT || o.record_exit_code == 128 + SIGQUIT;
    };
    return std::any_of(outcomes.begin(), outcomes.end(), stopped) ||
           std::any_of(baselines.begin(), baselines.end(), stopped);
  };
  for (const CompareMode mode : flags.modes) {
    const std::string_view name = compare_mode_name(mode);
    if (interrupted()) {
      outcomes.push_back(not_run(mode, ModeStatus::skipped, "interrupted"));
      continue;
    }
    switch (mode) {
      case CompareMode::native:
      case CompareMode::managed: {
        const CompareRun run =
            mode == CompareMode::native ? CompareRun::native : CompareRun::managed;
        const fs::path stats = stats_path(compare_run_name(run));
        if (!prepare(run, std::nullopt, "", stats)) return give_up(kUsageErrorExitCode);
        add(outcomes_of(mode, runner.run(name, command), stats, torchrun, compare_run_name(run)));
        break;
      }
      case CompareMode::online:
      case CompareMode::vmm: {
        const BudgetChoice& b = resolved_budget();
        if (!b.bytes) {
          runner.skip(name, fmt::format("skipped ({})", b.error));
          outcomes.push_back(not_run(mode, ModeStatus::skipped, b.error));
          break;
        }
        const CompareRun run = mode == CompareMode::vmm ? CompareRun::vmm : CompareRun::online;
        const fs::path stats = stats_path(compare_run_name(run));
        if (!prepare(run, b.bytes, "", stats)) return give_up(kUsageErrorExitCode);
        std::vector<ModeOutcome> os =
            outcomes_of(mode, runner.run(name, command), stats, torchrun, compare_run_name(run));
        for (ModeOutcome& o : os) o.budget_bytes = b.bytes;
        add(std::move(os));
        break;
      }
      case CompareMode::replay: {
        if (torchrun) {
          // Every rank would record into the one trace file, and replay would read one plan
          // for all.
          const std::string why = "not for torchrun (one trace file would serve every rank)";
          runner.skip("record", "skipped");
          runner.skip(name, fmt::format("skipped ({})", why));
          outcomes.push_back(not_run(mode, ModeStatus::skipped, why));
          break;
        }
        const BudgetChoice& b = resolved_budget();
        if (!b.bytes) {
          runner.skip("record", fmt::format("skipped ({})", b.error));
          runner.skip(name, "skipped");
          outcomes.push_back(not_run(mode, ModeStatus::skipped, b.error));
          break;
        }
        const std::string trace = (dir / "compare.umtrace").string();
        if (!prepare(CompareRun::record, b.bytes, trace,
                     stats_path(compare_run_name(CompareRun::record)))) {
          return give_up(kUsageErrorExitCode);
        }
        const Runner::Result record = runner.run("record", command);
        std::string trace_error;
        const bool have_trace = read_trace_file(trace, &trace_error).has_value();
        std::vector<ModeOutcome> os;
        if (record.exit_code != 0 || !have_trace) {
          const std::string why =
              record.exit_code != 0
                  ? fmt::format("record run failed: {}",
                                failure_reason(record.exit_code, record.last_stderr_line))
                  : fmt::format("no trace recorded ({})", trace_error);
          runner.skip(name, fmt::format("failed: {}", why));
          os = {not_run(mode, ModeStatus::failed, why)};
        } else {
          const fs::path stats = stats_path(compare_run_name(CompareRun::replay));
          if (!prepare(CompareRun::replay, b.bytes, trace, stats)) {
            return give_up(kUsageErrorExitCode);
          }
          os = outcomes_of(mode, runner.run(name, command), stats, torchrun,
                           compare_run_name(CompareRun::replay));
        }
        for (ModeOutcome& o : os) {
          o.budget_bytes = b.bytes;
          o.record_exit_code = record.exit_code;
          o.record_wall_s = record.wall_s;
        }
        add(std::move(os));
        break;
      }
    }
  }

  // The baselines: the command natively, with the baseline's flag appended.
  for (const CompareBaseline baseline : flags.baselines) {
    const std::string_view name = compare_baseline_name(baseline);
    std::vector<ModeOutcome> os;
    if (interrupted()) {
      os = {not_run(CompareMode::native, ModeStatus::skipped, "interrupted")};
    } else {
      if (!prepare(CompareRun::native, std::nullopt, "", stats_path(name))) {
        return give_up(kUsageErrorExitCode);
      }
      std::vector<std::string> with_flag = command;
      with_flag.emplace_back(compare_baseline_flag(baseline));
      const Runner::Result r = runner.run(name, with_flag);
      os = outcomes_of(CompareMode::native, r, stats_path(name), torchrun, name);
      for (ModeOutcome& o : os) {
        if (o.status == ModeStatus::failed) {
          // A program that does not know the flag most likely names it in its complaint.
          if (r.last_stderr_line.find(compare_baseline_flag(baseline)) != std::string::npos) {
            o.reason += fmt::format(" (the command must accept {}, as samples/pytorch/*.py do)",
                                    compare_baseline_flag(baseline));
          }
        } else if (o.output.iterations.empty() && !o.output.summary.is_object()) {
          o.status = ModeStatus::failed;
          o.reason = "printed no `iter <i> ms <t>` lines and no summary line to time it by";
        }
      }
    }
    for (ModeOutcome& o : os) {
      o.baseline = baseline;
      baselines.push_back(std::move(o));
    }
  }

  CompareReport report;
  report.command = command;
  report.budget_spec = flags.budget;
  report.budget = budget.value_or(BudgetChoice{});
  report.probe = probed;
  report.outcomes = outcomes;
  report.baselines = baselines;
  const LinkRates rates = probed.probe ? probed.probe->rates : LinkRates{};
  auto judge = [&] {
    report.rows = compute_rows(outcomes, rates, flags.loss_tolerance, report.natives_again);
    report.baseline_rows =
        compute_baseline_rows(baselines, outcomes, flags.loss_tolerance, report.natives_again);
  };
  judge();
  // A loss past the tolerance, with nothing to compare bit for bit: native again, so that a
  // program that is not deterministic is not called changed by umswap (check_result).
  const bool native_ok = std::any_of(outcomes.begin(), outcomes.end(), [](const ModeOutcome& o) {
    return o.mode == CompareMode::native && o.status == ModeStatus::ok;
  });
  if (native_ok && !interrupted() &&
      (needs_native_again(report.rows) || needs_native_again(report.baseline_rows))) {
    say("compare: a loss is past --loss-tolerance, with no checksum on both sides: native runs "
        "again to measure how much the program's own runs differ\n");
    const fs::path stats = stats_path("native2");
    if (!prepare(CompareRun::native, std::nullopt, "", stats)) return give_up(kUsageErrorExitCode);
    runner.add_step();
    report.natives_again = outcomes_of(CompareMode::native, runner.run("native2", command), stats,
                                       torchrun, "native2");
    judge();
  }
  report.loss_tolerance = flags.loss_tolerance;
  std::vector<ModeRow> table_rows = report.rows;
  table_rows.insert(table_rows.end(), report.baseline_rows.begin(), report.baseline_rows.end());
  std::printf("\numswap compare: %s\n\n", join_command(command).c_str());
  std::fputs(render_table(table_rows).c_str(), stdout);
  if (const std::string verdicts = render_verdicts(report); !verdicts.empty()) {
    std::fputs(("\n" + verdicts).c_str(), stdout);
  }
  std::fputs(("\n" + render_notes(report)).c_str(), stdout);
  std::fflush(stdout);

  int code = 0;
  if (!flags.json_path.empty()) {
    std::string error;
    const std::string text =
        compare_json(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (!write_file_atomically(flags.json_path, text, &error)) {
      log(LogLevel::error, "{}", error);
      code = 1;
    }
  }

  // A skipped run left nothing to look at; a failed one did.
  auto is_ok = [](const ModeOutcome& o) { return o.status != ModeStatus::failed; };
  const bool all_ok = std::all_of(outcomes.begin(), outcomes.end(), is_ok) &&
                      std::all_of(baselines.begin(), baselines.end(), is_ok) &&
                      std::all_of(report.natives_again.begin(), report.natives_again.end(), is_ok);
  if (!all_ok || flags.keep) {
    say(fmt::format("compare: outputs and stats of each run are in {}\n", dir.string()));
  } else {
    fs::remove_all(dir, ec);
  }

  const bool ran_native = std::any_of(outcomes.begin(), outcomes.end(), [](const ModeOutcome& o) {
    return o.mode == CompareMode::native;
  });
  const bool baseline_ok = std::any_of(outcomes.begin(), outcomes.end(), [&](const ModeOutcome& o) {
    return (!ran_native || o.mode == CompareMode::native) && o.status == ModeStatus::ok;
  });
  return baseline_ok ? code : 1;
}

}  // namespace umswap::cli
