// The trace file format, version 1. docs/trace-format.md is the reference; keep the two in step.
#include "umswap/core/trace_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace umswap {
namespace {

using trace::Trace;

// --- Layout -----------------------------------------------------------------------------------

constexpr size_t kHeaderSize = 40;
constexpr size_t kVersionOffset = 8;
constexpr size_t kHeaderSizeOffset = 12;
constexpr size_t kFlagsOffset = 16;
constexpr size_t kChecksumOffset = 20;
constexpr size_t kFileSizeOffset = 24;
constexpr size_t kSectionCountOffset = 32;
constexpr size_t kSectionEntrySizeOffset = 36;
constexpr uint32_t kSectionEntrySize = 24;
// Flag bits 0-15 name features a reader must understand to read the file; bits 16-31 are hints a
// reader may ignore. Version 1 defines none of either.
constexpr uint32_t kRequiredFlagsMask = 0x0000ffff;

enum class Kind : uint32_t {
  strings = 1,
  names = 2,
  buffers = 3,
  steps = 4,
  accesses = 5,
  iterations = 6,
  faults = 7,
  detection = 8,
  program = 9,
  totals = 10,
  lifetimes = 11,
  transfers = 12,
};

struct SectionInfo {
  Kind kind;
  std::string_view name;
  uint32_t record_size;  // bytes of a version 1 record; a later writer may append fields
  bool single;           // exactly one record
  // May be absent, read as no records: a section added within version 1 (files written before it
  // lack it), which the writer leaves out when empty so such files stay as they were.
  bool optional = false;
};

constexpr size_t kCountersSize = 40;
constexpr std::array kSections = {
    SectionInfo{Kind::strings, "strings", 1, false},
    SectionInfo{Kind::names, "names", 16, false},
    SectionInfo{Kind::buffers, "buffers", 34, false},
    SectionInfo{Kind::steps, "steps", 41, false},
    SectionInfo{Kind::accesses, "accesses", 20, false},
    SectionInfo{Kind::iterations, "iterations", 32 + kCountersSize, false},
    SectionInfo{Kind::faults, "faults", 21, false},
    SectionInfo{Kind::detection, "detection", 40, true},
    SectionInfo{Kind::program, "program", 32, true},
    SectionInfo{Kind::totals, "totals", kCountersSize, true},
    SectionInfo{Kind::lifetimes, "lifetimes", 29, false, true},
    SectionInfo{Kind::transfers, "transfers", 34, false, true},
};

const SectionInfo* find_section(uint32_t kind) {
  for (const SectionInfo& s : kSections) {
    if (static_cast<uint32_t>(s.kind) == kind) return &s;
  }
  return nullptr;
}

size_t section_index(Kind kind) {
  return static_cast<size_t>(kind) - 1;
}

// --- Little-endian encoding ---------------------------------------------------------------------

void put_u8(std::vector<uint8_t>& out, uint8_t v) {
  out.push_back(v);
}
void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void set_u32(std::span<uint8_t> bytes, size_t at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void set_u64(std::span<uint8_t> bytes, size_t at, uint64_t v) {
  for (size_t i = 0; i < 8; ++i) bytes[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
uint32_t get_u32(std::span<const uint8_t> bytes, size_t at) {
  return static_cast<uint32_t>(get_le(bytes.data() + at, 4));
}
uint64_t get_u64(std::span<const uint8_t> bytes, size_t at) {
  return get_le(bytes.data() + at, 8);
}

// Reads the fields of one record in order. The caller has checked that the record is in bounds.
class Fields {
 public:
  explicit Fields(const uint8_t* p) : p_(p) {}
  uint8_t u8() { return static_cast<uint8_t>(take(1)); }
  uint32_t u32() { return static_cast<uint32_t>(take(4)); }
  uint64_t u64() { return take(8); }
  double f64() { return std::bit_cast<double>(take(8)); }

 private:
  uint64_t take(size_t n) {
    const uint64_t v = get_le(p_, n);
    p_ += n;
    return v;
  }
  const uint8_t* p_;
};

void put_counters(std::vector<uint8_t>& out, const trace::Counters& c) {
  put_u64(out, c.gpu_page_faults);
  put_u64(out, c.bytes_htod);
  put_u64(out, c.bytes_dtoh);
  put_u64(out, c.thrashing_events);
  put_u64(out, c.cpu_page_faults);
}

trace::Counters get_counters(Fields& f) {
  trace::Counters c;
  c.gpu_page_faults = f.u64();
  c.bytes_htod = f.u64();
  c.bytes_dtoh = f.u64();
  c.thrashing_events = f.u64();
  c.cpu_page_faults = f.u64();
  return c;
}

// --- CRC-32 -------------------------------------------------------------------------------------

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

uint32_t crc_update(uint32_t crc, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

// --- Checks shared by check_trace and the reader
// --------------------------------------------------

// True when [offset, offset + length) fits in `size`, without overflow.
bool fits(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

// How many bytes of a stream (not a regular file) to read, given its first kHeaderSize bytes:
// the file size its header gives plus one, or no more when they are not a trace's header.
uint64_t stream_read_limit(std::span<const uint8_t> header) {
  if (header.size() < kHeaderSize ||
      std::memcmp(header.data(), kTraceMagic, sizeof kTraceMagic) != 0 ||
      get_u32(header, kVersionOffset) != kTraceFormatVersion) {
    return header.size();
  }
  const uint64_t file_size = get_u64(header, kFileSizeOffset);
  return file_size == UINT64_MAX ? file_size : file_size + 1;
}

}  // namespace

// --- Consistency
// ----------------------------------------------------------------------------------

std::optional<std::string> check_trace(const Trace& t) {
  const uint64_t names = t.names.size(), buffers = t.buffers.size(), steps = t.steps.size(),
                 accesses = t.accesses.size();
  uint64_t accesses_used_to = 0;  // end of the previous non-empty access list
  uint64_t previous_user = 0;
  for (uint64_t i = 0; i < steps; ++i) {
    const trace::Step& s = t.steps[i];
    const auto kind = static_cast<unsigned>(s.kind);
    if (kind > 2) {
      return fmt::format("step {} has kind {} (expected 0 kernel, 1 memcpy or 2 memset)", i, kind);
    }
    if (s.name >= names) {
      return fmt::format("step {} names name {}, but the trace has {} names", i, s.name, names);
    }
    if (!fits(s.first_access, s.access_count, accesses)) {
      return fmt::format("step {} uses {} accesses from access {}, but the trace has {} accesses",
                         i, s.access_count, s.first_access, accesses);
    }
    if (s.access_count > 0) {
      if (s.first_access < accesses_used_to) {
        return fmt::format(
            "step {} uses accesses from access {}, which step {} already uses: steps' access "
            "lists must be in order and not overlap",
            i, s.first_access, previous_user);
      }
      accesses_used_to = s.first_access + s.access_count;
      previous_user = i;
    }
    if (s.start_ns != 0 && s.end_ns != 0 && s.end_ns < s.start_ns) {
      return fmt::format("step {} ends at {} ns, before it starts at {} ns", i, s.end_ns,
                         s.start_ns);
    }
  }
  for (uint64_t i = 0; i < accesses; ++i) {
    const trace::Access& a = t.accesses[i];
    if (a.buffer >= buffers) {
      return fmt::format("access {} refers to buffer {}, but the trace has {} buffers", i, a.buffer,
                         buffers);
    }
    if (a.length == 0) return fmt::format("access {} has length 0", i);
    const trace::Buffer& b = t.buffers[a.buffer];
    if (!fits(a.offset, a.length, b.size)) {
      return fmt::format(
          "access {} covers {} bytes at offset {} of buffer {} (id {}), which has only {} bytes", i,
          a.length, a.offset, a.buffer, b.id, b.size);
    }
  }
  uint64_t steps_used_to = 0;
  for (uint64_t i = 0; i < t.iterations.size(); ++i) {
    const trace::Iteration& it = t.iterations[i];
    if (!fits(it.first_step, it.step_count, steps)) {
      return fmt::format("iteration {} covers {} steps from step {}, but the trace has {} steps", i,
                         it.step_count, it.first_step, steps);
    }
    if (it.first_step < steps_used_to) {
      return fmt::format(
          "iteration {} starts at step {}, inside iteration {} (which ends before step {}): "
          "iterations must be in order and not overlap",
          i, it.first_step, i - 1, steps_used_to);
    }
    steps_used_to = it.first_step + it.step_count;
    if (it.start_ns != 0 && it.end_ns != 0 && it.end_ns < it.start_ns) {
      return fmt::format("iteration {} ends at {} ns, before it starts at {} ns", i, it.end_ns,
                         it.start_ns);
    }
  }
  for (uint64_t i = 0; i < t.faults.size(); ++i) {
    const uint32_t b = t.faults[i].buffer;
    if (b != UINT32_MAX && b >= buffers) {
      return fmt::format("fault {} refers to buffer {}, but the trace has {} buffers", i, b,
                         buffers);
    }
  }
  uint64_t previous_before_step = 0;
  for (uint64_t i = 0; i < t.lifetimes.size(); ++i) {
    const trace::Lifetime& l = t.lifetimes[i];
    if (l.buffer >= buffers) {
      return fmt::format("lifetime {} refers to buffer {}, but the trace has {} buffers", i,
                         l.buffer, buffers);
    }
    if (l.length == 0) return fmt::format("lifetime {} has length 0", i);
    const trace::Buffer& b = t.buffers[l.buffer];
    if (!fits(l.offset, l.length, b.size)) {
      return fmt::format(
          "lifetime {} covers {} bytes at offset {} of buffer {} (id {}), which has only {} bytes",
          i, l.length, l.offset, l.buffer, b.id, b.size);
    }
    if (l.before_step > steps) {
      return fmt::format(
          "lifetime {} is before step {}, but the trace has {} steps (before step {} is after the "
          "last)",
          i, l.before_step, steps, steps);
    }
    if (l.before_step < previous_before_step) {
      return fmt::format(
          "lifetime {} is before step {}, earlier than lifetime {} (before step {}): lifetimes "
          "must be in program order",
          i, l.before_step, i - 1, previous_before_step);
    }
    previous_before_step = l.before_step;
  }
  for (uint64_t i = 0; i < t.transfers.size(); ++i) {
    const trace::Transfer& x = t.transfers[i];
    if (x.end_ns < x.start_ns) {
      return fmt::format("transfer {} ends at {} ns, before it starts at {} ns", i, x.end_ns,
                         x.start_ns);
    }
    if (x.kind > trace::Transfer::driver) {
      return fmt::format("transfer {} has kind {} (expected 0 to 2)", i, x.kind);
    }
  }
  const double c = t.detection.confidence;
  if (!(c >= 0.0 && c <= 1.0)) {
    return fmt::format("the detection confidence is {} (expected 0 to 1)", c);
  }
  return std::nullopt;
}

// --- Writing ------------------------------------------------------------------------------------

std::vector<uint8_t> encode_trace(const Trace& t) {
  std::array<std::vector<uint8_t>, kSections.size()> body;
  std::array<uint64_t, kSections.size()> count{};
  std::vector<uint8_t>& strings = body[section_index(Kind::strings)];
  // A string is stored once in the string table and referred to by (offset, length).
  auto put_string = [&strings](std::vector<uint8_t>& out, const std::string& s) {
    put_u64(out, strings.size());
    put_u64(out, s.size());
    strings.insert(strings.end(), s.begin(), s.end());
  };

  std::vector<uint8_t>& program = body[section_index(Kind::program)];
  put_string(program, t.program);
  put_u64(program, t.pid);
  put_u64(program, t.dropped_records);
  count[section_index(Kind::program)] = 1;

  std::vector<uint8_t>& detection = body[section_index(Kind::detection)];
  put_u64(detection, t.detection.period);
  put_u64(detection, std::bit_cast<uint64_t>(t.detection.confidence));
  put_u64(detection, t.detection.warmup_steps);
  put_string(detection, t.detection.source);
  count[section_index(Kind::detection)] = 1;

  std::vector<uint8_t>& names = body[section_index(Kind::names)];
  for (const std::string& name : t.names) put_string(names, name);
  count[section_index(Kind::names)] = t.names.size();

  std::vector<uint8_t>& buffers = body[section_index(Kind::buffers)];
  for (const trace::Buffer& b : t.buffers) {
    put_u64(buffers, b.id);
    put_u64(buffers, b.size);
    put_u64(buffers, b.call_site);
    put_u64(buffers, b.base);
    put_u8(buffers, b.api);
    put_u8(buffers, b.freed ? 1 : 0);
  }
  count[section_index(Kind::buffers)] = t.buffers.size();

  std::vector<uint8_t>& steps = body[section_index(Kind::steps)];
  for (const trace::Step& s : t.steps) {
    put_u8(steps, static_cast<uint8_t>(s.kind));
    put_u32(steps, s.name);
    put_u64(steps, s.stream);
    put_u64(steps, s.first_access);
    put_u32(steps, s.access_count);
    put_u64(steps, s.start_ns);
    put_u64(steps, s.end_ns);
  }
  count[section_index(Kind::steps)] = t.steps.size();

  std::vector<uint8_t>& accesses = body[section_index(Kind::accesses)];
  for (const trace::Access& a : t.accesses) {
    put_u32(accesses, a.buffer);
    put_u64(accesses, a.offset);
    put_u64(accesses, a.length);
  }
  count[section_index(Kind::accesses)] = t.accesses.size();

  std::vector<uint8_t>& iterations = body[section_index(Kind::iterations)];
  for (const trace::Iteration& it : t.iterations) {
    put_u64(iterations, it.first_step);
    put_u64(iterations, it.step_count);
    put_u64(iterations, it.start_ns);
    put_u64(iterations, it.end_ns);
    put_counters(iterations, it.counters);
  }
  count[section_index(Kind::iterations)] = t.iterations.size();

  std::vector<uint8_t>& faults = body[section_index(Kind::faults)];
  for (const trace::Fault& f : t.faults) {
    put_u64(faults, f.time_ns);
    put_u64(faults, f.address);
    put_u32(faults, f.buffer);
    put_u8(faults, f.access);
  }
  count[section_index(Kind::faults)] = t.faults.size();

  std::vector<uint8_t>& lifetimes = body[section_index(Kind::lifetimes)];
  for (const trace::Lifetime& l : t.lifetimes) {
    put_u64(lifetimes, l.before_step);
    put_u32(lifetimes, l.buffer);
    put_u64(lifetimes, l.offset);
    put_u64(lifetimes, l.length);
    put_u8(lifetimes, l.freed ? 1 : 0);
  }
  count[section_index(Kind::lifetimes)] = t.lifetimes.size();

  std::vector<uint8_t>& transfers = body[section_index(Kind::transfers)];
  for (const trace::Transfer& x : t.transfers) {
    put_u64(transfers, x.start_ns);
    put_u64(transfers, x.end_ns);
    put_u64(transfers, x.address);
    put_u64(transfers, x.bytes);
    put_u8(transfers, x.to_gpu ? 1 : 0);
    put_u8(transfers, x.kind);
  }
  count[section_index(Kind::transfers)] = t.transfers.size();

  put_counters(body[section_index(Kind::totals)], t.totals);
  count[section_index(Kind::totals)] = 1;

  count[section_index(Kind::strings)] = strings.size();

  // An optional section with no records is left out: a trace without lifetimes gives the same
  // bytes as before they existed.
  std::array<bool, kSections.size()> written{};
  uint32_t written_count = 0;
  for (size_t i = 0; i < kSections.size(); ++i) {
    written[i] = !kSections[i].optional || count[i] > 0;
    if (written[i]) ++written_count;
  }
  const uint64_t table_end = kHeaderSize + uint64_t{written_count} * kSectionEntrySize;
  uint64_t total = table_end;
  for (const std::vector<uint8_t>& b : body) total += b.size();
  std::vector<uint8_t> out;
  out.reserve(total);
  for (const char c : kTraceMagic) put_u8(out, static_cast<uint8_t>(c));
  put_u32(out, kTraceFormatVersion);
  put_u32(out, kHeaderSize);
  put_u32(out, 0);  // flags
  put_u32(out, 0);  // checksum, set below
  put_u64(out, 0);  // file size, set below
  put_u32(out, written_count);
  put_u32(out, kSectionEntrySize);
  uint64_t offset = table_end;
  for (size_t i = 0; i < kSections.size(); ++i) {
    if (!written[i]) continue;  // empty, so its body is too
    put_u32(out, static_cast<uint32_t>(kSections[i].kind));
    put_u32(out, kSections[i].record_size);
    put_u64(out, count[i]);
    put_u64(out, offset);
    offset += body[i].size();
  }
  for (const std::vector<uint8_t>& b : body) out.insert(out.end(), b.begin(), b.end());
  detail::reseal_trace_bytes(out);
  return out;
}

bool write_file_atomically(const std::string& path, std::string_view bytes, std::string* error) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  auto fail = [&](std::string_view what) {
    if (error) *error = fmt::format("cannot {} {}: {}", what, tmp, std::strerror(errno));
    return false;
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return fail("create");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      const int saved = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = saved;
      return fail("write");
    }
    done += static_cast<size_t>(n);
  }
  // fsync before rename: after a crash the final name holds the whole file or the old one.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    return fail("write");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    if (error) {
      *error = fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(saved));
    }
    return false;
  }
  return true;
}

