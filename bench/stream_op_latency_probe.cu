// How long the GPU waits between two kernels on one stream when a stream-ordered operation lies
// between them: a discard, a populate (a prefetch to the GPU of discarded pages), a prefetch of
// resident pages, a stream memory wait or write. The advisor puts populates and discards between
// a program's kernels (docs/advisor.md); with copies, GPT-2 at 29% waits 0.3-1.2 ms after each
// copy to the host before its next kernel starts.
//
// Every case's work is queued behind a closed gate (a stream waiting on a host word), so that the
// host's issue rate plays no part; then the gate opens. Kernel A writes %globaltimer as it ends,
// kernel B as it starts; the gap is B - A. Each case runs kReps times; the median and the largest
// are printed, in microseconds.
//   none          A, B
//   wait          A, cuStreamWaitValue32 (satisfied), B
//   signal        A on a second stream, which then writes a word (cuStreamWriteValue32); the
//                 stream waits for it (cuStreamWaitValue32), B
//   resident-64M  A, prefetch of 64 MiB already on the GPU, B
//   discard-N     A, cuMemDiscardBatchAsync of N resident on the GPU, B
//   populate-N    (discard N,) A, prefetch of the N discarded to the GPU, B
//   batch-8x8M    (discard,) A, one cuMemPrefetchBatchAsync of eight discarded 8 MiB ranges, B
//   pair-64M      A, discard 64 MiB, populate it again, B
//   busy-64M      populate-64M while a second stream discards and populates 8 other 64 MiB
//                 ranges, opened at the same time (the driver's worker shared)
// usage: stream_op_latency_probe   (1.25 GiB of managed memory)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuda_check.h"

namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kPool = 1024 * kMiB;
constexpr size_t kSide = 256 * kMiB;
constexpr int kReps = 12;

__global__ void stamp(unsigned long long* slot) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  *slot = t;
}

struct Probe {
  char* pool = nullptr;
  char* side = nullptr;
  unsigned long long* stamps = nullptr;  // device memory
  volatile uint32_t* gate_host = nullptr;
  CUdeviceptr gate_dev = 0;
  uint32_t* word = nullptr;
  CUdeviceptr word_dev = 0;
  cudaStream_t s = nullptr, t = nullptr;
  cudaMemLocation gpu{cudaMemLocationTypeDevice, 0};
  uint32_t gate_value = 0;
  uint32_t signal_base = 0;

  CUstream cs() const { return reinterpret_cast<CUstream>(s); }
  CUstream ct() const { return reinterpret_cast<CUstream>(t); }

  void resident(char* p, size_t bytes) {
    CHECK(cudaMemPrefetchAsync(p, bytes, gpu, 0, s));
    CHECK(cudaStreamSynchronize(s));
  }
  void discard(char* p, size_t bytes, CUstream on) {
    CUdeviceptr a = reinterpret_cast<CUdeviceptr>(p);
    size_t n = bytes;
    CHECK_CU(cuMemDiscardBatchAsync(&a, &n, 1, 0, on));
  }
  void populate(char* p, size_t bytes, cudaStream_t on) {
    CHECK(cudaMemPrefetchAsync(p, bytes, gpu, 0, on));
  }
  void close(cudaStream_t on) {
    CHECK_CU(cuStreamWaitValue32(reinterpret_cast<CUstream>(on), gate_dev, gate_value + 1,
                                 CU_STREAM_WAIT_VALUE_GEQ));
  }
  void open() { *gate_host = ++gate_value; }

