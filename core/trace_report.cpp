#include "umswap/core/trace_report.h"

#include "umswap/core/options.h"
#include "umswap/core/trace_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

namespace umswap {
namespace {

using trace::Trace;

constexpr size_t kTopKernels = 10;
constexpr size_t kIterationRows = 10;
constexpr size_t kNameWidth = 60;

// --- Figures ------------------------------------------------------------------------------------

struct Range {
  uint32_t buffer;
  uint64_t begin;
  uint64_t end;
};

struct Touch {
  uint64_t bytes = 0;     // distinct bytes in the ranges (overlaps counted once)
  uint64_t segments = 0;  // sum of the sizes of the distinct buffers the ranges lie in
};

void add_step_ranges(const Trace& t, const trace::Step& step, std::vector<Range>* ranges) {
  for (uint64_t a = step.first_access; a < step.first_access + step.access_count; ++a) {
    const trace::Access& access = t.accesses[a];
    ranges->push_back({access.buffer, access.offset, access.offset + access.length});
  }
}

Touch touched(const Trace& t, std::vector<Range>& ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.buffer != b.buffer ? a.buffer < b.buffer : a.begin < b.begin;
  });
  Touch touch;
  size_t i = 0;
  while (i < ranges.size()) {
    const uint32_t buffer = ranges[i].buffer;
    touch.segments += t.buffers[buffer].size;
    uint64_t begin = ranges[i].begin, end = ranges[i].end;
    for (++i; i < ranges.size() && ranges[i].buffer == buffer; ++i) {
      if (ranges[i].begin > end) {
        touch.bytes += end - begin;
        begin = ranges[i].begin;
      }
      end = std::max(end, ranges[i].end);
    }
    touch.bytes += end - begin;
  }
  return touch;
}

Touch step_touch(const Trace& t, const trace::Step& step) {
  std::vector<Range> ranges;
  add_step_ranges(t, step, &ranges);
  return touched(t, ranges);
}

Touch iteration_touch(const Trace& t, const trace::Iteration& it) {
  std::vector<Range> ranges;
  for (uint64_t s = it.first_step; s < it.first_step + it.step_count; ++s) {
    add_step_ranges(t, t.steps[s], &ranges);
  }
  return touched(t, ranges);
}

// Median of `values` (the mean of the two middle ones for an even count); 0 when empty.
uint64_t median(std::vector<uint64_t> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n % 2 == 1) return values[n / 2];
  const uint64_t a = values[n / 2 - 1], b = values[n / 2];
  return a + (b - a) / 2;
}

bool has_gpu_times(const trace::Step& s) {
  return s.start_ns != 0 && s.end_ns != 0;
}

bool has_host_times(const trace::Iteration& it) {
  return it.start_ns != 0 && it.end_ns != 0;
}

// A stretch of GPU time, [lo, hi) in ns.
struct Span {
  uint64_t lo, hi;
};

// An iteration on the GPU: its steps' first start to their last end; none without GPU times.
std::optional<Span> gpu_span(const Trace& t, const trace::Iteration& it) {
  std::optional<Span> span;
  for (uint64_t s = it.first_step; s < it.first_step + it.step_count; ++s) {
    const trace::Step& step = t.steps[s];
    if (!has_gpu_times(step)) continue;
    if (!span) span = Span{step.start_ns, step.end_ns};
    span->lo = std::min(span->lo, step.start_ns);
    span->hi = std::max(span->hi, step.end_ns);
  }
  return span;
}

// Sorts `spans` and merges those that overlap or touch; returns the time they cover.
uint64_t merge_spans(std::vector<Span>& spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
  size_t kept = 0;
  uint64_t covered = 0;
  for (const Span& x : spans) {
    if (kept > 0 && x.lo <= spans[kept - 1].hi) {
      spans[kept - 1].hi = std::max(spans[kept - 1].hi, x.hi);
    } else {
      spans[kept++] = x;
    }
  }
  spans.resize(kept);
  for (const Span& x : spans) covered += x.hi - x.lo;
  return covered;
}

std::string_view kind_name(trace::StepKind kind) {
  switch (kind) {
    case trace::StepKind::kernel:
      return "kernel";
    case trace::StepKind::memcpy:
      return "memcpy";
    case trace::StepKind::memset:
      return "memset";
  }
  return "unknown";
}