bool write_trace_file(const std::string& path, const Trace& trace, std::string* error) {
  if (auto problem = check_trace(trace)) {
    if (error)
      *error = fmt::format("{}: not written: the trace is inconsistent: {}", path, *problem);
    return false;
  }
  const std::vector<uint8_t> bytes = encode_trace(trace);
  return write_file_atomically(
      path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), error);
}

// --- Reading ------------------------------------------------------------------------------------

namespace {

struct Located {
  const SectionInfo* info = nullptr;
  uint32_t record_size = 0;
  uint64_t count = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, std::string* error) : bytes_(bytes), error_(error) {}

  std::optional<Trace> parse() {
    if (!check_header() || !locate_sections() || !decode()) return std::nullopt;
    if (auto problem = check_trace(trace_)) {
      fail("corrupt: {}", *problem);
      return std::nullopt;
    }
    return std::move(trace_);
  }

 private:
  // Sets the error and returns false.
  template <typename... Args>
  bool fail(fmt::format_string<Args...> format, Args&&... args) {
    if (error_) *error_ = fmt::format(format, std::forward<Args>(args)...);
    return false;
  }

  bool check_header() {
    const size_t size = bytes_.size();
    if (size == 0) return fail("empty file (0 bytes): not a umswap trace");
    if (std::memcmp(bytes_.data(), kTraceMagic, std::min(size, sizeof kTraceMagic)) != 0) {
      if (bytes_[0] == '{') {
        return fail(
            "not a umswap trace: it starts with '{{' like a JSON file (a stats file or "
            "a timeline?)");
      }
      return fail("not a umswap trace (it does not start with the magic number \"UMSWTRC\")");
    }
    if (size < kHeaderSizeOffset) return truncated_header();
    const uint32_t version = get_u32(bytes_, kVersionOffset);
    if (version != kTraceFormatVersion) {
      return fail("version {} is not supported (this umswap reads version {}){}", version,
                  kTraceFormatVersion,
                  version > kTraceFormatVersion ? "; it was written by a newer umswap" : "");
    }
    if (size < kHeaderSize) return truncated_header();
    const uint64_t file_size = get_u64(bytes_, kFileSizeOffset);
    if (size < file_size) {
      return fail("truncated: the file has {} of the {} bytes its header gives", size, file_size);
    }
    if (size > file_size) {
      return fail(
          "corrupt: the file has {} bytes, {} more than its header gives (data appended "
          "after the end?)",
          size, size - file_size);
    }
    const uint32_t stored = get_u32(bytes_, kChecksumOffset);
    const uint32_t computed = detail::trace_checksum(bytes_);
    if (stored != computed) {
      return fail(
          "damaged: checksum mismatch (stored {:08x}, computed {:08x}): the file was "
          "changed after it was written",
          stored, computed);
    }
    header_size_ = get_u32(bytes_, kHeaderSizeOffset);
    if (header_size_ < kHeaderSize) {
      return fail(
          "corrupt: the header size is {} bytes, less than the {} bytes of a version {} "
          "header",
          header_size_, kHeaderSize, kTraceFormatVersion);
    }
    if (header_size_ > size) {
      return fail("corrupt: the header size is {} bytes but the file has only {}", header_size_,
                  size);
    }
    const uint32_t unknown = get_u32(bytes_, kFlagsOffset) & kRequiredFlagsMask;
    if (unknown != 0) {
      return fail(
          "uses features this umswap does not know (flags {:#06x}); a newer umswap wrote "
          "it",
          unknown);
    }
    return true;
  }

