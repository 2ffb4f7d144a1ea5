#include "umswap/allocator/submission_hold.h"

namespace umswap {

void SubmissionHold::enter() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !open_; });
  ++in_flight_;
}

void SubmissionHold::leave() {
  {
    std::lock_guard lock(mutex_);
    if (in_flight_ == 0) return;
    --in_flight_;
    if (in_flight_ != 0 || !open_) return;
  }
  changed_.notify_all();
}

bool SubmissionHold::open(std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::unique_lock lock(mutex_);
  if (!changed_.wait_until(lock, deadline, [this] { return !open_; })) {
    ++abandoned_;
    return false;
  }
  open_ = true;  // from here no call enters
  if (!changed_.wait_until(lock, deadline, [this] { return in_flight_ == 0; })) {
    open_ = false;
    ++abandoned_;
    lock.unlock();
    changed_.notify_all();
    return false;
  }
  ++windows_;
  return true;
}

void SubmissionHold::close() {
  {
    std::lock_guard lock(mutex_);
    open_ = false;
  }
  changed_.notify_all();
}

uint64_t SubmissionHold::in_flight() const {
  std::lock_guard lock(mutex_);
  return in_flight_;
}

uint64_t SubmissionHold::windows() const {
  std::lock_guard lock(mutex_);
  return windows_;
}

uint64_t SubmissionHold::windows_abandoned() const {
  std::lock_guard lock(mutex_);
  return abandoned_;
}

}  // namespace umswap
