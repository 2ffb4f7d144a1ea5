// Evictions umswap copies itself (UMSWAP_EVICT_COPY): the bookkeeping, pure C++ (no CUDA).
//
// The driver evicts managed memory to the host at 11-18 GB/s (H200); a copy engine moves
// GPU-resident managed memory to pinned host memory at 52 GB/s. So an eviction can be a copy to
// pinned memory followed by a discard of the GPU pages (cuMemDiscardBatchAsync), and the
// prefetch that brings it back a populate (cuMemPrefetchAsync of discarded pages moves nothing)
// followed by a copy from pinned memory. A discarded range holds no data until it is copied
// back, so the advisor must know, before any launch runs, whether it reaches a range held here
// (advisor.h: the approval word).
//
// A held range is a Piece: [address, address + length), the host memory holding its bytes, and
// a state:
//   copying:   the copy out was issued with a ticket; the GPU pages still hold the data (nothing
//              is discarded before the copy is seen done);
//   discarded: the copy finished and the caller discarded the GPU pages; only the host has it.
// Giving a range back returns the discarded parts to copy in (their host memory stays reserved
// until the copy in is seen done) and forgets the copying parts (the GPU still has them).
//
// Host memory comes from `alloc` in blocks, one per range taken; a block whose pieces are all
// given back is reused for a later range of exactly its size once the copies that read or wrote
// it are done (tickets), and freed when room is needed under `limit`. After freeze() no block is
// reused or freed (copies issued before may still be queued behind a stalled stream), until
// unfreeze().
//
// Not thread safe: the advisor thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace umswap::advisor {

class HostCopies {
 public:
  using Alloc = std::function<uint64_t(uint64_t bytes)>;  // host address, 0 on failure
  using Free = std::function<void(uint64_t host, uint64_t bytes)>;

  struct Segment {
    uint64_t address = 0;  // managed memory
    uint64_t length = 0;
    uint64_t host = 0;  // where its bytes are (or go) on the host
  };
  struct Returned {
    std::vector<Segment> copy_in;  // discarded: populate, then copy these in
    uint64_t forgotten_bytes = 0;  // still copying: the GPU pages were never discarded
  };

  HostCopies(Alloc alloc, Free free, uint64_t limit);
  ~HostCopies();
  HostCopies(const HostCopies&) = delete;
  HostCopies& operator=(const HostCopies&) = delete;

  // Takes the parts of [address, address + length) not held yet for a copy out with `ticket`
  // (increasing): one host block for them, the segments to copy (none: all held already).
  // Nothing is taken (nullopt) when the host memory cannot be had under the limit, or after
  // freeze().
  // `due`: the launch at which the plan brings the range back (reaches()).
  std::optional<std::vector<Segment>> take(uint64_t address, uint64_t length, uint64_t ticket,
                                           uint64_t due = UINT64_MAX);
  // Pieces whose copy out is done (ticket <= out_done) and not discarded yet: marked discarded,
  // returned so that the caller discards their GPU pages.
  std::vector<Segment> copied(uint64_t out_done);
  // Gives back what [address, address + length) holds; the copies in get `ticket` (increasing).
  // `back_by`: the launch whose wait covers these copies back; until retire() sees `ticket` done
  // they stay "returning", and reaches() counts them as missing for a launch covered only up to
  // an earlier launch (kNoLaunch: for every launch with a cover; kUntracked: not kept).
  static constexpr uint64_t kUntracked = UINT64_MAX;
  static constexpr uint64_t kNoLaunch = UINT64_MAX - 1;
  Returned give_back(uint64_t address, uint64_t length, uint64_t ticket,
                     uint64_t back_by = kUntracked);
  Returned give_back_all(uint64_t ticket);
  // Whether a held piece overlaps [address, end).
  bool holds(uint64_t address, uint64_t end) const;
  // Whether a held piece overlapping [address, end) comes back only after launch `covered`, or a
  // returning one (give_back) only after a launch past `covered`: a launch that waits for the
  // copies back issued up to `covered` would find it missing. covered == UINT64_MAX: the launch
  // waits for none; any held or returning piece reaches it.
  bool reaches(uint64_t address, uint64_t end, uint64_t covered) const;
  uint64_t returning_count() const;  // ranges given back with a launch to cover them
  // Whether a range given back and not yet seen copied back overlaps [address, end).
  bool returning(uint64_t address, uint64_t end) const;
  // The newest ticket of the copies back that give_back() (any: a plan's, a rescue's, a stop's
  // give_back_all(); not one with ticket 0, whose memory is gone) handed out over
  // [address, end) and retire() has not seen done; 0: none. Until that copy back is done the GPU
  // pages of those parts hold nothing (populated, not yet filled), so a copy out of them taken
  // meanwhile must be ordered after it on the GPU, or it saves empty pages to the host and a later
  // copy back writes them over the program's data (found while chasing issue 36; not its cause).
  uint64_t copy_back_pending(uint64_t address, uint64_t end) const;
  // The pieces overlapping [address, end) as text (for a debug log): address, length, due.
  std::string describe(uint64_t address, uint64_t end) const;
  // Makes blocks whose copies are done (out_done, in_done: the highest tickets seen done)
  // reusable, and forgets returning ranges whose copies back are done.
  void retire(uint64_t out_done, uint64_t in_done);
  void freeze() { frozen_ = true; }
  // Takes ranges again (after give_back_all()); blocks are still reused only once retire() has
  // seen their copies done.
  void unfreeze() { frozen_ = false; }
  bool frozen() const { return frozen_; }