  bool truncated_header() {
    return fail("truncated: the header needs {} bytes but the file ends at {}", kHeaderSize,
                bytes_.size());
  }

  bool locate_sections() {
    const uint64_t size = bytes_.size();
    const uint32_t entries = get_u32(bytes_, kSectionCountOffset);
    const uint32_t entry_size = get_u32(bytes_, kSectionEntrySizeOffset);
    if (entry_size < kSectionEntrySize) {
      return fail("corrupt: section table entries are {} bytes, less than the {} of version {}",
                  entry_size, kSectionEntrySize, kTraceFormatVersion);
    }
    const uint64_t table_length = uint64_t{entries} * entry_size;  // < 2^64: two u32 factors
    if (!fits(header_size_, table_length, size)) {
      return fail("corrupt: the section table needs {} bytes at offset {} but the file ends at {}",
                  table_length, header_size_, size);
    }
    const uint64_t table_end = header_size_ + table_length;
    for (uint32_t e = 0; e < entries; ++e) {
      const size_t at = header_size_ + size_t{e} * entry_size;
      const uint32_t kind = get_u32(bytes_, at);
      const SectionInfo* info = find_section(kind);
      if (!info) continue;  // a section a later writer added: not ours to read
      Located& s = sections_[section_index(info->kind)];
      if (s.info) return fail("corrupt: section '{}' appears twice", info->name);
      s.info = info;
      s.record_size = get_u32(bytes_, at + 4);
      s.count = get_u64(bytes_, at + 8);
      s.offset = get_u64(bytes_, at + 16);
      if (info->kind == Kind::strings ? s.record_size != 1 : s.record_size < info->record_size) {
        return fail(
            "corrupt: section '{}' has {}-byte records, but version {} records are {}{} "
            "bytes",
            info->name, s.record_size, kTraceFormatVersion,
            info->kind == Kind::strings ? "" : "at least ", info->record_size);
      }
      if (info->single && s.count != 1) {
        return fail("corrupt: section '{}' has {} records (expected 1)", info->name, s.count);
      }
      // The product is checked before anything is reserved: a count of 2^40 in a small file
      // fails here, with no allocation.
      if (__builtin_mul_overflow(s.count, uint64_t{s.record_size}, &s.length)) {
        return fail(
            "corrupt: section '{}' claims {} records of {} bytes, more than any file can "
            "hold",
            info->name, s.count, s.record_size);
      }
      if (s.offset < table_end) {
        return fail(
            "corrupt: section '{}' starts at offset {}, inside the header and section "
            "table (which end at {})",
            info->name, s.offset, table_end);
      }
      if (!fits(s.offset, s.length, size)) {
        return fail("corrupt: section '{}' needs {} bytes at offset {} but the file ends at {}",
                    info->name, s.length, s.offset, size);
      }
    }
    std::vector<const Located*> by_offset;
    for (const Located& s : sections_) {
      const SectionInfo& expected = kSections[static_cast<size_t>(&s - sections_.data())];
      if (!s.info && !expected.optional) {
        return fail("corrupt: section '{}' is missing", expected.name);
      }
      if (s.length > 0) by_offset.push_back(&s);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const Located* a, const Located* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const Located& a = *by_offset[i - 1];
      const Located& b = *by_offset[i];
      if (a.offset + a.length > b.offset) {
        return fail("corrupt: sections '{}' and '{}' overlap", a.info->name, b.info->name);
      }
    }
    return true;
  }

