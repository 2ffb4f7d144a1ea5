// The vmm engine's moves with the copy out of the hold (issue 38; lab/2026-11-29-vmm-window.md):
// how long the program must stop when an eviction's copy runs beside its kernels and only a check
// and the remaps run while its stream is held.
//
// Six ranges of --range-mib MiB, each mapped chunk by chunk (--chunk-mib, default 32) to GPU chunks
// (four ranges' worth) or host chunks (six ranges' worth), all made up front. A program thread
// launches passes (a --spin-us kernel, then one adding 1 to one word per 4 KiB of the ranges it
// touches: --touch all, every range every pass; rotate, range n % 6 at pass n; rare, the same
// but only at passes n % 500 < 6, each range once in 500 passes) behind a gate:
// a stream wait on mapped host memory before each pass. A mover thread evicts a range on the GPU
// and restores one on the host, over and over:
//
//   hold   close the gate, wait for the passes submitted, copy out, remap, copy in, remap, open;
//   stage  copy out first, beside the passes, by a kernel that hashes what it copies (per chunk);
//          then close, wait, hash the GPU chunks again and copy again each chunk whose hash
//          changed (a write the copy missed), remap, copy in, remap, open.
//
// The copy back stays inside the hold in both: checking it would read the host chunk over the
// link, as long as the copy. At the end every sampled word must equal its number of touches (a
// smaller one is a lost write). Printed per mode: passes a second against the program alone, the
// median stall (gate reached to gate open) and its parts, chunks copied again, lost writes.
//
// usage: vmm_stage_probe [--seconds S] [--spin-us U] [--range-mib M] [--chunk-mib C]
//                        [--touch all|rotate|rare] [MODE...]   (modes: alone hold stage)
// Memory: 4 x M MiB on the GPU, 6 x M MiB pinned host (defaults 128 MiB: 512 MiB and 768 MiB)
// through cuMemCreate; no managed memory.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "vmm_probe_common.cuh"

