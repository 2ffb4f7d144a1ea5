#include "umswap/advisor/pending_ops.h"

#include <algorithm>

namespace umswap::advisor {

void PendingOps::issued(Stream s) {
  ++unmarked_;
  most_ = std::max(most_, waiting());
  for (auto& [stream, calls] : unmarked_by_stream_) {
    if (stream == s) {
      ++calls;
      return;
    }
  }
  unmarked_by_stream_.emplace_back(s, 1);
}

void PendingOps::mark(const std::function<Event(Stream)>& record) {
  for (auto& [stream, calls] : unmarked_by_stream_) {
    if (calls == 0) continue;
    if (Event e = record(stream)) {
      marks_.push_back({e, calls});
      marked_ += calls;
    }
    unmarked_ -= calls;
    calls = 0;
  }
}

void PendingOps::retire(const std::function<bool(Event)>& done,
                        const std::function<void(Event)>& release) {
  for (size_t i = 0; i < marks_.size();) {
    if (done(marks_[i].event)) {
      marked_ -= marks_[i].calls;
      release(marks_[i].event);
      marks_[i] = marks_.back();
      marks_.pop_back();
    } else {
      ++i;
    }
  }
}

}  // namespace umswap::advisor
