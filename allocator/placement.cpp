#include "umswap/allocator/placement.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <random>
#include <unordered_map>
#include <utility>

namespace umswap {
namespace {

constexpr size_t kNone = SIZE_MAX;

// A lifetime on the iteration's circle of E events: [start, end) with end <= 2E; past E it wraps.
struct Interval {
  uint64_t size = 0;
  uint64_t start = 0;
  uint64_t end = 0;
};

// The interval as at most two pieces of [0, E).
std::array<std::pair<uint64_t, uint64_t>, 2> pieces(const Interval& x, uint64_t events) {
  if (x.end <= events) return {{{x.start, x.end}, {0, 0}}};
  return {{{x.start, events}, {0, x.end - events}}};
}

bool overlap(const Interval& x, const Interval& y, uint64_t events) {
  for (const auto& [a0, a1] : pieces(x, events)) {
    for (const auto& [b0, b1] : pieces(y, events)) {
      if (a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1) return true;
    }
  }
  return false;
}

// The local search's seed: the same events give the same placement in every process.
constexpr uint64_t kSearchSeed = 0x756d73776170;
// Its work: about this many interval pairs compared in all (a packing compares each item with
// those placed before it), at most 1.5 s on the 2-core build machine. VGG-16 b256's 114 blocks
// (a recorded trace, offline) reach their live peak in the first rounds, about 0.4 s; GPT-2
// medium's 1,922 are packed at their live peak by the first greedy order and are not searched.
constexpr uint64_t kSearchWork = uint64_t{128} << 20;
constexpr uint64_t kMaxSearchTries = 20000;
constexpr uint64_t kSearchRounds = 8;

uint64_t local_search_tries(size_t items) {
  const uint64_t pairs = std::max<uint64_t>(1, uint64_t{items} * items / 2);
  return std::min<uint64_t>(kMaxSearchTries, kSearchWork / pairs);
}

uint64_t round_up(uint64_t value, uint64_t granule) {
  return (value + granule - 1) / granule * granule;
}

// Places the intervals in `order`, each at the lowest offset (first_gap) or in the smallest gap
// (best gap) that no placed interval overlapping it in time occupies. Returns the arena size.
uint64_t pack(const std::vector<Interval>& items, const std::vector<size_t>& order, uint64_t events,
              uint64_t alignment, bool best_gap, std::vector<uint64_t>& offsets) {
  offsets.assign(items.size(), Placement::kUnplaced);
  std::vector<size_t> placed;
  std::vector<std::pair<uint64_t, uint64_t>> busy;
  uint64_t top = 0;
  for (const size_t i : order) {
    const Interval& x = items[i];
    const uint64_t size = round_up(x.size, alignment);
    busy.clear();
    for (const size_t k : placed) {
      if (overlap(x, items[k], events)) busy.emplace_back(offsets[k], offsets[k] + items[k].size);
    }
    std::sort(busy.begin(), busy.end());
    uint64_t cursor = 0;
    uint64_t chosen = Placement::kUnplaced;
    uint64_t chosen_gap = UINT64_MAX;
    for (const auto& [lo, hi] : busy) {
      if (lo > cursor && lo - cursor >= size) {
        if (!best_gap) {
          chosen = cursor;
          break;
        }
        if (lo - cursor < chosen_gap) {
          chosen = cursor;
          chosen_gap = lo - cursor;
        }
      }
      cursor = std::max(cursor, round_up(hi, alignment));
    }
    if (chosen == Placement::kUnplaced) chosen = cursor;
    offsets[i] = chosen;
    top = std::max(top, chosen + x.size);
    placed.push_back(i);
  }
  return top;
}

// The most pages of Placement::kPage (from the arena's start) that hold a live interval at once,
// in bytes: a sweep over the circle's events, ends before starts at the same event.
uint64_t page_peak(const std::vector<Interval>& items, const std::vector<uint64_t>& offsets,
                   uint64_t events) {
  constexpr uint64_t kPage = Placement::kPage;
  struct Edge {
    uint64_t at;
    int delta;
    size_t item;
  };
  std::vector<Edge> edges;
  uint64_t pages = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].size == 0) continue;
    pages = std::max(pages, (offsets[i] + items[i].size + kPage - 1) / kPage);
    for (const auto& [a, b] : pieces(items[i], events)) {
      if (a >= b) continue;
      edges.push_back({a, +1, i});
      edges.push_back({b, -1, i});
    }
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) {
    return x.at != y.at ? x.at < y.at : x.delta < y.delta;
  });
  std::vector<uint32_t> users(pages, 0);
  uint64_t live = 0, peak = 0;
  for (size_t e = 0; e < edges.size(); ++e) {
    const Interval& x = items[edges[e].item];
    const uint64_t first = offsets[edges[e].item] / kPage;
    const uint64_t last = (offsets[edges[e].item] + x.size - 1) / kPage;
    for (uint64_t p = first; p <= last; ++p) {
      if (edges[e].delta > 0) {
        if (users[p]++ == 0) ++live;
      } else if (--users[p] == 0) {
        --live;
      }
    }
    if (e + 1 == edges.size() || edges[e + 1].at != edges[e].at) peak = std::max(peak, live);
  }
  return peak * kPage;
}

}  // namespace