namespace {

using probe::kMiB;
using probe::kStride;
using probe::median;
using probe::ms_since;
using probe::spin;

constexpr int kRanges = 6;
constexpr int kGpuRanges = 4;  // the GPU pool holds this many ranges

// Ranges first .. first + count - 1: one thread per sampled word, word += 1.
__global__ void touch(uint32_t* const* table, int first, int count, uint64_t words) {
  const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (i >= words * count) return;
  table[first + i / words][(i % words) * (kStride / 4)] += 1;
}

__global__ void count_wrong(uint32_t* const* table, const uint32_t* expected, uint64_t words,
                            unsigned long long* wrong) {
  const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (i >= words * kRanges) return;
  const int r = int(i / words);
  if (table[r][(i % words) * (kStride / 4)] != expected[r]) atomicAdd(wrong, 1ull);
}

__device__ uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Hashes `bytes` at src (a sum of each 8-byte word mixed with its index: any change to a word
// changes it but with odds of 2^-64), copying them to dst when dst is not null.
__global__ void copy_hash(uint64_t* dst, const uint64_t* src, uint64_t words,
                          unsigned long long* hash) {
  uint64_t h = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t w = src[i];
    if (dst) dst[i] = w;
    h += mix(w ^ mix(i + 1));
  }
  for (int o = 16; o > 0; o /= 2) h += __shfl_down_sync(0xffffffffu, h, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(hash, (unsigned long long)h);
}

struct Config {
  double seconds = 3;
  unsigned spin_us = 200;
  uint64_t range_bytes = 128 * kMiB;
  uint64_t chunk = 32 * kMiB;
  int touch = 0;  // 0 all, 1 rotate, 2 rare
};

struct Pool {
  std::vector<CUmemGenericAllocationHandle> handles;
  CUdeviceptr window = 0;
  std::vector<int> free;
};

struct Result {
  uint64_t passes = 0;
  double seconds = 0;
  int windows = 0;
  uint64_t recopied = 0;
  unsigned long long lost = 0;
  std::vector<double> stall, check, hash, copy_out, remap_out, copy_in, remap_in, early_copy;
};

class Probe {
 public:
  Probe(const Config& c, CUdevice device, CUcontext ctx) : c_(c), device_(device), ctx_(ctx) {
    chunks_ = c.range_bytes / c.chunk;
    words_ = c.range_bytes / kStride;
    access_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access_.location.id = device;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    make(gpu_, CU_MEM_LOCATION_TYPE_DEVICE, device, kGpuRanges * chunks_);
    make(host_, CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, kRanges * chunks_);
    for (int r = 0; r < kRanges; ++r) {
      CU(cuMemAddressReserve(&base_[r], c.range_bytes, c.chunk, 0, 0));
      on_gpu_[r] = r < kGpuRanges;
      slots_[r].resize(chunks_);
      Pool& p = on_gpu_[r] ? gpu_ : host_;
      for (uint64_t i = 0; i < chunks_; ++i) {
        slots_[r][i] = p.free.back();
        p.free.pop_back();
        CU(cuMemMap(at(r, i), c.chunk, 0, p.handles[slots_[r][i]], 0));
      }
      CU(cuMemSetAccess(base_[r], c.range_bytes, &access_, 1));
    }
    CU(cuMemAlloc(&table_, sizeof base_));
    CU(cuMemcpyHtoD(table_, base_, sizeof base_));
    CU(cuMemAlloc(&expected_dev_, sizeof(uint32_t) * kRanges));
    CU(cuMemAlloc(&hashes_, 2 * chunks_ * sizeof(uint64_t)));
    CU(cuMemAlloc(&wrong_, sizeof(uint64_t)));
    CU(cuMemHostAlloc(reinterpret_cast<void**>(&gate_), sizeof(uint32_t),
                      CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CU(cuMemHostGetDevicePointer(&gate_dev_, gate_, 0));
    CU(cuStreamCreate(&program_, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&mover_, CU_STREAM_NON_BLOCKING));
    CU(cuEventCreate(&drained_, CU_EVENT_DISABLE_TIMING));
  }

  Result run(const std::string& mode) {
    Result res;
    for (int r = 0; r < kRanges; ++r) CU(cuMemsetD32(base_[r], 0, c_.range_bytes / 4));
    CU(cuCtxSynchronize());
    uint32_t touches[kRanges] = {};
    __atomic_store_n(gate_, 0u, __ATOMIC_RELEASE);
    generation_ = 0;
    stop_ = false;
    std::thread mover;
    if (mode != "alone") mover = std::thread([&] { move_loop(mode == "stage", res); });
    constexpr int kAhead = 64;
    std::vector<CUevent> ring(kAhead);
    for (auto& e : ring) CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t n = 0;
    while (ms_since(t0) < c_.seconds * 1000) {
      if (n >= kAhead) CU(cuEventSynchronize(ring[n % kAhead]));
      // rare: range n % 6 at passes n % kRareEvery < 6, so each range once per kRareEvery passes.
      constexpr uint64_t kRareEvery = 500;
      const int first = c_.touch ? int(n % kRanges) : 0;
      const int count = c_.touch == 0 ? kRanges : c_.touch == 1 || n % kRareEvery < kRanges;
      for (int r = first; r < first + count; ++r) ++touches[r];
      {
        std::lock_guard<std::mutex> lock(gate_mutex_);
        CU(cuStreamWaitValue32(program_, gate_dev_, generation_, CU_STREAM_WAIT_VALUE_GEQ));
        spin<<<1, 1, 0, program_>>>(c_.spin_us * 1000ull);
        touch<<<unsigned((words_ * count + 255) / 256), 256, 0, program_>>>(
            reinterpret_cast<uint32_t* const*>(table_), first, count, words_);
        CU(cuEventRecord(ring[n % kAhead], program_));
      }
      ++n;
    }
    CU(cuStreamSynchronize(program_));
    res.seconds = ms_since(t0) / 1000;
    res.passes = n;
    stop_ = true;
    if (mover.joinable()) mover.join();
    __atomic_store_n(gate_, 0xffffffffu, __ATOMIC_RELEASE);
    for (auto& e : ring) CU(cuEventDestroy(e));
    CU(cuMemcpyHtoD(expected_dev_, touches, sizeof touches));
    CU(cuMemsetD32(wrong_, 0, 2));
    count_wrong<<<unsigned((words_ * kRanges + 255) / 256), 256>>>(
        reinterpret_cast<uint32_t* const*>(table_), reinterpret_cast<uint32_t*>(expected_dev_),
        words_, reinterpret_cast<unsigned long long*>(wrong_));
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(&res.lost, wrong_, sizeof res.lost));
    return res;
  }

 private:
  void make(Pool& p, CUmemLocationType type, int id, uint64_t count) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = type;
    prop.location.id = id;
    p.handles.resize(count);
    CU(cuMemAddressReserve(&p.window, count * c_.chunk, c_.chunk, 0, 0));
    for (uint64_t i = 0; i < count; ++i) {
      CU(cuMemCreate(&p.handles[i], c_.chunk, &prop, 0));
      CU(cuMemMap(p.window + i * c_.chunk, c_.chunk, 0, p.handles[i], 0));
      p.free.push_back(int(count - 1 - i));
    }
    CU(cuMemSetAccess(p.window, count * c_.chunk, &access_, 1));
  }
  CUdeviceptr at(int r, uint64_t i) const { return base_[r] + i * c_.chunk; }
  CUdeviceptr window(const Pool& p, int chunk) const { return p.window + chunk * c_.chunk; }

  unsigned long long* hash(int set, uint64_t i) {
    return reinterpret_cast<unsigned long long*>(hashes_) + set * chunks_ + i;
  }
  void copy(CUdeviceptr dst, CUdeviceptr src, unsigned long long* h) {
    copy_hash<<<132, 512, 0, mover_>>>(reinterpret_cast<uint64_t*>(dst),
                                       reinterpret_cast<const uint64_t*>(src), c_.chunk / 8, h);
  }

  // Points range r's slots at `to`'s chunks `next` (one unmap of the range, a map per chunk, one
  // set access) and gives its old chunks back to their pool.
  void remap(int r, Pool& to, const std::vector<int>& next) {
    Pool& from = on_gpu_[r] ? gpu_ : host_;
    CU(cuMemUnmap(base_[r], c_.range_bytes));
    for (uint64_t i = 0; i < chunks_; ++i) {
      CU(cuMemMap(at(r, i), c_.chunk, 0, to.handles[next[i]], 0));
      from.free.push_back(slots_[r][i]);
      slots_[r][i] = next[i];
    }
    CU(cuMemSetAccess(base_[r], c_.range_bytes, &access_, 1));
    on_gpu_[r] = &to == &gpu_;
  }

  std::vector<int> take(Pool& p) {
    std::vector<int> out(chunks_);
    for (auto& x : out) {
      if (p.free.empty()) {
        std::fprintf(stderr, "pool ran dry\n");
        std::exit(2);
      }
      x = p.free.back();
      p.free.pop_back();
    }
    return out;
  }

  void move_loop(bool stage, Result& res) {
    CU(cuCtxSetCurrent(ctx_));
    int next_out = 0;
    while (!stop_) {
      int out = -1, in = -1;
      for (int k = 0; k < kRanges; ++k) {
        const int r = (next_out + k) % kRanges;
        if (on_gpu_[r] && out < 0) out = r;
        if (!on_gpu_[r] && in < 0) in = r;
      }
      next_out = out + 1;
      std::vector<int> host_chunks = take(host_);
      double early = 0;
      if (stage) {  // the copy out, beside the program's passes
        const auto t = std::chrono::steady_clock::now();
        CU(cuMemsetD32Async(hashes_, 0, 4 * chunks_, mover_));
        for (uint64_t i = 0; i < chunks_; ++i) {
          copy(window(host_, host_chunks[i]), window(gpu_, slots_[out][i]), hash(0, i));
        }
        CU(cuStreamSynchronize(mover_));
        early = ms_since(t);
      }
      {
        std::lock_guard<std::mutex> lock(gate_mutex_);
        ++generation_;
        CU(cuEventRecord(drained_, program_));
      }
      CU(cuEventSynchronize(drained_));
      const auto t0 = std::chrono::steady_clock::now();  // the GPU is at the gate
      double check = 0, copy_out = 0, hashed = 0;
      if (stage) {
        CU(cuMemsetD32Async(hashes_ + chunks_ * 8, 0, 2 * chunks_, mover_));
        for (uint64_t i = 0; i < chunks_; ++i) copy(0, window(gpu_, slots_[out][i]), hash(1, i));
        std::vector<uint64_t> h(2 * chunks_);
        CU(cuMemcpyDtoHAsync(h.data(), hashes_, h.size() * 8, mover_));
        CU(cuStreamSynchronize(mover_));
        hashed = ms_since(t0);
        for (uint64_t i = 0; i < chunks_; ++i) {
          if (h[i] == h[chunks_ + i]) continue;
          ++res.recopied;
          CU(cuMemcpyDtoDAsync(window(host_, host_chunks[i]), window(gpu_, slots_[out][i]),
                               c_.chunk, mover_));
        }
        CU(cuStreamSynchronize(mover_));
        check = ms_since(t0);
      } else {
        for (uint64_t i = 0; i < chunks_; ++i) {
          CU(cuMemcpyDtoDAsync(window(host_, host_chunks[i]), window(gpu_, slots_[out][i]),
                               c_.chunk, mover_));
        }
        CU(cuStreamSynchronize(mover_));
        copy_out = ms_since(t0);
      }
      auto t = std::chrono::steady_clock::now();
      remap(out, host_, host_chunks);
      const double remap_out = ms_since(t);
      t = std::chrono::steady_clock::now();
      std::vector<int> gpu_chunks = take(gpu_);
      for (uint64_t i = 0; i < chunks_; ++i) {
        CU(cuMemcpyDtoDAsync(window(gpu_, gpu_chunks[i]), window(host_, slots_[in][i]), c_.chunk,
                             mover_));
      }
      CU(cuStreamSynchronize(mover_));
      const double copy_in = ms_since(t);
      t = std::chrono::steady_clock::now();
      remap(in, gpu_, gpu_chunks);
      const double remap_in = ms_since(t);
      __atomic_store_n(gate_, generation_, __ATOMIC_RELEASE);
      res.stall.push_back(ms_since(t0));
      res.check.push_back(check);
      res.hash.push_back(hashed);
      res.copy_out.push_back(copy_out);
      res.remap_out.push_back(remap_out);
      res.copy_in.push_back(copy_in);
      res.remap_in.push_back(remap_in);
      res.early_copy.push_back(early);
      ++res.windows;
    }
  }

  Config c_;
  CUdevice device_;
  CUcontext ctx_;
  uint64_t chunks_ = 0, words_ = 0;
  CUmemAccessDesc access_{};
  Pool gpu_, host_;
  CUdeviceptr base_[kRanges] = {};
  bool on_gpu_[kRanges] = {};        // the mover's (and the constructor's)
  std::vector<int> slots_[kRanges];  // chunk index per slot, in its pool
  CUdeviceptr table_ = 0, expected_dev_ = 0, hashes_ = 0, wrong_ = 0, gate_dev_ = 0;
  uint32_t* gate_ = nullptr;
  CUstream program_ = nullptr, mover_ = nullptr;
  CUevent drained_ = nullptr;
  std::mutex gate_mutex_;
  uint32_t generation_ = 0;  // guarded by gate_mutex_
  std::atomic<bool> stop_{false};
};

}  // namespace

int main(int argc, char** argv) {
  Config c;
  std::vector<std::string> modes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(1);
      }
      return std::string(argv[++i]);
    };
    if (a == "--seconds") {
      c.seconds = std::stod(value());
    } else if (a == "--spin-us") {
      c.spin_us = unsigned(std::stoul(value()));
    } else if (a == "--range-mib") {
      c.range_bytes = std::stoull(value()) * kMiB;
    } else if (a == "--chunk-mib") {
      c.chunk = std::stoull(value()) * kMiB;
    } else if (a == "--touch") {
      const std::string t = value();
      if (t != "all" && t != "rotate" && t != "rare") {
        std::fprintf(stderr, "--touch is all, rotate or rare\n");
        return 1;
      }
      c.touch = t == "all" ? 0 : t == "rotate" ? 1 : 2;
    } else if (a == "alone" || a == "hold" || a == "stage") {
      modes.push_back(a);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--seconds S] [--spin-us U] [--range-mib M] [--chunk-mib C] "
                   "[--touch all|rotate|rare] [alone|hold|stage]...\n",
                   argv[0]);
      return 1;
    }
  }
  if (c.chunk == 0 || c.chunk % (2 * kMiB) || c.range_bytes % c.chunk) {
    std::fprintf(stderr, "--chunk-mib must be a multiple of 2 dividing --range-mib\n");
    return 1;
  }
  if (modes.empty()) modes = {"alone", "hold", "stage"};
  CUdevice device;
  const CUcontext ctx = probe::primary_context(&device);
  Probe probe(c, device, ctx);
  std::printf(
      "vmm stage probe: %d ranges of %llu MiB in %llu MiB chunks, spin %u us, touch %s, "
      "%.1f s a mode\n",
      kRanges, (unsigned long long)(c.range_bytes / kMiB), (unsigned long long)(c.chunk / kMiB),
      c.spin_us,
      c.touch == 0   ? "all"
      : c.touch == 1 ? "rotate"
                     : "rare",
      c.seconds);
  double alone = 0;
  for (const auto& mode : modes) {
    const Result r = probe.run(mode);
    const double rate = r.passes / r.seconds;
    if (mode == "alone") alone = rate;
    std::printf(
        "%-5s %.0f passes/s (%.3fx alone), %d windows, stall %.2f ms (check %.2f of which hash "
        "%.2f, copy out "
        "%.2f, remap out %.2f, copy in %.2f, remap in %.2f; copy out before it %.2f), "
        "%llu chunks copied again, lost %llu\n",
        mode.c_str(), rate, alone > 0 ? alone / rate : 0.0, r.windows, median(r.stall),
        median(r.check), median(r.hash), median(r.copy_out), median(r.remap_out), median(r.copy_in),
        median(r.remap_in), median(r.early_copy), (unsigned long long)r.recopied, r.lost);
    std::fflush(stdout);
  }
  return 0;
}