  uint64_t held_bytes() const { return held_bytes_; }
  uint64_t host_bytes() const { return host_bytes_; }  // allocated, in use or cached
  uint64_t blocks_allocated() const { return blocks_allocated_; }

 private:
  struct Block {
    uint64_t host = 0, bytes = 0;
    uint32_t pieces = 0;  // pieces referring to it
    uint64_t out_ticket = 0, in_ticket = 0;
  };
  struct Piece {
    uint64_t end = 0;
    std::shared_ptr<Block> block;
    uint64_t block_offset = 0;  // of the piece's first byte
    bool discarded = false;
    uint64_t ticket = 0;        // of its copy out
    uint64_t due = UINT64_MAX;  // the launch that brings it back
  };
  using Map = std::map<uint64_t, Piece>;  // by address

  std::shared_ptr<Block> block_for(uint64_t bytes);
  void split_at(uint64_t address);
  void drop(Map::iterator it);
  // A returning range overlapping [address, end) comes back only after launch `covered` (any,
  // with UINT64_MAX).
  bool returning_after(uint64_t address, uint64_t end, uint64_t covered) const;
  void free_fn(const std::shared_ptr<Block>& b);

  Alloc alloc_;
  Free free_;
  uint64_t limit_;
  Map pieces_;
  std::vector<std::shared_ptr<Block>> retiring_;            // no pieces, copies maybe in flight
  std::multimap<uint64_t, std::shared_ptr<Block>> cached_;  // by size: ready for reuse
  struct Returning {
    uint64_t end = 0, ticket = 0, back_by = 0;
  };
  // By address: every copy back handed out and not seen done; back_by kUntracked for those the
  // guard does not follow (a stop's), which only copy_back_pending() sees.
  std::multimap<uint64_t, Returning> returning_;
  // Calls f(r) for each returning range overlapping [address, end) until f returns true.
  template <typename F>
  void for_returning(uint64_t address, uint64_t end, F&& f) const;
  std::deque<std::pair<uint64_t, uint64_t>> returning_order_;  // (ticket, address), by ticket
  uint64_t returning_longest_ = 0;
  uint64_t held_bytes_ = 0, host_bytes_ = 0, blocks_allocated_ = 0;
  uint64_t copying_ = 0;  // pieces not discarded yet
  bool frozen_ = false;
};

// What became of the copies back of a restore (copy_back()).
struct CopyBackOutcome {
  uint64_t bytes = 0;                     // issued
  uint32_t retried = 0;                   // segments whose first try failed
  std::vector<HostCopies::Segment> lost;  // failed twice: never copied back
};

// Issues the copy back of each segment through copy(segment), which says whether the copy was
// issued; one that was not is tried once more. With the GPU's pages discarded, a lost segment's
// bytes are gone from the program's memory: the caller must say so and stop copying.
template <class Copy>
CopyBackOutcome copy_back(const std::vector<HostCopies::Segment>& segments, Copy&& copy) {
  CopyBackOutcome out;
  for (const HostCopies::Segment& s : segments) {
    bool issued = copy(s);
    if (!issued) {
      ++out.retried;
      issued = copy(s);
    }
    if (issued) {
      out.bytes += s.length;
    } else {
      out.lost.push_back(s);
    }
  }
  return out;
}

}  // namespace umswap::advisor
