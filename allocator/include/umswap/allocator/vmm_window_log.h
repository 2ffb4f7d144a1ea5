// Engine vmm's windows one by one (issue 38): the launch each held, its time and what it moved,
// so that the stats file says per iteration how many windows held the program and what they
// cost (iterations[].vmm_*: the figures a plan's windows are judged by, which a run's totals hide
// behind its learning iterations).
//
// WindowLog: bounded (kMaxRecords; a window past it, or one whose record could not be stored, is
// counted in dropped() only; add() never throws). Thread safety: add() and the readers from any
// thread (one mutex). windows_by_iteration(): pure.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace umswap {

struct WindowRecord {
  uint64_t launch = 0;  // the tracer's launch count at the step the window held
  uint64_t ns = 0;      // the program held
  uint64_t bytes_to_gpu = 0;
  uint64_t bytes_to_host = 0;
};

class WindowLog {
 public:
  static constexpr size_t kMaxRecords = size_t{1} << 20;  // 32 MiB
  void add(const WindowRecord& record);
  std::vector<WindowRecord> records() const;
  uint64_t dropped() const;

 private:
  mutable std::mutex mutex_;
  std::vector<WindowRecord> records_;
  uint64_t dropped_ = 0;
};

struct IterationWindows {
  uint64_t windows = 0;
  double ms = 0;
  uint64_t bytes_to_gpu = 0;
  uint64_t bytes_to_host = 0;
};

// Iteration i covers the launches [first[i], first[i] + count[i]) (ascending, not overlapping;
// `count` as long as `first`); each record goes to the iteration holding its launch, none when no
// iteration does.
std::vector<IterationWindows> windows_by_iteration(std::span<const uint64_t> first,
                                                   std::span<const uint64_t> count,
                                                   std::span<const WindowRecord> records);

}  // namespace umswap
