// How the plan's evictions and prefetches move memory. The advisor offers each eviction, and each
// prefetch, to its evictors in order until one takes it: today the copy evictor
// (copy_evictor.h, UMSWAP_EVICT_COPY: copies to pinned host memory and discards) and then the
// driver evictor (below: cuMemPrefetchAsync, which always takes it). A remapping engine (the vmm
// engine, issue 38) is a third kind.
//
// Threads: every call below on the advisor thread. An evictor that also has work on the launch
// path (the copy evictor's guard and waits) says so in its own header.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace umswap::advisor {

// What an evictor needs from the advisor that owns it.
class EvictorHost {
 public:
  // An eviction (to_gpu false) or prefetch through the driver (cuMemPrefetchAsync on the
  // advisor's stream), at launch `launch` (advisor thread).
  virtual void migrate(uint64_t address, uint64_t length, bool to_gpu, uint64_t launch) = 0;
  // Makes `on` wait for the GPU to reach launch g (its "reached" event; advisor thread).
  virtual void wait_reached(uint64_t g, CUstream on) = 0;
  // Bytes moved another way than migrate(), into the advisor's transfer totals (advisor thread).
  virtual void count(bool to_gpu, uint64_t launch, uint64_t bytes) = 0;
  virtual void note_doing(const char* what) = 0;  // what the advisor thread begins (watchdog's)
  virtual void issued_call() = 0;                 // one more call issued (the watchdog's progress)
  virtual uint64_t launches_seen() const = 0;     // launches seen by the launch path (any thread)
  virtual uint64_t waits_start() const = 0;       // launches from here on carry waits (any thread)
  virtual bool stopping() const = 0;              // the program ends (any thread)

 protected:
  ~EvictorHost() = default;
};

class Evictor {
 public:
  enum class Outcome : uint8_t {
    taken,     // done (or issued) by this evictor
    declined,  // nothing was done: the next evictor is asked
    kept,      // nothing was done, and the range must stay on the GPU (a launch already
               // submitted reaches it): no evictor is asked
  };
  // The eviction of [address, address + length) at launch g, after launch j's end (`ordered`: the
  // advisor's stream waits for launch j), brought back by launch `due` (UINT64_MAX: the plan does
  // not bring it all back within an iteration).
  virtual Outcome evict(uint64_t address, uint64_t length, uint64_t g, uint64_t j, bool ordered,
                        uint64_t due) = 0;
  // The prefetch of [address, address + length) at launch g: false when declined.
  virtual bool restore(uint64_t address, uint64_t length, uint64_t g) = 0;
  // Launch g's prefetches are all offered (`wait_reached`: what they issue waits for the GPU to
  // reach launch g).
  virtual void finish_launch(uint64_t g, bool wait_reached) = 0;

 protected:
  ~Evictor() = default;
};

// Evictions and prefetches by cuMemPrefetchAsync: the driver moves managed memory's pages, and a
// launch that reaches a page on the host faults it back (slower, never wrong). Takes everything.
class DriverEvictor final : public Evictor {
 public:
  explicit DriverEvictor(EvictorHost& host) : host_(host) {}
  Outcome evict(uint64_t address, uint64_t length, uint64_t g, uint64_t, bool, uint64_t) override {
    host_.migrate(address, length, false, g);
    return Outcome::taken;
  }
  bool restore(uint64_t address, uint64_t length, uint64_t g) override {
    host_.migrate(address, length, true, g);
    return true;
  }
  void finish_launch(uint64_t, bool) override {}

 private:
  EvictorHost& host_;
};

}  // namespace umswap::advisor
