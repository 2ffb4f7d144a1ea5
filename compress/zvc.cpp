// The CPU reference ZVC codec (zvc.h). Written for clarity, not speed: the GPU kernels are the fast
// path, and this is what they are tested against.
#include "umswap/compress/zvc.h"

#include <bit>
#include <cstring>

namespace umswap::compress::zvc {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the format is little-endian and so is every host umswap runs on");

uint64_t get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
uint32_t get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
uint16_t get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void put64(uint8_t* p, uint64_t v) {
  std::memcpy(p, &v, sizeof v);
}
void put32(uint8_t* p, uint32_t v) {
  std::memcpy(p, &v, sizeof v);
}
void put16(uint8_t* p, uint16_t v) {
  std::memcpy(p, &v, sizeof v);
}

bool nonzero_word(const uint8_t* p, uint32_t word) {
  return word == 4 ? get32(p) != 0 : get16(p) != 0;
}

// Population count of a block's mask, and whether any bit past word `words` is set.
struct MaskCount {
  uint64_t ones = 0;
  bool bits_past_end = false;
};

MaskCount count_mask(const uint8_t* mask, uint32_t bytes, uint32_t words) {
  MaskCount c;
  for (uint32_t i = 0; i < bytes; ++i) {
    const uint32_t byte = mask[i];
    c.ones += static_cast<uint64_t>(std::popcount(byte));
    // Bits of this byte that name words at or past `words`.
    const uint64_t first = uint64_t{i} * 8;
    if (first + 8 > words) {
      const uint32_t valid = first >= words ? 0 : static_cast<uint32_t>(words - first);
      if ((byte >> valid) != 0) c.bits_past_end = true;
    }
  }
  return c;
}

}  // namespace

const char* describe(Error e) {
  switch (e) {
    case Error::ok:
      return "ok";
    case Error::truncated:
      return "truncated: shorter than its header, table or payload says it is";
    case Error::bad_magic:
      return "not a ZVC buffer: bad magic number";
    case Error::bad_version:
      return "a ZVC version this code does not read";
    case Error::bad_word:
      return "word size is not 2 or 4, or not the one expected";
    case Error::bad_header:
      return "header fields (block size, flags, reserved, input length) are not valid";
    case Error::length_mismatch:
      return "the header's input length is not the output's size";
    case Error::size_mismatch:
      return "longer than its header, table, payload and tail";
    case Error::bad_offsets:
      return "offsets table is not increasing from 0 to the payload size in 16-byte steps";
    case Error::bad_block:
      return "a block's size is not what its mask gives, or its mask names words past the end";
    case Error::output_too_small:
      return "the output buffer is smaller than max_compressed_size()";
    case Error::bad_argument:
      return "a pointer is not 16-byte aligned, or a size is out of range";
  }
  return "unknown ZVC error";
}

uint64_t encode(std::span<const uint8_t> input, Word w, std::span<uint8_t> out) {
  const uint64_t n = input.size();
  if (n > kMaxInputBytes || (w != Word::bits16 && w != Word::bits32)) return 0;
  if (out.size() < max_compressed_size(n, w)) return 0;
  const Geometry g = geometry(n, w);
  const uint32_t wb = word_bytes(w), mb = mask_bytes(w);
  uint8_t* const o = out.data();
  uint8_t* const table = o + kHeaderBytes;
  const uint64_t table_end = kHeaderBytes + 8 * (g.blocks + 1);
  std::memset(o + table_end, 0, g.payload_offset - table_end);

  uint64_t pos = 0;  // payload bytes written so far
  put64(table, 0);
  for (uint64_t b = 0; b < g.blocks; ++b) {
    uint8_t* const mask = o + g.payload_offset + pos;
    uint8_t* const packed = mask + mb;
    const uint8_t* const src = input.data() + b * kBlockBytes;
    const uint32_t words = words_in_block(g, b, w);
    std::memset(mask, 0, mb);
    uint64_t nonzero = 0;
    for (uint32_t i = 0; i < words; ++i) {
      const uint8_t* const word = src + uint64_t{i} * wb;
      if (!nonzero_word(word, wb)) continue;
      mask[i / 8] = static_cast<uint8_t>(mask[i / 8] | (1u << (i % 8)));
      std::memcpy(packed + nonzero * wb, word, wb);
      ++nonzero;
    }
    const uint64_t used = nonzero * wb;
    std::memset(packed + used, 0, align_up(used, kAlign) - used);
    pos += block_size(nonzero, w);
    put64(table + 8 * (b + 1), pos);
  }
  if (g.tail_bytes > 0) {
    std::memcpy(o + g.payload_offset + pos, input.data() + g.words * wb, g.tail_bytes);
  }

  put32(o + kMagicAt, kMagic);
  put16(o + kVersionAt, kVersion);
  o[kWordAt] = static_cast<uint8_t>(wb);
  o[kFlagsAt] = 0;
  put32(o + kBlockBytesAt, kBlockBytes);
  put32(o + kReservedAt, 0);
  put64(o + kInputBytesAt, n);
  put64(o + kPayloadBytesAt, pos);
  return encoded_size(g, pos);
}

