// Iteration detection: where the training loop's iterations begin in the launch sequence.
//
// The tracer gives each launch a 32-bit step key (interned kernel name + kind; equal keys = the
// same launch). A training loop, once warmed up, launches the same keys in the same order every
// iteration, so the key sequence becomes periodic and the iteration is its period. The detector
// finds the most recent steady region [e, n) of the sequence and its period P.
//
// Algorithm (the same for the one-shot detect() and for the analyses push() runs), over the
// analysed keys [lo, n), T = n - lo:
//   1. Candidates. For each reference end r, the Z-function of the reversed keys [lo, r) gives, for
//      every lag p at once, how far back from r the keys repeat exactly with lag p. A lag is a
//      candidate when that exact run holds two full periods and min_steady_steps and reaches
//      further back than every smaller lag's (so multiples of the period add nothing, and an inner
//      loop's period enters only with its short reach). Reference ends: r = n - 2^k, to reach past
//      a disturbed end (an extra launch in the last iterations, a non-repeating tail), and
//      r = lo + 64 * 2^k, where a stream would have analysed early. At most 16 candidates (the
//      longest-reaching) go on.
//   2. Alignment. For each candidate p one forward pass aligns each step with its counterpart one
//      iteration earlier (initially lag p). In sync a step either matches its counterpart or
//      starts a disruption. The disruption is absorbed as noise when C consecutive steps
//      (C = clamp(p, 4, 16)), beginning at most R = max_noise_launches steps after it, match at a
//      lag that differs by at most R from the current one and by at most 2R from p (an extra
//      launch, a missing one, one replaced; two can overlap when consecutive iterations each carry
//      one); otherwise the steady region ends where the disruption began. Out of sync, C
//      consecutive matches at lag p start a region whose first iteration begins p steps before
//      the first of them. Result per candidate: its most recent region [e, f) that spans two
//      periods and min_steady_steps.
//   3. Choice. Among the candidates whose region ends latest (within 20 steps: the most recent
//      regime wins, so a change of period is followed), take those covering at least 7/8 of the
//      longest such region, and of those the smallest period. An inner loop's period cannot reach
//      across the outer loop's other launches (unless they amount to R launches or fewer, below),
//      so the outer period wins; occasional extra launches leave the true period covering as much
//      as the exact "period with the noise in it" (e.g. 10 iterations + 1), and the smaller wins.
//   Detection: period P, warmup_steps = e (index of the first step of the first iteration of the
//   region), confidence = steps of [e + P, n) that matched their counterpart / (n - e - P): a
//   final partial iteration costs nothing, each extra launch one step, a trailing non-repeating
//   tail all its steps.
//
// Iteration boundaries: e, e + P, ... as the alignment carries them: a step starts an iteration
// when its counterpart one (aligned) iteration earlier did, so an extra launch shifts the later
// boundaries by one. Where the iteration starts within the loop is a choice the data cannot make:
// the region starts after the last warm-up launch that does not repeat, so when warm-up iterations
// carry extra launches in their middle, the boundaries are a rotation of the loop's own (the same
// cyclic sequence). Use mark() where the exact phase matters.
//
// Streaming: push() appends to a ring of the last 2^window_log2 keys. Until a period is locked,
// the window is analysed as above at doubling intervals (64, 128, ... steps after the search
// began, at most half a window apart) and only while a work budget of 64 key visits per push
// allows; once locked, each push advances the alignment by one step and reports whether the step
// starts an iteration. A disruption that cannot be absorbed ends the lock and a new search starts
// (the last detection stays reported until a newer regime is found). Feeding the same keys to
// push() and then finish(), and to detect(), gives the same detection as long as they fit in the
// window (but see Limitations).
//
// Cost: push() while locked O(1) (O(R) during a disruption), no allocation; while searching,
// amortized O(1) through the work budget: an analysis of T keys visits about 2T log2(T) keys for
// the candidates plus 2T per candidate, and waits until the budget covers it (a full 2^20 window
// is re-analysed at most about once per window of pushes). Memory: 4 bytes + 1 bit per window
// slot, plus 2 bytes per window slot of analysis scratch allocated by the first analysis.
// detect(): O(T log T) time, O(T) scratch (tens of milliseconds for 2^20 keys). Periods up to
// half the analysed keys.
//
// Explicit markers: mark() says the next pushed step begins an iteration (called from an NVTX
// range or umswap_mark_iteration()). From the first mark on, marks alone set the boundaries:
// period = length of the last complete marked iteration, warmup_steps = first marked step,
// confidence = steps that matched the same position of the previous marked iteration / steps
// compared, source = the mark's source ("api", "nvtx:<name>").
//
// Limitations: a nested loop whose outer iteration adds R (default 1) launches or fewer to the
// repeated inner body is indistinguishable from the inner body with an occasional extra launch
// and is reported with the inner period (use mark()). More than R extra launches together, or two
// disruptions less than C steps apart, end the region (it restarts once two iterations repeat).
// Only the most recent regime is reported; the streaming analysis sees only the window, and a
// lock taken on a shorter prefix is kept while it holds, where detect() on the longer sequence
// may prefer another candidate in such ambiguous cases.
//
// Thread safety: none. One detector is fed by one thread (the tracer serializes its launch path);
// detect() is a pure function and may run anywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "umswap/core/trace.h"

namespace umswap::tracer {

struct DetectorOptions {
  // push() keeps the last 2^window_log2 keys (clamped to 8..30); periods up to half of it.
  uint32_t window_log2 = 20;
  // Shortest steady region accepted, in steps (at least 8), besides two full periods.
  uint32_t min_steady_steps = 32;
  // Launches one disruption may add, drop or replace and still count as noise (at most 4).
  uint32_t max_noise_launches = 1;
};

class IterationDetector {
 public:
  explicit IterationDetector(const DetectorOptions& options = {});
  ~IterationDetector();
  IterationDetector(const IterationDetector&) = delete;
  IterationDetector& operator=(const IterationDetector&) = delete;

  // Appends the next step's key. Returns true when this step begins an iteration (as known now:
  // a boundary inside a disruption is a guess that boundary_at() may later correct).
  bool push(uint32_t key);

  // The next pushed step begins an iteration. `source` names the marker ("api", "nvtx:<name>");
  // from the first call on, markers replace period detection.
  void mark(std::string_view source = "api");

  // The run is over (or a detection is wanted now): when no period is locked, analyses the
  // window once more whatever the schedule and the work budget say, so that current() accounts
  // for every step pushed. Cost: one analysis (see above).
  void finish();

  // The detection so far: period 0 and source "none" until one is found.
  trace::Detection current() const;

  // Whether `step` (an index into the pushed sequence) begins an iteration, as known now. False
  // for steps no longer in the window and for steps outside any detected region.
  bool boundary_at(uint64_t step) const;

  // The most recent step, within the window, that begins an iteration.
  std::optional<uint64_t> last_boundary() const;

  // Whether boundaries are being reported (a period is locked, or markers are in use).
  bool locked() const;

  // Steps pushed so far.
  uint64_t steps() const;

  // One-shot detection over a whole recorded sequence (not limited to a window).
  static trace::Detection detect(std::span<const uint32_t> keys,
                                 const DetectorOptions& options = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace umswap::tracer
