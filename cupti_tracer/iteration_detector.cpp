#include "umswap/tracer/iteration_detector.h"

#include <algorithm>
#include <array>
#include <bit>
#include <string>
#include <vector>

namespace umswap::tracer {
namespace {

constexpr uint32_t kMaxNoise = 4;
constexpr uint32_t kMinConfirm = 4;
constexpr uint32_t kMaxConfirm = 16;
constexpr size_t kMaxCandidates = 16;
// A region shorter than 1/kSubstantialShare of the longest one cannot be the latest regime.
constexpr uint64_t kSubstantialShare = 4;
// Regions ending this close to the latest one count as equally recent (a disruption can hold a
// region's end up to a confirm length plus the noise allowance before the end of the data).
constexpr uint64_t kRecencySlack = kMaxConfirm + kMaxNoise;
constexpr uint64_t kFirstAnalysis = 64;
constexpr int64_t kWorkPerPush = 64;

struct Settings {
  uint32_t noise = 1;
  uint64_t min_steady = 32;
};

Settings settings_from(const DetectorOptions& options) {
  return Settings{.noise = std::min(options.max_noise_launches, kMaxNoise),
                  .min_steady = std::max<uint64_t>(options.min_steady_steps, 8)};
}

enum class Mode : uint8_t { searching, synced, disrupted };

// The alignment of the sequence with itself one iteration earlier, for one period.
// Lags stay within p +- 2R: a disruption may move the lag by at most R, and two may overlap (an
// extra launch in each of two consecutive iterations, before the first one's counterpart passed).
struct Alignment {
  uint64_t period = 0;
  uint32_t noise = 0;    // R
  uint32_t confirm = 0;  // C: consecutive matches that establish (or re-establish) sync
  Mode mode = Mode::searching;
  bool has_region = false;
  uint64_t lag = 0;      // synced/disrupted: the current lag
  uint64_t since = 0;    // disrupted: first step that did not match
  uint64_t start = 0;    // e: first step of the region's first iteration
  uint64_t end = 0;      // searching with has_region: where the last region ended
  uint64_t matched = 0;  // steps of the region that matched their counterpart
  // Consecutive matches ending at the current step, per lag p - 2R + d. Searching uses d = 2R.
  std::array<uint32_t, 4 * kMaxNoise + 1> run{};

  uint64_t region_end(uint64_t n) const {
    switch (mode) {
      case Mode::synced:
        return n;
      case Mode::disrupted:
        return since;
      case Mode::searching:
        return end;
    }
    return end;
  }
  uint64_t current_step = 0;  // the last step advanced

