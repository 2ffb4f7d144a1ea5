// UMSWAP_DEBUG=op-log (a diagnostic): what the GPU has done of each stream's calls that umswap
// made. Every call the advisor makes on one of its own streams (prefetches, discards, copies, event
// records and waits, stream memory operations, its copy kernel) is numbered per stream and followed
// on that stream by a write of its number to a word of pinned host memory. A hang report then
// reads, with no driver call (a thread stuck in the driver may hold the driver's locks), how far
// the GPU got on each stream and which call it is held at.
//
// Pure: the words are plain memory here, written by the GPU in umswap (the caller issues the
// writes note() numbers).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

namespace umswap::advisor {

class OpLog {
 public:
  static constexpr size_t kStreams = 16;  // streams followed; calls on others are not logged
  static constexpr size_t kKept = 32;     // calls kept per stream

  using Stream = void*;  // a CUstream

  // `done` has kStreams words, which the GPU writes (volatile: read while it does).
  explicit OpLog(volatile uint64_t* done) : done_(done) {}

  // Follows a stream from now on, by that name ("main", "restore", ...); false when kStreams
  // are followed already.
  bool name(Stream s, const char* name);
  // A call just made on `s`: its number there (from 1), and the word to write it to after it
  // (index into `done`); false when `s` is not followed (the program's streams are not: a write
  // of umswap's own among the program's calls is best left out of a diagnostic).
  bool note(Stream s, const char* what, uint64_t a, uint64_t b, uint64_t* number, size_t* word);
  // Without op-log: an event wait was placed on `s` (followed streams only), and, when
  // a managed call is about to be, whether one was since the last time it was asked.
  void mark_wait(Stream s);
  bool take_wait(Stream s);
  // One line per stream: its name, calls made, the GPU's place, and the calls around that place
  // (the last done, then those not done, up to `around` of them).
  std::string describe(size_t around = 4) const;

 private:
  struct Op {
    uint64_t number = 0;
    const char* what = "";
    uint64_t a = 0, b = 0;
  };
  struct Followed {
    Stream stream = nullptr;
    const char* name = "";
    uint64_t made = 0;
    bool waited = false;  // mark_wait() since the last take_wait()
    std::array<Op, kKept> ring{};
  };
  Followed* find(Stream s);  // with mutex_ held
  Followed* add(Stream s);   // with mutex_ held

  volatile uint64_t* done_;
  mutable std::mutex mutex_;
  std::array<Followed, kStreams> streams_{};
  size_t count_ = 0;
};

}  // namespace umswap::advisor
