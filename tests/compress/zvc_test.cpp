// The CPU reference ZVC codec (compress/zvc.h): the format byte by byte, bit-exact round trips
// for both word sizes (empty, all zeros, no zeros, odd lengths and tails, unaligned input,
// -0.0/NaN/Inf, random data), the raw-fallback rule, and corrupt buffers refused with the right
// error and the output untouched.
#include "umswap/compress/zvc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "zvc_test_data.h"

namespace umswap::compress::zvc {
namespace {

using test_data::kWords;
using test_data::make_input;

uint64_t get64(const std::vector<uint8_t>& v, uint64_t at) {
  uint64_t x;
  std::memcpy(&x, v.data() + at, 8);
  return x;
}
void put64(std::vector<uint8_t>& v, uint64_t at, uint64_t x) {
  std::memcpy(v.data() + at, &x, 8);
}
void put32(std::vector<uint8_t>& v, uint64_t at, uint32_t x) {
  std::memcpy(v.data() + at, &x, 4);
}

// Encodes, checks the size against the format's rules, decodes and compares bit for bit.
void expect_round_trip(std::span<const uint8_t> input, Word w) {
  const std::vector<uint8_t> enc = encode(input, w);
  ASSERT_GE(enc.size(), 48u);
  ASSERT_LE(enc.size(), max_compressed_size(input.size(), w));
  Info info;
  ASSERT_EQ(inspect(enc, &info), Error::ok);
  EXPECT_EQ(info.word, w);
  EXPECT_EQ(info.input_bytes, input.size());
  EXPECT_EQ(info.compressed_bytes, enc.size());
  std::vector<uint8_t> out(input.size(), 0xAB);
  ASSERT_EQ(decode(enc, out), Error::ok) << "length " << input.size();
  EXPECT_TRUE(std::equal(input.begin(), input.end(), out.begin()))
      << "length " << input.size() << " word " << word_bytes(w);
}

TEST(ZvcFormat, GeometryAndBounds) {
  // 0 bytes: header + a 1-entry table, padded to 16.
  EXPECT_EQ(max_compressed_size(0, Word::bits32), 48u);
  // 1 block of fp32, no zeros: 48 + 128 + 4096.
  EXPECT_EQ(max_compressed_size(4096, Word::bits32), 48u + 128 + 4096);
  EXPECT_EQ(max_compressed_size(4096, Word::bits16), 48u + 256 + 4096);
  // 2 blocks: 32 + 24 = 56 -> 64.
  EXPECT_EQ(max_compressed_size(8192, Word::bits32), 64u + 2 * (128 + 4096));
  // A short last block with a tail: 4097 bytes of fp32 = 1024 words + 1 tail byte in one block.
  EXPECT_EQ(max_compressed_size(4097, Word::bits32), 48u + 128 + 4096 + 1);
  // 4100 bytes = 1025 words: a second block of 1 word (mask + 16 bytes).
  EXPECT_EQ(max_compressed_size(4100, Word::bits32), 64u + (128 + 4096) + (128 + 16));
  const Geometry g = geometry(4099, Word::bits16);
  EXPECT_EQ(g.words, 2049u);
  EXPECT_EQ(g.blocks, 2u);
  EXPECT_EQ(g.tail_bytes, 1u);
  EXPECT_EQ(words_in_block(g, 1, Word::bits16), 1u);
}

// The layout of zvc_format.h, byte by byte, on one fp32 block with two non-zero words.
TEST(ZvcFormat, BytesOfOneBlock) {
  std::vector<uint8_t> in(4096 + 3, 0);
  const uint32_t a = 0x11223344, b = 0x80000000;  // b is -0.0f: non-zero bits, kept
  std::memcpy(in.data() + 3 * 4, &a, 4);
  std::memcpy(in.data() + 1000 * 4, &b, 4);
  in[4096] = 7;
  in[4098] = 9;
  const std::vector<uint8_t> enc = encode(in, Word::bits32);
  ASSERT_EQ(enc.size(), 48u + 128 + 16 + 3);
  const uint8_t magic[4] = {'U', 'Z', 'V', 'C'};
  EXPECT_EQ(std::memcmp(enc.data(), magic, 4), 0);
  EXPECT_EQ(enc[4], 1);  // version
  EXPECT_EQ(enc[5], 0);
  EXPECT_EQ(enc[6], 4);                      // word
  EXPECT_EQ(enc[7], 0);                      // flags
  EXPECT_EQ(get64(enc, 8), uint64_t{4096});  // block bytes 4096, reserved 0
  EXPECT_EQ(get64(enc, 16), in.size());
  EXPECT_EQ(get64(enc, 24), 128u + 16);  // payload
  EXPECT_EQ(get64(enc, 32), 0u);         // offsets[0]
  EXPECT_EQ(get64(enc, 40), 128u + 16);  // offsets[1]
  const uint8_t* mask = enc.data() + 48;
  for (int i = 0; i < 128; ++i) {
    const uint8_t want = i == 0 ? 0x08 : i == 125 ? 0x01 : 0;  // words 3 and 1000
    EXPECT_EQ(mask[i], want) << "mask byte " << i;
  }
  uint32_t p0, p1;
  std::memcpy(&p0, enc.data() + 176, 4);
  std::memcpy(&p1, enc.data() + 180, 4);
  EXPECT_EQ(p0, a);
  EXPECT_EQ(p1, b);
  for (int i = 184; i < 192; ++i) EXPECT_EQ(enc[i], 0) << "padding byte " << i;
  EXPECT_EQ(enc[192], 7);  // tail, raw
  EXPECT_EQ(enc[193], 0);
  EXPECT_EQ(enc[194], 9);
}

TEST(ZvcRoundTrip, Empty) {
  for (Word w : kWords) {
    const std::vector<uint8_t> enc = encode({}, w);
    EXPECT_EQ(enc.size(), 48u);
    std::vector<uint8_t> out;
    EXPECT_EQ(decode(enc, out), Error::ok);
  }
}

TEST(ZvcRoundTrip, AllZerosCompressToMasks) {
  for (Word w : kWords) {
    const std::vector<uint8_t> in(1 << 20, 0);
    expect_round_trip(in, w);
    const uint64_t blocks = in.size() / 4096;
    const uint64_t want = align_up(32 + 8 * (blocks + 1), 16) + blocks * mask_bytes(w);
    EXPECT_EQ(encode(in, w).size(), want);  // ratio 32 (fp32) or 16 (2-byte words)
    EXPECT_TRUE(worth_compressing(in.size(), want));
  }
}

TEST(ZvcRoundTrip, NoZerosExpandsAndGoesRaw) {
  std::mt19937_64 rng(1);
  for (Word w : kWords) {
    const std::vector<uint8_t> in = make_input(1 << 18, w, 0.0, rng);
    expect_round_trip(in, w);
    const uint64_t size = encode(in, w).size();
    EXPECT_EQ(size, max_compressed_size(in.size(), w));
    EXPECT_GT(size, in.size());  // expands: the caller sends it raw
    EXPECT_FALSE(worth_compressing(in.size(), size));
    EXPECT_FALSE(worth_compressing(in.size(), size, 1.0));
  }
}

TEST(ZvcRoundTrip, WorthCompressingRule) {
  EXPECT_TRUE(worth_compressing(125, 100));
  EXPECT_FALSE(worth_compressing(124, 100));
  EXPECT_TRUE(worth_compressing(101, 100, 1.0));
  EXPECT_FALSE(worth_compressing(0, 48));
  std::mt19937_64 rng(2);
  // Half zeros: fp32 ~ 1/(0.5 + 1/32), worth it; 10% zeros are not.
  const std::vector<uint8_t> half = make_input(1 << 18, Word::bits32, 0.5, rng);
  EXPECT_TRUE(worth_compressing(half.size(), encode(half, Word::bits32).size()));
  const std::vector<uint8_t> few = make_input(1 << 18, Word::bits32, 0.1, rng);
  EXPECT_FALSE(worth_compressing(few.size(), encode(few, Word::bits32).size()));
}

TEST(ZvcRoundTrip, OddLengthsAndTails) {
  std::mt19937_64 rng(3);
  for (Word w : kWords) {
    for (uint64_t n : {1u, 2u, 3u, 4u, 5u, 7u, 15u, 16u, 17u, 4095u, 4096u, 4097u, 4098u, 4099u,
                       4100u, 8191u, 8193u, 3 * 4096u + 7, 5 * 4096u + 2}) {
      for (double z : {0.0, 0.5, 1.0}) {
        SCOPED_TRACE(testing::Message() << "n " << n << " zeros " << z);
        expect_round_trip(make_input(n, w, z, rng), w);
      }
    }
  }
}

TEST(ZvcRoundTrip, UnalignedInput) {
  std::mt19937_64 rng(4);
  for (Word w : kWords) {
    const std::vector<uint8_t> backing = make_input(3 * 4096 + 11, w, 0.5, rng);
    for (uint64_t skip : {1u, 2u, 3u, 5u}) {
      const std::span<const uint8_t> in(backing.data() + skip, backing.size() - skip);
      expect_round_trip(in, w);
    }
  }
}

TEST(ZvcRoundTrip, SpecialValuesKeptBitForBit) {
  const std::vector<uint8_t> in32 = test_data::special_values(Word::bits32, 300);
  const std::vector<uint8_t> in16 = test_data::special_values(Word::bits16, 300);
  expect_round_trip(in32, Word::bits32);
  expect_round_trip(in16, Word::bits16);
  // A 2-byte word's -0.0 inside a 4-byte word that is otherwise zero: non-zero either way.
  expect_round_trip(in16, Word::bits32);
  expect_round_trip(in32, Word::bits16);
}

TEST(ZvcRoundTrip, RandomBytesBothWordSizes) {
  std::mt19937_64 rng(5);
  std::vector<uint8_t> in(100003);
  for (auto& b : in) b = static_cast<uint8_t>(rng() % 3 == 0 ? 0 : rng());
  for (Word w : kWords) expect_round_trip(in, w);
}

TEST(ZvcRoundTrip, DeterministicAndCallerBuffer) {
  std::mt19937_64 rng(6);
  const std::vector<uint8_t> in = make_input(10000, Word::bits32, 0.7, rng);
  const std::vector<uint8_t> a = encode(in, Word::bits32);
  // Into a dirty caller buffer: the same bytes (padding written, not left over).
  std::vector<uint8_t> buf(max_compressed_size(in.size(), Word::bits32), 0xCD);
  const uint64_t n = encode(in, Word::bits32, buf);
  ASSERT_EQ(n, a.size());
  EXPECT_TRUE(std::equal(a.begin(), a.end(), buf.begin()));
  // Too small a buffer: 0, nothing written.
  std::vector<uint8_t> small(buf.size() - 1, 0xCD);
  EXPECT_EQ(encode(in, Word::bits32, small), 0u);
  for (uint8_t b : small) ASSERT_EQ(b, 0xCD);
}

// --- corrupt buffers ----------------------------------------------------------------------------

class ZvcCorrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(7);
    input_ = make_input(3 * 4096 + 4 * 10 + 2, Word::bits32, 0.5, rng);  // 4 blocks, 2-byte tail
    input_[3 * 4096] = 1;  // the last block's word 0 is not zero (MasksDisagreeWithSizes)
    good_ = encode(input_, Word::bits32);
  }
  // Decodes `bad` into an output of the input's size (or `out_bytes`), checks the output is
  // untouched, returns the error.
  Error decode_bad(const std::vector<uint8_t>& bad, uint64_t out_bytes = UINT64_MAX) {
    std::vector<uint8_t> out(out_bytes == UINT64_MAX ? input_.size() : out_bytes, 0xAB);
    const Error e = decode(bad, out);
    if (e != Error::ok) {
      EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0xAB; }))
          << "output written on error";
    }
    return e;
  }
  uint64_t payload_offset() const { return geometry(input_.size(), Word::bits32).payload_offset; }
  std::vector<uint8_t> input_, good_;
};

