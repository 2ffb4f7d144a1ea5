// The process tracer's step log reader and residency sink (tracer_ports.h): each call forwards
// to tracer.h's function of the same name.
#include "umswap/tracer/tracer_ports.h"

#include "umswap/tracer/tracer.h"

namespace umswap::tracer {
namespace {

class ProcessStepLog final : public StepLogReader {
 public:
  uint64_t logged_steps() const override { return tracer::logged_steps(); }
  std::vector<uint32_t> copy_keys(uint64_t first, uint64_t max) const override {
    return tracer::copy_keys(first, max);
  }
  bool copy_steps(uint64_t first, uint64_t count, StepLog* out) const override {
    return tracer::copy_steps(first, count, out);
  }
  std::string_view key_view(uint32_t key) const override { return tracer::key_view(key); }
  std::vector<LifetimeEvent> copy_lifetimes(uint64_t from_step, uint64_t to_step) const override {
    return tracer::copy_lifetimes(from_step, to_step);
  }
};

class ProcessResidencySink final : public ResidencySink {
 public:
  void note_launch_populate(uint64_t address, uint64_t bytes) override {
    tracer::note_launch_populate(address, bytes);
  }
  void note_residency_by_copy(uint64_t address, uint64_t bytes, bool on_gpu, uint32_t copy,
                              uint64_t step) override {
    tracer::note_residency_by_copy(address, bytes, on_gpu, copy, step);
  }
  uint32_t last_own_copy() const override { return tracer::last_own_copy(); }
  void note_own_copy(uint32_t correlation, uint64_t address, uint64_t length,
                     bool to_gpu) override {
    tracer::note_own_copy(correlation, address, length, to_gpu);
  }
  void untrace_this_thread() override { tracer::untrace_this_thread(); }
};

}  // namespace

StepLogReader& process_step_log() {
  static ProcessStepLog log;
  return log;
}

ResidencySink& process_residency_sink() {
  static ProcessResidencySink sink;
  return sink;
}

}  // namespace umswap::tracer
