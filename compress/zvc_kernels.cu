// The ZVC codec's GPU kernels (zvc_kernels.h). One warp per 4 KiB block of input: each lane holds
// 8 of the block's 256 16-byte vectors, lane l the vectors 32j + l (j = 0..7), so every load and
// store of a warp covers 512 contiguous bytes. In vector 32j + l, word k is the block's word
// V(32j + l) + k, where V = 16 / word size; mask word j*V + l/L (L = 32/V lanes share one) holds
// its bit at V*(l%L) + k.
#include "umswap/compress/zvc_kernels.h"

#include <cub/device/device_scan.cuh>

#include <climits>
#include <type_traits>

namespace umswap::compress::zvc::gpu {
namespace {

constexpr int kWarpsPerCta = 8;
constexpr int kThreads = 32 * kWarpsPerCta;
constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr int kVectorsPerLane = static_cast<int>(kBlockBytes / 16 / 32);  // 8

template <int W>
struct Shape {
  static_assert(W == 2 || W == 4);
  using T = std::conditional_t<W == 4, uint32_t, uint16_t>;
  static constexpr Word kWord = static_cast<Word>(W);
  static constexpr int V = 16 / W;  // words per vector
  static constexpr int L = 32 / V;  // lanes per mask word
  static constexpr int kMaskRegs = static_cast<int>(kBlockBytes / W / 32 / 32);  // 1 or 2
  static constexpr uint32_t kMaskBytes = kBlockBytes / W / 8;
  static constexpr uint32_t kBitsOfVector = (1u << V) - 1;
};

// Word k of a vector held as four 32-bit components.
template <int W>
__device__ __forceinline__ uint32_t word_of(const uint32_t (&c)[4], int k) {
  if constexpr (W == 4) {
    return c[k];
  } else {
    return (c[k / 2] >> (16 * (k % 2))) & 0xFFFFu;
  }
}

// Vector `v` of a block of `words` words: one 16-byte load when it is whole, else its words one
// by one, zeros past the end (only the input's last block is short).
template <int W>
__device__ __forceinline__ void load_vector(const uint8_t* __restrict__ block, uint32_t words,
                                            int v, uint32_t (&c)[4]) {
  using S = Shape<W>;
  if (static_cast<uint32_t>(v + 1) * S::V <= words) {
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(block) + v);
    c[0] = x.x;
    c[1] = x.y;
    c[2] = x.z;
    c[3] = x.w;
    return;
  }
  c[0] = c[1] = c[2] = c[3] = 0;
  const auto* src = reinterpret_cast<const typename S::T*>(block);
#pragma unroll
  for (int k = 0; k < S::V; ++k) {
    const uint32_t i = static_cast<uint32_t>(v) * S::V + k;
    if (i < words) c[k * W / 4] |= static_cast<uint32_t>(src[i]) << (8 * ((k * W) % 4));
  }
}

template <int W>
__device__ __forceinline__ void store_vector(uint8_t* __restrict__ block, uint32_t words, int v,
                                             const uint32_t (&c)[4]) {
  using S = Shape<W>;
  if (static_cast<uint32_t>(v + 1) * S::V <= words) {
    reinterpret_cast<uint4*>(block)[v] = make_uint4(c[0], c[1], c[2], c[3]);
    return;
  }
  auto* dst = reinterpret_cast<typename S::T*>(block);
#pragma unroll
  for (int k = 0; k < S::V; ++k) {
    const uint32_t i = static_cast<uint32_t>(v) * S::V + k;
    if (i < words) dst[i] = static_cast<typename S::T>(word_of<W>(c, k));
  }
}

__device__ __forceinline__ void report(uint32_t* status, Error e) {
  atomicCAS(status, 0u, static_cast<uint32_t>(e));  // the first problem found stays
}

// --- encode ------------------------------------------------------------------------------------

// Pass 1: each block's encoded size (mask + its non-zero words, padded to 16 bytes).
template <int W>
__global__ void __launch_bounds__(kThreads)
    count_blocks(const uint8_t* __restrict__ in, Geometry g, uint64_t* __restrict__ sizes) {
  using S = Shape<W>;
  const uint64_t b = uint64_t{blockIdx.x} * kWarpsPerCta + threadIdx.x / 32;
  if (b >= g.blocks) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const uint8_t* block = in + b * kBlockBytes;
  const uint32_t words = words_in_block(g, b, S::kWord);
  uint32_t c[kVectorsPerLane][4];
#pragma unroll
  for (int j = 0; j < kVectorsPerLane; ++j) load_vector<W>(block, words, 32 * j + lane, c[j]);
  uint32_t nonzero = 0;
#pragma unroll
  for (int j = 0; j < kVectorsPerLane; ++j) {
#pragma unroll
    for (int k = 0; k < S::V; ++k) nonzero += word_of<W>(c[j], k) != 0 ? 1u : 0u;
  }
  nonzero = __reduce_add_sync(kFull, nonzero);
  if (lane == 0) sizes[b] = block_size(nonzero, S::kWord);
}

// After the scan: offsets[0], the header, the zeros before the payload, the raw tail, the size.
__global__ void finish_header(const uint8_t* __restrict__ in, uint64_t input_bytes, Geometry g,
                              uint32_t word, uint8_t* __restrict__ out, uint64_t* size_out) {
  auto* table = reinterpret_cast<uint64_t*>(out + kHeaderBytes);
  const uint64_t payload = g.blocks > 0 ? table[g.blocks] : 0;
  table[0] = 0;
  for (uint64_t i = kHeaderBytes + 8 * (g.blocks + 1); i < g.payload_offset; ++i) out[i] = 0;
  *reinterpret_cast<uint32_t*>(out + kMagicAt) = kMagic;
  *reinterpret_cast<uint16_t*>(out + kVersionAt) = kVersion;
  out[kWordAt] = static_cast<uint8_t>(word);
  out[kFlagsAt] = 0;
  *reinterpret_cast<uint32_t*>(out + kBlockBytesAt) = kBlockBytes;
  *reinterpret_cast<uint32_t*>(out + kReservedAt) = 0;
  *reinterpret_cast<uint64_t*>(out + kInputBytesAt) = input_bytes;
  *reinterpret_cast<uint64_t*>(out + kPayloadBytesAt) = payload;
  for (uint32_t i = 0; i < g.tail_bytes; ++i) {
    out[g.payload_offset + payload + i] = in[g.words * word + i];
  }
  if (size_out != nullptr) *size_out = encoded_size(g, payload);
}

// Pass 2: each block's mask and packed words at the offset the scan gave it.
template <int W>
__global__ void __launch_bounds__(kThreads)
    write_blocks(const uint8_t* __restrict__ in, Geometry g, uint8_t* __restrict__ out) {
  using S = Shape<W>;
  using T = typename S::T;
  const uint64_t b = uint64_t{blockIdx.x} * kWarpsPerCta + threadIdx.x / 32;
  if (b >= g.blocks) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const uint32_t below = (1u << lane) - 1;  // lanes under this one
  const uint8_t* block = in + b * kBlockBytes;
  const uint32_t words = words_in_block(g, b, S::kWord);
  const uint64_t start = reinterpret_cast<const uint64_t*>(out + kHeaderBytes)[b];
  uint8_t* const dst = out + g.payload_offset + start;
  // The packed words are gathered in shared memory, then written with 16-byte stores: scattered
  // 2-byte global stores held bf16 encoding to 360 GB/s (H200, 2026-11-29).
  __shared__ uint4 staging[kWarpsPerCta][kBlockBytes / 16];
  uint4* const stage_vectors = staging[threadIdx.x / 32];
  T* const packed = reinterpret_cast<T*>(stage_vectors);

  uint32_t c[kVectorsPerLane][4];
#pragma unroll
  for (int j = 0; j < kVectorsPerLane; ++j) load_vector<W>(block, words, 32 * j + lane, c[j]);

  uint32_t mask[S::kMaskRegs];  // this lane owns mask words lane and 32 + lane
#pragma unroll
  for (int r = 0; r < S::kMaskRegs; ++r) mask[r] = 0;
  uint32_t written = 0;  // non-zero words of the block before vector 32j
#pragma unroll
  for (int j = 0; j < kVectorsPerLane; ++j) {
    uint32_t bits = 0;
#pragma unroll
    for (int k = 0; k < S::V; ++k) bits |= (word_of<W>(c[j], k) != 0 ? 1u : 0u) << k;
    // Mask word j*V + lane/L: the OR of its L lanes' bits, each at its place.
    uint32_t word_mask = bits << (S::V * (lane % S::L));
#pragma unroll
    for (int s = 1; s < S::L; s <<= 1) word_mask |= __shfl_xor_sync(kFull, word_mask, s);
    // Its owner is lane (j*V + g) % 32 for group g; the owner of word 32r + o reads group o % V.
    const uint32_t owned = __shfl_sync(kFull, word_mask, (lane % S::V) * S::L);
    if (lane / S::V == ((j * S::V) % 32) / S::V) mask[(j * S::V) / 32] = owned;

    // Where this lane's words go: the non-zero words of the lanes below it, from ballots of the
    // bits of each lane's count (0..V).
    const uint32_t count = __popc(bits);
    uint32_t before = 0, total = 0;
#pragma unroll
    for (int q = 0; (1 << q) <= S::V; ++q) {
      const uint32_t ballot = __ballot_sync(kFull, (count >> q) & 1u);
      before += static_cast<uint32_t>(__popc(ballot & below)) << q;
      total += static_cast<uint32_t>(__popc(ballot)) << q;
    }
    uint32_t at = written + before;
#pragma unroll
    for (int k = 0; k < S::V; ++k) {
      if ((bits >> k) & 1u) packed[at++] = static_cast<T>(word_of<W>(c[j], k));
    }
    written += total;
  }
  auto* const mask_out = reinterpret_cast<uint32_t*>(dst);
#pragma unroll
  for (int r = 0; r < S::kMaskRegs; ++r) mask_out[32 * r + lane] = mask[r];
  // Zeros after the last packed word, up to the block's 16-byte boundary (at most 7 words).
  const uint32_t padded = static_cast<uint32_t>(align_up(uint64_t{written} * W, kAlign) / W);
  if (written + static_cast<uint32_t>(lane) < padded) packed[written + lane] = 0;
  __syncwarp();
  auto* const packed_out = reinterpret_cast<uint4*>(dst + S::kMaskBytes);
  for (uint32_t i = static_cast<uint32_t>(lane); i < padded * W / 16; i += 32) {
    packed_out[i] = stage_vectors[i];
  }
}

// --- decode ------------------------------------------------------------------------------------

// The checks CPU inspect() makes, in its order, plus the word size and output size the caller
// expects. `in` has `in_bytes` bytes.
__device__ Error check_header(const uint8_t* in, uint64_t in_bytes, uint32_t word,
                              uint64_t out_bytes) {
  if (in_bytes < kHeaderBytes) return Error::truncated;
  if (*reinterpret_cast<const uint32_t*>(in + kMagicAt) != kMagic) return Error::bad_magic;
  if (*reinterpret_cast<const uint16_t*>(in + kVersionAt) != kVersion) return Error::bad_version;
  const uint32_t w = in[kWordAt];
  if (w != 2 && w != 4) return Error::bad_word;
  if (in[kFlagsAt] != 0 || *reinterpret_cast<const uint32_t*>(in + kBlockBytesAt) != kBlockBytes ||
      *reinterpret_cast<const uint32_t*>(in + kReservedAt) != 0) {
    return Error::bad_header;
  }
  const uint64_t input_bytes = *reinterpret_cast<const uint64_t*>(in + kInputBytesAt);
  if (input_bytes > kMaxInputBytes) return Error::bad_header;
  const Geometry g = geometry(input_bytes, static_cast<Word>(w));
  if (in_bytes < g.payload_offset + g.tail_bytes) return Error::truncated;
  const uint64_t payload = *reinterpret_cast<const uint64_t*>(in + kPayloadBytesAt);
  const uint64_t room = in_bytes - g.payload_offset - g.tail_bytes;
  if (payload > room) return Error::truncated;
  if (payload < room) return Error::size_mismatch;
  if (w != word) return Error::bad_word;
  if (input_bytes != out_bytes) return Error::length_mismatch;
  return Error::ok;
}

// `g` is the geometry of `out_bytes`; once the header is checked it is also the buffer's.
template <int W>
__global__ void __launch_bounds__(kThreads)
    decode_blocks(const uint8_t* __restrict__ in, uint64_t in_bytes, Geometry g, uint64_t out_bytes,
                  uint8_t* __restrict__ out, uint32_t* status) {
  using S = Shape<W>;
  using T = typename S::T;
  const uint64_t b = uint64_t{blockIdx.x} * kWarpsPerCta + threadIdx.x / 32;
  if (b >= g.blocks && b != 0) return;  // warp 0 runs even with no block, for the tail
  const int lane = static_cast<int>(threadIdx.x % 32);

  if (const Error e = check_header(in, in_bytes, W, out_bytes); e != Error::ok) {
    if (b == 0 && lane == 0) report(status, e);
    return;
  }
  const auto* table = reinterpret_cast<const uint64_t*>(in + kHeaderBytes);
  const uint64_t payload = *reinterpret_cast<const uint64_t*>(in + kPayloadBytesAt);
  if (b == 0) {
    if (table[0] != 0 || table[g.blocks] != payload) {
      if (lane == 0) report(status, Error::bad_offsets);
      return;
    }
    if (static_cast<uint32_t>(lane) < g.tail_bytes) {
      out[g.words * W + lane] = in[g.payload_offset + payload + lane];
    }
    if (g.blocks == 0) return;
  }

  const uint64_t start = table[b], end = table[b + 1];
  if (end < start || end > payload || start % kAlign != 0 || end % kAlign != 0) {
    if (lane == 0) report(status, Error::bad_offsets);
    return;
  }
  if (end - start < S::kMaskBytes) {
    if (lane == 0) report(status, Error::bad_block);
    return;
  }
  const uint8_t* const src = in + g.payload_offset + start;
  const uint32_t words = words_in_block(g, b, S::kWord);

  // Mask words lane and 32 + lane; the non-zero words before each (a warp scan of popcounts);
  // no bit past the block's last word.
  uint32_t mask[S::kMaskRegs], before[S::kMaskRegs];
  bool past_end = false;
  uint32_t total = 0;
#pragma unroll
  for (int r = 0; r < S::kMaskRegs; ++r) {
    mask[r] = reinterpret_cast<const uint32_t*>(src)[32 * r + lane];
    const uint32_t first = 32u * static_cast<uint32_t>(32 * r + lane);
    if (first >= words) {
      past_end |= mask[r] != 0;
    } else if (words - first < 32) {
      past_end |= (mask[r] >> (words - first)) != 0;
    }
    const uint32_t ones = __popc(mask[r]);
    uint32_t inclusive = ones;
#pragma unroll
    for (int s = 1; s < 32; s <<= 1) {
      const uint32_t x = __shfl_up_sync(kFull, inclusive, s);
      if (lane >= s) inclusive += x;
    }
    before[r] = total + inclusive - ones;
    total += __shfl_sync(kFull, inclusive, 31);
  }
  if (__any_sync(kFull, past_end) || block_size(total, S::kWord) != end - start) {
    if (lane == 0) report(status, Error::bad_block);
    return;
  }

  // Gather every vector's words first (independent loads in flight), then store.
  const T* const packed = reinterpret_cast<const T*>(src + S::kMaskBytes);
  uint32_t c[kVectorsPerLane][4];
#pragma unroll
  for (int j = 0; j < kVectorsPerLane; ++j) {
    const int r = (j * S::V) / 32;
    const int from = (j * S::V) % 32 + lane / S::L;  // the lane owning this vector's mask word
    const uint32_t word_mask = __shfl_sync(kFull, mask[r], from);
    const uint32_t base = __shfl_sync(kFull, before[r], from);
    const int shift = S::V * (lane % S::L);
    const uint32_t bits = (word_mask >> shift) & S::kBitsOfVector;
    uint32_t at = base + __popc(word_mask & ((1u << shift) - 1));
    c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0;
#pragma unroll
    for (int k = 0; k < S::V; ++k) {
      if ((bits >> k) & 1u) {
        c[j][k * W / 4] |= static_cast<uint32_t>(packed[at++]) << (8 * ((k * W) % 4));
      }
    }
  }
  uint8_t* const dst = out + b * kBlockBytes;
#pragma unroll
  for (int j = 0; j < kVectorsPerLane; ++j) store_vector<W>(dst, words, 32 * j + lane, c[j]);
}

bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kAlign == 0;
}

