// Sweeps (sweeps.h): a plan's three sweeps, each after a fence on the advisor's stream.
#include "umswap/advisor/sweeps.h"

namespace umswap::advisor {

bool Sweeps::set_up(const AdvisorDriver& d) {
  return d.event_create && d.event_create(&fence_, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
}

void Sweeps::start(uint64_t applied_from) {
  left_ = kSweeps;
  at_ = applied_from;
  fenced_ = false;
}

void Sweeps::tend(const AdvisorDriver& d, CUstream advisor_stream, uint64_t n, uint64_t period,
                  const std::function<uint64_t()>& sweep) {
  if (left_ <= 0 || n <= at_) return;
  if (!fenced_) {
    if (fence_ && d.event_query && d.event_record(fence_, advisor_stream) == CUDA_SUCCESS) {
      fenced_ = true;  // swept at a later pass, once what the stream holds now has run
    } else {
      finish(n, 0, period);
    }
    return;
  }
  const CUresult r = d.event_query(fence_);
  if (r == CUDA_ERROR_NOT_READY) return;
  fenced_ = false;
  finish(n, r == CUDA_SUCCESS ? sweep() : 0, period);
}

void Sweeps::finish(uint64_t n, uint64_t bytes, uint64_t period) {
  swept_ += bytes;
  done_.emplace_back(n, bytes);
  at_ += period;
  --left_;
}

}  // namespace umswap::advisor