TEST_F(ZvcCorrupt, GoodBufferDecodes) {
  EXPECT_EQ(decode_bad(good_), Error::ok);
}

TEST_F(ZvcCorrupt, EveryTruncationRefused) {
  for (uint64_t n = 0; n < good_.size(); ++n) {
    std::vector<uint8_t> bad(good_.begin(), good_.begin() + static_cast<std::ptrdiff_t>(n));
    const Error e = decode_bad(bad);
    ASSERT_EQ(e, Error::truncated) << "prefix of " << n << " bytes";
  }
}

TEST_F(ZvcCorrupt, TrailingBytesRefused) {
  std::vector<uint8_t> bad = good_;
  bad.push_back(0);
  EXPECT_EQ(decode_bad(bad), Error::size_mismatch);
}

TEST_F(ZvcCorrupt, HeaderFields) {
  std::vector<uint8_t> bad = good_;
  bad[0] ^= 1;
  EXPECT_EQ(decode_bad(bad), Error::bad_magic);
  bad = good_;
  bad[4] = 2;
  EXPECT_EQ(decode_bad(bad), Error::bad_version);
  for (uint8_t word : {0, 1, 3, 8}) {
    bad = good_;
    bad[6] = word;
    EXPECT_EQ(decode_bad(bad), Error::bad_word);
  }
  bad = good_;
  bad[7] = 1;
  EXPECT_EQ(decode_bad(bad), Error::bad_header);
  bad = good_;
  put32(bad, 8, 8192);
  EXPECT_EQ(decode_bad(bad), Error::bad_header);
  bad = good_;
  put32(bad, 12, 1);
  EXPECT_EQ(decode_bad(bad), Error::bad_header);
  bad = good_;
  put64(bad, 16, ~uint64_t{0});
  EXPECT_EQ(decode_bad(bad), Error::bad_header);
}