uint64_t blocks_bytes(const Geometry& g) {
  return align_up(8 * g.blocks, 256);
}

size_t scan_bytes(const Geometry& g) {
  size_t bytes = 0;
  cub::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                                static_cast<uint64_t*>(nullptr), static_cast<int>(g.blocks));
  return bytes;
}

unsigned grid_for(const Geometry& g) {
  const uint64_t ctas = (g.blocks + kWarpsPerCta - 1) / kWarpsPerCta;
  return static_cast<unsigned>(ctas > 0 ? ctas : 1);
}

bool valid_word(Word w) {
  return w == Word::bits16 || w == Word::bits32;
}

// The kernels index blocks with int counts (CUB's scan) and grids of 2^31 - 1: 8 TiB of input.
bool within_limits(uint64_t input_bytes, Word w) {
  return input_bytes <= kMaxInputBytes && geometry(input_bytes, w).blocks <= INT_MAX;
}

template <int W>
cudaError_t encode_as(const uint8_t* in, uint64_t n, uint8_t* out, uint64_t* size_out,
                      uint8_t* scratch, uint64_t scratch_bytes, cudaStream_t stream) {
  const Geometry g = geometry(n, Shape<W>::kWord);
  if (g.blocks > 0) {
    auto* sizes = reinterpret_cast<uint64_t*>(scratch);
    count_blocks<W><<<grid_for(g), kThreads, 0, stream>>>(in, g, sizes);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    uint8_t* const temp = reinterpret_cast<uint8_t*>(
        align_up(reinterpret_cast<uintptr_t>(scratch + blocks_bytes(g)), 256));
    size_t temp_bytes = scratch_bytes - static_cast<uint64_t>(temp - scratch);
    auto* table = reinterpret_cast<uint64_t*>(out + kHeaderBytes);
    if (const cudaError_t e = cub::DeviceScan::InclusiveSum(temp, temp_bytes, sizes, table + 1,
                                                            static_cast<int>(g.blocks), stream);
        e != cudaSuccess) {
      return e;
    }
  }
  finish_header<<<1, 1, 0, stream>>>(in, n, g, W, out, size_out);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (g.blocks > 0) write_blocks<W><<<grid_for(g), kThreads, 0, stream>>>(in, g, out);
  return cudaGetLastError();
}

}  // namespace

