#include "umswap/core/flight_recorder.h"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <chrono>

namespace umswap::flight {
namespace {

// One slot. A writer claims it by turning `seq` into its own number with kBusy set (only from
// an older number: two writers a whole ring apart never write it at once), writes the fields and
// publishes its number (release); a reader that sees the same published number before and after
// copying the fields has a complete event.
constexpr uint64_t kBusy = uint64_t{1} << 63;
struct alignas(64) Slot {
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> time_ns{0}, launch{0}, address{0}, bytes{0}, stream{0};
  std::atomic<uint8_t> kind{0};
};

// Trivially destructible, constant-initialized: usable from any constructor or exit handler.
constinit std::array<Slot, kEvents> g_ring{};
constinit std::atomic<uint64_t> g_next{0};
constinit std::atomic<uint64_t> g_dropped{0};
constinit std::atomic<uint64_t (*)()> g_clock{nullptr};

}  // namespace

const char* to_string(Kind kind) {
  switch (kind) {
    case Kind::block_alloc:
      return "block alloc";
    case Kind::block_free:
      return "block free";
    case Kind::slab_create:
      return "slab create";
    case Kind::slab_free:
      return "slab free";
    case Kind::arena:
      return "arena";
    case Kind::discard:
      return "discard";
    case Kind::populate:
      return "populate";
    case Kind::prefetch:
      return "prefetch";
    case Kind::evict:
      return "evict";
  }
  return "?";
}

void record(Kind kind, uint64_t address, uint64_t bytes, const void* stream) {
  const uint64_t seq = g_next.fetch_add(1, std::memory_order_relaxed) + 1;
  Slot& s = g_ring[(seq - 1) & (kEvents - 1)];
  uint64_t held = s.seq.load(std::memory_order_relaxed);
  do {
    if ((held & kBusy) != 0 || held >= seq) {  // a writer a ring ahead or behind is in it
      g_dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  } while (!s.seq.compare_exchange_weak(held, seq | kBusy, std::memory_order_acq_rel,
                                        std::memory_order_relaxed));
  std::atomic_thread_fence(std::memory_order_release);
  const auto clock = g_clock.load(std::memory_order_relaxed);
  s.time_ns.store(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now().time_since_epoch())
                                            .count()),
                  std::memory_order_relaxed);
  s.launch.store(clock ? clock() : 0, std::memory_order_relaxed);
  s.address.store(address, std::memory_order_relaxed);
  s.bytes.store(bytes, std::memory_order_relaxed);
  s.stream.store(reinterpret_cast<uintptr_t>(stream), std::memory_order_relaxed);
  s.kind.store(static_cast<uint8_t>(kind), std::memory_order_relaxed);
  s.seq.store(seq, std::memory_order_release);
}

void set_launch_clock(uint64_t (*clock)()) {
  g_clock.store(clock, std::memory_order_relaxed);
}

std::vector<Event> snapshot() {
  const uint64_t last = g_next.load(std::memory_order_acquire);
  const uint64_t first = last > kEvents ? last - kEvents + 1 : 1;
  std::vector<Event> out;
  out.reserve(static_cast<size_t>(last - first + 1));
  for (uint64_t seq = first; seq <= last; ++seq) {
    const Slot& s = g_ring[(seq - 1) & (kEvents - 1)];
    if (s.seq.load(std::memory_order_acquire) != seq) continue;
    Event e;
    e.seq = seq;
    e.time_ns = s.time_ns.load(std::memory_order_relaxed);
    e.launch = s.launch.load(std::memory_order_relaxed);
    e.address = s.address.load(std::memory_order_relaxed);
    e.bytes = s.bytes.load(std::memory_order_relaxed);
    e.stream = s.stream.load(std::memory_order_relaxed);
    e.kind = static_cast<Kind>(s.kind.load(std::memory_order_relaxed));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != seq) continue;  // overwritten meanwhile
    out.push_back(e);
  }
  return out;
}

uint64_t dropped() {
  return g_dropped.load(std::memory_order_relaxed);
}

nlohmann::json to_json(const std::vector<Event>& events) {
  nlohmann::json list = nlohmann::json::array();
  for (const Event& e : events) {
    list.push_back({e.seq, e.time_ns, e.launch, to_string(e.kind), fmt::format("{:#x}", e.address),
                    e.bytes, fmt::format("{:#x}", e.stream)});
  }
  return {{"columns", {"seq", "time_ns", "launch", "what", "address", "bytes", "stream"}},
          {"events", std::move(list)},
          {"dropped", dropped()}};
}

}  // namespace umswap::flight