  const Located& section(Kind kind) const { return sections_[section_index(kind)]; }

  // Calls `read(Fields&)` for each record of a section.
  template <typename Read>
  void for_each_record(Kind kind, Read read) const {
    const Located& s = section(kind);
    for (uint64_t i = 0; i < s.count; ++i) {
      Fields f(bytes_.data() + s.offset + i * s.record_size);
      read(f);
    }
  }

  // A (offset, length) reference into the string table. The sum of all referenced lengths may
  // not exceed the table, so text can't be multiplied by many references to one long string.
  bool read_string(Fields& f, std::string_view what, std::string* out) {
    const Located& table = section(Kind::strings);
    const uint64_t offset = f.u64(), length = f.u64();
    if (!fits(offset, length, table.length)) {
      return fail(
          "corrupt: {} is {} bytes at offset {} of the string table, which has only {} "
          "bytes",
          what, length, offset, table.length);
    }
    text_bytes_ += length;  // no overflow: each length <= table.length, and we stop at the first
    if (text_bytes_ > table.length) {
      return fail("corrupt: the strings refer to more text than the string table's {} bytes",
                  table.length);
    }
    const char* base = reinterpret_cast<const char*>(bytes_.data() + table.offset);
    out->assign(base + offset, length);
    return true;
  }

