// A thread-local flag set while umswap's own code runs inside a hook, so that CUDA calls umswap
// makes (and callbacks they trigger) pass straight to the real functions.
#pragma once

namespace umswap {

class ReentryGuard {
 public:
  ReentryGuard() : was_active_(active_) { active_ = true; }
  ~ReentryGuard() { active_ = was_active_; }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;

  static bool active() { return active_; }

 private:
  // initial-exec: no lazy TLS allocation (which could malloc) inside a hook.
  static inline thread_local bool active_ __attribute__((tls_model("initial-exec"))) = false;
  bool was_active_;
};

}  // namespace umswap
