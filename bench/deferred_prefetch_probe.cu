// Does cudaMemPrefetchAsync block its caller while earlier prefetches wait on the GPU? The
// advisor's hang with copies (docs/advisor.md, "A hang with the cuDNN sample") had its thread
// inside cuMemPrefetchAsync for good while launches waited for words it had yet to write.
//
// A stream `gate` waits on a host word (cuStreamWaitValue32) that a helper thread sets after
// `release_ms`; stream `pend` waits (event) for `gate`. Each case issues prefetches and times
// every call: a call that returns only when the gate opens took about release_ms.
//   pend-gpu    64 prefetches of 2 MiB to the GPU on `pend`
//   pend-host   64 prefetches of 2 MiB to the host on `pend`
//   idle-after  1 prefetch on an idle stream while `pend` holds 8 pending ones (other ranges)
//   same-range  1 prefetch on an idle stream of a range a pending one on `pend` moves
//   discard>populate, discard>partial, discard>other, populate>discard, partial>partial: a call
//               on an idle stream over pages a call pending on `pend` touches (below)
//   copy-after  a cudaMemcpyAsync and a discard on an idle stream while `pend` holds prefetches
//   two-streams 40 pending on `pend`, then 40 on a second stream behind the same gate
//   discards    80 cuMemDiscardBatchAsync of 2 MiB on `pend`
//   copies      80 cudaMemcpyAsync of 2 MiB to pinned memory on `pend`
//   batches     80 cuMemPrefetchBatchAsync of two 2 MiB ranges on `pend`
//   idle-at-57  1 prefetch on an idle stream while `pend` holds 57 pending ones
//   writes      80 cuStreamWriteValue32 on `pend`
//   waits       80 cuStreamWaitValue32 (already satisfied) on `pend`
//   16MiB       64 prefetches of 16 MiB on `pend`
//   discard4    64 cuMemDiscardBatchAsync of four 2 MiB ranges on `pend`
//   wait+pref   80 pairs of a satisfied cuStreamWaitValue32 and a 2 MiB prefetch on `pend`
// Behind one pending prefetch on `pend` (the driver runs a prefetch from the host once its stream
// gets there, so what follows it may be held back with it): do these count too?
//   pref+copies   80 cudaMemcpyAsync of 2 MiB to pinned memory
//   pref+writes   80 cuStreamWriteValue32
//   pref+records  80 cudaEventRecord
//   pref+kernels  80 launches of an empty kernel
//   pref+other    80 empty kernels on a third stream that waits (event) for `pend` after it
//   kernels       80 empty kernels on `pend`, no prefetch (the gate alone)
// A call over several allocations (cudaMalloc under umswap is one managed allocation per buffer,
// and the advisor coalesces adjacent ranges): does it count once, or once per allocation?
//   span1, span4  64 prefetches, each over 1 or 4 adjacent 2 MiB managed allocations
//   discard-span4 64 discards, each over 4 adjacent allocations
// Across streams (run first; `hol` runs only these):
//   hol X > Y   X left pending on the gated stream (nothing, an empty kernel, a kernel writing a
//               managed chunk, a prefetch), Y on a stream busy with a 50 ms kernel (a prefetch to
//               the GPU or host, a populate, a discard): is Y's completion held by the gate?
//   behind ...  a stream waits (event) for the gated stream after its kernel, then a prefetch is
//               issued on it: does the call block? (the advisor's hang at batch 16 did)
// Across threads (`threads` runs only these): thread A leaves a populate (a prefetch of discarded
// chunk 50) pending on the gated stream and launches a kernel behind it, which blocks A until the
// gate opens. Meanwhile thread B times calls on an idle stream: a kernel launch, an event record,
// an event query, a 4 KiB copy to pinned memory, a stream write, a prefetch of another chunk. A
// call of B's held until the gate opens means a thread blocked behind a pending managed call holds
// the others out of the driver (the launch path's populates are on the program's stream).
//   threads-plain  A as above
//   threads-side   A's populate on a side stream that waits (event) for the gated one, and the
//                  gated stream waits (event) for the populate before A's kernel
// usage: deferred_prefetch_probe [release_ms [hol|threads]]   (128 MiB of managed memory, and
// 256 allocations of 2 MiB more for the span cases: 640 MiB at most)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuda_check.h"