TEST_F(ZvcCorrupt, SizesInconsistent) {
  std::vector<uint8_t> bad = good_;
  // The header's input length one word longer: its own geometry no longer matches the buffer.
  put64(bad, 16, input_.size() + 4);
  EXPECT_NE(decode_bad(bad), Error::ok);
  // One tail byte fewer: the buffer is a byte too long for it.
  bad = good_;
  put64(bad, 16, input_.size() - 1);
  EXPECT_EQ(decode_bad(bad, input_.size() - 1), Error::size_mismatch);
  // Payload claimed larger / smaller than what is there.
  bad = good_;
  put64(bad, 24, get64(good_, 24) + 16);
  EXPECT_EQ(decode_bad(bad), Error::truncated);
  bad = good_;
  put64(bad, 24, get64(good_, 24) - 16);
  EXPECT_EQ(decode_bad(bad), Error::size_mismatch);
  // The output is not the input's size.
  EXPECT_EQ(decode_bad(good_, input_.size() - 1), Error::length_mismatch);
  EXPECT_EQ(decode_bad(good_, input_.size() + 1), Error::length_mismatch);
  EXPECT_EQ(decode_bad(good_, 0), Error::length_mismatch);
}

TEST_F(ZvcCorrupt, OffsetsTable) {
  const uint64_t blocks = 4, table = 32;
  std::vector<uint8_t> bad = good_;
  put64(bad, table, 16);  // offsets[0] != 0
  EXPECT_EQ(decode_bad(bad), Error::bad_offsets);
  bad = good_;
  put64(bad, table + 8 * blocks, get64(good_, 24) + 1u);  // last entry past the payload
  EXPECT_EQ(decode_bad(bad), Error::bad_offsets);
  bad = good_;
  put64(bad, table + 8 * 2, uint64_t{1} << 40);  // a block claiming more than the buffer
  EXPECT_EQ(decode_bad(bad), Error::bad_offsets);
  bad = good_;
  put64(bad, table + 8 * 2, get64(good_, table + 8) - 16);  // going backwards
  EXPECT_EQ(decode_bad(bad), Error::bad_offsets);
  bad = good_;
  put64(bad, table + 8 * 2, get64(good_, table + 8 * 2) + 4);  // misaligned
  EXPECT_EQ(decode_bad(bad), Error::bad_offsets);
  bad = good_;
  put64(bad, table + 8 * 2, get64(good_, table + 8 * 2) + 16);  // aligned, sizes now wrong
  EXPECT_EQ(decode_bad(bad), Error::bad_block);
  bad = good_;
  put64(bad, table + 8 * 2, get64(good_, table + 8) + 16);  // block 1 shorter than a mask
  EXPECT_EQ(decode_bad(bad), Error::bad_block);
}

