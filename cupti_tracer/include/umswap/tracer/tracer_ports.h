// What the advisor reads from the tracer and tells it, as two interfaces handed to the advisor
// when it is made (advisor.h): the advisor reaches no tracer global, and a test can hand it
// its own. The process's tracer has one of each (process_step_log(), process_residency_sink()),
// forwarding to tracer.h's functions; they live until the process exits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "umswap/tracer/launch_log.h"
#include "umswap/tracer/lifetimes.h"

namespace umswap::tracer {

// The launch log as the tracer has published it so far (launch_log.h). Every call may come from
// any thread and takes no lock.
class StepLogReader {
 public:
  virtual ~StepLogReader() = default;
  // Number of steps in the log (the launch index of the next logged step while none is dropped).
  virtual uint64_t logged_steps() const = 0;
  // Keys of steps [first, ...) logged so far, at most `max` of them.
  virtual std::vector<uint32_t> copy_keys(uint64_t first, uint64_t max = UINT64_MAX) const = 0;
  // Steps [first, first + count) into `out`; false if they are not all in the log.
  virtual bool copy_steps(uint64_t first, uint64_t count, StepLog* out) const = 0;
  // The kernel name (or "memcpy ..."/"memset") a step key stands for; empty if unknown. The view
  // stays valid while the reader lives.
  virtual std::string_view key_view(uint32_t key) const = 0;
  std::string key_name(uint32_t key) const { return std::string(key_view(key)); }
  // The name of the step at launch index `step`; empty if it is not logged.
  std::string step_name(uint64_t step) const {
    const std::vector<uint32_t> key = copy_keys(step, 1);
    return key.empty() ? std::string() : key_name(key[0]);
  }
  // The slab allocator's lifetime events with from_step <= when <= to_step, in program order.
  virtual std::vector<LifetimeEvent> copy_lifetimes(uint64_t from_step, uint64_t to_step) const = 0;
};

// What the advisor tells the tracer about memory it moved without a transfer CUPTI counts, and
// about CUDA calls of its own. Any thread, unless a method says otherwise.
class ResidencySink {
 public:
  virtual ~ResidencySink() = default;
  // A populate issued from the launch path (the launching thread), placed at the GPU start of
  // the step being launched: its pages are counted resident there.
  virtual void note_launch_populate(uint64_t address, uint64_t bytes) = 0;
  // UMSWAP_EVICT_COPY's discards (on_gpu false) and populates (true), placed where CUPTI saw the
  // copy of umswap's own that `copy` names (last_own_copy()), or with none, where the GPU runs
  // step `step` (UINT64_MAX: at the time of the call).
  virtual void note_residency_by_copy(uint64_t address, uint64_t bytes, bool on_gpu, uint32_t copy,
                                      uint64_t step) = 0;
  // The correlation id of the calling thread's last copy or copy-kernel launch (a thread
  // untrace_this_thread() marked); 0: none seen.
  virtual uint32_t last_own_copy() const = 0;
  // A copy of umswap's own of [address, address + length), to the GPU or to the host: checked
  // against the program's steps at the end.
  virtual void note_own_copy(uint32_t correlation, uint64_t address, uint64_t length,
                             bool to_gpu) = 0;
  // The calling thread's CUDA calls are umswap's own: not logged as the program's steps.
  virtual void untrace_this_thread() = 0;
};

// The process tracer's (tracer.h); usable before the tracer starts (the log is then empty and
// the notes are dropped).
StepLogReader& process_step_log();
ResidencySink& process_residency_sink();

}  // namespace umswap::tracer
