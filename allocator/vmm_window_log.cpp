#include "umswap/allocator/vmm_window_log.h"

#include <algorithm>
#include <new>

namespace umswap {

void WindowLog::add(const WindowRecord& record) {
  std::lock_guard lock(mutex_);
  if (records_.size() >= kMaxRecords) {
    ++dropped_;
    return;
  }
  try {
    records_.push_back(record);
  } catch (const std::bad_alloc&) {
    ++dropped_;  // inside the driver's launch callback: never throw out of it
  }
}

std::vector<WindowRecord> WindowLog::records() const {
  std::lock_guard lock(mutex_);
  return records_;
}

uint64_t WindowLog::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

std::vector<IterationWindows> windows_by_iteration(std::span<const uint64_t> first,
                                                   std::span<const uint64_t> count,
                                                   std::span<const WindowRecord> records) {
  std::vector<IterationWindows> out(first.size());
  for (const WindowRecord& r : records) {
    // The last iteration starting at or before the launch.
    const auto it = std::upper_bound(first.begin(), first.end(), r.launch);
    if (it == first.begin()) continue;
    const size_t i = static_cast<size_t>(it - first.begin()) - 1;
    if (i >= count.size() || r.launch >= first[i] + count[i]) continue;
    IterationWindows& w = out[i];
    ++w.windows;
    w.ms += static_cast<double>(r.ns) / 1e6;
    w.bytes_to_gpu += r.bytes_to_gpu;
    w.bytes_to_host += r.bytes_to_host;
  }
  return out;
}

}  // namespace umswap