TEST_F(ZvcCorrupt, MasksDisagreeWithSizes) {
  // Block 1 gets 5 to 8 more mask bits: 4 or more words more always change its padded size.
  std::vector<uint8_t> bad = good_;
  const uint64_t block1 = payload_offset() + get64(good_, 40);
  uint64_t at = block1;
  while (at < block1 + 128 && std::popcount(unsigned{bad[at]}) > 3) ++at;
  ASSERT_LT(at, block1 + 128);
  bad[at] = 0xFF;
  EXPECT_EQ(decode_bad(bad), Error::bad_block);
  // The last block holds 10 words: a bit for word 10 or past it is refused even when sizes
  // still agree (clear word 0's bit, set word 100's).
  bad = good_;
  const uint64_t last = payload_offset() + get64(good_, 32 + 8 * 3);
  ASSERT_NE(bad[last] & 1, 0);
  bad[last] &= 0xFE;
  bad[last + 100 / 8] |= 1 << (100 % 8);
  EXPECT_EQ(decode_bad(bad), Error::bad_block);
}

// Random single-byte and multi-byte corruptions: never a crash or an access outside the buffers
// (the asan preset checks that); anything decode() accepts decodes to the right size.
TEST_F(ZvcCorrupt, RandomMutationsNeverCrash) {
  std::mt19937_64 rng(8);
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> bad = good_;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f)
      bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    if (rng() % 8 == 0) bad.resize(rng() % bad.size());
    std::vector<uint8_t> out(input_.size());
    (void)decode(bad, out);
    Info info;
    (void)inspect(bad, &info);
  }
}

// --- fuzz-style round trips ---------------------------------------------------------------------

TEST(ZvcRandomized, ManyLengthsAndZeroFractions) {
  std::mt19937_64 rng(9);
  for (int i = 0; i < 400; ++i) {
    const Word w = kWords[i % 2];
    const uint64_t n = rng() % (i % 10 == 0 ? 70000 : 9000);
    const double z = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    SCOPED_TRACE(testing::Message() << "case " << i << " n " << n << " zeros " << z);
    expect_round_trip(make_input(n, w, z, rng), w);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace umswap::compress::zvc