  // Lag p - 2R + d exists (is at least 1).
  bool lag_exists(uint32_t d) const { return period + d >= 2 * uint64_t{noise} + 1; }
  uint64_t lag_of(uint32_t d) const { return period + d - 2 * uint64_t{noise}; }
  // A disruption may move the lag by at most R.
  bool lag_allowed(uint32_t d) const {
    if (!lag_exists(d)) return false;
    const uint64_t to = lag_of(d);
    return (to > lag ? to - lag : lag - to) <= noise;
  }
  // Whether the run at lag index d began no later than R steps after the disruption.
  bool run_in_time(uint32_t d) const {
    return run[d] > 0 && current_step + 1 - run[d] <= since + noise;
  }
  // Matched steps, counting a disruption still open at the end as resolved by its best run.
  uint64_t matched_so_far() const {
    if (mode != Mode::disrupted) return matched;
    uint32_t best = 0;
    for (uint32_t d = 0; d <= 4 * noise; ++d) {
      if (lag_allowed(d) && run_in_time(d)) best = std::max(best, run[d]);
    }
    return matched + best;
  }
};

Alignment make_alignment(uint64_t period, const Settings& s) {
  Alignment a;
  a.period = period;
  a.noise = s.noise;
  a.confirm = static_cast<uint32_t>(std::clamp<uint64_t>(period, kMinConfirm, kMaxConfirm));
  return a;
}

bool valid_region(const Alignment& a, uint64_t f, const Settings& s) {
  return a.has_region && f - a.start >= std::max(2 * a.period, s.min_steady);
}

// Boundary flags: ignored during analysis, a bitset parallel to the ring when streaming.
struct NoFlags {
  static constexpr bool enabled = false;
  bool get(uint64_t) const { return false; }
  void set(uint64_t, bool) {}
};

// Advances `a` by step i (keys [lo, i] readable).
template <class Keys, class Flags>
void advance(Alignment& a, const Keys& keys, uint64_t lo, Flags& flags, uint64_t i) {
  const uint32_t key = keys(i);
  const auto same = [&](uint64_t lag) { return lag >= 1 && i >= lo + lag && keys(i - lag) == key; };
  const uint64_t p = a.period;
  const uint32_t r = a.noise;
  a.current_step = i;
  switch (a.mode) {
    case Mode::searching: {
      uint32_t& run = a.run[2 * r];
      run = same(p) ? run + 1 : 0;
      if (run >= a.confirm) {
        a.mode = Mode::synced;
        a.has_region = true;
        a.lag = p;
        a.start = i + 1 - a.confirm - p;
        a.matched = a.confirm;
        if constexpr (Flags::enabled) {
          for (uint64_t j = a.start; j <= i; ++j) flags.set(j, (j - a.start) % p == 0);
        }
      }
      return;
    }
    case Mode::synced:
      if (same(a.lag)) {
        ++a.matched;
        if constexpr (Flags::enabled) flags.set(i, flags.get(i - a.lag));
        return;
      }
      a.mode = Mode::disrupted;
      a.since = i;
      a.run.fill(0);
      [[fallthrough]];
    case Mode::disrupted: {
      for (uint32_t d = 0; d <= 4 * r; ++d) {
        a.run[d] = (a.lag_exists(d) && same(a.lag_of(d))) ? a.run[d] + 1 : 0;
      }
      if constexpr (Flags::enabled) flags.set(i, i >= lo + a.lag && flags.get(i - a.lag));
      // Resync on a run of C that began at most R steps after the disruption: prefer the current
      // lag, then p, then lags nearer p.
      const auto ready = [&](uint32_t d) {
        return a.lag_allowed(d) && a.run[d] >= a.confirm && a.run_in_time(d);
      };
      int best = -1;
      const uint32_t current = static_cast<uint32_t>(a.lag + 2 * r - p);
      if (ready(current)) best = static_cast<int>(current);
      for (uint32_t k = 0; best < 0 && k <= 2 * r; ++k) {
        if (ready(2 * r - k)) {
          best = static_cast<int>(2 * r - k);
        } else if (ready(2 * r + k)) {
          best = static_cast<int>(2 * r + k);
        }
      }
      if (best >= 0) {
        const uint64_t lag = a.lag_of(static_cast<uint32_t>(best));
        const uint64_t first = i + 1 - a.run[best];
        a.matched += a.run[best];
        a.lag = lag;
        a.mode = Mode::synced;
        if constexpr (Flags::enabled) {
          for (uint64_t j = a.since; j < first; ++j) flags.set(j, false);
          for (uint64_t j = first; j <= i; ++j) flags.set(j, flags.get(j - lag));
        }
        return;
      }
      if (i + 1 - a.since >= r + a.confirm) {  // no run starting in time can reach C any more
        a.mode = Mode::searching;
        a.end = a.since;  // a.run[2R], the run at lag p, carries on into the search
        if constexpr (Flags::enabled) {
          for (uint64_t j = a.since; j <= i; ++j) flags.set(j, false);
        }
      }
      return;
    }
  }
}

// One forward pass for one period over [lo, n): the most recent valid region (has_region false
// when there is none).
template <class Keys>
Alignment scan(const Keys& keys, uint64_t lo, uint64_t n, uint64_t period, const Settings& s) {
  Alignment a = make_alignment(period, s);
  Alignment last_valid;
  NoFlags flags;
  for (uint64_t i = lo + period; i < n; ++i) {
    const bool in_region = a.mode != Mode::searching;
    advance(a, keys, lo, flags, i);
    if (in_region && a.mode == Mode::searching && valid_region(a, a.end, s)) last_valid = a;
  }
  if (a.mode != Mode::searching && valid_region(a, a.region_end(n), s)) return a;
  if (last_valid.has_region) return last_valid;
  a.has_region = false;
  return a;
}

struct Candidate {
  uint64_t period = 0;
  uint64_t reach = 0;  // exact repetition from the reference end, in steps
};

struct Scratch {
  std::vector<uint32_t> z;
  std::vector<Candidate> frontier;
  std::vector<Candidate> candidates;
  std::vector<Alignment> regions;
};

// Z-function of the reversed keys [lo, end): z[k] = how many steps back from `end` the keys
// repeat with lag k. Appends the candidate lags (see the header) to `out`; returns the work done.
template <class Keys>
uint64_t exact_candidates(const Keys& keys, uint64_t lo, uint64_t end, const Settings& s,
                          Scratch& scratch) {
  const uint64_t len = end - lo;
  const uint64_t half = len / 2;
  if (half == 0) return 0;
  if (scratch.z.size() < half + 1) scratch.z.resize(half + 1);
  auto& z = scratch.z;
  const auto rev = [&](uint64_t k) { return keys(end - 1 - k); };
  scratch.frontier.clear();
  uint64_t l = 0;
  uint64_t r = 0;
  uint64_t best = 0;
  for (uint64_t k = 1; k <= half; ++k) {
    uint64_t v = k < r ? std::min<uint64_t>(r - k, z[k - l]) : 0;
    while (k + v < len && rev(v) == rev(k + v)) ++v;
    z[k] = static_cast<uint32_t>(v);
    if (k + v > r) {
      l = k;
      r = k + v;
    }
    if (v >= k && v + k >= s.min_steady && v + k > best) {
      scratch.frontier.push_back({k, v + k});
      best = v + k;
    }
  }
  // The longest-reaching ones matter; merge them, keeping each period's best reach.
  const size_t from =
      scratch.frontier.size() > kMaxCandidates ? scratch.frontier.size() - kMaxCandidates : 0;
  for (size_t f = from; f < scratch.frontier.size(); ++f) {
    const Candidate& c = scratch.frontier[f];
    auto it = std::find_if(scratch.candidates.begin(), scratch.candidates.end(),
                           [&](const Candidate& x) { return x.period == c.period; });
    if (it == scratch.candidates.end()) {
      scratch.candidates.push_back(c);
    } else {
      it->reach = std::max(it->reach, c.reach);
    }
  }
  return 2 * len;
}

struct Analysis {
  bool found = false;
  Alignment best;
  uint64_t work = 0;
};

template <class Keys>
Analysis analyse(const Keys& keys, uint64_t lo, uint64_t n, const Settings& s, Scratch& scratch) {
  Analysis out;
  const uint64_t len = n - lo;
  if (len < s.min_steady) return out;
  scratch.candidates.clear();
  // Reference ends n - 2^k reach past a disturbed end; prefix ends lo + 2^k (where a stream
  // analysed early) catch a period whose later iterations are disturbed.
  for (uint64_t back = 0; back <= len / 2 && len - back >= s.min_steady;
       back = back == 0 ? 1 : back * 2) {
    out.work += exact_candidates(keys, lo, n - back, s, scratch);
  }
  for (uint64_t prefix = kFirstAnalysis; prefix < len / 2; prefix *= 2) {
    out.work += exact_candidates(keys, lo, lo + prefix, s, scratch);
  }
  auto& cands = scratch.candidates;
  if (cands.size() > kMaxCandidates) {
    std::partial_sort(cands.begin(), cands.begin() + kMaxCandidates, cands.end(),
                      [](const Candidate& a, const Candidate& b) {
                        return a.reach != b.reach ? a.reach > b.reach : a.period < b.period;
                      });
    cands.resize(kMaxCandidates);
  }
  scratch.regions.clear();
  for (const Candidate& c : cands) {
    Alignment a = scan(keys, lo, n, c.period, s);
    out.work += 2 * len;
    if (a.has_region) scratch.regions.push_back(a);
  }
  if (scratch.regions.empty()) return out;
  // A regime much shorter than the longest one found does not count as the latest: a run of
  // identical launches at the end of a program (copying weights back, one memcpy per tensor) or
  // inside an iteration (one optimizer kernel per parameter) is not a change of period.
  uint64_t any_longest = 0;
  for (const Alignment& a : scratch.regions) {
    any_longest = std::max(any_longest, a.region_end(n) - a.start);
  }
  auto substantial = [&](const Alignment& a) {
    return (a.region_end(n) - a.start) * kSubstantialShare >= any_longest;
  };
  uint64_t latest = 0;
  for (const Alignment& a : scratch.regions) {
    if (substantial(a)) latest = std::max(latest, a.region_end(n));
  }
  uint64_t longest = 0;
  for (const Alignment& a : scratch.regions) {
    if (substantial(a) && a.region_end(n) + kRecencySlack >= latest) {
      longest = std::max(longest, a.region_end(n) - a.start);
    }
  }
  for (const Alignment& a : scratch.regions) {
    const uint64_t f = a.region_end(n);
    if (!substantial(a) || f + kRecencySlack < latest || (f - a.start) * 8 < longest * 7) continue;
    if (!out.found || a.period < out.best.period) {
      out.best = a;
      out.found = true;
    }
  }
  return out;
}

trace::Detection to_detection(const Alignment& a, uint64_t n) {
  trace::Detection d;
  d.period = a.period;
  d.warmup_steps = a.start;
  const uint64_t compared = n - a.start - a.period;
  d.confidence =
      compared == 0
          ? 0.0
          : std::min(1.0, static_cast<double>(a.matched_so_far()) / static_cast<double>(compared));
  d.source = "period";
  return d;
}

trace::Detection no_detection() {
  trace::Detection d;
  d.source = "none";
  return d;
}

struct SpanKeys {
  std::span<const uint32_t> keys;
  uint32_t operator()(uint64_t i) const { return keys[i]; }
};

}  // namespace

struct IterationDetector::Impl {
  explicit Impl(const DetectorOptions& options)
      : settings(settings_from(options)),
        window_log2(std::clamp<uint32_t>(options.window_log2, 8, 30)),
        window(uint64_t{1} << window_log2),
        mask(window - 1),
        ring(window),
        bits(window / 64),
        budget_cap(kWorkPerPush * static_cast<int64_t>(window)) {}

