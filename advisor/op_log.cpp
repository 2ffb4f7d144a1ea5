#include "umswap/advisor/op_log.h"

#include <fmt/format.h>

namespace umswap::advisor {

OpLog::Followed* OpLog::find(Stream s) {
  for (size_t i = 0; i < count_; ++i) {
    if (streams_[i].stream == s) return &streams_[i];
  }
  return nullptr;
}

OpLog::Followed* OpLog::add(Stream s) {
  if (Followed* f = find(s)) return f;
  if (count_ == kStreams) return nullptr;
  Followed& f = streams_[count_];
  f.stream = s;
  done_[count_] = 0;
  ++count_;
  return &f;
}

bool OpLog::name(Stream s, const char* name) {
  std::lock_guard lock(mutex_);
  Followed* f = add(s);
  if (f) f->name = name;
  return f != nullptr;
}

bool OpLog::note(Stream s, const char* what, uint64_t a, uint64_t b, uint64_t* number,
                 size_t* word) {
  std::lock_guard lock(mutex_);
  Followed* f = find(s);
  if (!f) return false;
  *number = ++f->made;
  *word = static_cast<size_t>(f - streams_.data());
  f->ring[*number % kKept] = {*number, what, a, b};
  return true;
}

void OpLog::mark_wait(Stream s) {
  std::lock_guard lock(mutex_);
  if (Followed* f = find(s)) f->waited = true;
}

bool OpLog::take_wait(Stream s) {
  std::lock_guard lock(mutex_);
  Followed* f = find(s);
  if (!f || !f->waited) return false;
  f->waited = false;
  return true;
}

std::string OpLog::describe(size_t around) const {
  std::lock_guard lock(mutex_);
  std::string out;
  for (size_t i = 0; i < count_; ++i) {
    const Followed& f = streams_[i];
    const uint64_t done = done_[i];
    out += fmt::format("\n  stream {} ({:#x}): {} calls, the GPU done through {}", f.name,
                       reinterpret_cast<uintptr_t>(f.stream), f.made, done);
    if (done >= f.made) {
      out += " (all)";
      continue;
    }
    out += ", held at:";
    const uint64_t first = done > 0 ? done : 1;
    for (uint64_t n = first; n <= f.made && n < first + around + 1; ++n) {
      if (f.made - n >= kKept) continue;  // no longer kept
      const Op& op = f.ring[n % kKept];
      out += fmt::format(" [#{}{} {} {:#x} {}]", n, n <= done ? " done" : "", op.what, op.a, op.b);
    }
  }
  return out;
}

}  // namespace umswap::advisor
