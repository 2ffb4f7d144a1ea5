// The ZVC kernels' speed (issue 40: >= 500 GB/s of input each way on an H200): for 4-byte (fp32)
// and 2-byte (bf16) words at zero fractions 0, 0.25, 0.5, 0.75 and 0.9, and ReLU-like data
// (normal samples through max(0, x), about half zeros), prints the compression ratio and the
// encode and decode rates in GB/s of input bytes (CUDA events around each call, median of the
// runs after warm-ups), and checks that every case decodes back to its input. One Markdown table
// row per case, for docs/BENCHMARKS.md. Exit status 1 if a round trip fails.
//
//   zvc_bench [MiB per buffer, default 256] [timed runs, default 20]
//
// Plain device memory: about 3.1x the buffer size (input, encoding, decoded copy).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"
#include "umswap/compress/zvc.h"
#include "umswap/compress/zvc_kernels.h"

namespace zvc = umswap::compress::zvc;

namespace {

constexpr int kWarmups = 3;

__device__ uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Word i is zero when its hash's low 32 bits fall under `zero_below`, else random and non-zero;
// with `relu`, max(0, x) of a standard normal x (fp32, or its top 16 bits: bf16 by truncation).
__global__ void fill(uint8_t* buf, uint64_t words, int word, uint32_t zero_below, bool relu,
                     uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < words;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint64_t h = mix(seed ^ (i * 0xD1B54A32D192ED03ull));
    uint32_t bits;
    if (relu) {
      const float u1 = (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
      const float u2 = static_cast<float>((h >> 8) & 0xFFFFFF) * (1.0f / 16777216.0f);
      const float x = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
      bits = __float_as_uint(fmaxf(0.0f, x));
      if (word == 2) bits >>= 16;
    } else if (static_cast<uint32_t>(h) < zero_below) {
      bits = 0;
    } else {
      bits = static_cast<uint32_t>(h >> 32) | 1u;
      if (word == 2) bits &= 0xFFFFu;
    }
    if (word == 4) {
      reinterpret_cast<uint32_t*>(buf)[i] = bits;
    } else {
      reinterpret_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(bits);
    }
  }
}

// Counts 16-byte vectors that differ (bytes is a multiple of 16 here).
__global__ void count_differences(const uint4* a, const uint4* b, uint64_t vectors,
                                  unsigned long long* differ) {
  unsigned long long mine = 0;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < vectors;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint4 x = a[i], y = b[i];
    if (x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w) ++mine;
  }
  if (mine != 0) atomicAdd(differ, mine);
}