using Clock = std::chrono::steady_clock;
__global__ void empty_kernel() {}
__global__ void touch_kernel(char* p) {
  p[0] = 2;
}
__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

namespace {
constexpr size_t kChunk = size_t(2) << 20;
constexpr int kChunks = 64;

struct Gate {
  volatile unsigned* word = nullptr;
  CUdeviceptr device = 0;
  std::thread opener;
  Clock::time_point closed_at;
  void close(cudaStream_t s, int release_ms) {
    *word = 0;
    CHECK_CU(
        cuStreamWaitValue32(reinterpret_cast<CUstream>(s), device, 1, CU_STREAM_WAIT_VALUE_GEQ));
    closed_at = Clock::now();
    opener = std::thread([this, release_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(release_ms));
      *word = 1;
    });
  }
  void join() { opener.join(); }
};

void report(const char* name, const std::vector<double>& calls, double release_ms) {
  int first_blocked = -1;
  double longest = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i] > release_ms / 2 && first_blocked < 0) first_blocked = static_cast<int>(i);
    if (calls[i] > longest) longest = calls[i];
  }
  std::printf("%-11s %zu calls, longest %.1f ms, first call blocked until the gate opened: %d\n",
              name, calls.size(), longest, first_blocked);
}
}  // namespace

int main(int argc, char** argv) {
  const int release_ms = argc > 1 ? std::atoi(argv[1]) : 1500;
  const bool only_hol = argc > 2 && std::string(argv[2]) == "hol";
  const bool only_threads = argc > 2 && std::string(argv[2]) == "threads";
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  char* p = nullptr;
  CHECK(cudaMallocManaged(&p, kChunk * kChunks));
  CHECK(cudaMemset(p, 1, kChunk * kChunks));
  CHECK(cudaDeviceSynchronize());
  void* host_word = nullptr;
  CHECK(cudaHostAlloc(&host_word, 64, cudaHostAllocMapped));
  Gate gate;
  gate.word = static_cast<volatile unsigned*>(host_word);
  CHECK_CU(cuMemHostGetDevicePointer(&gate.device, host_word, 0));
  cudaStream_t gs, pend, idle;
  CHECK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&pend, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&idle, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const cudaMemLocation gpu{cudaMemLocationTypeDevice, 0}, host{cudaMemLocationTypeHost, 0};
  const auto place_all = [&](cudaMemLocation where) {
    CHECK(cudaMemPrefetchAsync(p, kChunk * kChunks, where, 0, idle));
    CHECK(cudaStreamSynchronize(idle));
  };
  const auto block_pend = [&] {
    gate.close(gs, release_ms);
    CHECK(cudaEventRecord(ev, gs));
    CHECK(cudaStreamWaitEvent(pend, ev, 0));
  };
  const auto timed = [](auto&& call) {
    const auto t = Clock::now();
    call();
    return ms_since(t);
  };
  {
    cudaStream_t side;
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    cudaEvent_t reached, populated, marker;
    CHECK(cudaEventCreateWithFlags(&reached, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&populated, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&marker, cudaEventDisableTiming));
    void* pinned = nullptr;
    CHECK(cudaHostAlloc(&pinned, 4096, cudaHostAllocMapped));
    CUdeviceptr pinned_device = 0;
    CHECK_CU(cuMemHostGetDevicePointer(&pinned_device, pinned, 0));
    empty_kernel<<<1, 1, 0, idle>>>();  // loaded before timing
    CHECK(cudaStreamSynchronize(idle));
    for (const bool use_side : {false, true}) {
      place_all(gpu);
      CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p + 50 * kChunk);
      size_t size = kChunk;
      CHECK_CU(cuMemDiscardBatchAsync(&d, &size, 1, 0, reinterpret_cast<CUstream>(idle)));
      CHECK(cudaStreamSynchronize(idle));
      block_pend();
      double a_ms = 0;
      std::atomic<bool> a_started{false};
      std::thread a([&] {
        const auto t = Clock::now();
        if (use_side) {
          CHECK(cudaEventRecord(reached, pend));
          CHECK(cudaStreamWaitEvent(side, reached, 0));
          CHECK(cudaMemPrefetchAsync(p + 50 * kChunk, kChunk, gpu, 0, side));
          CHECK(cudaEventRecord(populated, side));
          CHECK(cudaStreamWaitEvent(pend, populated, 0));
        } else {
          CHECK(cudaMemPrefetchAsync(p + 50 * kChunk, kChunk, gpu, 0, pend));
        }
        a_started = true;
        empty_kernel<<<1, 1, 0, pend>>>();
        CHECK(cudaGetLastError());
        a_ms = ms_since(t);
      });
      while (!a_started) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // A inside its launch
      struct Call {
        const char* name;
        std::function<void()> call;
      };
      const Call calls[] = {
          {"kernel", [&] { empty_kernel<<<1, 1, 0, idle>>>(); }},
          {"record", [&] { CHECK(cudaEventRecord(marker, idle)); }},
          {"query", [&] { (void)cudaEventQuery(marker); }},
          {"copy",
           [&] {
             CHECK(cudaMemcpyAsync(pinned, p + 51 * kChunk, 4096, cudaMemcpyDeviceToHost, idle));
           }},
          {"write",
           [&] {
             CHECK_CU(cuStreamWriteValue32(reinterpret_cast<CUstream>(idle), pinned_device, 7, 0));
           }},
          {"prefetch",
           [&] { CHECK(cudaMemPrefetchAsync(p + 52 * kChunk, kChunk, host, 0, idle)); }},
      };
      const auto b_start = Clock::now();
      for (const Call& c : calls) {
        const double ms = timed(c.call);
        std::printf("%s B's %-8s at %6.1f ms: call %.1f ms (%s)\n",
                    use_side ? "threads-side " : "threads-plain", c.name, ms_since(b_start), ms,
                    ms > release_ms / 2.0 ? "HELD until the gate opened" : "returned");
      }
      a.join();
      CHECK(cudaStreamSynchronize(pend));
      CHECK(cudaStreamSynchronize(side));
      CHECK(cudaStreamSynchronize(idle));
      gate.join();
      std::printf("%s A's launch behind the populate took %.1f ms (%s)\n",
                  use_side ? "threads-side " : "threads-plain", a_ms,
                  a_ms > release_ms / 2.0 ? "blocked until the gate opened" : "returned");
    }
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaEventDestroy(reached));
    CHECK(cudaEventDestroy(populated));
    CHECK(cudaEventDestroy(marker));
    CHECK(cudaStreamDestroy(side));
    if (only_threads) {
      CHECK(cudaFree(p));
      return 0;
    }
  }
  // Head of line: does work left pending on the gated stream hold back a managed call on another
  // stream that is only busy (a 50 ms kernel ahead of it), which the driver also defers? Timed is
  // when an event after the busy stream's call completes, not the call. Pending on the gated
  // stream: nothing, an empty kernel, a kernel that writes managed chunk 40, or a prefetch of
  // chunk 0. The busy stream's call: a prefetch of chunk 20 to the GPU, of chunk 22 to the host,
  // a populate (prefetch of discarded chunk 30), a discard of chunk 21.
  {
    cudaStream_t busy;
    CHECK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
    cudaEvent_t done;
    CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    const long long spin_cycles = 50LL * clock_khz;  // about 50 ms
    // Loaded before timing anything (lazy module loading holds a first launch).
    spin_kernel<<<1, 1, 0, busy>>>(1000);
    touch_kernel<<<1, 1, 0, busy>>>(p + 40 * kChunk);
    CHECK(cudaStreamSynchronize(busy));
    const auto discard = [&](int chunk, cudaStream_t s) {
      CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p + chunk * kChunk);
      size_t size = kChunk;
      CHECK_CU(cuMemDiscardBatchAsync(&d, &size, 1, 0, reinterpret_cast<CUstream>(s)));
    };
    const char* pending_names[] = {"gate", "kernel", "touch", "pref"};
    const char* call_names[] = {"", "to-gpu", "discard", "populate", "to-host"};
    for (int pending = 0; pending < 4; ++pending) {
      for (int call = 1; call <= 4; ++call) {
        place_all(call == 4 ? gpu : host);
        if (call == 3) {
          discard(30, idle);
          CHECK(cudaStreamSynchronize(idle));
        }
        block_pend();
        if (pending == 1) empty_kernel<<<1, 1, 0, pend>>>();
        if (pending == 2) touch_kernel<<<1, 1, 0, pend>>>(p + 40 * kChunk);
        if (pending == 3) CHECK(cudaMemPrefetchAsync(p, kChunk, gpu, 0, pend));
        const auto t = Clock::now();
        spin_kernel<<<1, 1, 0, busy>>>(spin_cycles);
        CHECK(cudaGetLastError());
        const double call_ms = timed([&] {
          if (call == 1) CHECK(cudaMemPrefetchAsync(p + 20 * kChunk, kChunk, gpu, 0, busy));
          if (call == 2) discard(21, busy);
          if (call == 3) CHECK(cudaMemPrefetchAsync(p + 30 * kChunk, kChunk, gpu, 0, busy));
          if (call == 4) CHECK(cudaMemPrefetchAsync(p + 22 * kChunk, kChunk, host, 0, busy));
        });
        CHECK(cudaEventRecord(done, busy));
        while (cudaEventQuery(done) == cudaErrorNotReady) std::this_thread::yield();
        const double done_ms = ms_since(t);
        CHECK(cudaStreamSynchronize(pend));
        gate.join();
        std::printf("hol %-6s > %-8s call %.1f ms, busy stream done after %.1f ms (%s)\n",
                    pending_names[pending], call_names[call], call_ms, done_ms,
                    done_ms > release_ms / 2.0 ? "HELD by the gated stream" : "not held");
      }
    }
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(busy));
  }
  // The advisor's hang at batch 16 (docs/advisor.md): its populate, on a stream that waits (an
  // event) for a launch of the program's stream not yet reached, blocked in the call while the
  // program's stream held kernels behind a wait. Here: the gated stream holds a kernel (writing
  // chunk 40, or empty, or none) and then an event; another stream waits for that event and is
  // given a prefetch: of chunk 40 (the kernel's) or of chunk 41, to the GPU or to the host.
  {
    cudaStream_t waiter;
    CHECK(cudaStreamCreateWithFlags(&waiter, cudaStreamNonBlocking));
    cudaEvent_t after;
    CHECK(cudaEventCreateWithFlags(&after, cudaEventDisableTiming));
    empty_kernel<<<1, 1, 0, waiter>>>();
    touch_kernel<<<1, 1, 0, waiter>>>(p + 40 * kChunk);
    CHECK(cudaStreamSynchronize(waiter));
    struct Case {
      const char* name;
      int kernel;  // 0 none, 1 empty, 2 writes chunk 40
      int chunk;
      bool to_gpu;
    };
    const Case cases[] = {
        {"behind none  > 41 gpu", 0, 41, true},   {"behind empty > 41 gpu", 1, 41, true},
        {"behind touch > 41 gpu", 2, 41, true},   {"behind touch > 40 gpu", 2, 40, true},
        {"behind touch > 40 host", 2, 40, false}, {"behind touch > 41 host", 2, 41, false}};
    for (const Case& c : cases) {
      place_all(c.to_gpu ? host : gpu);
      block_pend();
      if (c.kernel == 1) empty_kernel<<<1, 1, 0, pend>>>();
      if (c.kernel == 2) touch_kernel<<<1, 1, 0, pend>>>(p + 40 * kChunk);
      CHECK(cudaEventRecord(after, pend));
      CHECK(cudaStreamWaitEvent(waiter, after, 0));
      const double call = timed([&] {
        CHECK(cudaMemPrefetchAsync(p + c.chunk * kChunk, kChunk, c.to_gpu ? gpu : host, 0, waiter));
      });
      CHECK(cudaStreamSynchronize(waiter));
      CHECK(cudaStreamSynchronize(pend));
      gate.join();
      std::printf("%-24s call %.1f ms (%s)\n", c.name, call,
                  call > release_ms / 2.0 ? "BLOCKED until the gate opened" : "returned");
    }
    CHECK(cudaEventDestroy(after));
    CHECK(cudaStreamDestroy(waiter));
  }
  if (only_hol) {
    CHECK(cudaFree(p));
    return 0;
  }
  for (int to_gpu = 1; to_gpu >= 0; --to_gpu) {
    place_all(to_gpu ? host : gpu);
    block_pend();
    std::vector<double> calls;
    for (int i = 0; i < kChunks; ++i) {
      calls.push_back(timed([&] {
        CHECK(cudaMemPrefetchAsync(p + i * kChunk, kChunk, to_gpu ? gpu : host, 0, pend));
      }));
    }
    CHECK(cudaStreamSynchronize(pend));
    gate.join();
    report(to_gpu ? "pend-gpu" : "pend-host", calls, release_ms);
  }
  {
    place_all(host);
    block_pend();
    for (int i = 0; i < 8; ++i) CHECK(cudaMemPrefetchAsync(p + i * kChunk, kChunk, gpu, 0, pend));
    const double call =
        timed([&] { CHECK(cudaMemPrefetchAsync(p + 32 * kChunk, kChunk, gpu, 0, idle)); });
    CHECK(cudaStreamSynchronize(pend));
    gate.join();
    report("idle-after", {call}, release_ms);
  }
  {
    place_all(host);
    block_pend();
    CHECK(cudaMemPrefetchAsync(p, kChunk, gpu, 0, pend));
    const double call = timed([&] { CHECK(cudaMemPrefetchAsync(p, kChunk, host, 0, idle)); });
    CHECK(cudaStreamSynchronize(pend));
    gate.join();
    report("same-range", {call}, release_ms);
  }
  // The advisor's hang with copies at batch 16 (docs/advisor.md, "What was found third"): held in
  // cuMemPrefetchAsync (a populate of discarded pages, or a range's partial pages) with nothing of
  // its own left waiting on the GPU. Does a call on an idle stream wait for a pending call over the
  // same pages? One pending call on `pend`, then one call on `idle`, timed:
  //   discard>populate   a discard of chunk 8 pending; a prefetch of chunk 8 to the GPU
  //   discard>partial    a discard of chunk 9 pending; a prefetch of 64 KiB inside it, to the host
  //   discard>other      a discard of chunk 10 pending; a prefetch of chunk 11 (another page)
  //   populate>discard   a prefetch of chunk 12 to the GPU pending; a discard of chunk 12
  //   partial>partial    a prefetch of 64 KiB of chunk 13 to the host pending; another 64 KiB of
  //                      chunk 13 to the GPU
  {
    const auto discard = [&](int chunk, cudaStream_t s) {
      CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p + chunk * kChunk);
      size_t size = kChunk;
      CHECK_CU(cuMemDiscardBatchAsync(&d, &size, 1, 0, reinterpret_cast<CUstream>(s)));
    };
    constexpr size_t kPart = size_t(64) << 10;
    struct Case {
      const char* name;
      std::function<void()> pending, call;
    };
    const Case cases[] = {
        {"discard>populate", [&] { discard(8, pend); },
         [&] { CHECK(cudaMemPrefetchAsync(p + 8 * kChunk, kChunk, gpu, 0, idle)); }},
        {"discard>partial", [&] { discard(9, pend); },
         [&] { CHECK(cudaMemPrefetchAsync(p + 9 * kChunk + kPart, kPart, host, 0, idle)); }},
        {"discard>other", [&] { discard(10, pend); },
         [&] { CHECK(cudaMemPrefetchAsync(p + 11 * kChunk, kChunk, gpu, 0, idle)); }},
        {"populate>discard",
         [&] { CHECK(cudaMemPrefetchAsync(p + 12 * kChunk, kChunk, gpu, 0, pend)); },
         [&] { discard(12, idle); }},
        {"partial>partial",
         [&] { CHECK(cudaMemPrefetchAsync(p + 13 * kChunk, kPart, host, 0, pend)); },
         [&] { CHECK(cudaMemPrefetchAsync(p + 13 * kChunk + 2 * kPart, kPart, gpu, 0, idle)); }},
    };
    for (const Case& c : cases) {
      place_all(gpu);
      block_pend();
      c.pending();
      const double call = timed(c.call);
      CHECK(cudaStreamSynchronize(pend));
      CHECK(cudaStreamSynchronize(idle));
      gate.join();
      report(c.name, {call}, release_ms);
    }
  }
  {
    place_all(gpu);
    void* pinned = nullptr;
    CHECK(cudaHostAlloc(&pinned, kChunk, cudaHostAllocDefault));
    block_pend();
    for (int i = 0; i < 8; ++i) CHECK(cudaMemPrefetchAsync(p + i * kChunk, kChunk, host, 0, pend));
    std::vector<double> calls;
    calls.push_back(timed([&] {
      CHECK(cudaMemcpyAsync(pinned, p + 40 * kChunk, kChunk, cudaMemcpyDeviceToHost, idle));
    }));
    CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p + 40 * kChunk);
    size_t size = kChunk;
    calls.push_back(timed([&] {
      CHECK_CU(cuMemDiscardBatchAsync(&d, &size, 1, 0, reinterpret_cast<CUstream>(idle)));
    }));
    CHECK(cudaStreamSynchronize(pend));
    gate.join();
    report("copy-after", calls, release_ms);
    CHECK(cudaFreeHost(pinned));
  }
  // Per stream or per context: 40 pending on `pend`, then 40 on a second gated stream.
  {
    place_all(host);
    cudaStream_t pend2;
    CHECK(cudaStreamCreateWithFlags(&pend2, cudaStreamNonBlocking));
    block_pend();
    CHECK(cudaStreamWaitEvent(pend2, ev, 0));
    std::vector<double> calls;
    for (int i = 0; i < 80; ++i) {
      calls.push_back(timed([&] {
        CHECK(cudaMemPrefetchAsync(p + (i % kChunks) * kChunk, kChunk, gpu, 0,
                                   i < 40 ? pend : pend2));
      }));
    }
    CHECK(cudaStreamSynchronize(pend));
    CHECK(cudaStreamSynchronize(pend2));
    gate.join();
    report("two-streams", calls, release_ms);
  }
  // Discards, copies and batched prefetches on a pending stream: do they count too?
  {
    place_all(gpu);
    block_pend();
    std::vector<double> calls;
    for (int i = 0; i < 80; ++i) {
      CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p + (i % kChunks) * kChunk);
      size_t size = kChunk;
      calls.push_back(timed([&] {
        CHECK_CU(cuMemDiscardBatchAsync(&d, &size, 1, 0, reinterpret_cast<CUstream>(pend)));
      }));
    }
    CHECK(cudaStreamSynchronize(pend));
    gate.join();
    report("discards", calls, release_ms);
  }
  {
    place_all(gpu);
    void* pinned = nullptr;
    CHECK(cudaHostAlloc(&pinned, kChunk, cudaHostAllocDefault));
    block_pend();
    std::vector<double> calls;
    for (int i = 0; i < 80; ++i) {
      calls.push_back(timed([&] {
        CHECK(cudaMemcpyAsync(pinned, p + (i % kChunks) * kChunk, kChunk, cudaMemcpyDeviceToHost,
                              pend));
      }));
    }
    CHECK(cudaStreamSynchronize(pend));
    gate.join();
    report("copies", calls, release_ms);
    CHECK(cudaFreeHost(pinned));
  }
  {
    place_all(host);
    block_pend();
    std::vector<double> calls;
    CUmemLocation cgpu{};
    cgpu.type = CU_MEM_LOCATION_TYPE_DEVICE;
    cgpu.id = 0;
    size_t loc_index = 0;
    for (int i = 0; i < 80; ++i) {
      CUdeviceptr ds[2] = {reinterpret_cast<CUdeviceptr>(p + (i % kChunks) * kChunk),
                           reinterpret_cast<CUdeviceptr>(p + ((i + 1) % kChunks) * kChunk)};
      size_t sizes[2] = {kChunk, kChunk};
      calls.push_back(timed([&] {
        CHECK_CU(cuMemPrefetchBatchAsync(ds, sizes, 2, &cgpu, &loc_index, 1, 0,
                                         reinterpret_cast<CUstream>(pend)));
      }));
    }
    CHECK(cudaStreamSynchronize(pend));
    gate.join();
    report("batches", calls, release_ms);
  }
  // Once blocked calls are behind a gate, does a prefetch on an idle stream wait too?
  {
    place_all(host);
    block_pend();
    for (int i = 0; i < 57; ++i) CHECK(cudaMemPrefetchAsync(p + i * kChunk, kChunk, gpu, 0, pend));
    const double call =
        timed([&] { CHECK(cudaMemPrefetchAsync(p + 60 * kChunk, kChunk, gpu, 0, idle)); });
    CHECK(cudaStreamSynchronize(pend));
    gate.join();
    report("idle-at-57", {call}, release_ms);
  }
  // Stream memory operations behind the gate: do they count toward the same limit?
  for (int kind = 0; kind < 3; ++kind) {
    place_all(host);
    block_pend();
    std::vector<double> calls;
    for (int i = 0; i < 80; ++i) {
      calls.push_back(timed([&] {
        const CUstream cs = reinterpret_cast<CUstream>(pend);
        if (kind == 0) {
          CHECK_CU(cuStreamWriteValue32(cs, gate.device + 8, i, 0));
        } else if (kind == 1) {
          CHECK_CU(cuStreamWaitValue32(cs, gate.device + 8, 0, CU_STREAM_WAIT_VALUE_GEQ));
        } else {
          CHECK_CU(cuStreamWaitValue32(cs, gate.device + 8, 0, CU_STREAM_WAIT_VALUE_GEQ));
          CHECK(cudaMemPrefetchAsync(p + (i % kChunks) * kChunk, kChunk, gpu, 0, pend));
        }
      }));
    }
    CHECK(cudaStreamSynchronize(pend));
    gate.join();
    report(kind == 0 ? "writes" : kind == 1 ? "waits" : "wait+pref", calls, release_ms);
  }
  // Does a call count once, or once per 2 MiB (or per range of a batch)?
  for (int kind = 0; kind < 2; ++kind) {
    place_all(kind == 0 ? host : gpu);
    block_pend();
    std::vector<double> calls;
    for (int i = 0; i < 64; ++i) {
      calls.push_back(timed([&] {
        if (kind == 0) {  // 16 MiB: 8 pages of 2 MiB
          CHECK(cudaMemPrefetchAsync(p + (i % 8) * 8 * kChunk, 8 * kChunk, gpu, 0, pend));
        } else {  // a discard batch of 4 ranges
          CUdeviceptr ds[4];
          size_t sizes[4];
          for (int k = 0; k < 4; ++k) {
            ds[k] = reinterpret_cast<CUdeviceptr>(p + ((4 * i + k) % kChunks) * kChunk);
            sizes[k] = kChunk;
          }
          CHECK_CU(cuMemDiscardBatchAsync(ds, sizes, 4, 0, reinterpret_cast<CUstream>(pend)));
        }
      }));
    }
    CHECK(cudaStreamSynchronize(pend));
    gate.join();
    report(kind == 0 ? "16MiB" : "discard4", calls, release_ms);
  }
  // Behind one pending prefetch: copies, stream writes, event records, kernels, another stream.
  {
    void* pinned = nullptr;
    CHECK(cudaHostAlloc(&pinned, kChunk, cudaHostAllocDefault));
    cudaEvent_t ev2;
    CHECK(cudaEventCreateWithFlags(&ev2, cudaEventDisableTiming));
    cudaStream_t other;
    CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    const char* names[] = {"pref+copies",  "pref+writes", "pref+records",
                           "pref+kernels", "pref+other",  "kernels"};
    for (int kind = 0; kind < 6; ++kind) {
      place_all(host);
      block_pend();
      if (kind != 5) CHECK(cudaMemPrefetchAsync(p, kChunk, gpu, 0, pend));
      if (kind == 4) {
        CHECK(cudaEventRecord(ev2, pend));
        CHECK(cudaStreamWaitEvent(other, ev2, 0));
      }
      std::vector<double> calls;
      for (int i = 0; i < 80; ++i) {
        calls.push_back(timed([&] {
          const CUstream cs = reinterpret_cast<CUstream>(pend);
          if (kind == 0) {
            CHECK(cudaMemcpyAsync(pinned, p + (1 + i % (kChunks - 1)) * kChunk, kChunk,
                                  cudaMemcpyDeviceToHost, pend));
          } else if (kind == 1) {
            CHECK_CU(cuStreamWriteValue32(cs, gate.device + 8, i, 0));
          } else if (kind == 2) {
            CHECK(cudaEventRecord(ev2, pend));
          } else {
            empty_kernel<<<1, 1, 0, kind == 4 ? other : pend>>>();
            CHECK(cudaGetLastError());
          }
        }));
      }
      CHECK(cudaStreamSynchronize(pend));
      CHECK(cudaStreamSynchronize(other));
      gate.join();
      report(names[kind], calls, release_ms);
    }
    CHECK(cudaStreamDestroy(other));
    CHECK(cudaEventDestroy(ev2));
    CHECK(cudaFreeHost(pinned));
  }
  // Calls over several allocations: 256 managed allocations of 2 MiB, in runs of adjacent ones.
  {
    std::vector<char*> allocs(256);
    for (char*& a : allocs) {
      CHECK(cudaMallocManaged(&a, kChunk));
      CHECK(cudaMemset(a, 1, kChunk));
    }
    CHECK(cudaDeviceSynchronize());
    std::vector<char*> sorted = allocs;
    std::sort(sorted.begin(), sorted.end());
    std::vector<char*> starts4;  // starts of 4 adjacent allocations, not overlapping
    for (size_t i = 0; i + 3 < sorted.size();) {
      if (sorted[i + 1] == sorted[i] + kChunk && sorted[i + 2] == sorted[i] + 2 * kChunk &&
          sorted[i + 3] == sorted[i] + 3 * kChunk) {
        starts4.push_back(sorted[i]);
        i += 4;
      } else {
        ++i;
      }
    }
    std::printf("span: %zu runs of 4 adjacent allocations of 256\n", starts4.size());
    const auto place = [&](cudaMemLocation where) {
      for (char* a : allocs) CHECK(cudaMemPrefetchAsync(a, kChunk, where, 0, idle));
      CHECK(cudaStreamSynchronize(idle));
    };
    for (int kind = 0; kind < 3; ++kind) {
      if (kind > 0 && starts4.size() < 64) {
        std::printf("%s skipped: too few adjacent runs\n", kind == 1 ? "span4" : "discard-span4");
        continue;
      }
      place(kind == 2 ? gpu : host);
      block_pend();
      std::vector<double> calls;
      for (int i = 0; i < 64; ++i) {
        calls.push_back(timed([&] {
          if (kind == 0) {
            CHECK(cudaMemPrefetchAsync(allocs[i], kChunk, gpu, 0, pend));
          } else if (kind == 1) {
            if (cudaMemPrefetchAsync(starts4[i], 4 * kChunk, gpu, 0, pend) != cudaSuccess) {
              (void)cudaGetLastError();  // refused: a prefetch may not span allocations
            }
          } else {
            CUdeviceptr d = reinterpret_cast<CUdeviceptr>(starts4[i]);
            size_t size = 4 * kChunk;
            CHECK_CU(cuMemDiscardBatchAsync(&d, &size, 1, 0, reinterpret_cast<CUstream>(pend)));
          }
        }));
      }
      CHECK(cudaStreamSynchronize(pend));
      gate.join();
      report(kind == 0 ? "span1" : kind == 1 ? "span4" : "discard-span4", calls, release_ms);
    }
    for (char* a : allocs) CHECK(cudaFree(a));
  }
  CHECK(cudaFree(p));
  std::printf("release after %d ms\n", release_ms);
  return 0;
}
