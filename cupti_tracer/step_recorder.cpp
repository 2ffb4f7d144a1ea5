#include "umswap/tracer/step_recorder.h"

#include "umswap/tracer/own_calls.h"
#include "umswap/tracer/step_data.h"

#include <algorithm>
#include <memory>
#include <optional>

namespace umswap::tracer {
namespace {

constexpr uint32_t kNamesChunkLog2 = 10;
constexpr uint64_t kMaxNames = uint64_t{1} << 20;
// Stands for every name past kMaxNames - 1 (a program generating kernels without end).
constexpr std::string_view kOverflowName = "<more kernel names than the trace keeps>";

}  // namespace

StepRecorder::StepRecorder(const Options& options)
    : options_(options), log_(options.log_limits), names_(kNamesChunkLog2, kMaxNames) {}

StepRecorder::~StepRecorder() {
  const uint32_t n = names_published_.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) delete *names_.at(i);
}

uint64_t StepRecorder::record_kernel(const FunctionLayout& function, const void* const* params,
                                     std::span<const std::byte> packed, CUstream stream,
                                     uint32_t correlation, const Registry::Snapshot& snapshot) {
  const LoggedStep step{.stream = reinterpret_cast<uint64_t>(stream),
                        .key = function.key,
                        .correlation = correlation,
                        .kind = trace::StepKind::kernel};
  std::lock_guard lock(launch_mutex_);
  if (scans()) {
    if (params) {
      scan_kernel_params(function.params, params, snapshot, scratch_);
    } else {
      scan_param_buffer(function.params, packed, snapshot, scratch_);
    }
  }
  return record(step, stream, snapshot);
}

uint64_t StepRecorder::record_copy(trace::StepKind kind, uint32_t key, CUstream stream,
                                   uint32_t correlation, std::span<const uint64_t> pointers,
                                   const Registry::Snapshot& snapshot) {
  const LoggedStep step{.stream = reinterpret_cast<uint64_t>(stream),
                        .key = key,
                        .correlation = correlation,
                        .kind = kind};
  std::lock_guard lock(launch_mutex_);
  if (scans()) {
    scratch_.clear();
    for (uint64_t ptr : pointers) {
      const BufferRecord* r = ptr ? snapshot.find(ptr) : nullptr;
      const std::optional<uint64_t> end = r ? snapshot.allocation_end(*r, ptr) : std::nullopt;
      const auto same = [&](const PointerHit& h) { return h.buffer == r->id && h.pointer == ptr; };
      if (end && std::none_of(scratch_.begin(), scratch_.end(), same)) {
        scratch_.push_back({.buffer = r->id,
                            .base = r->base,
                            .size = r->size,
                            .pointer = ptr,
                            .limit = r->has_blocks() ? *end : 0});
      }
    }
  }
  return record(step, stream, snapshot);
}

// Under launch_mutex_, with this step's hits in scratch_ when recording.
uint64_t StepRecorder::record(const LoggedStep& step, CUstream stream,
                              const Registry::Snapshot& snapshot) {
  if (recording()) {
    if (log_.append(step, scratch_)) {
      remember_buffers(snapshot);
      after_append(step.key);
    } else {
      ++dropped_steps_;
    }
  }
  const uint64_t index = launches_++;
  if (options_.observer) {
    const OwnCallsScope own;  // the launch path's calls are no steps (under launch_mutex_)
    options_.observer->on_step(index, step.key, stream, scans() ? &scratch_ : nullptr);
  }
  return index;
}

// A buffer seen for the first time is remembered with its identity (a hit carries only base and
// size), so that the trace can name buffers freed before the end.
void StepRecorder::remember_buffers(const Registry::Snapshot& snapshot) {
  for (const PointerHit& h : scratch_) {
    const uint64_t word = h.buffer / 64;
    const uint64_t bit = uint64_t{1} << (h.buffer % 64);
    if (word < seen_.size() && (seen_[word] & bit) != 0) continue;
    const BufferRecord* r = snapshot.find(h.pointer);
    if (!r) continue;
    if (word >= seen_.size()) seen_.resize(std::max<size_t>(word + 1, 2 * seen_.size()));
    seen_[word] |= bit;
    buffers_.push_back(*r);
  }
}

void StepRecorder::after_append(uint32_t key) {
  // A marked boundary was counted by mark() already.
  if (detector_.push(key) && marks_.empty()) boundaries_.fetch_add(1, std::memory_order_relaxed);
}

void StepRecorder::mark(std::string_view source) {
  std::lock_guard lock(launch_mutex_);
  marks_.push_back(log_.size());
  detector_.mark(source);
  boundaries_.fetch_add(1, std::memory_order_relaxed);
}

uint32_t StepRecorder::intern(std::string_view name) {
  std::lock_guard lock(names_mutex_);
  std::string key(name);
  if (auto it = name_ids_.find(key); it != name_ids_.end()) return it->second;
  if (overflow_key_ != UINT32_MAX) return overflow_key_;
  const uint32_t id = names_published_.load(std::memory_order_relaxed);
  if (!names_.ensure(id)) return id == 0 ? 0 : id - 1;  // no memory: some valid key
  const bool last = id + 1 >= kMaxNames;
  std::construct_at(names_.at(id), new std::string(last ? kOverflowName : name));
  names_published_.store(id + 1, std::memory_order_release);
  if (last) {
    overflow_key_ = id;
  } else {
    name_ids_.emplace(std::move(key), id);
  }
  return id;
}

std::string_view StepRecorder::key_view(uint32_t key) const {
  if (key >= names_published_.load(std::memory_order_acquire)) return {};
  return **names_.at(key);
}

std::string StepRecorder::key_name(uint32_t key) const {
  return std::string(key_view(key));
}

StepRecorder::Recording StepRecorder::stop() {
  Recording r;
  {
    std::lock_guard lock(launch_mutex_);
    recording_.store(false, std::memory_order_relaxed);
    r.buffers = buffers_;
    r.marks = marks_;
    if (!marks_.empty()) r.detection = detector_.current();
    r.dropped_steps = dropped_steps_;
  }
  std::sort(r.buffers.begin(), r.buffers.end(),
            [](const BufferRecord& a, const BufferRecord& b) { return a.id < b.id; });
  const uint32_t names = names_published_.load(std::memory_order_acquire);
  r.names.reserve(names);
  for (uint32_t i = 0; i < names; ++i) r.names.push_back(**names_.at(i));
  // Without markers, the period of the whole logged sequence (not only the detector's window),
  // by the launches' data too: a chain of layers with their own data is one iteration, not one
  // layer (step_data.h).
  if (r.marks.empty()) {
    const uint64_t n = log_.size();
    std::vector<uint64_t> signatures;
    signatures.reserve(n);
    for (uint64_t i = 0; i < n; ++i) signatures.push_back(hits_signature(log_.hits(log_.step(i))));
    r.detection = detect_with_data(log_.copy_keys(0), signatures);
  }
  return r;
}

}  // namespace umswap::tracer