std::optional<Placement> plan_placement(std::span<const BlockEvent> events, uint64_t start,
                                        uint64_t period, uint64_t min_bytes, uint64_t alignment,
                                        std::string* why, const std::function<bool()>& stop) {
  if (period == 0 || start < period || alignment == 0) {
    *why = "no two whole iterations to plan placement from";
    return std::nullopt;
  }
  // Pair each allocation with the next free of its address.
  std::vector<size_t> free_of(events.size(), kNone);
  std::unordered_map<uint64_t, size_t> open;
  for (size_t i = 0; i < events.size(); ++i) {
    const BlockEvent& e = events[i];
    if (e.bytes <= min_bytes) continue;
    if (!e.freed) {
      open[e.address] = i;
    } else if (const auto it = open.find(e.address); it != open.end()) {
      free_of[it->second] = i;
      open.erase(it);
    }
  }
  const uint64_t first = start - period;
  const uint64_t last = start + period;
  std::vector<size_t> previous, current;                      // allocations of the two iterations
  std::vector<uint64_t> position(events.size(), UINT64_MAX);  // in the second iteration
  uint64_t count = 0;                                         // events in the second iteration
  for (size_t i = 0; i < events.size(); ++i) {
    const BlockEvent& e = events[i];
    if (e.bytes <= min_bytes || e.when < first || e.when >= last) continue;
    const bool second = e.when >= start;
    if (second) position[i] = count++;
    if (!e.freed) (second ? current : previous).push_back(i);
  }
  if (current.empty()) {
    *why = "the iteration allocates no large stream-ordered blocks";
    return std::nullopt;
  }
  if (current.size() > kMaxPlacedAllocations) {
    *why = "the iteration allocates more blocks than placement plans for";
    return std::nullopt;
  }
  const auto same_size = [&](size_t a, size_t b) { return events[a].bytes == events[b].bytes; };
  if (previous.size() != current.size() ||
      !std::equal(previous.begin(), previous.end(), current.begin(), same_size)) {
    *why = "two consecutive iterations allocate different sequences of blocks";
    return std::nullopt;
  }

  Placement out;
  std::vector<Interval> items;
  std::vector<size_t> item_of;  // allocation index of each item
  for (size_t j = 0; j < current.size(); ++j) {
    out.sizes.push_back(events[current[j]].bytes);
    const uint64_t s = position[current[j]];
    uint64_t e = UINT64_MAX;
    if (const size_t f = free_of[current[j]]; f != kNone && position[f] != UINT64_MAX) {
      e = position[f];
    } else if (const size_t g = free_of[previous[j]];
               g != kNone && position[g] != UINT64_MAX && position[g] < s) {
      e = count + position[g];  // freed in the next iteration, as its predecessor was in this one
    }
    if (e == UINT64_MAX) continue;
    items.push_back({events[current[j]].bytes, s, e});
    item_of.push_back(j);
  }
  out.offsets.assign(out.sizes.size(), Placement::kUnplaced);
  if (items.empty()) {
    *why = "no block of the iteration is freed within an iteration of its allocation";
    return std::nullopt;
  }

  // The most bytes live at once, over the circle.
  std::vector<int64_t> delta(count + 1, 0);
  for (const Interval& x : items) {
    for (const auto& [a, b] : pieces(x, count)) {
      if (a >= b) continue;
      delta[a] += static_cast<int64_t>(x.size);
      delta[b] -= static_cast<int64_t>(x.size);
    }
  }
  int64_t live = 0;
  for (uint64_t t = 0; t < count; ++t) {
    live += delta[t];
    out.live_peak = std::max(out.live_peak, static_cast<uint64_t>(live));
  }

  // A few greedy orders; the smallest arena wins (the first on ties, so the result is stable).
  std::vector<size_t> by_start(items.size());
  std::iota(by_start.begin(), by_start.end(), 0);  // items are in allocation order
  std::vector<size_t> by_size = by_start;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](size_t a, size_t b) { return items[a].size > items[b].size; });
  struct Candidate {
    const char* name;
    const std::vector<size_t>* order;
    bool best_gap;
  };
  // Measured on VGG-16 (docs/advisor.md, "Placement"): ordering by free gives a smaller arena
  // (18.45 against 18.71 GiB) but its plans dropped more (1.27-1.44 against 0.83 GB per
  // iteration) and ran slower; the arena's size is not all that counts.
  const std::array<Candidate, 4> candidates{{{"allocation order, first gap", &by_start, false},
                                             {"size, first gap", &by_size, false},
                                             {"size, best gap", &by_size, true},
                                             {"allocation order, best gap", &by_start, true}}};
  std::vector<uint64_t> offsets, best;
  uint64_t best_top = UINT64_MAX;
  // Lists a packing (in `offsets`) as a candidate and keeps it if its arena is the smallest yet.
  const auto consider = [&](const char* name, uint64_t top) {
    const uint64_t pages = page_peak(items, offsets, count);
    out.candidates.push_back({name, round_up(top, alignment), pages});
    if (top >= best_top) return false;
    best_top = top;
    best = offsets;
    out.order = name;
    out.page_peak = pages;
    return true;
  };
  const std::vector<size_t>* best_order = nullptr;
  for (const Candidate& c : candidates) {
    if (consider(c.name, pack(items, *c.order, count, alignment, c.best_gap, offsets))) {
      best_order = c.order;
    }
  }
  // An arena above the live peak: search the orders around the best one (first gap). Managed
  // memory holds what an arena spans, so its excess is GPU memory to hold or drop: VGG-16 b256's
  // 2.2% over (18.71 against 18.31 GiB) made its plan drop 0.83 GB an iteration at a budget equal
  // to the native peak, and cost it 3% (docs/advisor.md, "Placement").
  const uint64_t goal = round_up(out.live_peak, alignment);
  if (best_top > goal) {
    // Rounds from the greedy order, each with a seed of its own: one round often settles above
    // the live peak while another reaches it (VGG-16: within 800 to 4,000 tries, or not in 20,000).
    std::vector<size_t> order = *best_order;
    uint64_t top = UINT64_MAX;
    const uint64_t tries = local_search_tries(items.size());
    std::vector<size_t> walk, trial;
    bool stopped = false;
    for (uint64_t round = 0; round < kSearchRounds && top > goal && !stopped; ++round) {
      std::mt19937_64 rng(kSearchSeed + round);
      walk = *best_order;
      uint64_t walk_top = pack(items, walk, count, alignment, false, offsets);
      for (uint64_t t = 0; t < tries / kSearchRounds && walk_top > goal; ++t) {
        if (stop && stop()) {
          stopped = true;
          break;
        }
        trial = walk;
        const size_t a = rng() % trial.size(), b = rng() % trial.size();
        if (rng() % 2 == 0) {
          std::swap(trial[a], trial[b]);
        } else {  // one item moved elsewhere
          const size_t x = trial[a];
          trial.erase(trial.begin() + static_cast<ptrdiff_t>(a));
          trial.insert(trial.begin() + static_cast<ptrdiff_t>(b), x);
        }
        const uint64_t trial_top = pack(items, trial, count, alignment, false, offsets);
        if (trial_top <= walk_top) {  // sideways moves too: arenas plateau
          walk_top = trial_top;
          walk.swap(trial);
        }
      }
      if (walk_top < top) {
        top = walk_top;
        order = walk;
      }
    }
    if (round_up(top, alignment) < round_up(best_top, alignment)) {  // a smaller arena
      consider("local search from the best", pack(items, order, count, alignment, false, offsets));
    }
  }
  for (size_t k = 0; k < items.size(); ++k) out.offsets[item_of[k]] = best[k];
  out.placed = items.size();
  out.arena_bytes = round_up(best_top, alignment);
  return out;
}

}  // namespace umswap