  struct RingKeys {
    const Impl* self;
    uint32_t operator()(uint64_t i) const { return self->ring[i & self->mask]; }
  };
  struct RingFlags {
    static constexpr bool enabled = true;
    Impl* self;
    bool get(uint64_t i) const { return self->bit(i); }
    void set(uint64_t i, bool v) { self->set_bit(i, v); }
  };

  uint64_t lo() const { return n > window ? n - window : 0; }
  bool bit(uint64_t i) const { return (bits[(i & mask) / 64] >> (i % 64)) & 1; }
  void set_bit(uint64_t i, bool v) {
    uint64_t& w = bits[(i & mask) / 64];
    const uint64_t m = uint64_t{1} << (i % 64);
    w = v ? (w | m) : (w & ~m);
  }

  bool push(uint32_t key) {
    const uint64_t i = n;
    ring[i & mask] = key;
    set_bit(i, false);
    ++n;
    budget = std::min(budget + kWorkPerPush, budget_cap);
    if (marked) return push_marked(i, key);
    if (is_locked) {
      RingFlags flags{this};
      advance(alignment, RingKeys{this}, lo(), flags, i);
      if (alignment.mode != Mode::searching) return bit(i);
      is_locked = false;  // the region ended: search again, keep reporting it meanwhile
      search_start = n;
      next_due = n + kFirstAnalysis;
      return false;
    }
    if (n >= next_due && budget >= 0) search();
    return is_locked && bit(i);
  }