std::vector<uint8_t> encode(std::span<const uint8_t> input, Word w) {
  std::vector<uint8_t> out(max_compressed_size(input.size(), w));
  out.resize(encode(input, w, out));
  return out;
}

Error inspect(std::span<const uint8_t> compressed, Info* info) {
  const uint64_t size = compressed.size();
  const uint8_t* const p = compressed.data();
  if (size < kHeaderBytes) return Error::truncated;
  if (get32(p + kMagicAt) != kMagic) return Error::bad_magic;
  if (get16(p + kVersionAt) != kVersion) return Error::bad_version;
  const uint8_t word = p[kWordAt];
  if (word != 2 && word != 4) return Error::bad_word;
  if (p[kFlagsAt] != 0 || get32(p + kBlockBytesAt) != kBlockBytes || get32(p + kReservedAt) != 0) {
    return Error::bad_header;
  }
  const uint64_t input_bytes = get64(p + kInputBytesAt);
  if (input_bytes > kMaxInputBytes) return Error::bad_header;
  const Word w = static_cast<Word>(word);
  const Geometry g = geometry(input_bytes, w);
  if (size < g.payload_offset + g.tail_bytes) return Error::truncated;
  const uint64_t payload = get64(p + kPayloadBytesAt);
  const uint64_t room = size - g.payload_offset - g.tail_bytes;
  if (payload > room) return Error::truncated;
  if (payload < room) return Error::size_mismatch;
  info->word = w;
  info->input_bytes = input_bytes;
  info->compressed_bytes = encoded_size(g, payload);
  info->blocks = g.blocks;
  return Error::ok;
}

Error decode(std::span<const uint8_t> compressed, std::span<uint8_t> out) {
  Info info;
  if (const Error e = inspect(compressed, &info); e != Error::ok) return e;
  if (out.size() != info.input_bytes) return Error::length_mismatch;
  const Word w = info.word;
  const Geometry g = geometry(info.input_bytes, w);
  const uint32_t wb = word_bytes(w), mb = mask_bytes(w);
  const uint8_t* const p = compressed.data();
  const uint8_t* const table = p + kHeaderBytes;
  const uint8_t* const payload = p + g.payload_offset;
  const uint64_t payload_bytes = get64(p + kPayloadBytesAt);

  // Everything checked first, so that `out` is untouched on error.
  if (get64(table) != 0 || get64(table + 8 * g.blocks) != payload_bytes) return Error::bad_offsets;
  for (uint64_t b = 0; b < g.blocks; ++b) {
    const uint64_t start = get64(table + 8 * b), end = get64(table + 8 * (b + 1));
    if (end < start || end > payload_bytes || start % kAlign != 0 || end % kAlign != 0) {
      return Error::bad_offsets;
    }
    if (end - start < mb) return Error::bad_block;
    const MaskCount c = count_mask(payload + start, mb, words_in_block(g, b, w));
    if (c.bits_past_end || block_size(c.ones, w) != end - start) return Error::bad_block;
  }

  for (uint64_t b = 0; b < g.blocks; ++b) {
    const uint8_t* const mask = payload + get64(table + 8 * b);
    const uint8_t* next = mask + mb;  // the next packed word
    uint8_t* const dst = out.data() + b * kBlockBytes;
    const uint32_t words = words_in_block(g, b, w);
    for (uint32_t i = 0; i < words; ++i) {
      uint8_t* const word = dst + uint64_t{i} * wb;
      if ((mask[i / 8] >> (i % 8)) & 1u) {
        std::memcpy(word, next, wb);
        next += wb;
      } else {
        std::memset(word, 0, wb);
      }
    }
  }
  if (g.tail_bytes > 0) {
    std::memcpy(out.data() + g.words * wb, payload + payload_bytes, g.tail_bytes);
  }
  return Error::ok;
}

}  // namespace umswap::compress::zvc