std::string format_duration(uint64_t ns) {
  if (ns < 1000) return fmt::format("{} ns", ns);
  if (ns < 1000000) return fmt::format("{:.2f} us", static_cast<double>(ns) / 1e3);
  if (ns < 1000000000) return fmt::format("{:.2f} ms", static_cast<double>(ns) / 1e6);
  return fmt::format("{:.2f} s", static_cast<double>(ns) / 1e9);
}

// A name cut to `width` characters ("..." at the end when cut).
std::string shorten(std::string_view name, size_t width) {
  if (name.size() <= width) return std::string(name);
  return std::string(name.substr(0, width - 3)) + "...";
}

// "1 step", "3 steps".
std::string count_of(uint64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

std::string ratio_text(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  return fmt::format("{:.2f}", static_cast<double>(part) / static_cast<double>(whole));
}

// --- Report sections ----------------------------------------------------------------------------

using Out = std::back_insert_iterator<std::string>;

void report_run(const Trace& t, Out out) {
  uint64_t by_kind[3] = {};
  uint64_t timed = 0;
  for (const trace::Step& s : t.steps) {
    ++by_kind[static_cast<size_t>(s.kind)];
    if (has_gpu_times(s)) ++timed;
  }
  fmt::format_to(out, "umswap trace of {} (pid {})\n", t.program.empty() ? "?" : t.program, t.pid);
  fmt::format_to(out,
                 "  steps             {}: {} kernels, {} memcpy, {} memset; {} with GPU times\n",
                 t.steps.size(), by_kind[0], by_kind[1], by_kind[2], timed);
  fmt::format_to(out, "  dropped records   {}{}\n", t.dropped_records,
                 t.dropped_records == 0
                     ? ""
                     : " (dropped rather than slowing the program; figures may be incomplete)");
}

void report_iterations(const Trace& t, Out out) {
  const trace::Detection& d = t.detection;
  fmt::format_to(out, "\nIterations\n");
  if (t.iterations.empty()) {
    fmt::format_to(out,
                   "  found             none (no repeating launch sequence and no iteration "
                   "marker)\n");
    return;
  }
  fmt::format_to(out, "  found             {} (source: {})\n", t.iterations.size(),
                 d.source.empty() ? "unknown" : d.source);
  if (d.period > 0) {
    fmt::format_to(out, "  period            {}, confidence {:.2f}\n", count_of(d.period, "step"),
                   d.confidence);
  } else {
    fmt::format_to(out, "  period            none, confidence {:.2f}\n", d.confidence);
  }
  fmt::format_to(out, "  warm-up           {} before the first iteration\n",
                 count_of(d.warmup_steps, "step"));
  std::vector<uint64_t> steps, times;
  for (const trace::Iteration& it : t.iterations) {
    steps.push_back(it.step_count);
    if (has_host_times(it)) times.push_back(it.end_ns - it.start_ns);
  }
  const auto [min_steps, max_steps] = std::minmax_element(steps.begin(), steps.end());
  if (*min_steps == *max_steps) {
    fmt::format_to(out, "  steps/iteration   {}\n", *min_steps);
  } else {
    fmt::format_to(out, "  steps/iteration   min {}, median {}, max {}\n", *min_steps,
                   median(steps), *max_steps);
  }
  if (!times.empty()) {
    const auto [min_time, max_time] = std::minmax_element(times.begin(), times.end());
    fmt::format_to(out, "  time/iteration    min {}, median {}, max {}\n",
                   format_duration(*min_time), format_duration(median(times)),
                   format_duration(*max_time));
  }
}

void report_kernels(const Trace& t, Out out) {
  struct Kernel {
    uint32_t name;
    uint64_t launches = 0;
    uint64_t gpu_ns = 0;
    uint64_t timed = 0;
  };
  std::unordered_map<uint32_t, size_t> index;
  std::vector<Kernel> kernels;
  uint64_t launches = 0;
  for (const trace::Step& s : t.steps) {
    if (s.kind != trace::StepKind::kernel) continue;
    auto [where, added] = index.try_emplace(s.name, kernels.size());
    if (added) kernels.push_back({s.name});
    Kernel& k = kernels[where->second];
    ++k.launches;
    ++launches;
    if (has_gpu_times(s)) {
      k.gpu_ns += s.end_ns - s.start_ns;
      ++k.timed;
    }
  }
  fmt::format_to(out, "\nKernels: {} distinct, {} launches", kernels.size(), launches);
  if (kernels.empty()) {
    fmt::format_to(out, "\n");
    return;
  }
  fmt::format_to(out, " (top {} by launches)\n", std::min(kTopKernels, kernels.size()));
  // Most launches first; ties in order of first launch (stable).
  std::stable_sort(kernels.begin(), kernels.end(),
                   [](const Kernel& a, const Kernel& b) { return a.launches > b.launches; });
  fmt::format_to(out, "  {:>8}  {:>6}  {:>10}  {}\n", "launches", "share", "GPU time", "name");
  for (size_t i = 0; i < std::min(kTopKernels, kernels.size()); ++i) {
    const Kernel& k = kernels[i];
    const double share = 100.0 * static_cast<double>(k.launches) / static_cast<double>(launches);
    fmt::format_to(out, "  {:>8}  {:>5.1f}%  {:>10}  {}\n", k.launches, share,
                   k.timed == 0 ? "-" : format_duration(k.gpu_ns),
                   shorten(t.names[k.name], kNameWidth));
  }
}

// The sum of the trace's buffers' sizes.
uint64_t footprint_of(const Trace& t) {
  uint64_t bytes = 0;
  for (const trace::Buffer& b : t.buffers) bytes += b.size;
  return bytes;
}

void report_buffers(const Trace& t, Out out) {
  fmt::format_to(out, "\nBuffers\n");
  const uint64_t footprint = footprint_of(t);
  uint64_t freed = 0;
  size_t largest = 0;
  for (size_t i = 0; i < t.buffers.size(); ++i) {
    if (t.buffers[i].freed) ++freed;
    if (t.buffers[i].size > t.buffers[largest].size) largest = i;
  }
  fmt::format_to(out, "  count             {}", t.buffers.size());
  if (freed > 0) fmt::format_to(out, " ({} freed before the trace was written)", freed);
  fmt::format_to(out, "\n  footprint         {} (sum of sizes)\n", format_bytes(footprint));
  if (!t.buffers.empty()) {
    fmt::format_to(out, "  largest           {} (buffer {}, id {})\n",
                   format_bytes(t.buffers[largest].size), largest, t.buffers[largest].id);
  }
}

void report_working_set(const Trace& t, Out out) {
  fmt::format_to(out, "\nWorking set per step (distinct bytes one step touches)\n");
  if (t.steps.empty()) {
    fmt::format_to(out, "  no steps\n");
    return;
  }
  std::vector<uint64_t> bytes;
  bytes.reserve(t.steps.size());
  size_t max_step = 0;
  for (size_t i = 0; i < t.steps.size(); ++i) {
    bytes.push_back(step_touch(t, t.steps[i]).bytes);
    if (bytes[i] > bytes[max_step]) max_step = i;
  }
  fmt::format_to(out, "  max               {} (step {}, {})\n", format_bytes(bytes[max_step]),
                 max_step, shorten(t.names[t.steps[max_step].name], kNameWidth));
  fmt::format_to(out, "  median            {} (over {})\n", format_bytes(median(bytes)),
                 count_of(t.steps.size(), "step"));
}

void report_per_iteration(const Trace& t, Out out) {
  fmt::format_to(out,
                 "\nPer iteration (touched: distinct bytes its steps touch; segments: sizes of "
                 "the buffers\nthose bytes lie in; HtoD/DtoH: bytes the driver moved)\n");
  constexpr std::string_view kRow =
      "  {:>10} {:>6} {:>10} {:>10} {:>10} {:>11} {:>8} {:>10} {:>10}\n";
  fmt::format_to(out, kRow, "iteration", "steps", "time", "touched", "segments", "touched/seg",
                 "faults", "HtoD", "DtoH");
  uint64_t steps = 0, time = 0, timed = 0, bytes = 0, segments = 0;
  trace::Counters sum;
  for (size_t i = 0; i < t.iterations.size(); ++i) {
    const trace::Iteration& it = t.iterations[i];
    const Touch touch = iteration_touch(t, it);
    const trace::Counters& c = it.counters;
    steps += it.step_count;
    bytes += touch.bytes;
    segments += touch.segments;
    if (has_host_times(it)) {
      time += it.end_ns - it.start_ns;
      ++timed;
    }
    sum.gpu_page_faults += c.gpu_page_faults;
    sum.bytes_htod += c.bytes_htod;
    sum.bytes_dtoh += c.bytes_dtoh;
    sum.thrashing_events += c.thrashing_events;
    sum.cpu_page_faults += c.cpu_page_faults;
    if (i >= kIterationRows) continue;
    fmt::format_to(out, kRow, i, it.step_count,
                   has_host_times(it) ? format_duration(it.end_ns - it.start_ns) : "-",
                   format_bytes(touch.bytes), format_bytes(touch.segments),
                   ratio_text(touch.bytes, touch.segments), c.gpu_page_faults,
                   format_bytes(c.bytes_htod), format_bytes(c.bytes_dtoh));
  }
  const uint64_t n = t.iterations.size();
  if (n > kIterationRows) {
    fmt::format_to(out, "  ({} more not shown)\n", n - kIterationRows);
  }
  fmt::format_to(out, kRow, "mean", steps / n, timed == 0 ? "-" : format_duration(time / timed),
                 format_bytes(bytes / n), format_bytes(segments / n), ratio_text(bytes, segments),
                 sum.gpu_page_faults / n, format_bytes(sum.bytes_htod / n),
                 format_bytes(sum.bytes_dtoh / n));
  fmt::format_to(out, kRow, "total", steps, timed == 0 ? "-" : format_duration(time), "", "", "",
                 sum.gpu_page_faults, format_bytes(sum.bytes_htod), format_bytes(sum.bytes_dtoh));
  fmt::format_to(out, "  thrashing events  {} in iterations; CPU page faults {} in iterations\n",
                 sum.thrashing_events, sum.cpu_page_faults);
}

void report_totals(const Trace& t, Out out) {
  const trace::Counters& c = t.totals;
  fmt::format_to(out, "\nWhole run (warm-up included)\n");
  fmt::format_to(out, "  GPU page faults   {}\n", c.gpu_page_faults);
  fmt::format_to(out, "  moved HtoD        {}\n", format_bytes(c.bytes_htod));
  fmt::format_to(out, "  moved DtoH        {}\n", format_bytes(c.bytes_dtoh));
  // A byte comes to the GPU once from where it began, then only after it left: more moved in
  // than out plus every buffer's size means the records of moves are incomplete (seen on an H200
  // under heavy faulting, both ways: docs/lab/2026-11-30-link-and-waits.md).
  const uint64_t footprint = footprint_of(t);
  if (c.bytes_htod > c.bytes_dtoh + footprint) {
    fmt::format_to(out,
                   "  records short     {} more moved in than out, past the {} all buffers "
                   "hold:\n                    CUPTI's records of moves are incomplete here,\n"
                   "                    and residency counted from them is unreliable\n",
                   format_bytes(c.bytes_htod - c.bytes_dtoh), format_bytes(footprint));
  }
  fmt::format_to(out, "  thrashing events  {}\n", c.thrashing_events);
  fmt::format_to(out, "  CPU page faults   {}\n", c.cpu_page_faults);
  if (t.transfers.empty()) return;
  // By kind (trace::Transfer::Kind) and direction: transfers and bytes.
  uint64_t count[3][2] = {}, bytes[3][2] = {};
  for (const trace::Transfer& x : t.transfers) {
    ++count[x.kind][x.to_gpu ? 0 : 1];
    bytes[x.kind][x.to_gpu ? 0 : 1] += x.bytes;
  }
  fmt::format_to(out, "  transfers         {} recorded (to the GPU / to the host)\n",
                 t.transfers.size());
  constexpr const char* kKinds[3] = {"umswap's copies", "prefetch calls", "the driver's own"};
  for (int k = 0; k < 3; ++k) {
    if (count[k][0] + count[k][1] == 0) continue;
    fmt::format_to(out, "    {:<17} {} in {} / {} in {}\n", kKinds[k], format_bytes(bytes[k][0]),
                   count[k][0], format_bytes(bytes[k][1]), count[k][1]);
  }
}

// Per iteration with transfers recorded: how busy each direction of the link was (the union of
// its transfers' GPU times within the iteration's GPU span, its steps' first start to last end),
// that time's share of the span, the rate while busy, and the time both directions ran at once.
// The last kIterationRows such iterations: the steady ones, where a plan is in force.
void report_link_use(const Trace& t, Out out) {
  if (t.transfers.empty()) return;
  struct Row {
    size_t iteration;
    Span span;
    uint64_t steps = 0;  // the steps' time on the GPU, merged
    uint64_t busy[2] = {}, bytes[2] = {}, both = 0;
  };
  // The transfers by start (a reader does not check that a trace's are in order).
  std::vector<const trace::Transfer*> by_start;
  for (const trace::Transfer& x : t.transfers) by_start.push_back(&x);
  std::stable_sort(
      by_start.begin(), by_start.end(),
      [](const trace::Transfer* a, const trace::Transfer* b) { return a->start_ns < b->start_ns; });
  std::vector<Row> rows;
  for (size_t i = 0; i < t.iterations.size(); ++i) {
    const trace::Iteration& it = t.iterations[i];
    const std::optional<Span> span = gpu_span(t, it);
    if (!span || span->hi <= span->lo) continue;
    // Each direction's transfers that start in the span, clipped to it and merged.
    Row row{i, *span};
    std::vector<Span> merged[2];
    const auto from =
        std::lower_bound(by_start.begin(), by_start.end(), span->lo,
                         [](const trace::Transfer* x, uint64_t lo) { return x->start_ns < lo; });
    for (auto x = from; x != by_start.end() && (*x)->start_ns < span->hi; ++x) {
      const int d = (*x)->to_gpu ? 0 : 1;
      row.bytes[d] += (*x)->bytes;
      const uint64_t hi = std::min((*x)->end_ns, span->hi);
      if (hi > (*x)->start_ns) merged[d].push_back({(*x)->start_ns, hi});
    }
    if (row.bytes[0] + row.bytes[1] == 0) continue;
    std::vector<Span> steps;
    for (uint64_t s = it.first_step; s < it.first_step + it.step_count; ++s) {
      if (has_gpu_times(t.steps[s])) steps.push_back({t.steps[s].start_ns, t.steps[s].end_ns});
    }
    row.steps = merge_spans(steps);
    for (int d = 0; d < 2; ++d) row.busy[d] = merge_spans(merged[d]);
    for (size_t a = 0, b = 0; a < merged[0].size() && b < merged[1].size();) {
      const uint64_t lo = std::max(merged[0][a].lo, merged[1][b].lo);
      const uint64_t hi = std::min(merged[0][a].hi, merged[1][b].hi);
      if (hi > lo) row.both += hi - lo;
      (merged[0][a].hi < merged[1][b].hi ? a : b)++;
    }
    rows.push_back(row);
  }
  if (rows.empty()) return;
  fmt::format_to(out,
                 "\nLink use per iteration (steps: time the iteration's steps ran on the GPU; to "
                 "GPU, to host:\ntime that direction's transfers ran; each merged, within the "
                 "span of the steps on the GPU;\nrate: bytes over that time)\n");
  constexpr std::string_view kRow =
      "  {:>9} {:>10} {:>10} {:>10} {:>5} {:>10} {:>10} {:>5} {:>10} {:>10}\n";
  fmt::format_to(out, kRow, "iteration", "span", "steps", "to GPU", "share", "rate", "to host",
                 "share", "rate", "both ways");
  const size_t first = rows.size() > kIterationRows ? rows.size() - kIterationRows : 0;
  if (first > 0) fmt::format_to(out, "  ({} earlier not shown)\n", first);
  for (size_t r = first; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const uint64_t span = row.span.hi - row.span.lo;
    std::string cells[2][3];
    for (int d = 0; d < 2; ++d) {
      cells[d][0] = format_duration(row.busy[d]);
      cells[d][1] = fmt::format("{}%", row.busy[d] * 100 / span);
      cells[d][2] = row.busy[d] == 0
                        ? "-"
                        : fmt::format("{:.1f} GB/s", static_cast<double>(row.bytes[d]) /
                                                         static_cast<double>(row.busy[d]));
    }
    fmt::format_to(out, kRow, row.iteration, format_duration(span), format_duration(row.steps),
                   cells[0][0], cells[0][1], cells[0][2], cells[1][0], cells[1][1], cells[1][2],
                   format_duration(row.both));
  }
}

}  // namespace

