// The vmm engine's copy-to-remap window (issue 38; docs/lab/2026-11-29-vmm-wiring-plan.md): what
// it costs to hold the program's stream while ChunkArena moves chunks, and what happens without.
//
// A "program" thread launches, on its own stream, a loop of passes: a kernel that keeps the GPU
// busy for --spin-us without touching the arena, then a kernel that adds 1 to one word in every
// 4 KiB of every arena range, reached through a pointer table in device memory (the access no
// plan foresees). It runs at most --ahead passes ahead of the GPU. A "mover" thread meanwhile
// evicts one range to host chunks and restores another to GPU chunks, over and over:
//
//   alone  no mover: the loop's own rate, the baseline;
//   hold   before every pass the program's stream waits on a word in mapped host memory
//          (cuStreamWaitValue32, as umswap's launch path does for its prefetch waits); a window
//          closes the gate (the next passes wait), waits until the passes already submitted are
//          done, moves, then opens the gate;
//   none   moves run beside the passes, no gate.
//
// At the end every sampled word must equal the number of passes: a smaller one is a lost write.
// Printed per mode: passes a second, their slowdown against alone, windows, bytes moved, the
// median drain (gate closed to the GPU idle at the gate) and move (evict + restore) times, lost
// writes, and the first CUDA error if the context died (an access to a slot while unmapped is
// an illegal address, fatal to the context: run `none` last, or alone).
//
// usage: vmm_window_probe [--breakdown] [--seconds S] [--spin-us U] [--ahead N]
//                         [--range-mib M] [MODE...]
// Defaults: 3 s, 200 us, 64 passes, 128 MiB; modes alone hold none. Six ranges of M MiB, a GPU
// pool of four (the rest on host chunks), a host limit of four. --breakdown first prints copy and
// remap times for 128 and 512 MiB in chunks of 2 to 128 MiB. No managed memory.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "umswap/vmm/chunk_arena.h"
#include "vmm_probe_common.cuh"
#include "vmm_real_driver.h"

