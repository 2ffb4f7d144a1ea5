// When the advisor's learning steps happened: the iteration found, the placement made and handed
// over, each plan made and put in force, relearning, plans dropped. Issue 39 asks for a plan in
// force by the fourth iteration; this says where the iterations before it went. The stats'
// advisor.timeline, one entry per event: what, the launch the advisor had seen then, the seconds
// since the advisor started, how long the step took (planning, placing; 0 where nothing was
// timed) and the launch it takes effect from (or null).
//
// Thread: the advisor thread (note); the stats read it after the thread joined.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

namespace umswap::advisor {

class LearningTimeline {
 public:
  using Clock = std::chrono::steady_clock;
  // At most this many events are kept (a program that keeps dropping and relearning plans): the
  // later ones are counted only.
  static constexpr size_t kMostEvents = 64;
  struct Event {
    const char* what;  // a string literal
    uint64_t launch;
    double at_s;
    double took_s;
    std::optional<uint64_t> from_launch;
  };
  static double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }
  void start(Clock::time_point at = Clock::now()) { start_ = at; }
  void note(const char* what, uint64_t launch, double took_s = 0,
            std::optional<uint64_t> from_launch = std::nullopt,
            Clock::time_point at = Clock::now());
  const std::vector<Event>& events() const { return events_; }
  uint64_t left_out() const { return left_out_; }
  nlohmann::json to_json() const;

 private:
  Clock::time_point start_ = Clock::now();
  std::vector<Event> events_;
  uint64_t left_out_ = 0;
};

}  // namespace umswap::advisor