uint64_t encode_scratch_bytes(uint64_t input_bytes, Word w) {
  if (!valid_word(w) || !within_limits(input_bytes, w)) return 0;
  const Geometry g = geometry(input_bytes, w);
  return blocks_bytes(g) + 256 + scan_bytes(g);  // 256: room to align CUB's storage
}

cudaError_t encode(const void* input, uint64_t input_bytes, Word w, void* out, uint64_t* size_out,
                   void* scratch, uint64_t scratch_bytes, cudaStream_t stream) {
  if (!valid_word(w) || !within_limits(input_bytes, w) || !aligned(input) || !aligned(out) ||
      !aligned(scratch) || scratch_bytes < encode_scratch_bytes(input_bytes, w) ||
      reinterpret_cast<uintptr_t>(size_out) % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  const auto* in = static_cast<const uint8_t*>(input);
  auto* o = static_cast<uint8_t*>(out);
  auto* s = static_cast<uint8_t*>(scratch);
  return w == Word::bits32 ? encode_as<4>(in, input_bytes, o, size_out, s, scratch_bytes, stream)
                           : encode_as<2>(in, input_bytes, o, size_out, s, scratch_bytes, stream);
}

cudaError_t decode(const void* compressed, uint64_t compressed_bytes, Word w, void* out,
                   uint64_t out_bytes, uint32_t* status, cudaStream_t stream) {
  if (!valid_word(w) || !within_limits(out_bytes, w) || !aligned(compressed) || !aligned(out) ||
      status == nullptr || reinterpret_cast<uintptr_t>(status) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  if (const cudaError_t e = cudaMemsetAsync(status, 0, sizeof *status, stream); e != cudaSuccess) {
    return e;
  }
  const Geometry g = geometry(out_bytes, w);
  const auto* in = static_cast<const uint8_t*>(compressed);
  auto* o = static_cast<uint8_t*>(out);
  if (w == Word::bits32) {
    decode_blocks<4>
        <<<grid_for(g), kThreads, 0, stream>>>(in, compressed_bytes, g, out_bytes, o, status);
  } else {
    decode_blocks<2>
        <<<grid_for(g), kThreads, 0, stream>>>(in, compressed_bytes, g, out_bytes, o, status);
  }
  return cudaGetLastError();
}

}  // namespace umswap::compress::zvc::gpu