  void search() {
    const uint64_t from = lo();
    Analysis an = analyse(RingKeys{this}, from, n, settings, scratch);
    budget -= static_cast<int64_t>(an.work);
    const uint64_t interval = std::clamp<uint64_t>(n - search_start, kFirstAnalysis, window / 2);
    next_due = n + interval;
    if (!an.found) return;
    has_alignment = true;
    if (an.best.mode == Mode::searching) {  // a regime that has ended: report it, keep looking
      alignment = an.best;
      return;
    }
    // Lock: replay the region with boundary flags. Its run at lag p began at start + p, so the
    // replay, searching from there over the same keys, reaches the same state.
    const uint64_t start = an.best.start;
    Alignment a = make_alignment(an.best.period, settings);
    RingFlags flags{this};
    for (uint64_t j = start + a.period; j < n; ++j) advance(a, RingKeys{this}, from, flags, j);
    budget -= static_cast<int64_t>(n - start);
    alignment = a;
    is_locked = true;
  }

  bool push_marked(uint64_t i, uint32_t key) {
    const bool boundary = pending_mark;
    if (pending_mark) {
      pending_mark = false;
      if (have_mark) {
        prev_start = mark_start;
        prev_len = i - mark_start;
        have_prev = true;
      } else {
        first_mark = i;
        have_mark = true;
      }
      mark_start = i;
      set_bit(i, true);
    }
    if (have_prev) {
      const uint64_t offset = i - mark_start;
      ++mark_compared;
      const uint64_t counterpart = prev_start + offset;
      if (offset < prev_len && counterpart >= lo() && ring[counterpart & mask] == key) {
        ++mark_matched;
      }
    }
    return boundary;
  }

