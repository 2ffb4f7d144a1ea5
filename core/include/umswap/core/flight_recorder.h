// The flight recorder: the last kEvents things umswap did to the program's device memory (slab
// blocks handed out and taken back, slabs made and freed, the arena, discards and populates, the
// advisor's prefetches and evictions), each with the time and the launches seen by then.
//
// Why: a rare failure in the program (the correctness matrix's EmbeddingBag stopped at a
// synchronize with cudaErrorInvalidAddressSpace, 2 in 62 runs, 2026-11-30) left nothing that says
// what umswap did just before it. The stats file gets the ring (`flight_recorder`) when the
// program's context holds an error at exit; nothing else reads it.
//
// Threads: record() from any thread, without a lock (an atomic add, a compare-and-swap and seven
// relaxed stores; an event whose slot another writer holds, a whole ring apart, is dropped and
// counted); set_launch_clock() before the first record() it should number; snapshot() from any
// thread, exit handlers included: an event being written at the time is left out. A batch of
// discards or populates is one event per range: a large sweep can push older events out.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace umswap::flight {

enum class Kind : uint8_t {
  block_alloc,  // a slab block handed to the program
  block_free,   // given back by the program (stream-ordered or not)
  slab_create,  // a slab made (cuMemAllocManaged)
  slab_free,    // a wholly free slab given back (cuMemFree)
  arena,        // a placement's arena made (a slab too, recorded once as this)
  discard,      // pages discarded (one range of a batch)
  populate,     // pages discarded and prefetched to the GPU (one range of a batch)
  prefetch,     // the advisor's prefetch to the GPU (one call)
  evict,        // the advisor's prefetch to the host (one call)
};
const char* to_string(Kind kind);

struct Event {
  uint64_t seq = 0;      // 1, 2, ...: the order of record() calls
  uint64_t time_ns = 0;  // steady clock
  uint64_t launch = 0;   // launches seen when recorded (the launch clock; 0 without one)
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t stream = 0;  // the stream handle's value (0: the legacy stream, or none; 0x2: the
                        // calling thread's per-thread stream)
  Kind kind = Kind::block_alloc;
};

inline constexpr size_t kEvents = size_t{1} << 14;  // a power of two

void record(Kind kind, uint64_t address, uint64_t bytes, const void* stream = nullptr);
// What numbers the launches (the advisor's launches seen); null: none.
void set_launch_clock(uint64_t (*clock)());
// The ring's complete events, oldest first (at most kEvents).
std::vector<Event> snapshot();
// Events dropped because their slot was being written (see Threads).
uint64_t dropped();
// The snapshot as the stats file's `flight_recorder`: {"columns": [...], "events": [[seq, time_ns,
// launch, what, address, bytes, stream], ...], "dropped": n}, addresses and streams in hex.
nlohmann::json to_json(const std::vector<Event>& events);

}  // namespace umswap::flight
