// The ZVC (zero-value compression) format: its constants, its geometry and its error codes, shared
// by the CPU codec (zvc.h) and the GPU kernels (zvc_kernels.h), so the two cannot drift apart.
// Everything here is constexpr arithmetic, callable from host and device code.
//
// Layout (all integers little-endian; compress/README.md draws it):
//
//   [0, 32)            header: magic u32 "UZVC", version u16 = 1, word size u8 (2 or 4),
//                      flags u8 = 0, block bytes u32 = 4096, reserved u32 = 0,
//                      input bytes u64, payload bytes u64
//   [32, 32+8(B+1))    offsets table: B+1 u64, offsets[b] = where block b starts in the payload,
//                      offsets[0] = 0, offsets[B] = payload bytes
//   zeros up to a multiple of 16 (payload_offset)
//   payload            B blocks, each: mask (one bit per word, bit i%8 of byte i/8 for word i,
//                      always a whole block's worth: 128 bytes for 4-byte words, 256 for 2-byte
//                      words), then the block's non-zero words in order, then zeros up to a
//                      multiple of 16 bytes
//   tail               the input's last (input bytes % word size) bytes, raw (0 to 3 bytes)
//
// The input is cut into whole words (input bytes / word size); B = ceil(words / words per block);
// every block has 4096 bytes of input (1024 or 2048 words) except perhaps the last, whose mask
// bits past its words are zero. "Non-zero" is a word's bit pattern: -0.0, NaN and Inf are kept
// as they are, bit for bit. Blocks are independent: any block decodes from its mask and offset.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define UMSWAP_ZVC_HD __host__ __device__
#else
#define UMSWAP_ZVC_HD
#endif

namespace umswap::compress::zvc {

// The size of the words compared with zero: 2 (fp16, bf16) or 4 (fp32, int32).
enum class Word : uint8_t { bits16 = 2, bits32 = 4 };

// Why a buffer was refused. Values are stable: the GPU decoder reports them as uint32_t.
enum class Error : uint32_t {
  ok = 0,
  truncated = 1,          // shorter than its header, table or payload says it is
  bad_magic = 2,          // not a ZVC buffer
  bad_version = 3,        // a version this code does not read
  bad_word = 4,           // word size not 2 or 4, or not the one the caller asked for
  bad_header = 5,         // block bytes, flags or reserved field not what version 1 writes
  length_mismatch = 6,    // the header's input length is not the output's size
  size_mismatch = 7,      // longer than header + table + payload + tail
  bad_offsets = 8,        // offsets table not increasing from 0 to the payload size, or misaligned
  bad_block = 9,          // a block's size is not what its mask says, or mask bits past the end
  output_too_small = 10,  // encode: the output buffer is under max_compressed_size()
  bad_argument = 11,      // GPU: a pointer not 16-byte aligned, or a size the kernels cannot take
};

inline constexpr uint32_t kMagic = 0x43565A55;  // bytes 'U' 'Z' 'V' 'C'
inline constexpr uint16_t kVersion = 1;
inline constexpr uint32_t kBlockBytes = 4096;  // input bytes per block
inline constexpr uint64_t kHeaderBytes = 32;
inline constexpr uint64_t kAlign = 16;  // blocks and the payload start on 16-byte boundaries
// Inputs above this are refused (bad_argument / length_mismatch): keeps every size computation
// below far from overflowing 64 bits.
inline constexpr uint64_t kMaxInputBytes = uint64_t{1} << 56;

// Header field offsets.
inline constexpr uint64_t kMagicAt = 0, kVersionAt = 4, kWordAt = 6, kFlagsAt = 7,
                          kBlockBytesAt = 8, kReservedAt = 12, kInputBytesAt = 16,
                          kPayloadBytesAt = 24;

UMSWAP_ZVC_HD constexpr uint64_t align_up(uint64_t n, uint64_t a) {
  return (n + a - 1) / a * a;
}
UMSWAP_ZVC_HD constexpr uint32_t word_bytes(Word w) {
  return static_cast<uint32_t>(w);
}
UMSWAP_ZVC_HD constexpr uint32_t block_words(Word w) {
  return kBlockBytes / word_bytes(w);
}
// One bit per word of a whole block: 128 (4-byte words) or 256 (2-byte words) bytes.
UMSWAP_ZVC_HD constexpr uint32_t mask_bytes(Word w) {
  return block_words(w) / 8;
}

// The geometry of the encoding of `input_bytes` bytes: everything but the payload's size.
struct Geometry {
  uint64_t words = 0;           // whole words in the input
  uint64_t blocks = 0;          // B
  uint64_t payload_offset = 0;  // where block 0 starts
  uint32_t tail_bytes = 0;      // input bytes past the last whole word, stored raw
};

UMSWAP_ZVC_HD constexpr Geometry geometry(uint64_t input_bytes, Word w) {
  Geometry g;
  g.words = input_bytes / word_bytes(w);
  g.blocks = (g.words + block_words(w) - 1) / block_words(w);
  g.payload_offset = align_up(kHeaderBytes + 8 * (g.blocks + 1), kAlign);
  g.tail_bytes = static_cast<uint32_t>(input_bytes % word_bytes(w));
  return g;
}

// Words in block `b` (the last may be short).
UMSWAP_ZVC_HD constexpr uint32_t words_in_block(const Geometry& g, uint64_t b, Word w) {
  const uint64_t first = b * block_words(w);
  const uint64_t left = g.words - first;
  return left < block_words(w) ? static_cast<uint32_t>(left) : block_words(w);
}

// Encoded size of a block with `nonzero` non-zero words.
UMSWAP_ZVC_HD constexpr uint64_t block_size(uint64_t nonzero, Word w) {
  return mask_bytes(w) + align_up(nonzero * word_bytes(w), kAlign);
}

// Total encoded size given the payload's size.
UMSWAP_ZVC_HD constexpr uint64_t encoded_size(const Geometry& g, uint64_t payload_bytes) {
  return g.payload_offset + payload_bytes + g.tail_bytes;
}

// The most bytes encode() can write for `input_bytes` bytes: every word non-zero. About 3%
// (4-byte words) or 6% (2-byte words) more than the input, plus 48 bytes and 8 per block.
UMSWAP_ZVC_HD constexpr uint64_t max_compressed_size(uint64_t input_bytes, Word w) {
  const Geometry g = geometry(input_bytes, w);
  uint64_t payload = 0;
  if (g.blocks > 0) {
    payload = (g.blocks - 1) * block_size(block_words(w), w) +
              block_size(words_in_block(g, g.blocks - 1, w), w);
  }
  return encoded_size(g, payload);
}

}  // namespace umswap::compress::zvc