  // Runs `op(r)` between two stamps, kReps times behind one gate; `before(r)` ahead of A. With
  // `signal`, A runs on the second stream and writes a word that s waits for before B.
  void run(const char* name, const std::function<void(int)>& before,
           const std::function<void(int)>& op, const std::function<void()>& beside = {},
           bool signal = false) {
    CHECK(cudaDeviceSynchronize());
    close(s);
    if (beside || signal) close(t);
    // Should a call below block until the gate opens, this opens it after 20 s and says so.
    std::atomic<bool> opened{false};
    std::thread watchdog([&] {
      for (int i = 0; i < 200 && !opened.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!opened.exchange(true)) {
        std::printf("%s: a call blocked behind the gate; opened after 20 s\n", name);
        open();
      }
    });
    if (beside) beside();
    for (int r = 0; r < kReps; ++r) {
      if (before) before(r);
      if (signal) {
        stamp<<<1, 1, 0, t>>>(stamps + 2 * r);
        CHECK_CU(cuStreamWriteValue32(ct(), word_dev, signal_base + r + 1, 0));
        CHECK_CU(
            cuStreamWaitValue32(cs(), word_dev, signal_base + r + 1, CU_STREAM_WAIT_VALUE_GEQ));
      } else {
        stamp<<<1, 1, 0, s>>>(stamps + 2 * r);
      }
      if (op) op(r);
      stamp<<<1, 1, 0, s>>>(stamps + 2 * r + 1);
    }
    if (signal) signal_base += kReps;
    // A call that blocked above would not return before the gate opens: no case here queues
    // more than 40 managed-memory calls (the driver holds the 58th, docs/BENCHMARKS.md).
    if (!opened.exchange(true)) open();
    watchdog.join();
    CHECK(cudaDeviceSynchronize());
    std::vector<unsigned long long> host(2 * kReps);
    CHECK(cudaMemcpy(host.data(), stamps, host.size() * sizeof(host[0]), cudaMemcpyDeviceToHost));
    std::vector<double> gaps;
    for (int r = 0; r < kReps; ++r) gaps.push_back((host[2 * r + 1] - host[2 * r]) / 1000.0);
    std::sort(gaps.begin(), gaps.end());
    std::printf("%-14s median %8.1f us   largest %8.1f us\n", name, gaps[gaps.size() / 2],
                gaps.back());
  }
};

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  Probe p;
  CHECK(cudaMallocManaged(&p.pool, kPool));
  CHECK(cudaMallocManaged(&p.side, kSide));
  CHECK(cudaMalloc(&p.stamps, 2 * kReps * sizeof(unsigned long long)));
  void* gate = nullptr;
  CHECK(cudaHostAlloc(&gate, 64, cudaHostAllocMapped));
  p.gate_host = static_cast<volatile uint32_t*>(gate);
  *p.gate_host = 0;
  CHECK_CU(cuMemHostGetDevicePointer(&p.gate_dev, gate, 0));
  CHECK(cudaMalloc(&p.word, 64));
  p.word_dev = reinterpret_cast<CUdeviceptr>(p.word);
  CHECK(cudaMemset(p.word, 0, 64));
  CHECK(cudaStreamCreateWithFlags(&p.s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&p.t, cudaStreamNonBlocking));
  CHECK(cudaMemset(p.pool, 1, kPool));
  CHECK(cudaMemset(p.side, 1, kSide));
  p.resident(p.pool, kPool);
  p.resident(p.side, kSide);
  // The kernel's first launch loads its module (lazy loading), which would wait for the gate.
  stamp<<<1, 1, 0, p.s>>>(p.stamps);
  CHECK(cudaDeviceSynchronize());

  p.run("none", {}, {});
  p.run("wait", {}, [&](int) {
    CHECK_CU(cuStreamWaitValue32(p.cs(), p.word_dev, 0, CU_STREAM_WAIT_VALUE_GEQ));
  });
  p.run("signal", {}, {}, {}, true);
  p.run("resident-64M", {},
        [&](int r) { p.populate(p.pool + (r % 16) * 64 * kMiB, 64 * kMiB, p.s); });
  for (size_t mib : {2, 64}) {
    p.resident(p.pool, kPool);
    const std::string name = "discard-" + std::to_string(mib) + "M";
    p.run(name.c_str(), {}, [&](int r) { p.discard(p.pool + r * mib * kMiB, mib * kMiB, p.cs()); });
  }
  for (size_t mib : {2, 16, 64}) {
    p.resident(p.pool, kPool);
    const std::string name = "populate-" + std::to_string(mib) + "M";
    p.run(
        name.c_str(), [&](int r) { p.discard(p.pool + r * mib * kMiB, mib * kMiB, p.cs()); },
        [&](int r) { p.populate(p.pool + r * mib * kMiB, mib * kMiB, p.s); });
  }
  p.resident(p.pool, kPool);
  p.run(
      "batch-8x8M", [&](int r) { p.discard(p.pool + r * 64 * kMiB, 64 * kMiB, p.cs()); },
      [&](int r) {
        void* ptrs[8];
        size_t sizes[8];
        for (int i = 0; i < 8; ++i) {
          ptrs[i] = p.pool + r * 64 * kMiB + i * 8 * kMiB;
          sizes[i] = 8 * kMiB;
        }
        cudaMemLocation locs[1] = {p.gpu};
        size_t loc_index[1] = {0};
        CHECK(cudaMemPrefetchBatchAsync(ptrs, sizes, 8, locs, loc_index, 1, 0, p.s));
      });
  p.resident(p.pool, kPool);
  p.run("pair-64M", {}, [&](int r) {
    p.discard(p.pool + r * 64 * kMiB, 64 * kMiB, p.cs());
    p.populate(p.pool + r * 64 * kMiB, 64 * kMiB, p.s);
  });
  p.resident(p.pool, kPool);
  p.run(
      "busy-64M", [&](int r) { p.discard(p.pool + r * 64 * kMiB, 64 * kMiB, p.cs()); },
      [&](int r) { p.populate(p.pool + r * 64 * kMiB, 64 * kMiB, p.s); },
      [&] {
        for (int k = 0; k < 8; ++k) {
          char* q = p.side + (k % 4) * 64 * kMiB;
          p.discard(q, 64 * kMiB, p.ct());
          p.populate(q, 64 * kMiB, p.t);
        }
      });
  // Does a managed-memory call wait for one issued before it on another stream, held there by
  // that stream's own work? Stream t: a gate that opens 200 ms later, then a discard (or a
  // populate) of other pages; stream s, issued after it and free to run: A, op, B.
  for (const bool populate_behind : {false, true}) {
    for (const bool resident_op : {false, true}) {
      p.resident(p.pool, kPool);
      char* x = p.pool;               // t's range
      char* y = p.pool + 512 * kMiB;  // s's range
      if (populate_behind) p.discard(x, 64 * kMiB, p.cs());
      if (!resident_op) p.discard(y, 64 * kMiB, p.cs());
      CHECK(cudaDeviceSynchronize());
      p.close(p.t);
      if (populate_behind) {
        p.populate(x, 64 * kMiB, p.t);
      } else {
        p.discard(x, 64 * kMiB, p.ct());
      }
      stamp<<<1, 1, 0, p.s>>>(p.stamps);
      p.populate(y, 64 * kMiB, p.s);
      stamp<<<1, 1, 0, p.s>>>(p.stamps + 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      p.open();
      CHECK(cudaDeviceSynchronize());
      unsigned long long host[2];
      CHECK(cudaMemcpy(host, p.stamps, sizeof(host), cudaMemcpyDeviceToHost));
      std::printf(
          "behind-%s %s populate: gap %.1f us (200,000 us: it waited for the other "
          "stream's gate)\n",
          populate_behind ? "populate" : "discard", resident_op ? "resident" : "discarded",
          (host[1] - host[0]) / 1000.0);
    }
  }
  CHECK(cudaDeviceSynchronize());
  std::printf("ok\n");
  return 0;
}
