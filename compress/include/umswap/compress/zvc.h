// The CPU reference ZVC codec (issue 40): zero-value compression of 2- or 4-byte words, in the
// format of zvc_format.h. The GPU kernels (zvc_kernels.h) write exactly the bytes encode() writes
// and accept exactly the buffers decode() accepts; the tests hold them to it.
//
// Pure code, no CUDA: nothing here throws or allocates except the vector overload of encode().
// All functions are thread-safe (no shared state).
//
// Raw fallback: the format always encodes, even when the result is larger than the input (data
// with no zero words grows by 3% or 6%). Whether to send the encoding or the raw input is the
// caller's choice, made from the size encode() returns: worth_compressing() with kMinRatio is
// the default rule. A raw copy is not a ZVC buffer; the caller records which it kept.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "umswap/compress/zvc_format.h"

namespace umswap::compress::zvc {

// One sentence for an error code ("truncated: shorter than its header, table or payload says").
const char* describe(Error e);

// Encodes `input` into `out`, which must hold at least max_compressed_size(input.size(), w)
// bytes; returns the bytes written (at least 48), or 0 when `out` is too small (nothing is
// written then) or the input is over kMaxInputBytes. Deterministic: the same input gives the
// same bytes, padding included (zeros).
uint64_t encode(std::span<const uint8_t> input, Word w, std::span<uint8_t> out);

// The same into a new vector of exactly the encoded size.
std::vector<uint8_t> encode(std::span<const uint8_t> input, Word w);

// What a buffer's header says, checked against the buffer's size and the format's rules, without
// looking at the table or the blocks.
struct Info {
  Word word = Word::bits32;
  uint64_t input_bytes = 0;       // decode()'s output size
  uint64_t compressed_bytes = 0;  // the whole encoding; equals the buffer's size when it is ok
  uint64_t blocks = 0;
};

// Reads and checks the header of `compressed` (magic, version, word size, block size, flags and
// reserved fields, and that the buffer is exactly as long as header + table + payload + tail).
// Returns Error::ok and fills `info`, or the first problem found (`info` untouched).
Error inspect(std::span<const uint8_t> compressed, Info* info);

// Decodes `compressed` into `out`, which must be exactly the input's size (inspect() gives it).
// Everything is checked before anything is written: the header (inspect()), the offsets table
// (starts at 0, ends at the payload size, each block 16-byte aligned and exactly the size its
// mask's population count gives), and that no mask bit names a word past the input's end. On
// any error `out` is left untouched. Never reads outside `compressed` or writes outside `out`.
Error decode(std::span<const uint8_t> compressed, std::span<uint8_t> out);

// The default threshold of worth_compressing(): send compressed data only when it is at most
// 80% of the raw size. Below that the link saves under a fifth of its bytes, for the cost of an
// encode, a decode and a staging buffer; a starting point, to be measured in the eviction path.
inline constexpr double kMinRatio = 1.25;

// Whether `compressed_bytes` for `input_bytes` of input reach `min_ratio` (input / compressed).
// False for an empty input.
constexpr bool worth_compressing(uint64_t input_bytes, uint64_t compressed_bytes,
                                 double min_ratio = kMinRatio) {
  return input_bytes > 0 && compressed_bytes > 0 &&
         static_cast<double>(input_bytes) >= min_ratio * static_cast<double>(compressed_bytes);
}

}  // namespace umswap::compress::zvc
