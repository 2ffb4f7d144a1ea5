// umswap run --verify's round trips: each 2 MiB page umswap copies to the host (UMSWAP_EVICT_COPY)
// is hashed on the GPU as it leaves (after its copy out, before its discard, on the same stream)
// and again once its copy back has landed (before the word that lets launches use it); the two
// hashes must be equal. A difference means the bytes a kernel finds after the round trip are not
// those it left: a copy back from the wrong host block or of a block reused too early, a copy
// that failed or ran in the wrong order, a populate that landed after its copy. It does not see
// a write that reached a page while it was away (the copy back overwrites it with the bytes that
// left, both hashes agree): the fault check (copy_check.unforeseen) catches those.
//
// By page, not by range: a range often comes back in other pieces than it left in.
//
// Pure bookkeeping, no CUDA: the advisor launches the hash kernel (copy_kernel.h,
// umswap_hash_pages) into the slots handed out here (one 8-byte word per page, a run of
// consecutive ones per copy) and says which copies are done.
//
// Not thread safe: the advisor thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "umswap/advisor/copy_kernel.h"

namespace umswap::advisor {

class RoundTrips {
 public:
  static constexpr uint64_t kPage = kPageBytes;  // what umswap_hash_pages hashes one of
  struct Mismatch {
    uint64_t page = 0;
    uint64_t left_at = 0, back_at = 0;  // the launches of the copy out and of the copy back
    uint64_t left_hash = 0, back_hash = 0;
  };
  struct Counts {             // pages
    uint64_t checked = 0;     // came back with the hash they left with
    uint64_t mismatches = 0;  // came back different
    uint64_t no_slot = 0;     // left or came back while the slots ahead were busy: not hashed
    // Came back without a hashed leave, or left again before coming back: not compared.
    uint64_t unmatched = 0;
  };
  static constexpr size_t kMismatchesKept = 8;

  explicit RoundTrips(uint64_t slots);

  // The first of `pages` consecutive slots for the hashes of the pages from `address` (a page
  // boundary) as they leave with copy out `ticket` at launch `launch`; nullopt: not free.
  std::optional<uint64_t> leave(uint64_t address, uint64_t pages, uint64_t ticket, uint64_t launch);
  // The same for their return with copy back `ticket` at launch `launch`; the pages that left
  // unhashed are not compared.
  std::optional<uint64_t> back(uint64_t address, uint64_t pages, uint64_t ticket, uint64_t launch);
  // Reads, through read(slot), the hashes whose copies are done (out_done, in_done: the highest
  // tickets seen done each way), compares each return with its leave and frees their slots.
  void settle(uint64_t out_done, uint64_t in_done, const std::function<uint64_t(uint64_t)>& read);

  const Counts& counts() const { return counts_; }
  const std::vector<Mismatch>& mismatches() const { return mismatches_; }  // the first few
  uint64_t away() const { return away_.size(); }        // pages left, not back (yet, or ever)
  uint64_t returning() const { return backs_.size(); }  // pages back, not yet compared

 private:
  static constexpr uint64_t kNoSlot = UINT64_MAX;
  struct Trip {
    uint64_t page = 0;
    uint64_t left_ticket = 0, left_launch = 0, left_hash = 0;
    uint64_t left_slot = kNoSlot;  // its hash not read yet (kNoSlot and !left_hashed: unhashed)
    bool left_hashed = false;
    uint64_t back_ticket = 0, back_launch = 0, back_slot = kNoSlot;
  };
  struct Draining {
    uint64_t slot = 0, ticket = 0;
    bool out = false;  // the ticket of a copy out (else of a copy back)
  };

  std::optional<uint64_t> take_slots(uint64_t n);
  void free_slot(uint64_t slot) { busy_[slot] = 0; }
  // Drops the trip of `page` away, if any, counted as unmatched; its slot drains.
  void forget(uint64_t page);
  void read_left(Trip& t, uint64_t out_done, const std::function<uint64_t(uint64_t)>& read);

  std::vector<uint8_t> busy_;       // by slot: the GPU may write it, or a hash in it is not read
  uint64_t head_ = 0;               // the next slot to hand out (a ring)
  std::map<uint64_t, Trip> away_;   // left, not back: by page
  std::vector<Trip> backs_;         // hashed copies back not yet compared
  std::vector<Draining> draining_;  // slots the GPU may still write, no longer wanted
  Counts counts_;
  std::vector<Mismatch> mismatches_;
};

}  // namespace umswap::advisor