  bool decode() {
    bool ok = true;
    for_each_record(Kind::program, [&](Fields& f) {
      ok = read_string(f, "the program name", &trace_.program);
      trace_.pid = f.u64();
      trace_.dropped_records = f.u64();
    });
    if (!ok) return false;
    for_each_record(Kind::detection, [&](Fields& f) {
      trace_.detection.period = f.u64();
      trace_.detection.confidence = f.f64();
      trace_.detection.warmup_steps = f.u64();
      ok = read_string(f, "the detection source", &trace_.detection.source);
    });
    if (!ok) return false;
    for_each_record(Kind::totals, [&](Fields& f) { trace_.totals = get_counters(f); });

    // Each reserve is bounded by the section's length, which is within the file.
    trace_.names.resize(section(Kind::names).count);
    uint64_t i = 0;
    for_each_record(Kind::names, [&](Fields& f) {
      if (ok) ok = read_string(f, fmt::format("name {}", i), &trace_.names[i]);
      ++i;
    });
    if (!ok) return false;

    trace_.buffers.reserve(section(Kind::buffers).count);
    for_each_record(Kind::buffers, [&](Fields& f) {
      trace::Buffer b;
      b.id = f.u64();
      b.size = f.u64();
      b.call_site = f.u64();
      b.base = f.u64();
      b.api = f.u8();
      const uint8_t freed = f.u8();
      if (freed > 1 && ok) {
        fail("corrupt: buffer {} has 'freed' {} (expected 0 or 1)", trace_.buffers.size(), freed);
        ok = false;
      }
      b.freed = freed == 1;
      trace_.buffers.push_back(b);
    });
    if (!ok) return false;

    trace_.steps.reserve(section(Kind::steps).count);
    for_each_record(Kind::steps, [&](Fields& f) {
      trace::Step s;
      s.kind = static_cast<trace::StepKind>(f.u8());  // range checked by check_trace
      s.name = f.u32();
      s.stream = f.u64();
      s.first_access = f.u64();
      s.access_count = f.u32();
      s.start_ns = f.u64();
      s.end_ns = f.u64();
      trace_.steps.push_back(s);
    });

    trace_.accesses.reserve(section(Kind::accesses).count);
    for_each_record(Kind::accesses, [&](Fields& f) {
      trace::Access a;
      a.buffer = f.u32();
      a.offset = f.u64();
      a.length = f.u64();
      trace_.accesses.push_back(a);
    });

    trace_.iterations.reserve(section(Kind::iterations).count);
    for_each_record(Kind::iterations, [&](Fields& f) {
      trace::Iteration it;
      it.first_step = f.u64();
      it.step_count = f.u64();
      it.start_ns = f.u64();
      it.end_ns = f.u64();
      it.counters = get_counters(f);
      trace_.iterations.push_back(it);
    });

    trace_.faults.reserve(section(Kind::faults).count);
    for_each_record(Kind::faults, [&](Fields& f) {
      trace::Fault fault;
      fault.time_ns = f.u64();
      fault.address = f.u64();
      fault.buffer = f.u32();
      fault.access = f.u8();
      trace_.faults.push_back(fault);
    });

    // Absent in files written before lifetimes were recorded: then its count is 0.
    trace_.lifetimes.reserve(section(Kind::lifetimes).count);
    for_each_record(Kind::lifetimes, [&](Fields& f) {
      trace::Lifetime l;
      l.before_step = f.u64();
      l.buffer = f.u32();
      l.offset = f.u64();
      l.length = f.u64();
      const uint8_t freed = f.u8();
      if (freed > 1 && ok) {
        fail("corrupt: lifetime {} has 'freed' {} (expected 0 or 1)", trace_.lifetimes.size(),
             freed);
        ok = false;
      }
      l.freed = freed == 1;
      trace_.lifetimes.push_back(l);
    });

    // Absent in files written before transfers were recorded, or by a run without any.
    trace_.transfers.reserve(section(Kind::transfers).count);
    for_each_record(Kind::transfers, [&](Fields& f) {
      trace::Transfer x;
      x.start_ns = f.u64();
      x.end_ns = f.u64();
      x.address = f.u64();
      x.bytes = f.u64();
      const uint8_t to_gpu = f.u8();
      x.kind = f.u8();
      if (to_gpu > 1 && ok) {
        fail("corrupt: transfer {} has 'to_gpu' {} (expected 0 or 1)", trace_.transfers.size(),
             to_gpu);
        ok = false;
      }
      x.to_gpu = to_gpu == 1;
      trace_.transfers.push_back(x);
    });
    return ok;
  }

