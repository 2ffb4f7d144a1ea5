// The ZVC kernels (compress/zvc_kernels.h) against the CPU reference (zvc.h): for both word sizes,
// zero fractions 0, 0.5, 0.9 and 1, special values and odd lengths, the GPU's encoding is the
// CPU's byte for byte, and the GPU decodes the CPU's encoding to the input bit for bit; corrupt
// buffers get the CPU decoder's error. Plain device memory (cudaMalloc, at most ~70 MiB): nothing
// here can oversubscribe a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "umswap/compress/zvc.h"
#include "umswap/compress/zvc_kernels.h"
#include "zvc_test_data.h"

namespace umswap::compress::zvc {
namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

using test_data::kWords;
using test_data::make_input;

// The index of the first byte where `a` and `b` differ, or their (equal) size.
uint64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0) return a.size();
  uint64_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

// A device buffer of at least one byte, freed with the test.
struct DeviceBuffer {
  explicit DeviceBuffer(uint64_t bytes) {
    if (cudaMalloc(&p, bytes > 0 ? bytes : 1) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T = uint8_t>
  T* get() const {
    return static_cast<T*>(p);
  }
  void* p = nullptr;
};

class ZvcGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) GTEST_SKIP() << "no CUDA GPU";
  }

  // The GPU's encoding of `input`.
  static void gpu_encode(const std::vector<uint8_t>& input, Word w, std::vector<uint8_t>* out) {
    const uint64_t n = input.size(), cap = max_compressed_size(n, w);
    const uint64_t scratch_bytes = gpu::encode_scratch_bytes(n, w);
    ASSERT_GT(scratch_bytes, 0u);
    DeviceBuffer in(n), enc(cap), scratch(scratch_bytes), size(8);
    ASSERT_TRUE(in.p && enc.p && scratch.p && size.p);
    if (n > 0) ASSERT_CUDA(cudaMemcpy(in.p, input.data(), n, cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemset(enc.p, 0xCD, cap));  // stale bytes must not leak into the output
    ASSERT_CUDA(
        gpu::encode(in.p, n, w, enc.p, size.get<uint64_t>(), scratch.p, scratch_bytes, nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    uint64_t written = 0;
    ASSERT_CUDA(cudaMemcpy(&written, size.p, 8, cudaMemcpyDeviceToHost));
    ASSERT_LE(written, cap);
    out->resize(written);
    ASSERT_CUDA(cudaMemcpy(out->data(), enc.p, written, cudaMemcpyDeviceToHost));
  }

  // The GPU's decoding of `compressed` into `out_bytes` bytes; the status it reports.
  static void gpu_decode(const std::vector<uint8_t>& compressed, Word w, uint64_t out_bytes,
                         std::vector<uint8_t>* out, Error* status) {
    DeviceBuffer enc(compressed.size()), dec(out_bytes), st(4);
    ASSERT_TRUE(enc.p && dec.p && st.p);
    ASSERT_CUDA(cudaMemcpy(enc.p, compressed.data(), compressed.size(), cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemset(dec.p, 0xAB, out_bytes > 0 ? out_bytes : 1));
    ASSERT_CUDA(
        gpu::decode(enc.p, compressed.size(), w, dec.p, out_bytes, st.get<uint32_t>(), nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    uint32_t s = 0;
    ASSERT_CUDA(cudaMemcpy(&s, st.p, 4, cudaMemcpyDeviceToHost));
    *status = static_cast<Error>(s);
    out->resize(out_bytes);
    if (out_bytes > 0) {
      ASSERT_CUDA(cudaMemcpy(out->data(), dec.p, out_bytes, cudaMemcpyDeviceToHost));
    }
  }

  // GPU encode == CPU encode byte for byte; GPU decode of it == input bit for bit.
  static void check(const std::vector<uint8_t>& input, Word w) {
    const std::vector<uint8_t> cpu = encode(input, w);
    std::vector<uint8_t> gpu;
    ASSERT_NO_FATAL_FAILURE(gpu_encode(input, w, &gpu));
    ASSERT_EQ(gpu.size(), cpu.size());
    ASSERT_EQ(first_difference(gpu, cpu), cpu.size()) << "encoded bytes differ";
    std::vector<uint8_t> back;
    Error status = Error::bad_argument;
    ASSERT_NO_FATAL_FAILURE(gpu_decode(cpu, w, input.size(), &back, &status));
    ASSERT_EQ(status, Error::ok) << describe(status);
    ASSERT_EQ(first_difference(back, input), input.size()) << "decoded bytes differ";
  }
};

TEST_F(ZvcGpu, ZeroFractionsMatchTheCpu) {
  std::mt19937_64 rng(11);
  for (Word w : kWords) {
    for (double z : {0.0, 0.5, 0.9, 1.0}) {
      SCOPED_TRACE(testing::Message() << "word " << word_bytes(w) << " zeros " << z);
      check(make_input(32 << 20, w, z, rng), w);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(ZvcGpu, OddLengthsMatchTheCpu) {
  std::mt19937_64 rng(12);
  for (Word w : kWords) {
    for (uint64_t n : {0u, 1u, 2u, 3u, 5u, 17u, 4095u, 4096u, 4097u, 4098u, 4099u, 4100u, 8191u,
                       3 * 4096u + 7, 3 * 4096u + 42, 64 * 4096u + 2, (1u << 20) + 13}) {
      for (double z : {0.0, 0.5, 0.9, 1.0}) {
        SCOPED_TRACE(testing::Message() << "word " << word_bytes(w) << " n " << n << " z " << z);
        check(make_input(n, w, z, rng), w);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_F(ZvcGpu, SpecialValuesKeptBitForBit) {
  const std::vector<uint8_t> in32 = test_data::special_values(Word::bits32, 2000);
  const std::vector<uint8_t> in16 = test_data::special_values(Word::bits16, 2000);
  for (Word w : kWords) {
    check(in32, w);
    check(in16, w);
  }
}

TEST_F(ZvcGpu, RandomLengthsMatchTheCpu) {
  std::mt19937_64 rng(13);
  for (int i = 0; i < 60; ++i) {
    const Word w = kWords[i % 2];
    const uint64_t n = rng() % 300000;
    const double z = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    SCOPED_TRACE(testing::Message() << "case " << i << " n " << n << " z " << z);
    check(make_input(n, w, z, rng), w);
    if (HasFatalFailure()) return;
  }
}

// Corrupt buffers: the GPU reports the CPU decoder's error, and never faults (the runtime would
// report an illegal address at the next synchronisation; compute-sanitizer checks more).
TEST_F(ZvcGpu, CorruptBuffersRefused) {
  std::mt19937_64 rng(14);
  for (Word w : kWords) {
    SCOPED_TRACE(testing::Message() << "word " << word_bytes(w));
    std::vector<uint8_t> input = make_input(5 * 4096 + 3 * 4 + 1, w, 0.5, rng);
    const std::vector<uint8_t> good = encode(input, w);
    const uint64_t blocks = geometry(input.size(), w).blocks;
    const auto put64 = [](std::vector<uint8_t>& v, uint64_t at, uint64_t x) {
      std::memcpy(v.data() + at, &x, 8);
    };
    const auto get64 = [](const std::vector<uint8_t>& v, uint64_t at) {
      uint64_t x;
      std::memcpy(&x, v.data() + at, 8);
      return x;
    };
    std::vector<std::vector<uint8_t>> bad;
    bad.push_back(std::vector<uint8_t>(good.begin(), good.end() - 1));  // truncated
    bad.push_back(std::vector<uint8_t>(good.begin(), good.begin() + 20));
    bad.push_back(good);
    bad.back().push_back(0);  // trailing byte
    bad.push_back(good);
    bad.back()[0] ^= 1;  // magic
    bad.push_back(good);
    bad.back()[4] = 9;  // version
    bad.push_back(good);
    bad.back()[7] = 1;  // flags
    bad.push_back(good);
    put64(bad.back(), 24, get64(good, 24) + 16);  // payload claims more
    bad.push_back(good);
    put64(bad.back(), 32 + 8 * 2, uint64_t{1} << 40);  // a block claiming more than the buffer
    bad.push_back(good);
    put64(bad.back(), 32 + 8 * 2, get64(good, 32 + 8 * 2) + 4);  // misaligned
    bad.push_back(good);
    put64(bad.back(), 32 + 8 * blocks, get64(good, 24) + 16);  // table's end != payload
    bad.push_back(good);
    {
      // Mask vs size: 16 mask bits all set or all cleared change the count by 8 words or more,
      // which always changes the padded size.
      const uint64_t block1 = geometry(input.size(), w).payload_offset + get64(good, 40);
      uint8_t* m = bad.back().data() + block1;
      const uint8_t to =
          std::popcount(unsigned{m[0]}) + std::popcount(unsigned{m[1]}) <= 8 ? 0xFF : 0;
      m[0] = m[1] = to;
    }
    for (size_t i = 0; i < bad.size(); ++i) {
      std::vector<uint8_t> cpu_out(input.size()), gpu_out;
      const Error cpu = decode(bad[i], cpu_out);
      ASSERT_NE(cpu, Error::ok) << "case " << i;
      Error gpu = Error::ok;
      ASSERT_NO_FATAL_FAILURE(gpu_decode(bad[i], w, input.size(), &gpu_out, &gpu));
      EXPECT_EQ(gpu, cpu) << "case " << i << ": GPU " << describe(gpu) << ", CPU " << describe(cpu);
    }
    // What only the GPU's caller states: the word size and the output's size.
    std::vector<uint8_t> out;
    Error gpu = Error::ok;
    const Word other = w == Word::bits32 ? Word::bits16 : Word::bits32;
    ASSERT_NO_FATAL_FAILURE(gpu_decode(good, other, input.size(), &out, &gpu));
    EXPECT_EQ(gpu, Error::bad_word);
    ASSERT_NO_FATAL_FAILURE(gpu_decode(good, w, input.size() + 4096, &out, &gpu));
    EXPECT_EQ(gpu, Error::length_mismatch);
    // Random corruptions: whatever the status, the device is still healthy afterwards.
    for (int i = 0; i < 200; ++i) {
      std::vector<uint8_t> mutated = good;
      for (int f = 0; f < 3; ++f) mutated[rng() % mutated.size()] ^= static_cast<uint8_t>(rng());
      ASSERT_NO_FATAL_FAILURE(gpu_decode(mutated, w, input.size(), &out, &gpu));
      std::vector<uint8_t> cpu_out(input.size());
      const Error cpu = decode(mutated, cpu_out);
      EXPECT_EQ(gpu == Error::ok, cpu == Error::ok) << "mutation " << i;
      if (cpu == Error::ok && gpu == Error::ok) EXPECT_EQ(out, cpu_out) << "mutation " << i;
    }
  }
}

TEST_F(ZvcGpu, BadArgumentsRefusedBeforeLaunch) {
  DeviceBuffer a(1 << 16), b(1 << 16), s(1 << 16);
  ASSERT_TRUE(a.p && b.p && s.p);
  const uint64_t need = gpu::encode_scratch_bytes(4096, Word::bits32);
  EXPECT_EQ(gpu::encode(a.get() + 4, 4096, Word::bits32, b.p, nullptr, s.p, need, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(gpu::encode(a.p, 4096, Word::bits32, b.p, nullptr, s.p, need - 1, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(gpu::encode(a.p, 4096, static_cast<Word>(3), b.p, nullptr, s.p, need, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(gpu::decode(a.p, 100, Word::bits32, b.get() + 8, 4096, s.get<uint32_t>(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(gpu::decode(a.p, 100, Word::bits32, b.p, 4096, nullptr, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace umswap::compress::zvc