namespace {

using probe::kMiB;
using probe::kStride;
using probe::median;
using probe::ms_since;
using probe::spin;

using umswap::vmm::ChunkArena;
using umswap::vmm::Moved;

constexpr int kRanges = 6;

// One thread per sampled word of every range: word += 1.
__global__ void touch(uint32_t* const* table, int ranges, uint64_t words_per_range) {
  const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (i >= words_per_range * ranges) return;
  uint32_t* base = table[i / words_per_range];
  base[(i % words_per_range) * (kStride / 4)] += 1;
}

// How many sampled words differ from `expected`, and the smallest value seen.
__global__ void count_wrong(uint32_t* const* table, int ranges, uint64_t words_per_range,
                            uint32_t expected, unsigned long long* wrong, unsigned* smallest) {
  const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (i >= words_per_range * ranges) return;
  const uint32_t v = table[i / words_per_range][(i % words_per_range) * (kStride / 4)];
  if (v != expected) {
    atomicAdd(wrong, 1ull);
    atomicMin(smallest, v);
  }
}

struct Config {
  double seconds = 3;
  unsigned spin_us = 200;
  int ahead = 64;
  uint64_t range_bytes = 128 * kMiB;
};

struct Result {
  uint64_t passes = 0;
  double seconds = 0;
  int windows = 0;
  uint64_t bytes_moved = 0;
  std::vector<double> drain_ms, move_ms, evict_ms, restore_ms;
  unsigned long long wrong = 0;
  unsigned smallest = 0;
  std::string error;  // the first CUDA error, if the context died
};

class Probe {
 public:
  Probe(const Config& c, CUdevice device, CUcontext ctx) : c_(c), ctx_(ctx) {
    arena_ = new ChunkArena(real_vmm_driver(), device, 4 * c.range_bytes, 4 * c.range_bytes);
    for (int r = 0; r < kRanges; ++r) CU(arena_->allocate(c.range_bytes, &base_[r]));
    CU(cuMemAlloc(&table_, sizeof base_));
    CU(cuMemcpyHtoD(table_, base_, sizeof base_));
    CU(cuMemHostAlloc(reinterpret_cast<void**>(&gate_), sizeof(uint32_t),
                      CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CU(cuMemHostGetDevicePointer(&gate_dev_, gate_, 0));
    CU(cuMemAlloc(&wrong_dev_, 16));
    CU(cuStreamCreate(&program_, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&mover_, CU_STREAM_NON_BLOCKING));
    CU(cuEventCreate(&drained_, CU_EVENT_DISABLE_TIMING));
  }

  Result run(const std::string& mode) {
    Result res;
    words_ = c_.range_bytes / kStride;
    for (int r = 0; r < kRanges; ++r) CU(cuMemsetD32(base_[r], 0, c_.range_bytes / 4));
    CU(cuCtxSynchronize());
    __atomic_store_n(gate_, 0u, __ATOMIC_RELEASE);
    generation_ = 0;
    stop_ = false;
    std::thread mover;
    if (mode != "alone") mover = std::thread([&] { move_loop(mode == "hold", res); });
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<CUevent> ring(c_.ahead);
    for (auto& e : ring) CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    uint64_t n = 0;
    CUresult failed = CUDA_SUCCESS;
    while (ms_since(t0) < c_.seconds * 1000 && failed == CUDA_SUCCESS) {
      CUevent& slot = ring[n % c_.ahead];
      if (n >= uint64_t(c_.ahead)) failed = cuEventSynchronize(slot);  // at most `ahead` queued
      if (failed != CUDA_SUCCESS) break;
      {
        std::lock_guard<std::mutex> lock(gate_mutex_);
        if (mode == "hold") {
          failed = cuStreamWaitValue32(program_, gate_dev_, generation_, CU_STREAM_WAIT_VALUE_GEQ);
        }
        spin<<<1, 1, 0, program_>>>(c_.spin_us * 1000ull);
        const uint64_t threads = words_ * kRanges;
        touch<<<unsigned((threads + 255) / 256), 256, 0, program_>>>(
            reinterpret_cast<uint32_t* const*>(table_), kRanges, words_);
        if (failed == CUDA_SUCCESS) failed = cuEventRecord(slot, program_);
      }
      ++n;
    }
    if (failed == CUDA_SUCCESS) failed = cuStreamSynchronize(program_);
    res.seconds = ms_since(t0) / 1000;
    res.passes = n;
    stop_ = true;
    if (mover.joinable()) mover.join();
    __atomic_store_n(gate_, 0xffffffffu, __ATOMIC_RELEASE);
    for (auto& e : ring) cuEventDestroy(e);
    if (failed == CUDA_SUCCESS && !mover_error_.empty()) failed = CUDA_ERROR_UNKNOWN;
    if (failed != CUDA_SUCCESS) {
      const char* s = nullptr;
      cuGetErrorName(failed, &s);
      res.error = mover_error_.empty() ? std::string(s ? s : "?") : mover_error_;
      return res;
    }
    struct {
      unsigned long long wrong;
      unsigned smallest;
    } out{0, 0xffffffffu};
    CU(cuMemcpyHtoD(wrong_dev_, &out, sizeof out));
    const uint64_t threads = words_ * kRanges;
    count_wrong<<<unsigned((threads + 255) / 256), 256>>>(
        reinterpret_cast<uint32_t* const*>(table_), kRanges, words_, uint32_t(n),
        reinterpret_cast<unsigned long long*>(wrong_dev_),
        reinterpret_cast<unsigned*>(wrong_dev_ + 8));
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(&out, wrong_dev_, sizeof out));
    res.wrong = out.wrong;
    res.smallest = out.smallest;
    return res;
  }

 private:
  // Evicts a range on the GPU and restores one on the host, alternating, until stop_.
  void move_loop(bool hold, Result& res) {
    CU(cuCtxSetCurrent(ctx_));
    while (!stop_) {
      int out = -1, in = -1;
      for (int r = 0; r < kRanges; ++r) {
        auto info = arena_->range(base_[r]);
        if (info->gpu_bytes == info->reserved && out < 0) out = r;
        if (info->host_bytes == info->reserved) in = r;
      }
      if (out < 0 || in < 0) {
        mover_error_ = "no range to move";
        return;
      }
      const auto t0 = std::chrono::steady_clock::now();
      if (hold) {
        std::lock_guard<std::mutex> lock(gate_mutex_);
        ++generation_;  // passes submitted from now on wait for the gate
        if (cuEventRecord(drained_, program_) != CUDA_SUCCESS) break;
      }
      if (hold && cuEventSynchronize(drained_) != CUDA_SUCCESS) {
        mover_error_ = "drain failed";
        break;
      }
      const auto t1 = std::chrono::steady_clock::now();
      const Moved o = arena_->evict(base_[out], c_.range_bytes, mover_);
      const double evict = ms_since(t1);
      const auto t2 = std::chrono::steady_clock::now();
      const Moved i = arena_->restore(base_[in], c_.range_bytes, mover_);
      const double restore = ms_since(t2);
      if (hold) __atomic_store_n(gate_, generation_, __ATOMIC_RELEASE);
      if (o.result != CUDA_SUCCESS || i.result != CUDA_SUCCESS) {
        const char* s = nullptr;
        cuGetErrorName(o.result != CUDA_SUCCESS ? o.result : i.result, &s);
        mover_error_ = std::string("move failed: ") + (s ? s : "?");
        if (hold) __atomic_store_n(gate_, 0xffffffffu, __ATOMIC_RELEASE);
        return;
      }
      res.windows++;
      res.bytes_moved += o.bytes + i.bytes;
      res.drain_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      res.move_ms.push_back(ms_since(t1));
      res.evict_ms.push_back(evict);
      res.restore_ms.push_back(restore);
    }
  }

  Config c_;
  CUcontext ctx_;                // the primary context, current on the mover's thread too
  ChunkArena* arena_ = nullptr;  // never destroyed: a dead context cannot release it
  CUdeviceptr base_[kRanges] = {};
  CUdeviceptr table_ = 0, gate_dev_ = 0, wrong_dev_ = 0;
  uint32_t* gate_ = nullptr;
  CUstream program_ = nullptr, mover_ = nullptr;
  CUevent drained_ = nullptr;
  std::mutex gate_mutex_;
  uint32_t generation_ = 0;  // guarded by gate_mutex_
  uint64_t words_ = 0;
  std::atomic<bool> stop_{false};
  std::string mover_error_;
};

// --breakdown: where a move's time goes, with the driver alone (no arena). `bytes` in GPU chunks
// of `kChunk` bytes and as many host chunks, each also mapped in a window; a range mapped to the
// GPU chunks. Timed on the host, median of kReps: copies GPU -> host chunk one call per chunk, and
// one call over a window where the host chunks are contiguous; remaps of the range to the host
// chunks per chunk (unmap, map, set access each) and batched (one unmap of the range, a map per
// chunk, one set access); the same back to the GPU chunks; the to-host remap's three calls timed
// apart; remaps from four threads at once.
void breakdown(CUdevice device, uint64_t bytes, uint64_t kChunk) {
  const uint64_t chunks = bytes / kChunk;
  constexpr int kReps = 7;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  auto make = [&](CUmemLocationType type, int id, std::vector<CUmemGenericAllocationHandle>& h) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = type;
    prop.location.id = id;
    h.resize(chunks);
    for (auto& x : h) CU(cuMemCreate(&x, kChunk, &prop, 0));
  };
  std::vector<CUmemGenericAllocationHandle> gpu, host;
  make(CU_MEM_LOCATION_TYPE_DEVICE, device, gpu);
  make(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, host);
  // Windows: the GPU chunks at gw, the host chunks at hw (contiguous there), and the range.
  CUdeviceptr gw, hw, range;
  CU(cuMemAddressReserve(&gw, bytes, kChunk, 0, 0));
  CU(cuMemAddressReserve(&hw, bytes, kChunk, 0, 0));
  CU(cuMemAddressReserve(&range, bytes, kChunk, 0, 0));
  for (uint64_t i = 0; i < chunks; ++i) {
    CU(cuMemMap(gw + i * kChunk, kChunk, 0, gpu[i], 0));
    CU(cuMemMap(hw + i * kChunk, kChunk, 0, host[i], 0));
    CU(cuMemMap(range + i * kChunk, kChunk, 0, gpu[i], 0));
  }
  CU(cuMemSetAccess(gw, bytes, &access, 1));
  CU(cuMemSetAccess(hw, bytes, &access, 1));
  CU(cuMemSetAccess(range, bytes, &access, 1));
  CUstream s;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  auto timed = [&](auto&& f) {
    std::vector<double> t;
    for (int r = 0; r < kReps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      t.push_back(ms_since(t0));
    }
    return median(t);
  };
  const double copy_each = timed([&] {
    for (uint64_t i = 0; i < chunks; ++i) {
      CU(cuMemcpyDtoDAsync(hw + i * kChunk, range + i * kChunk, kChunk, s));
    }
    CU(cuStreamSynchronize(s));
  });
  const double copy_one = timed([&] {
    CU(cuMemcpyDtoDAsync(hw, range, bytes, s));
    CU(cuStreamSynchronize(s));
  });
  const double copy_back_each = timed([&] {
    for (uint64_t i = 0; i < chunks; ++i) {
      CU(cuMemcpyDtoDAsync(range + i * kChunk, hw + i * kChunk, kChunk, s));
    }
    CU(cuStreamSynchronize(s));
  });
  // Remaps alternate the range between the two sets, so each timing starts from the other side.
  auto remap_each = [&](std::vector<CUmemGenericAllocationHandle>& to) {
    for (uint64_t i = 0; i < chunks; ++i) {
      CU(cuMemUnmap(range + i * kChunk, kChunk));
      CU(cuMemMap(range + i * kChunk, kChunk, 0, to[i], 0));
      CU(cuMemSetAccess(range + i * kChunk, kChunk, &access, 1));
    }
  };
  auto remap_batched = [&](std::vector<CUmemGenericAllocationHandle>& to) {
    CU(cuMemUnmap(range, bytes));
    for (uint64_t i = 0; i < chunks; ++i) CU(cuMemMap(range + i * kChunk, kChunk, 0, to[i], 0));
    CU(cuMemSetAccess(range, bytes, &access, 1));
  };
  // Per chunk, by step: which call costs (to the host only).
  double unmap_ms = 0, map_ms = 0, access_ms = 0;
  auto remap_split = [&](std::vector<CUmemGenericAllocationHandle>& to) {
    for (uint64_t i = 0; i < chunks; ++i) {
      auto t = std::chrono::steady_clock::now();
      CU(cuMemUnmap(range + i * kChunk, kChunk));
      unmap_ms += ms_since(t);
      t = std::chrono::steady_clock::now();
      CU(cuMemMap(range + i * kChunk, kChunk, 0, to[i], 0));
      map_ms += ms_since(t);
      t = std::chrono::steady_clock::now();
      CU(cuMemSetAccess(range + i * kChunk, kChunk, &access, 1));
      access_ms += ms_since(t);
    }
  };
  // Per chunk, from kThreads threads at once (chunk i on thread i % kThreads).
  constexpr int kThreads = 4;
  CUcontext ctx;
  CU(cuCtxGetCurrent(&ctx));
  auto remap_threads = [&](std::vector<CUmemGenericAllocationHandle>& to) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        CU(cuCtxSetCurrent(ctx));
        for (uint64_t i = t; i < chunks; i += kThreads) {
          CU(cuMemUnmap(range + i * kChunk, kChunk));
          CU(cuMemMap(range + i * kChunk, kChunk, 0, to[i], 0));
          CU(cuMemSetAccess(range + i * kChunk, kChunk, &access, 1));
        }
      });
    }
    for (auto& th : threads) th.join();
  };
  std::vector<double> each_out, each_in, batch_out, batch_in, threads_out, threads_in;
  for (int r = 0; r < kReps; ++r) {
    remap_split(host);
    remap_each(gpu);
    auto t1 = std::chrono::steady_clock::now();
    remap_threads(host);
    threads_out.push_back(ms_since(t1));
    t1 = std::chrono::steady_clock::now();
    remap_threads(gpu);
    threads_in.push_back(ms_since(t1));
    auto t0 = std::chrono::steady_clock::now();
    remap_each(host);
    each_out.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    remap_each(gpu);
    each_in.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    remap_batched(host);
    batch_out.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    remap_batched(gpu);
    batch_in.push_back(ms_since(t0));
  }
  const double gb = bytes / 1e9;
  std::printf(
      "breakdown %llu MiB in %llu MiB chunks: copy to host per chunk %.2f ms (%.1f GB/s), one call "
      "%.2f ms "
      "(%.1f GB/s), back per chunk %.2f ms (%.1f GB/s); remap to host per chunk %.2f ms, "
      "batched %.2f ms; to GPU per chunk %.2f ms, batched %.2f ms\n",
      (unsigned long long)(bytes / kMiB), (unsigned long long)(kChunk / kMiB), copy_each,
      gb / copy_each * 1e3, copy_one, gb / copy_one * 1e3, copy_back_each,
      gb / copy_back_each * 1e3, median(each_out), median(batch_out), median(each_in),
      median(batch_in));
  std::printf(
      "breakdown %llu MiB in %llu MiB chunks: to host, mean of %d: unmap %.2f ms, map %.2f "
      "ms, set access %.2f ms; from %d threads: to host %.2f ms, to GPU %.2f ms\n",
      (unsigned long long)(bytes / kMiB), (unsigned long long)(kChunk / kMiB), kReps,
      unmap_ms / kReps, map_ms / kReps, access_ms / kReps, kThreads, median(threads_out),
      median(threads_in));
  std::fflush(stdout);
  CU(cuMemUnmap(range, bytes));
  CU(cuMemUnmap(gw, bytes));
  CU(cuMemUnmap(hw, bytes));
  for (auto h : gpu) CU(cuMemRelease(h));
  for (auto h : host) CU(cuMemRelease(h));
  CU(cuMemAddressFree(range, bytes));
  CU(cuMemAddressFree(gw, bytes));
  CU(cuMemAddressFree(hw, bytes));
  CU(cuStreamDestroy(s));
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  bool want_breakdown = false;
  std::vector<std::string> modes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(1);
      }
      return std::strtod(argv[++i], nullptr);
    };
    if (a == "--seconds") {
      c.seconds = next();
    } else if (a == "--spin-us") {
      c.spin_us = unsigned(next());
    } else if (a == "--ahead") {
      c.ahead = std::max(1, int(next()));
    } else if (a == "--range-mib") {
      c.range_bytes = uint64_t(next()) * kMiB;
    } else if (a == "--breakdown") {
      want_breakdown = true;
    } else if (a == "alone" || a == "hold" || a == "none") {
      modes.push_back(a);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--seconds S] [--spin-us U] [--ahead N] [--range-mib M] "
                   "[--breakdown] [alone|hold|none]...\n",
                   argv[0]);
      return 1;
    }
  }
  if (modes.empty()) modes = {"alone", "hold", "none"};
  CUdevice device;
  const CUcontext ctx = probe::primary_context(&device);
  if (want_breakdown) {
    for (uint64_t total : {128 * kMiB, 512 * kMiB}) {
      for (uint64_t chunk : {2 * kMiB, 8 * kMiB, 32 * kMiB, 128 * kMiB})
        breakdown(device, total, chunk);
    }
  }
  Probe probe(c, device, ctx);
  std::printf(
      "vmm window probe: %d ranges of %llu MiB, GPU pool %llu MiB, spin %u us, ahead %d, "
      "%.1f s a mode\n",
      kRanges, (unsigned long long)(c.range_bytes / kMiB),
      (unsigned long long)(4 * c.range_bytes / kMiB), c.spin_us, c.ahead, c.seconds);
  double alone_rate = 0;
  for (const auto& mode : modes) {
    const Result r = probe.run(mode);
    const double rate = r.passes / r.seconds;
    if (mode == "alone") alone_rate = rate;
    std::printf(
        "%-5s passes %llu (%.0f/s%s) windows %d moved %.2f GB (%.1f GB/s) drain %.2f ms "
        "move %.2f ms (evict %.2f first %.2f, restore %.2f first %.2f) lost %llu "
        "(smallest %u of %llu)%s%s\n",
        mode.c_str(), (unsigned long long)r.passes, rate,
        alone_rate > 0 && mode != "alone"
            ? (", " + std::to_string(alone_rate / rate).substr(0, 5) + "x alone").c_str()
            : "",
        r.windows, r.bytes_moved / 1e9, r.bytes_moved / 1e9 / r.seconds, median(r.drain_ms),
        median(r.move_ms), median(r.evict_ms), r.evict_ms.empty() ? 0 : r.evict_ms[0],
        median(r.restore_ms), r.restore_ms.empty() ? 0 : r.restore_ms[0], r.wrong,
        r.wrong ? r.smallest : 0, (unsigned long long)r.passes, r.error.empty() ? "" : " ERROR ",
        r.error.c_str());
    std::fflush(stdout);
    if (!r.error.empty()) return 0;  // the context is gone: later modes cannot run
  }
  return 0;
}