  void mark(std::string_view source) {
    if (!marked) {
      marked = true;
      is_locked = false;
    }
    if (mark_source != source) mark_source.assign(source);
    pending_mark = true;
  }

  trace::Detection current() const {
    if (marked) {
      trace::Detection d;
      d.source = mark_source;
      if (!have_prev) return d;
      d.period = prev_len;
      d.warmup_steps = first_mark;
      d.confidence = mark_compared == 0
                         ? 0.0
                         : static_cast<double>(mark_matched) / static_cast<double>(mark_compared);
      return d;
    }
    if (!has_alignment) return no_detection();
    return to_detection(alignment, n);
  }

  std::optional<uint64_t> last_boundary() const {
    if (marked) return have_mark ? std::optional<uint64_t>(mark_start) : std::nullopt;
    const uint64_t from = lo();
    for (uint64_t i = n; i > from;) {
      --i;
      const uint64_t w = bits[(i & mask) / 64];
      // Bits of this word at or below position i, and not below the window start.
      uint64_t m = w & (~uint64_t{0} >> (63 - i % 64));
      const uint64_t word_first = i - i % 64;
      if (word_first < from) m &= ~uint64_t{0} << (from - word_first);
      if (m != 0) return word_first + 63 - static_cast<uint64_t>(std::countl_zero(m));
      i = word_first;
    }
    return std::nullopt;
  }

  const Settings settings;
  const uint32_t window_log2;
  const uint64_t window;
  const uint64_t mask;
  std::vector<uint32_t> ring;
  std::vector<uint64_t> bits;
  const int64_t budget_cap;
  int64_t budget = 0;
  uint64_t n = 0;

  // Period detection.
  Scratch scratch;
  Alignment alignment;
  bool has_alignment = false;
  bool is_locked = false;
  uint64_t search_start = 0;
  uint64_t next_due = kFirstAnalysis;

  // Markers.
  bool marked = false;
  bool pending_mark = false;
  bool have_mark = false;
  bool have_prev = false;
  std::string mark_source;
  uint64_t first_mark = 0;
  uint64_t mark_start = 0;
  uint64_t prev_start = 0;
  uint64_t prev_len = 0;
  uint64_t mark_compared = 0;
  uint64_t mark_matched = 0;
};

IterationDetector::IterationDetector(const DetectorOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
IterationDetector::~IterationDetector() = default;

bool IterationDetector::push(uint32_t key) {
  return impl_->push(key);
}
void IterationDetector::mark(std::string_view source) {
  impl_->mark(source);
}
void IterationDetector::finish() {
  if (!impl_->marked && !impl_->is_locked && impl_->n > 0) impl_->search();
}
trace::Detection IterationDetector::current() const {
  return impl_->current();
}
bool IterationDetector::locked() const {
  return impl_->is_locked || impl_->marked;
}
uint64_t IterationDetector::steps() const {
  return impl_->n;
}
std::optional<uint64_t> IterationDetector::last_boundary() const {
  return impl_->last_boundary();
}

bool IterationDetector::boundary_at(uint64_t step) const {
  if (step >= impl_->n || step < impl_->lo()) return false;
  return impl_->bit(step);
}

trace::Detection IterationDetector::detect(std::span<const uint32_t> keys,
                                           const DetectorOptions& options) {
  const Settings s = settings_from(options);
  Scratch scratch;
  const Analysis an = analyse(SpanKeys{keys}, 0, keys.size(), s, scratch);
  if (!an.found) return no_detection();
  return to_detection(an.best, keys.size());
}

}  // namespace umswap::tracer