// Median milliseconds of `runs` timed calls of `call` on stream 0, after kWarmups untimed ones.
template <typename F>
float median_ms(int runs, F call) {
  for (int i = 0; i < kWarmups; ++i) call();
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> ms(static_cast<size_t>(runs));
  for (float& m : ms) {
    CHECK(cudaEventRecord(start));
    call();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaEventElapsedTime(&m, start, stop));
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double gbps(uint64_t bytes, float ms) {
  return static_cast<double>(bytes) / (ms * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 20;
  if (mib == 0 || runs <= 0) {
    std::fprintf(stderr, "usage: zvc_bench [MiB per buffer > 0] [timed runs > 0]\n");
    return 2;
  }
  const uint64_t n = mib << 20;
  int device = 0;
  cudaDeviceProp prop{};
  CHECK(cudaGetDevice(&device));
  CHECK(cudaGetDeviceProperties(&prop, device));
  int runtime = 0, driver = 0;
  CHECK(cudaRuntimeGetVersion(&runtime));
  CHECK(cudaDriverGetVersion(&driver));

  const uint64_t cap = std::max(zvc::max_compressed_size(n, zvc::Word::bits16),
                                zvc::max_compressed_size(n, zvc::Word::bits32));
  const uint64_t scratch_bytes = std::max(zvc::gpu::encode_scratch_bytes(n, zvc::Word::bits16),
                                          zvc::gpu::encode_scratch_bytes(n, zvc::Word::bits32));
  uint8_t *in = nullptr, *enc = nullptr, *dec = nullptr, *scratch = nullptr;
  uint64_t* size = nullptr;
  uint32_t* status = nullptr;
  unsigned long long* differ = nullptr;
  CHECK(cudaMalloc(&in, n));
  CHECK(cudaMalloc(&enc, cap));
  CHECK(cudaMalloc(&dec, n));
  CHECK(cudaMalloc(&scratch, scratch_bytes));
  CHECK(cudaMalloc(&size, sizeof *size));
  CHECK(cudaMalloc(&status, sizeof *status));
  CHECK(cudaMalloc(&differ, sizeof *differ));

  const float copy_ms =
      median_ms(runs, [&] { CHECK(cudaMemcpyAsync(dec, in, n, cudaMemcpyDefault)); });
  std::printf(
      "# zvc_bench: %llu MiB per buffer, median of %d runs after %d warm-ups; %s, "
      "runtime %d, driver %d\n",
      static_cast<unsigned long long>(mib), runs, kWarmups, prop.name, runtime, driver);
  std::printf("# device-to-device cudaMemcpy of one buffer: %.0f GB/s (bytes copied)\n",
              gbps(n, copy_ms));
  std::printf("| words | data | ratio | encode GB/s | decode GB/s | round trip |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");

  const double cases[] = {0.0, 0.25, 0.5, 0.75, 0.9, -1.0};  // zero fractions; < 0: ReLU-like
  bool all_ok = true;
  for (const zvc::Word w : {zvc::Word::bits32, zvc::Word::bits16}) {
    const int wb = static_cast<int>(zvc::word_bytes(w));
    for (const double z : cases) {
      const bool relu = z < 0;
      const auto zero_below = static_cast<uint32_t>(relu ? 0.0 : z * 4294967295.0);
      fill<<<4 * prop.multiProcessorCount, 256>>>(in, n / wb, wb, zero_below, relu, 42);
      CHECK(cudaGetLastError());
      CHECK(cudaMemset(dec, 0xAB, n));
      CHECK(cudaDeviceSynchronize());

      const float enc_ms = median_ms(runs, [&] {
        CHECK(zvc::gpu::encode(in, n, w, enc, size, scratch, scratch_bytes, nullptr));
      });
      uint64_t compressed = 0;
      CHECK(cudaMemcpy(&compressed, size, sizeof compressed, cudaMemcpyDeviceToHost));
      const float dec_ms = median_ms(
          runs, [&] { CHECK(zvc::gpu::decode(enc, compressed, w, dec, n, status, nullptr)); });
      uint32_t st = 0;
      CHECK(cudaMemcpy(&st, status, sizeof st, cudaMemcpyDeviceToHost));
      CHECK(cudaMemset(differ, 0, sizeof *differ));
      count_differences<<<4 * prop.multiProcessorCount, 256>>>(
          reinterpret_cast<const uint4*>(in), reinterpret_cast<const uint4*>(dec), n / 16, differ);
      CHECK(cudaGetLastError());
      unsigned long long wrong = 0;
      CHECK(cudaMemcpy(&wrong, differ, sizeof wrong, cudaMemcpyDeviceToHost));
      const bool ok = st == 0 && wrong == 0;
      all_ok = all_ok && ok;

      char data[32];
      if (relu) {
        std::snprintf(data, sizeof data, "ReLU(normal)");
      } else {
        std::snprintf(data, sizeof data, "zeros %.2f", z);
      }
      char result[96];
      if (ok) {
        std::snprintf(result, sizeof result, "ok");
      } else {
        std::snprintf(result, sizeof result, "FAILED (status %u: %s; %llu vectors differ)", st,
                      zvc::describe(static_cast<zvc::Error>(st)), wrong);
      }
      std::printf("| %s | %s | %.2f | %.0f | %.0f | %s |\n", wb == 4 ? "fp32" : "bf16", data,
                  static_cast<double>(n) / static_cast<double>(compressed), gbps(n, enc_ms),
                  gbps(n, dec_ms), result);
      std::fflush(stdout);
    }
  }
  CHECK(cudaFree(in));
  CHECK(cudaFree(enc));
  CHECK(cudaFree(dec));
  CHECK(cudaFree(scratch));
  CHECK(cudaFree(size));
  CHECK(cudaFree(status));
  CHECK(cudaFree(differ));
  return all_ok ? 0 : 1;
}
