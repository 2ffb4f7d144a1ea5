#include "umswap/advisor/pending_ops.h"

#include <algorithm>

namespace umswap::advisor {

uint32_t PendingOps::waiting() const {
  uint32_t n = 0;
  for (const Mark& m : marks_) n += m.calls;
  for (const auto& [stream, calls] : unmarked_by_stream_) n += calls;
  return n;
}

void PendingOps::issued(Stream s) {
  auto it = std::find_if(unmarked_by_stream_.begin(), unmarked_by_stream_.end(),
                         [s](const auto& e) { return e.first == s; });
  if (it == unmarked_by_stream_.end()) {
    unmarked_by_stream_.emplace_back(s, 1);
  } else {
    ++it->second;
  }
  most_ = std::max(most_, waiting());
}

void PendingOps::mark(const std::function<Event(Stream)>& record) {
  for (auto& [stream, calls] : unmarked_by_stream_) {
    if (calls == 0) continue;
    if (Event e = record(stream)) marks_.push_back({e, calls});
    calls = 0;
  }
}

void PendingOps::retire(const std::function<bool(Event)>& done,
                        const std::function<void(Event)>& release) {
  for (size_t i = 0; i < marks_.size();) {
    if (done(marks_[i].event)) {
      release(marks_[i].event);
      marks_[i] = marks_.back();
      marks_.pop_back();
    } else {
      ++i;
    }
  }
}

}  // namespace umswap::advisor
