// The streams a plan's barrier covers (plan_streams.h).
#include "umswap/advisor/plan_streams.h"

#include <algorithm>

namespace umswap::advisor {

std::vector<uint64_t> streams_before(const tracer::StepLogReader& steps, uint64_t seen,
                                     uint64_t count) {
  const uint64_t end = std::min(seen, steps.logged_steps());
  const uint64_t n = std::min({count, end, kMostStepsForStreams});
  tracer::StepLog log;
  if (n == 0 || !steps.copy_steps(end - n, n, &log)) return {};
  std::vector<uint64_t> out = log.streams;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace umswap::advisor
