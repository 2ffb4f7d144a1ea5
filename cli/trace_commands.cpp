// `umswap report` and `umswap timeline`: read a trace through the one reader, render, print or
// write. Errors are one line naming the file and the problem.
#include "umswap/cli/cli_main.h"
#include "umswap/core/log.h"
#include "umswap/core/trace_file.h"
#include "umswap/core/trace_report.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

namespace umswap::cli {
namespace {

std::optional<trace::Trace> read_trace(const std::string& path) {
  std::string error;
  std::optional<trace::Trace> trace = read_trace_file(path, &error);
  if (!trace) log(LogLevel::error, "{}", error);
  return trace;
}

// True when `output` names the same file as `input` (through links, `..` or another spelling).
bool same_file(const std::string& input, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::equivalent(input, output, ec)) return true;
  const fs::path a = fs::weakly_canonical(input, ec);
  if (ec) return false;
  const fs::path b = fs::weakly_canonical(output, ec);
  return !ec && a == b;
}

}  // namespace

int report_command(const TraceCommandFlags& flags) {
  const std::optional<trace::Trace> trace = read_trace(flags.trace_path);
  if (!trace) return kTraceErrorExitCode;
  const std::string text = render_report(*trace);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

int timeline_command(const TraceCommandFlags& flags) {
  if (same_file(flags.trace_path, flags.output_path)) {
    log(LogLevel::error, "timeline: the output {} is the trace itself; refusing to overwrite it",
        flags.output_path);
    return kUsageErrorExitCode;
  }
  const std::optional<trace::Trace> trace = read_trace(flags.trace_path);
  if (!trace) return kTraceErrorExitCode;
  if (const auto& only = flags.iterations; only && only->second >= trace->iterations.size()) {
    const size_t n = trace->iterations.size();
    log(LogLevel::error, "timeline: --iterations {}-{}: {} has {}", only->first, only->second,
        flags.trace_path,
        n == 0 ? std::string("no iterations")
               : fmt::format("{} iteration{} (0-{})", n, n == 1 ? "" : "s", n - 1));
    return kUsageErrorExitCode;
  }
  const nlohmann::json timeline = render_timeline(*trace, flags.iterations);
  // Names are copied byte for byte and may not be UTF-8; JSON must be.
  const std::string text =
      timeline.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::string error;
  if (!write_file_atomically(flags.output_path, text, &error)) {
    log(LogLevel::error, "{}", error);
    return kTraceErrorExitCode;
  }
  const nlohmann::json& other = timeline["otherData"];
  std::printf("umswap: wrote %s: %zu events (open it in https://ui.perfetto.dev)\n",
              flags.output_path.c_str(), timeline["traceEvents"].size());
  if (other.contains("note")) {
    log(LogLevel::warning, "{}", other["note"].get<std::string>());
  }
  return 0;
}

}  // namespace umswap::cli
