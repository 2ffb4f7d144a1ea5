// SubmissionHold: engine vmm's hold on the program's GPU work (issue 38, step 2). A chunk being
// remapped must not be reached by anything running on the GPU (an access between unmap and map is
// an illegal address that kills the context: docs/lab/2026-11-29-vmm-window.md), so a window
// stops the program from submitting work, and the caller then drains the GPU and moves chunks.
//
// Every driver call of the program that puts work on a stream (a launch, a copy, a memset, a
// stream memory operation, a graph launch, a host function) is "in flight" from its API entry
// (enter()) to its API exit (leave()): by its exit the work is in its stream, so a drain that
// starts afterwards waits for it. A window (open() .. close()) lets no new call enter and begins
// once every call in flight has left.
//
// Contract:
//   * enter() blocks while a window is open; leave() ends one enter() (an unmatched leave() is
//     ignored). Any thread.
//   * open() waits for any other window to close, then for the calls in flight to leave, at most
//     `wait` in all; true: the window is open, and the caller must close() it. false: the calls in
//     flight did not leave in time (a call whose exit the tracer never saw), the window is not
//     open and nothing is held; counted. The calling thread must not itself be in flight.
//   * Never throws.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace umswap {

class SubmissionHold {
 public:
  void enter();
  void leave();
  bool open(std::chrono::milliseconds wait);
  void close();

  uint64_t in_flight() const;
  uint64_t windows() const;            // opened
  uint64_t windows_abandoned() const;  // open() gave up

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t in_flight_ = 0;
  bool open_ = false;
  uint64_t windows_ = 0;
  uint64_t abandoned_ = 0;
};

}  // namespace umswap
