// LearningTimeline (learning_timeline.h): the advisor's learning steps, when.
#include "umswap/advisor/learning_timeline.h"

namespace umswap::advisor {

void LearningTimeline::note(const char* what, uint64_t launch, double took_s,
                            std::optional<uint64_t> from_launch, Clock::time_point at) {
  if (events_.size() >= kMostEvents) {
    ++left_out_;
    return;
  }
  events_.push_back(
      {what, launch, std::chrono::duration<double>(at - start_).count(), took_s, from_launch});
}

nlohmann::json LearningTimeline::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Event& e : events_) {
    out.push_back({{"what", e.what},
                   {"launch", e.launch},
                   {"at_s", e.at_s},
                   {"took_s", e.took_s},
                   {"from_launch", e.from_launch ? nlohmann::json(*e.from_launch) : nullptr}});
  }
  if (left_out_ > 0) out.push_back({{"what", "more events, not kept"}, {"count", left_out_}});
  return out;
}

}  // namespace umswap::advisor