std::string render_report(const Trace& t) {
  std::string text;
  const Out out(text);
  report_run(t, out);
  report_iterations(t, out);
  report_kernels(t, out);
  report_buffers(t, out);
  report_working_set(t, out);
  if (!t.iterations.empty()) report_per_iteration(t, out);
  report_totals(t, out);
  report_link_use(t, out);
  return text;
}

// --- Timeline -----------------------------------------------------------------------------------

namespace {

using nlohmann::json;

std::string hex(uint64_t v) {
  return fmt::format("{:#x}", v);
}

std::string stream_label(uint64_t stream) {
  return stream == 0 ? std::string("stream 0 (default)") : fmt::format("stream {:#x}", stream);
}

std::string_view fault_access(uint8_t access) {
  switch (access) {
    case 1:
      return "read";
    case 2:
      return "write";
    case 3:
      return "atomic";
    case 4:
      return "prefetch";
    default:
      return "unknown";
  }
}

json track_metadata(int tid, std::string_view name, int sort_index) {
  return json::array({
      {{"ph", "M"},
       {"pid", kTimelinePid},
       {"tid", tid},
       {"name", "thread_name"},
       {"args", {{"name", name}}}},
      {{"ph", "M"},
       {"pid", kTimelinePid},
       {"tid", tid},
       {"name", "thread_sort_index"},
       {"args", {{"sort_index", sort_index}}}},
  });
}

}  // namespace