  std::span<const uint8_t> bytes_;
  std::string* error_;
  uint32_t header_size_ = 0;
  std::array<Located, kSections.size()> sections_{};
  uint64_t text_bytes_ = 0;
  Trace trace_;
};

}  // namespace

std::optional<Trace> parse_trace(std::span<const uint8_t> bytes, std::string* error) {
  return Parser(bytes, error).parse();
}

std::optional<Trace> read_trace_file(const std::string& path, std::string* error) {
  auto fail = [&](std::string_view what) -> std::optional<Trace> {
    if (error) *error = fmt::format("{}: {}: {}", path, what, std::strerror(errno));
    return std::nullopt;
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail("cannot open");
  std::vector<uint8_t> bytes;
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (regular && st.st_size > 0) bytes.reserve(static_cast<size_t>(st.st_size));
  // A regular file is read to its end. Anything else (a pipe, a FIFO, /dev/zero) may never end,
  // so it is read only as far as a trace can reach: its header first, then up to the size that
  // header gives plus one byte (so that data after the end is still seen). What is not a trace
  // header stops the reading there, and the parser says what is wrong with it.
  uint64_t limit = regular ? UINT64_MAX : kHeaderSize;
  bool limit_from_header = regular;
  std::array<uint8_t, 1 << 16> chunk;
  for (;;) {
    if (bytes.size() >= limit) {
      if (limit_from_header) break;
      limit_from_header = true;
      limit = stream_read_limit(bytes);
      if (bytes.size() >= limit) break;
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), limit - bytes.size()));
    const ssize_t n = ::read(fd, chunk.data(), want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      return fail("cannot read");
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + n);
  }
  ::close(fd);
  std::string why;
  std::optional<Trace> trace = parse_trace(bytes, &why);
  if (!trace && error) *error = fmt::format("{}: {}", path, why);
  return trace;
}

namespace detail {

uint32_t trace_checksum(std::span<const uint8_t> bytes) {
  uint32_t crc = 0xffffffffu;
  if (bytes.size() < kChecksumOffset + 4) {
    crc = crc_update(crc, bytes.data(), bytes.size());
  } else {
    constexpr uint8_t kZero[4] = {};
    crc = crc_update(crc, bytes.data(), kChecksumOffset);
    crc = crc_update(crc, kZero, 4);
    crc = crc_update(crc, bytes.data() + kChecksumOffset + 4, bytes.size() - kChecksumOffset - 4);
  }
  return ~crc;
}

void reseal_trace_bytes(std::span<uint8_t> bytes) {
  if (bytes.size() < kHeaderSize) return;
  set_u64(bytes, kFileSizeOffset, bytes.size());
  set_u32(bytes, kChecksumOffset, trace_checksum(bytes));
}

}  // namespace detail
}  // namespace umswap
