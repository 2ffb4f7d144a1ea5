// The trace file: round trips, the versioning rule, and every check the reader makes before it
// trusts a byte (docs/trace-format.md).
#include "umswap/core/trace_file.h"

#include "synthetic_trace.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

// --- Largest single allocation, to check that bad counts are refused before reserving memory ----

namespace {
std::atomic<bool> g_track_allocations{false};
std::atomic<size_t> g_largest_allocation{0};
}  // namespace

void* operator new(size_t size) {
  if (g_track_allocations.load(std::memory_order_relaxed)) {
    size_t seen = g_largest_allocation.load(std::memory_order_relaxed);
    while (size > seen && !g_largest_allocation.compare_exchange_weak(seen, size)) {
    }
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// GCC cannot see that these pair with the operator new above.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace umswap {
namespace {

namespace fs = std::filesystem;
using trace::Trace;
using Bytes = std::vector<uint8_t>;

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// --- Field offsets of version 1 (docs/trace-format.md)
// --------------------------------------------

constexpr size_t kHeaderSize = 40;
constexpr size_t kEntrySize = 24;
enum Kind : uint32_t {
  kStrings = 1,
  kNames,
  kBuffers,
  kSteps,
  kAccesses,
  kIterations,
  kFaults,
  kDetection,
  kProgram,
  kTotals,
  kLifetimes,  // optional: absent when the trace has no lifetimes
  kTransfers   // optional: absent when the trace has no transfers
};

uint64_t get(const Bytes& b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{b[at + i]} << (8 * i);
  return v;
}
void put(Bytes& b, size_t at, size_t n, uint64_t v) {
  for (size_t i = 0; i < n; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
// Whether an encoding from encode_trace() has a section of `kind`.
bool has_section(const Bytes& b, uint32_t kind) {
  const size_t count = get(b, 32, 4);
  for (size_t e = 0; e < count; ++e) {
    if (get(b, kHeaderSize + e * kEntrySize, 4) == kind) return true;
  }
  return false;
}
// Offset of the section table entry of `kind` in an encoding from encode_trace().
size_t entry_of(const Bytes& b, uint32_t kind) {
  const size_t count = get(b, 32, 4);
  for (size_t e = 0; e < count; ++e) {
    if (get(b, kHeaderSize + e * kEntrySize, 4) == kind) return kHeaderSize + e * kEntrySize;
  }
  ADD_FAILURE() << "no section of kind " << kind;
  return 0;
}
// Offset in the file of field `field_offset` of record `index` of section `kind`.
size_t record_field(const Bytes& b, uint32_t kind, uint64_t index, size_t field_offset) {
  const size_t entry = entry_of(b, kind);
  return get(b, entry + 16, 8) + index * get(b, entry + 4, 4) + field_offset;
}

// A file taken apart into header and sections, to be put together again differently: the test's
// own small writer, so the reader's tolerance of later writers can be checked.
struct RawSection {
  uint32_t kind = 0;
  uint32_t record_size = 0;
  uint64_t count = 0;
  Bytes body;
};
struct RawFile {
  Bytes header;  // at least kHeaderSize bytes
  std::vector<RawSection> sections;

  static RawFile split(const Bytes& b) {
    RawFile f;
    f.header.assign(b.begin(), b.begin() + kHeaderSize);
    for (size_t e = 0; e < get(b, 32, 4); ++e) {
      const size_t at = kHeaderSize + e * kEntrySize;
      RawSection s{static_cast<uint32_t>(get(b, at, 4)),
                   static_cast<uint32_t>(get(b, at + 4, 4)),
                   get(b, at + 8, 8),
                   {}};
      const size_t offset = get(b, at + 16, 8);
      s.body.assign(b.begin() + offset, b.begin() + offset + s.count * s.record_size);
      f.sections.push_back(std::move(s));
    }
    return f;
  }
  RawSection& section(uint32_t kind) {
    for (RawSection& s : sections) {
      if (s.kind == kind) return s;
    }
    throw std::runtime_error("no such section");
  }
  void remove(uint32_t kind) {
    std::erase_if(sections, [kind](const RawSection& s) { return s.kind == kind; });
  }
  Bytes join() const {
    Bytes b = header;
    put(b, 12, 4, header.size());
    put(b, 32, 4, sections.size());
    put(b, 36, 4, kEntrySize);
    uint64_t offset = header.size() + sections.size() * kEntrySize;
    for (const RawSection& s : sections) {
      Bytes entry(kEntrySize);
      put(entry, 0, 4, s.kind);
      put(entry, 4, 4, s.record_size);
      put(entry, 8, 8, s.count);
      put(entry, 16, 8, offset);
      b.insert(b.end(), entry.begin(), entry.end());
      offset += s.body.size();
    }
    for (const RawSection& s : sections) b.insert(b.end(), s.body.begin(), s.body.end());
    detail::reseal_trace_bytes(b);
    return b;
  }
};

// Parses `bytes` and expects a rejection whose message contains `part`.
void expect_rejected(const Bytes& bytes, std::string_view part) {
  std::string error;
  const auto trace = parse_trace(bytes, &error);
  EXPECT_FALSE(trace.has_value()) << "expected: " << part;
  EXPECT_TRUE(contains(error, part)) << "message: " << error << "\nexpected: " << part;
}

// Encodes `trace` as it is (the writer would refuse it), resealed, and expects a rejection.
void expect_inconsistent(const Trace& trace, std::string_view part) {
  expect_rejected(encode_trace(trace), std::string("corrupt: ") + std::string(part));
  EXPECT_TRUE(check_trace(trace).has_value());
}

class TraceFileTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "umswap_trace_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_bytes(const std::string& name, const Bytes& bytes) const {
    std::ofstream(path(name), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

// --- Round trips --------------------------------------------------------------------------------

TEST_F(TraceFileTest, EveryFieldSurvivesARoundTripThroughAFile) {
  const Trace original = test::full_trace();
  ASSERT_EQ(check_trace(original), std::nullopt);
  std::string error;
  ASSERT_TRUE(write_trace_file(path("run.umtrace"), original, &error)) << error;
  const auto read = read_trace_file(path("run.umtrace"), &error);
  ASSERT_TRUE(read.has_value()) << error;
  EXPECT_TRUE(*read == original);
  // Field by field, for a readable failure.
  EXPECT_EQ(read->program, original.program);
  EXPECT_EQ(read->pid, original.pid);
  EXPECT_EQ(read->dropped_records, original.dropped_records);
  EXPECT_EQ(read->detection.source, original.detection.source);
  EXPECT_EQ(read->detection.confidence, original.detection.confidence);
  EXPECT_EQ(read->names, original.names);
  ASSERT_EQ(read->buffers.size(), original.buffers.size());
  for (size_t i = 0; i < original.buffers.size(); ++i) {
    EXPECT_TRUE(read->buffers[i] == original.buffers[i]) << "buffer " << i;
  }
  ASSERT_EQ(read->steps.size(), original.steps.size());
  for (size_t i = 0; i < original.steps.size(); ++i) {
    EXPECT_TRUE(read->steps[i] == original.steps[i]) << "step " << i;
  }
  EXPECT_TRUE(read->accesses == original.accesses);
  EXPECT_TRUE(read->iterations == original.iterations);
  EXPECT_TRUE(read->faults == original.faults);
  EXPECT_TRUE(read->lifetimes == original.lifetimes);
  EXPECT_TRUE(read->totals == original.totals);
  EXPECT_EQ(entries(), std::vector<std::string>{"run.umtrace"});  // no temporary file left
}

TEST(TraceFile, EncodingIsDeterministicAndStable) {
  const Bytes a = encode_trace(test::full_trace());
  EXPECT_EQ(a, encode_trace(test::full_trace()));
  std::string error;
  const auto parsed = parse_trace(a, &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_EQ(encode_trace(*parsed), a);
}

TEST(TraceFile, EmptyTraceRoundTrips) {
  const Bytes bytes = encode_trace(Trace{});
  // Header, ten table entries, and the three one-record sections: program, detection, totals.
  EXPECT_EQ(bytes.size(), kHeaderSize + 10 * kEntrySize + 32 + 40 + 40);
  std::string error;
  const auto parsed = parse_trace(bytes, &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_TRUE(*parsed == Trace{});
}

TEST(TraceFile, HeaderLayout) {
  const Bytes b = encode_trace(test::full_trace());
  EXPECT_EQ(std::string(b.begin(), b.begin() + 8), std::string("UMSWTRC\0", 8));
  EXPECT_EQ(get(b, 8, 4), kTraceFormatVersion);
  EXPECT_EQ(get(b, 12, 4), kHeaderSize);
  EXPECT_EQ(get(b, 16, 4), 0u);                         // flags
  EXPECT_EQ(get(b, 20, 4), detail::trace_checksum(b));  // CRC-32
  EXPECT_EQ(get(b, 24, 8), b.size());                   // file size
  EXPECT_EQ(get(b, 32, 4), 11u);                        // sections, lifetimes included
  EXPECT_EQ(get(b, 36, 4), kEntrySize);
  EXPECT_EQ(get(b, entry_of(b, kSteps) + 4, 4), 41u);  // step record size
  EXPECT_EQ(get(b, entry_of(b, kSteps) + 8, 8), test::full_trace().steps.size());
}

TEST(TraceFile, LifetimeRecordLayout) {
  const Trace t = test::full_trace();
  const Bytes b = encode_trace(t);
  ASSERT_TRUE(has_section(b, kLifetimes));
  EXPECT_EQ(get(b, entry_of(b, kLifetimes) + 4, 4), 29u);  // record size
  EXPECT_EQ(get(b, entry_of(b, kLifetimes) + 8, 8), t.lifetimes.size());
  const trace::Lifetime& l = t.lifetimes[3];
  EXPECT_EQ(get(b, record_field(b, kLifetimes, 3, 0), 8), l.before_step);
  EXPECT_EQ(get(b, record_field(b, kLifetimes, 3, 8), 4), l.buffer);
  EXPECT_EQ(get(b, record_field(b, kLifetimes, 3, 12), 8), l.offset);
  EXPECT_EQ(get(b, record_field(b, kLifetimes, 3, 20), 8), l.length);
  EXPECT_EQ(get(b, record_field(b, kLifetimes, 3, 28), 1), 1u);  // freed
  EXPECT_EQ(get(b, record_field(b, kLifetimes, 1, 28), 1), 0u);
}

Trace with_transfers() {
  Trace t = test::full_trace();
  t.transfers = {
      {.start_ns = 100,
       .end_ns = 150,
       .address = 0x7f1200000000,
       .bytes = 1 << 20,
       .to_gpu = false,
       .kind = trace::Transfer::copy},
      {.start_ns = 160,
       .end_ns = 160,
       .address = 0x7f1200200000,
       .bytes = 65536,
       .to_gpu = true,
       .kind = trace::Transfer::prefetch_call},
      {.start_ns = 170,
       .end_ns = 190,
       .address = 0x10,
       .bytes = 4096,
       .to_gpu = true,
       .kind = trace::Transfer::driver},
  };
  return t;
}

TEST(TraceFile, TransfersRoundTripWithTheirLayout) {
  const Trace t = with_transfers();
  const Bytes b = encode_trace(t);
  EXPECT_EQ(get(b, 32, 4), 12u);  // sections: lifetimes and transfers included
  ASSERT_TRUE(has_section(b, kTransfers));
  EXPECT_EQ(get(b, entry_of(b, kTransfers) + 4, 4), 34u);  // record size
  EXPECT_EQ(get(b, entry_of(b, kTransfers) + 8, 8), 3u);
  const trace::Transfer& x = t.transfers[1];
  EXPECT_EQ(get(b, record_field(b, kTransfers, 1, 0), 8), x.start_ns);
  EXPECT_EQ(get(b, record_field(b, kTransfers, 1, 8), 8), x.end_ns);
  EXPECT_EQ(get(b, record_field(b, kTransfers, 1, 16), 8), x.address);
  EXPECT_EQ(get(b, record_field(b, kTransfers, 1, 24), 8), x.bytes);
  EXPECT_EQ(get(b, record_field(b, kTransfers, 1, 32), 1), 1u);  // to the GPU
  EXPECT_EQ(get(b, record_field(b, kTransfers, 1, 33), 1), 1u);  // a prefetch call's
  EXPECT_EQ(get(b, record_field(b, kTransfers, 0, 32), 1), 0u);
  std::string error;
  const auto parsed = parse_trace(b, &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_TRUE(*parsed == t);
  // Without transfers: the bytes of a trace written before them.
  RawFile f = RawFile::split(b);
  f.remove(kTransfers);
  EXPECT_EQ(f.join(), encode_trace(test::full_trace()));
}

TEST(TraceFile, BadTransfersAreRejected) {
  {
    Trace t = with_transfers();
    t.transfers[2].end_ns = 169;
    expect_inconsistent(t, "transfer 2 ends at 169 ns, before it starts at 170 ns");
  }
  {
    Trace t = with_transfers();
    t.transfers[0].kind = 3;
    expect_inconsistent(t, "transfer 0 has kind 3 (expected 0 to 2)");
  }
  Bytes b = encode_trace(with_transfers());
  put(b, record_field(b, kTransfers, 2, 32), 1, 2);  // 'to_gpu'
  detail::reseal_trace_bytes(b);
  expect_rejected(b, "corrupt: transfer 2 has 'to_gpu' 2 (expected 0 or 1)");
}

TEST(TraceFile, ChecksumIsZlibsCrc32) {
  const std::string text = "123456789";  // shorter than a header: the whole text is summed
  EXPECT_EQ(
      detail::trace_checksum(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size())),
      0xCBF43926u);
}

// --- Versioning: what a later writer may add ----------------------------------------------------

TEST(TraceFile, UnknownSectionsAreSkipped) {
  RawFile f = RawFile::split(encode_trace(test::full_trace()));
  f.sections.insert(f.sections.begin() + 2, RawSection{999, 3, 5, Bytes(15, 0xab)});
  f.sections.push_back(RawSection{1000, 0, 1ULL << 60, {}});  // zero-byte records: nothing there
  std::string error;
  const auto parsed = parse_trace(f.join(), &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_TRUE(*parsed == test::full_trace());
}

TEST(TraceFile, LongerRecordsAndHeaderAreRead) {
  // A later writer appends fields to records and to the header; this reader skips them.
  RawFile f = RawFile::split(encode_trace(test::full_trace()));
  f.header.resize(kHeaderSize + 16, 0x77);
  for (RawSection& s : f.sections) {
    if (s.kind == kStrings) continue;
    Bytes longer;
    for (uint64_t r = 0; r < s.count; ++r) {
      longer.insert(longer.end(), s.body.begin() + r * s.record_size,
                    s.body.begin() + (r + 1) * s.record_size);
      longer.insert(longer.end(), 8, 0xee);
    }
    s.body = std::move(longer);
    s.record_size += 8;
  }
  std::string error;
  const auto parsed = parse_trace(f.join(), &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_TRUE(*parsed == test::full_trace());
}

// Lifetimes came within version 1: files before them have no such section, and readers before them
// do not know its kind.

TEST(TraceFile, ATraceWithoutLifetimesIsWrittenAsBeforeThem) {
  Trace t = test::full_trace();
  t.lifetimes.clear();
  const Bytes b = encode_trace(t);
  // The ten sections of the first version 1 files and nothing else: the bytes an older writer
  // wrote, which an older reader reads.
  EXPECT_EQ(get(b, 32, 4), 10u);
  EXPECT_FALSE(has_section(b, kLifetimes));
  for (uint32_t kind = kStrings; kind <= kTotals; ++kind) EXPECT_TRUE(has_section(b, kind)) << kind;
  // The same bytes as the file with lifetimes, their section taken out.
  RawFile f = RawFile::split(encode_trace(test::full_trace()));
  f.remove(kLifetimes);
  EXPECT_EQ(f.join(), b);
  std::string error;
  const auto parsed = parse_trace(b, &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_TRUE(*parsed == t);
  EXPECT_TRUE(parsed->lifetimes.empty());
}

TEST(TraceFile, AFileWithAnEmptyLifetimesSectionReads) {
  // Another writer may write the section with no records.
  Trace t = test::full_trace();
  t.lifetimes.clear();
  RawFile f = RawFile::split(encode_trace(t));
  f.sections.push_back(RawSection{kLifetimes, 29, 0, {}});
  std::string error;
  const auto parsed = parse_trace(f.join(), &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_TRUE(*parsed == t);
}

TEST(TraceFile, AReaderThatDoesNotKnowLifetimesReadsTheRest) {
  // What a reader without kind 11 sees: a section of a kind it does not know, skipped.
  RawFile f = RawFile::split(encode_trace(test::full_trace()));
  f.section(kLifetimes).kind = 1011;
  std::string error;
  const auto parsed = parse_trace(f.join(), &error);
  ASSERT_TRUE(parsed) << error;
  Trace expected = test::full_trace();
  expected.lifetimes.clear();
  EXPECT_TRUE(*parsed == expected);
}

TEST(TraceFile, OptionalFlagBitsAreIgnoredRequiredOnesRefused) {
  Bytes b = encode_trace(test::full_trace());
  put(b, 16, 4, 0x00010000);
  detail::reseal_trace_bytes(b);
  std::string error;
  EXPECT_TRUE(parse_trace(b, &error)) << error;
  put(b, 16, 4, 0x00000004);
  detail::reseal_trace_bytes(b);
  expect_rejected(b, "uses features this umswap does not know (flags 0x0004)");
}

// --- Files a user might hand us
// -------------------------------------------------------------------

TEST_F(TraceFileTest, EmptyFile) {
  write_bytes("empty.umtrace", {});
  std::string error;
  EXPECT_FALSE(read_trace_file(path("empty.umtrace"), &error));
  EXPECT_EQ(error, path("empty.umtrace") + ": empty file (0 bytes): not a umswap trace");
}

TEST_F(TraceFileTest, MissingFileAndDirectory) {
  std::string error;
  EXPECT_FALSE(read_trace_file(path("nope.umtrace"), &error));
  EXPECT_EQ(error, path("nope.umtrace") + ": cannot open: No such file or directory");
  EXPECT_FALSE(read_trace_file(dir_.string(), &error));
  EXPECT_EQ(error, dir_.string() + ": cannot read: Is a directory");
}

TEST_F(TraceFileTest, TruncatedFileNamesFileAndSizes) {
  const Bytes full = encode_trace(test::full_trace());
  write_bytes("cut.umtrace", Bytes(full.begin(), full.begin() + 1000));
  std::string error;
  EXPECT_FALSE(read_trace_file(path("cut.umtrace"), &error));
  EXPECT_EQ(error, fmt::format("{}: truncated: the file has 1000 of the {} bytes its header gives",
                               path("cut.umtrace"), full.size()));
}

TEST(TraceFile, EveryPrefixIsRejected) {
  const Bytes full = encode_trace(test::full_trace());
  ASSERT_GT(full.size(), 500u);
  for (size_t n = 0; n < full.size(); ++n) {
    std::string error;
    EXPECT_FALSE(parse_trace(std::span(full.data(), n), &error)) << n;
    EXPECT_TRUE(n == 0 ? contains(error, "empty file") : error.rfind("truncated: ", 0) == 0)
        << n << ": " << error;
  }
  // Also when the size field is made to agree, so the sections' own bounds are what catch it.
  for (size_t n = kHeaderSize; n < full.size(); ++n) {
    Bytes cut(full.begin(), full.begin() + n);
    detail::reseal_trace_bytes(cut);
    std::string error;
    EXPECT_FALSE(parse_trace(cut, &error)) << n;
    EXPECT_FALSE(error.empty()) << n;
  }
}

TEST(TraceFile, WrongMagic) {
  Bytes b = encode_trace(test::full_trace());
  b[3] = 'X';
  expect_rejected(b, "not a umswap trace (it does not start with the magic number \"UMSWTRC\")");
  const std::string json = "{\"umswap_stats_version\": 1}";
  expect_rejected(Bytes(json.begin(), json.end()), "like a JSON file");
  expect_rejected(Bytes{'U', 'M', 'S'},
                  "truncated: the header needs 40 bytes but the file ends at 3");
}

TEST(TraceFile, WrongVersion) {
  Bytes b = encode_trace(test::full_trace());
  put(b, 8, 4, 2);
  detail::reseal_trace_bytes(b);
  expect_rejected(b,
                  "version 2 is not supported (this umswap reads version 1); it was written by "
                  "a newer umswap");
  put(b, 8, 4, 0);
  expect_rejected(b, "version 0 is not supported (this umswap reads version 1)");
}

TEST(TraceFile, HeaderSizeMismatch) {
  Bytes b = encode_trace(test::full_trace());
  put(b, 12, 4, 16);
  detail::reseal_trace_bytes(b);
  expect_rejected(b,
                  "corrupt: the header size is 16 bytes, less than the 40 bytes of a version 1 "
                  "header");
  put(b, 12, 4, b.size() + 1);
  detail::reseal_trace_bytes(b);
  expect_rejected(
      b, "the header size is " + std::to_string(b.size() + 1) + " bytes but the file has only");
  put(b, 12, 4, 48);  // the table is then read from the wrong place
  detail::reseal_trace_bytes(b);
  expect_rejected(b, "corrupt: ");
}

TEST(TraceFile, ChecksumSizeAndTrailingData) {
  Bytes b = encode_trace(test::full_trace());
  b[b.size() - 3] ^= 0x10;
  expect_rejected(b, "damaged: checksum mismatch");
  Bytes longer = encode_trace(test::full_trace());
  longer.push_back(0);
  expect_rejected(longer, "1 more than its header gives");
}

TEST(TraceFile, SectionTableChecks) {
  const Bytes good = encode_trace(test::full_trace());
  auto patched = [&](uint32_t kind, size_t field, size_t n, uint64_t value) {
    Bytes b = good;
    put(b, entry_of(b, kind) + field, n, value);
    detail::reseal_trace_bytes(b);
    return b;
  };
  const uint64_t steps_length = 41 * test::full_trace().steps.size();
  expect_rejected(patched(kSteps, 16, 8, good.size() + 100),
                  fmt::format("corrupt: section 'steps' needs {} bytes at offset {} but the file "
                              "ends at {}",
                              steps_length, good.size() + 100, good.size()));
  expect_rejected(patched(kSteps, 16, 8, 8),
                  "section 'steps' starts at offset 8, inside the header");
  expect_rejected(patched(kSteps, 4, 4, 40),
                  "section 'steps' has 40-byte records, but version 1 "
                  "records are at least 41 bytes");
  expect_rejected(patched(kStrings, 4, 4, 2), "section 'strings' has 2-byte records");
  expect_rejected(patched(kSteps, 0, 4, kAccesses), "section 'accesses' appears twice");
  expect_rejected(patched(kFaults, 0, 4, 77), "section 'faults' is missing");
  expect_rejected(patched(kTotals, 8, 8, 2), "section 'totals' has 2 records (expected 1)");
  expect_rejected(patched(kLifetimes, 4, 4, 28),
                  "section 'lifetimes' has 28-byte records, but version 1 records are at least 29 "
                  "bytes");
  expect_rejected(patched(kLifetimes, 8, 8, 5),
                  fmt::format("corrupt: section 'lifetimes' needs 145 bytes at offset {} but the "
                              "file ends at {}",
                              get(good, entry_of(good, kLifetimes) + 16, 8), good.size()));
  expect_rejected(patched(kAccesses, 16, 8, get(good, entry_of(good, kSteps) + 16, 8) + 1),
                  "overlap");
  expect_rejected(patched(kSteps, 8, 8, UINT64_MAX / 8),
                  "section 'steps' claims 2305843009213693951 records of 41 bytes, more than any "
                  "file can hold");
  RawFile twice = RawFile::split(good);
  twice.sections.push_back(twice.section(kLifetimes));
  expect_rejected(twice.join(), "section 'lifetimes' appears twice");
  Bytes b = good;
  put(b, 36, 4, 16);
  detail::reseal_trace_bytes(b);
  expect_rejected(b, "section table entries are 16 bytes, less than the 24 of version 1");
  put(b, 36, 4, 24);
  put(b, 32, 4, 1000);
  detail::reseal_trace_bytes(b);
  expect_rejected(b, "the section table needs 24000 bytes at offset 40 but the file ends at");
}

TEST(TraceFile, HugeCountFailsFastWithoutAllocating) {
  // A 1 KiB-ish file whose steps section claims 2^40 records.
  Trace small;
  small.names = {"k"};
  small.steps.resize(3);
  small.buffers = {{.size = 4096}};
  small.lifetimes = {{.before_step = 1, .buffer = 0, .length = 64}};
  Bytes b = encode_trace(small);
  ASSERT_LT(b.size(), 1024u);
  for (uint32_t kind : {kSteps, kNames, kAccesses, kStrings, kLifetimes}) {
    Bytes huge = b;
    put(huge, entry_of(huge, kind) + 8, 8, 1ULL << 40);
    detail::reseal_trace_bytes(huge);
    std::string error;
    g_largest_allocation = 0;
    g_track_allocations = true;
    const auto start = std::chrono::steady_clock::now();
    const auto parsed = parse_trace(huge, &error);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    g_track_allocations = false;
    EXPECT_FALSE(parsed) << kind;
    EXPECT_TRUE(contains(error, "bytes at offset")) << error;
    EXPECT_LT(g_largest_allocation.load(), 4096u) << kind;
    EXPECT_LT(elapsed, std::chrono::milliseconds(50)) << kind;
  }
}

TEST(TraceFile, AcceptedFilesAllocateInProportionToTheirSize) {
  // Many names pointing at one long string would multiply the text; the reader refuses.
  Trace t;
  t.names.assign(100, std::string(10000, 'n'));
  Bytes b = encode_trace(t);
  RawFile f = RawFile::split(b);
  RawSection& names = f.section(kNames);
  for (uint64_t r = 0; r < names.count; ++r) put(names.body, r * 16, 8, 0);  // all at offset 0
  RawSection& strings = f.section(kStrings);
  strings.body.resize(20000);  // only two names' worth of text
  strings.count = strings.body.size();
  expect_rejected(f.join(), "the strings refer to more text than the string table's 20000 bytes");
  // One name outside the table.
  Bytes outside = encode_trace(test::full_trace());
  put(outside, record_field(outside, kNames, 1, 0), 8, 1ULL << 50);
  detail::reseal_trace_bytes(outside);
  expect_rejected(outside, "name 1 is 14 bytes at offset 1125899906842624 of the string table");
}

// --- Consistency
// ----------------------------------------------------------------------------------

TEST(TraceFile, InconsistentIndicesAreRejected) {
  {
    Trace t = test::full_trace();
    t.steps[2].name = 5;
    expect_inconsistent(t, "step 2 names name 5, but the trace has 5 names");
  }
  {
    Trace t = test::full_trace();
    t.steps[4].access_count = 3;
    expect_inconsistent(t, "step 4 uses 3 accesses from access 4, but the trace has 6 accesses");
  }
  {
    Trace t = test::full_trace();
    t.steps[4].first_access = UINT64_MAX;
    expect_inconsistent(t, "step 4 uses 2 accesses from access 18446744073709551615");
  }
  {
    Trace t = test::full_trace();
    t.steps[2].first_access = 2;  // overlaps step 1's accesses 1..2
    expect_inconsistent(t, "step 2 uses accesses from access 2, which step 1 already uses");
  }
  {
    Trace t = test::full_trace();
    t.accesses[3].buffer = 3;
    expect_inconsistent(t, "access 3 refers to buffer 3, but the trace has 3 buffers");
  }
  {
    Trace t = test::full_trace();
    t.accesses[2].length = 2;  // 4095 + 2 > 4096
    expect_inconsistent(t,
                        "access 2 covers 2 bytes at offset 4095 of buffer 2 (id "
                        "18446744073709551615), which has only 4096 bytes");
  }
  {
    Trace t = test::full_trace();
    t.accesses[2].offset = UINT64_MAX;  // offset + length would wrap
    expect_inconsistent(t, "access 2 covers 1 bytes at offset 18446744073709551615");
  }
  {
    Trace t = test::full_trace();
    t.accesses[0].length = 0;
    expect_inconsistent(t, "access 0 has length 0");
  }
  {
    Trace t = test::full_trace();
    t.iterations[1].step_count = 3;
    expect_inconsistent(t, "iteration 1 covers 3 steps from step 3, but the trace has 5 steps");
  }
  {
    Trace t = test::full_trace();
    t.iterations[1].first_step = 2;
    expect_inconsistent(t,
                        "iteration 1 starts at step 2, inside iteration 0 (which ends before "
                        "step 3)");
  }
  {
    Trace t = test::full_trace();
    std::swap(t.iterations[0], t.iterations[1]);
    expect_inconsistent(t, "iteration 1 starts at step 1, inside iteration 0");
  }
  {
    Trace t = test::full_trace();
    t.faults[0].buffer = 3;
    expect_inconsistent(t, "fault 0 refers to buffer 3, but the trace has 3 buffers");
  }
  {
    Trace t = test::full_trace();
    t.steps[0].kind = static_cast<trace::StepKind>(7);
    expect_inconsistent(t, "step 0 has kind 7 (expected 0 kernel, 1 memcpy or 2 memset)");
  }
  {
    Trace t = test::full_trace();
    t.steps[1].end_ns = 299;
    expect_inconsistent(t, "step 1 ends at 299 ns, before it starts at 300 ns");
  }
  {
    Trace t = test::full_trace();
    t.iterations[0].end_ns = 1;
    expect_inconsistent(t, "iteration 0 ends at 1 ns, before it starts at 250 ns");
  }
  {
    Trace t = test::full_trace();
    t.detection.confidence = 1.5;
    expect_inconsistent(t, "the detection confidence is 1.5 (expected 0 to 1)");
    t.detection.confidence = std::numeric_limits<double>::quiet_NaN();
    expect_inconsistent(t, "the detection confidence is nan");
  }
  // A byte with no Trace to make it from.
  Bytes b = encode_trace(test::full_trace());
  put(b, record_field(b, kBuffers, 1, 33), 1, 2);  // 'freed'
  detail::reseal_trace_bytes(b);
  expect_rejected(b, "corrupt: buffer 1 has 'freed' 2 (expected 0 or 1)");
}

TEST(TraceFile, InconsistentLifetimesAreRejected) {
  {
    Trace t = test::full_trace();
    t.lifetimes[1].buffer = 3;
    expect_inconsistent(t, "lifetime 1 refers to buffer 3, but the trace has 3 buffers");
  }
  {
    Trace t = test::full_trace();
    t.lifetimes[2].length = 0;
    expect_inconsistent(t, "lifetime 2 has length 0");
  }
  {
    Trace t = test::full_trace();
    t.lifetimes[0].offset = (1 << 20) - 100;  // 4096 bytes from there pass the 1 MiB end
    expect_inconsistent(t,
                        "lifetime 0 covers 4096 bytes at offset 1048476 of buffer 0 (id 0), which "
                        "has only 1048576 bytes");
  }
  {
    Trace t = test::full_trace();
    t.lifetimes[3].offset = UINT64_MAX - 1;  // offset + length would wrap to a small number
    expect_inconsistent(t,
                        "lifetime 3 covers 4294967301 bytes at offset 18446744073709551614 of "
                        "buffer 1 (id 3), which has only 8589934597 bytes");
  }
  {
    Trace t = test::full_trace();
    t.lifetimes[3].before_step = 6;  // 5 steps: 5 is after the last, 6 is past it
    expect_inconsistent(t,
                        "lifetime 3 is before step 6, but the trace has 5 steps (before step 5 is "
                        "after the last)");
  }
  {
    Trace t = test::full_trace();
    t.lifetimes[2].before_step = 1;  // lifetime 1 is before step 2
    expect_inconsistent(t,
                        "lifetime 2 is before step 1, earlier than lifetime 1 (before step 2): "
                        "lifetimes must be in program order");
  }
  {
    // The bounds are inclusive: before the first step, after the last, a block to the buffer's
    // last byte, and two events between the same launches.
    Trace t = test::full_trace();
    t.lifetimes = {{.before_step = 0, .buffer = 2, .offset = 4095, .length = 1},
                   {.before_step = 0, .buffer = 2, .offset = 4095, .length = 1, .freed = true},
                   {.before_step = 5, .buffer = 2, .offset = 0, .length = 4096}};
    EXPECT_EQ(check_trace(t), std::nullopt);
  }
}

TEST(TraceFile, CorruptLifetimeRecordsAreRejected) {
  // Bytes no Trace can make, and indices patched in the file: an error, never a crash.
  const Bytes good = encode_trace(test::full_trace());
  auto patched = [&](uint64_t record, size_t field, size_t n, uint64_t value) {
    Bytes b = good;
    put(b, record_field(b, kLifetimes, record, field), n, value);
    detail::reseal_trace_bytes(b);
    return b;
  };
  expect_rejected(patched(1, 28, 1, 2), "corrupt: lifetime 1 has 'freed' 2 (expected 0 or 1)");
  expect_rejected(patched(3, 28, 1, 0xff), "corrupt: lifetime 3 has 'freed' 255 (expected 0 or 1)");
  expect_rejected(patched(0, 8, 4, 7),
                  "corrupt: lifetime 0 refers to buffer 7, but the trace has 3 buffers");
  expect_rejected(patched(0, 8, 4, UINT32_MAX),
                  "corrupt: lifetime 0 refers to buffer 4294967295, but the trace has 3 buffers");
  expect_rejected(patched(2, 0, 8, UINT64_MAX), "corrupt: lifetime 2 is before step");
  expect_rejected(patched(1, 20, 8, 0), "corrupt: lifetime 1 has length 0");
  expect_rejected(patched(1, 12, 8, UINT64_MAX), "corrupt: lifetime 1 covers");
}

TEST(TraceFile, UnusedBufferIndexMarksAFaultOutsideEveryBuffer) {
  Trace t = test::full_trace();
  t.faults[0].buffer = UINT32_MAX;
  EXPECT_EQ(check_trace(t), std::nullopt);
}

// --- Damage -------------------------------------------------------------------------------------

TEST(TraceFile, EveryFlippedByteIsRejected) {
  // CRC-32 catches every burst of up to 32 bits; the file-size and magic checks the rest.
  const Bytes good = encode_trace(test::full_trace());
  for (size_t at = 0; at < good.size(); ++at) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      Bytes b = good;
      b[at] ^= mask;
      std::string error;
      EXPECT_FALSE(parse_trace(b, &error)) << "byte " << at << " ^ " << int{mask};
      EXPECT_FALSE(error.empty());
    }
  }
}

TEST(TraceFile, FlippedBytesPastTheChecksumNeverCrash) {
  // The same, with the size and checksum made to agree: every structural check is exercised.
  // Whatever is accepted must pass check_trace and encode back to the same bytes.
  const Bytes good = encode_trace(test::full_trace());
  size_t accepted = 0, rejected = 0;
  for (size_t at = 0; at < good.size(); ++at) {
    for (uint8_t mask : {0x01, 0x02, 0x10, 0x80, 0xff}) {
      Bytes b = good;
      b[at] ^= mask;
      detail::reseal_trace_bytes(b);
      std::string error;
      const auto parsed = parse_trace(b, &error);
      if (!parsed) {
        ++rejected;
        EXPECT_FALSE(error.empty()) << at;
        continue;
      }
      ++accepted;
      EXPECT_EQ(check_trace(*parsed), std::nullopt) << at;
      const Bytes again = encode_trace(*parsed);
      EXPECT_TRUE(parse_trace(again, &error)) << at << ": " << error;
    }
  }
  EXPECT_GT(accepted, 0u);  // flips in plain values (times, sizes, text) are data, not damage
  EXPECT_GT(rejected, 0u);
}

// --- Writing ------------------------------------------------------------------------------------

TEST_F(TraceFileTest, WriterRefusesAnInconsistentTraceAndLeavesTheOldFile) {
  std::string error;
  ASSERT_TRUE(write_trace_file(path("run.umtrace"), test::full_trace(), &error)) << error;
  Trace bad = test::full_trace();
  bad.accesses[0].buffer = 9;
  EXPECT_FALSE(write_trace_file(path("run.umtrace"), bad, &error));
  EXPECT_EQ(error, path("run.umtrace") +
                       ": not written: the trace is inconsistent: access 0 refers to buffer 9, "
                       "but the trace has 3 buffers");
  EXPECT_EQ(entries(), std::vector<std::string>{"run.umtrace"});
  EXPECT_TRUE(read_trace_file(path("run.umtrace"), &error)) << error;
}

TEST_F(TraceFileTest, WriteReplacesAtomicallyAndReportsFailures) {
  std::string error;
  ASSERT_TRUE(write_trace_file(path("run.umtrace"), Trace{}, &error)) << error;
  ASSERT_TRUE(write_trace_file(path("run.umtrace"), test::full_trace(), &error)) << error;
  const auto read = read_trace_file(path("run.umtrace"), &error);
  ASSERT_TRUE(read) << error;
  EXPECT_TRUE(*read == test::full_trace());
  EXPECT_EQ(entries(), std::vector<std::string>{"run.umtrace"});

  EXPECT_FALSE(write_trace_file(path("no/such/dir/run.umtrace"), Trace{}, &error));
  EXPECT_TRUE(contains(error, "cannot create " + path("no/such/dir/run.umtrace") + ".tmp."))
      << error;
  EXPECT_TRUE(contains(error, "No such file or directory")) << error;

  fs::create_directory(dir_ / "a_directory");
  EXPECT_FALSE(write_trace_file(path("a_directory"), Trace{}, &error));
  EXPECT_TRUE(contains(error, "cannot rename")) << error;
  EXPECT_EQ(entries(), (std::vector<std::string>{"a_directory", "run.umtrace"}));
}

}  // namespace
}  // namespace umswap
