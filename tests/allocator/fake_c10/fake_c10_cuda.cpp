// A stand-in for PyTorch's libc10_cuda.so, for torch_blocks_test: the same mangled names for the
// allocator pointer, the native allocator's vtable and its attachAllocatorTraceTracker (hidden,
// as in PyTorch's build, so found only through .symtab), and a TraceEntry with PyTorch 2.11's
// layout of the fields umswap reads. Test controls are exported as C functions.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#define FAKE_EXPORT __attribute__((visibility("default")))

namespace c10 {
namespace CachingDeviceAllocator {
struct TraceEntry {
  int32_t action_ = 0;
  int8_t device_ = 0;
  size_t addr_ = 0;
  std::shared_ptr<void> context_;
  void* stream_ = nullptr;
  size_t size_ = 0;
  uint64_t mempool_[2] = {0, 0};
};
static_assert(offsetof(TraceEntry, addr_) == 8 && offsetof(TraceEntry, stream_) == 32 &&
              offsetof(TraceEntry, size_) == 40);
}  // namespace CachingDeviceAllocator

namespace cuda::CUDACachingAllocator {
using Tracker = std::function<void(const CachingDeviceAllocator::TraceEntry&)>;

class CUDAAllocator {
 public:
  virtual ~CUDAAllocator() = default;
  virtual void attachAllocatorTraceTracker(Tracker tracker) = 0;
};

FAKE_EXPORT std::atomic<CUDAAllocator*> allocator{nullptr};

namespace Native {
class NativeCachingAllocator : public CUDAAllocator {
 public:
  void attachAllocatorTraceTracker(Tracker tracker) override {
    trackers.push_back(std::move(tracker));
  }
  std::vector<Tracker> trackers;
};
NativeCachingAllocator native;
}  // namespace Native

namespace CudaMallocAsync {
class CudaMallocAsyncAllocator : public CUDAAllocator {
 public:
  void attachAllocatorTraceTracker(Tracker) override {}
};
CudaMallocAsyncAllocator async_backend;
}  // namespace CudaMallocAsync
}  // namespace cuda::CUDACachingAllocator
}  // namespace c10

using namespace c10::cuda::CUDACachingAllocator;

// 0: no allocator yet; 1: the native one; 2: the async backend.
extern "C" FAKE_EXPORT void fake_c10_set_backend(int which) {
  allocator.store(which == 1   ? static_cast<CUDAAllocator*>(&Native::native)
                  : which == 2 ? static_cast<CUDAAllocator*>(&CudaMallocAsync::async_backend)
                               : nullptr);
}

extern "C" FAKE_EXPORT void fake_c10_clear_trackers() {
  Native::native.trackers.clear();
}

extern "C" FAKE_EXPORT size_t fake_c10_trackers() {
  return Native::native.trackers.size();
}

extern "C" FAKE_EXPORT void fake_c10_emit(int32_t action, size_t address, size_t bytes,
                                          size_t stream) {
  c10::CachingDeviceAllocator::TraceEntry e;
  e.action_ = action;
  e.addr_ = address;
  e.size_ = bytes;
  e.stream_ = reinterpret_cast<void*>(stream);
  e.context_ = std::make_shared<int>(7);  // a live field between the ones read
  for (const Tracker& t : Native::native.trackers) t(e);
}