json render_timeline(const Trace& t, std::optional<std::pair<uint64_t, uint64_t>> only) {
  // One clock for everything drawn: CUPTI's (steps, faults) when any step has GPU times, else the
  // host clock of the iterations. Faults are CUPTI times, so only the first case draws them.
  bool gpu_clock = false;
  uint64_t untimed = 0;
  for (const trace::Step& s : t.steps) {
    if (has_gpu_times(s)) {
      gpu_clock = true;
    } else {
      ++untimed;
    }
  }

  // Iteration spans on the chosen clock, and which iteration each step is in.
  std::vector<std::optional<std::pair<uint64_t, uint64_t>>> spans(t.iterations.size());
  std::vector<int64_t> iteration_of(t.steps.size(), -1);
  for (size_t i = 0; i < t.iterations.size(); ++i) {
    const trace::Iteration& it = t.iterations[i];
    for (uint64_t s = it.first_step; s < it.first_step + it.step_count; ++s) {
      iteration_of[s] = static_cast<int64_t>(i);
    }
    if (gpu_clock) {
      if (const std::optional<Span> span = gpu_span(t, it)) spans[i].emplace(span->lo, span->hi);
    } else if (has_host_times(it)) {
      spans[i].emplace(it.start_ns, it.end_ns);
    }
  }

  // What is drawn: every step, iteration, fault and transfer, or with `only` those iterations,
  // their steps, and the faults and transfers within their span (GPU clock).
  uint64_t step_lo = 0, step_hi = t.steps.size();
  uint64_t time_lo = 0, time_hi = UINT64_MAX;
  if (only) {
    const trace::Iteration& a = t.iterations[only->first];
    const trace::Iteration& b = t.iterations[only->second];
    step_lo = a.first_step;
    step_hi = b.first_step + b.step_count;
    time_lo = UINT64_MAX;
    time_hi = 0;
    for (uint64_t i = only->first; i <= only->second; ++i) {
      if (!spans[i]) continue;
      time_lo = std::min(time_lo, spans[i]->first);
      time_hi = std::max(time_hi, spans[i]->second);
    }
  }
  const auto drawn_iteration = [&](size_t i) {
    return !only || (i >= only->first && i <= only->second);
  };
  const auto in_window = [&](uint64_t ns) { return ns >= time_lo && ns <= time_hi; };

  uint64_t origin = UINT64_MAX;
  if (gpu_clock) {
    for (uint64_t i = step_lo; i < step_hi; ++i) {
      if (has_gpu_times(t.steps[i])) origin = std::min(origin, t.steps[i].start_ns);
    }
    for (const trace::Fault& f : t.faults) {
      if (in_window(f.time_ns)) origin = std::min(origin, f.time_ns);
    }
    for (const trace::Transfer& x : t.transfers) {
      if (in_window(x.start_ns)) origin = std::min(origin, x.start_ns);
    }
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i] && drawn_iteration(i)) origin = std::min(origin, spans[i]->first);
  }
  if (origin == UINT64_MAX) origin = 0;
  // Microseconds from the origin; an unsigned difference, so a fault before the origin can't be.
  auto us = [origin](uint64_t ns) { return static_cast<double>(ns - origin) / 1000.0; };

  json events = json::array();
  events.push_back({{"ph", "M"},
                    {"pid", kTimelinePid},
                    {"tid", 0},
                    {"name", "process_name"},
                    {"args", {{"name", fmt::format("umswap: {} (pid {})", t.program, t.pid)}}}});
  if (!t.iterations.empty()) {
    for (json& e : track_metadata(kTimelineIterationsTid, "iterations", 0)) events.push_back(e);
  }
  const uint64_t faults_drawn =
      gpu_clock ? static_cast<uint64_t>(
                      std::count_if(t.faults.begin(), t.faults.end(),
                                    [&](const trace::Fault& f) { return in_window(f.time_ns); }))
                : 0;
  if (faults_drawn > 0) {
    for (json& e : track_metadata(kTimelineFaultsTid, "GPU page faults", 1)) events.push_back(e);
  }

  bool to_gpu = false, to_host = false;
  for (const trace::Transfer& x : t.transfers) {
    if (in_window(x.start_ns)) (x.to_gpu ? to_gpu : to_host) = true;
  }
  if (gpu_clock && to_gpu) {
    for (json& e : track_metadata(kTimelineAdvisorPrefetchTid, "to the GPU", 2)) {
      events.push_back(e);
    }
  }
  if (gpu_clock && to_host) {
    for (json& e : track_metadata(kTimelineAdvisorEvictTid, "to the host", 3)) events.push_back(e);
  }

  // Streams: one track each, in order of first appearance.
  std::map<uint64_t, int> stream_tid;
  for (uint64_t i = step_lo; i < step_hi; ++i) {
    const trace::Step& s = t.steps[i];
    if (stream_tid.count(s.stream)) continue;
    const int tid = kTimelineFirstStreamTid + static_cast<int>(stream_tid.size());
    stream_tid.emplace(s.stream, tid);
    for (json& e : track_metadata(tid, stream_label(s.stream), tid)) events.push_back(e);
  }

  for (uint64_t i = step_lo; i < step_hi; ++i) {
    const trace::Step& s = t.steps[i];
    if (!has_gpu_times(s)) continue;
    json buffers = json::array();
    for (uint64_t a = s.first_access; a < s.first_access + s.access_count; ++a) {
      const trace::Access& access = t.accesses[a];
      buffers.push_back({{"buffer", access.buffer},
                         {"id", t.buffers[access.buffer].id},
                         {"offset", access.offset},
                         {"bytes", access.length}});
    }
    json args = {{"step", i}, {"buffers", std::move(buffers)}};
    if (iteration_of[i] >= 0) args["iteration"] = iteration_of[i];
    events.push_back({{"ph", "X"},
                      {"pid", kTimelinePid},
                      {"tid", stream_tid.at(s.stream)},
                      {"name", t.names[s.name]},
                      {"cat", kind_name(s.kind)},
                      {"ts", us(s.start_ns)},
                      {"dur", static_cast<double>(s.end_ns - s.start_ns) / 1000.0},
                      {"args", std::move(args)}});
  }

  uint64_t iterations_drawn = 0;
  for (size_t i = 0; i < t.iterations.size(); ++i) {
    if (!spans[i] || !drawn_iteration(i)) continue;
    ++iterations_drawn;
    const trace::Iteration& it = t.iterations[i];
    events.push_back({{"ph", "X"},
                      {"pid", kTimelinePid},
                      {"tid", kTimelineIterationsTid},
                      {"name", fmt::format("iteration {}", i)},
                      {"cat", "iteration"},
                      {"ts", us(spans[i]->first)},
                      {"dur", static_cast<double>(spans[i]->second - spans[i]->first) / 1000.0},
                      {"args",
                       {{"first_step", it.first_step},
                        {"steps", it.step_count},
                        {"gpu_page_faults", it.counters.gpu_page_faults},
                        {"bytes_htod", it.counters.bytes_htod},
                        {"bytes_dtoh", it.counters.bytes_dtoh},
                        {"thrashing_events", it.counters.thrashing_events}}}});
  }

  if (gpu_clock) {
    for (const trace::Fault& f : t.faults) {
      if (!in_window(f.time_ns)) continue;
      json args = {{"address", hex(f.address)}, {"access", fault_access(f.access)}};
      if (f.buffer != UINT32_MAX) {
        args["buffer"] = f.buffer;
        args["id"] = t.buffers[f.buffer].id;
        args["offset"] = f.address - t.buffers[f.buffer].base;
      }
      events.push_back({{"ph", "i"},
                        {"s", "t"},
                        {"pid", kTimelinePid},
                        {"tid", kTimelineFaultsTid},
                        {"name", fmt::format("page fault ({})", fault_access(f.access))},
                        {"cat", "fault"},
                        {"ts", us(f.time_ns)},
                        {"args", std::move(args)}});
    }
  }

  if (gpu_clock) {
    // Buffers by base, to name where a transfer lies.
    std::vector<uint32_t> by_base(t.buffers.size());
    for (uint32_t b = 0; b < by_base.size(); ++b) by_base[b] = b;
    std::sort(by_base.begin(), by_base.end(),
              [&](uint32_t a, uint32_t b) { return t.buffers[a].base < t.buffers[b].base; });
    for (const trace::Transfer& x : t.transfers) {
      if (!in_window(x.start_ns)) continue;
      json args = {{"address", hex(x.address)}, {"bytes", x.bytes}};
      const auto after =
          std::upper_bound(by_base.begin(), by_base.end(), x.address,
                           [&](uint64_t a, uint32_t b) { return a < t.buffers[b].base; });
      if (after != by_base.begin()) {
        const uint32_t b = *std::prev(after);
        if (x.address - t.buffers[b].base < t.buffers[b].size) {
          args["buffer"] = b;
          args["id"] = t.buffers[b].id;
          args["offset"] = x.address - t.buffers[b].base;
        }
      }
      const char* name =
          x.kind == trace::Transfer::copy ? (x.to_gpu ? "umswap copy in" : "umswap copy out")
          : x.kind == trace::Transfer::prefetch_call ? (x.to_gpu ? "prefetch" : "evict")
                                                     : (x.to_gpu ? "driver in" : "driver out");
      events.push_back({{"ph", "X"},
                        {"pid", kTimelinePid},
                        {"tid", x.to_gpu ? kTimelineAdvisorPrefetchTid : kTimelineAdvisorEvictTid},
                        {"name", name},
                        {"cat", "transfer"},
                        {"ts", us(x.start_ns)},
                        {"dur", static_cast<double>(x.end_ns - x.start_ns) / 1000.0},
                        {"args", std::move(args)}});
    }
  }

  json other = {
      {"umswap_trace_version", kTraceFormatVersion},
      {"program", t.program},
      {"pid", t.pid},
      {"clock", gpu_clock ? "gpu (CUPTI)" : "host (iterations only)"},
      {"time_origin_ns", origin},
      {"steps", t.steps.size()},
      {"steps_without_gpu_times", untimed},
      {"iterations_drawn", iterations_drawn},
      {"faults_drawn", faults_drawn},
      {"iterations", only ? fmt::format("{}-{}", only->first, only->second) : std::string("all")},
      {"dropped_records", t.dropped_records},
      {"tracks",
       {{"iterations", kTimelineIterationsTid},
        {"faults", kTimelineFaultsTid},
        {"advisor prefetch", kTimelineAdvisorPrefetchTid},
        {"advisor evict", kTimelineAdvisorEvictTid},
        {"first stream", kTimelineFirstStreamTid}}},
  };
  std::string note;
  if (untimed > 0) {
    note = fmt::format(
        "{} of {} steps have no GPU start/end times (CUPTI activity records missing or dropped) "
        "and are not drawn.",
        untimed, t.steps.size());
  }
  if (!gpu_clock && !t.faults.empty()) {
    note += fmt::format(
        "{}{} faults are not drawn: their times are on the GPU clock and no step "
        "is.",
        note.empty() ? "" : " ", t.faults.size());
  }
  if (!note.empty()) other["note"] = note;
  return json{{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ms"},
              {"otherData", std::move(other)}};
}

}  // namespace umswap
