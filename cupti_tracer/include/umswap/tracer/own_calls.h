// Which of a thread's CUDA calls are umswap's own, not the program's steps. The tracer's callback
// leaves them alone (it only notes the correlation ids of umswap's copies: last_own_copy()).
#pragma once

namespace umswap::tracer {

// True while the calling thread's CUDA calls are umswap's own: for good on the advisor thread
// (untrace_this_thread()), and while an OwnCallsScope lives.
extern thread_local bool t_own_calls __attribute__((tls_model("initial-exec")));

// While one lives, the calling thread's CUDA calls are umswap's own. The tracer holds one around
// the observer's calls (the launch path), which it makes under its launch lock: a call of the
// advisor's there that the tracer took for a step of the program's (a stream write, such as the
// one the advisor puts after an event wait on the populate stream) would wait for that
// lock on the same thread, for good.
class OwnCallsScope {
 public:
  OwnCallsScope() : was_(t_own_calls) { t_own_calls = true; }
  ~OwnCallsScope() { t_own_calls = was_; }
  OwnCallsScope(const OwnCallsScope&) = delete;
  OwnCallsScope& operator=(const OwnCallsScope&) = delete;

 private:
  bool was_;
};

}  // namespace umswap::tracer
