// The trace file: a trace::Trace on disk. Binary, little-endian, versioned; the layout, the
// versioning rule and every check the reader makes are in docs/trace-format.md.
//
// Offline code (STYLE.md rules 4 and 6): nothing here throws. Every function that can fail
// returns an empty value or false and, when `error` is given, one sentence a user understands.
// The reader trusts nothing in the file: magic number, version, sizes, offsets and every index are
// checked before use, and it never allocates more than a small multiple of the file's size.
// Writing is atomic (temporary file, fsync, rename), so a killed writer never leaves a file under
// the final name. All functions are thread-safe (no shared state).
#pragma once

#include "umswap/core/trace.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace umswap {

inline constexpr uint32_t kTraceFormatVersion = 1;
inline constexpr char kTraceMagic[8] = {'U', 'M', 'S', 'W', 'T', 'R', 'C', '\0'};

// Checks that `trace` is internally consistent: every index in range, access ranges inside their
// buffers, steps' access lists and iterations in order and not overlapping, times not running
// backwards. Returns nullopt when it is, else the first problem ("step 12 names name 40, but the
// trace has 30 names"). The reader applies exactly this check to what it decoded.
std::optional<std::string> check_trace(const trace::Trace& trace);

// The file's bytes for `trace`. Encodes whatever it is given, checked or not (tests use this to
// build bad files); write_trace_file() checks first.
std::vector<uint8_t> encode_trace(const trace::Trace& trace);

// Checks `trace` (check_trace) and writes it to `path` atomically. Returns false and sets `error`
// ("not written: ...", "cannot write ...: No space left on device") on failure; then no file is
// left under `path` or beside it, and an existing file at `path` is untouched.
bool write_trace_file(const std::string& path, const trace::Trace& trace, std::string* error);

// Reads and checks the trace at `path`. On failure `error` is "<path>: <problem>", for example
// "run.umtrace: truncated: the file has 1000 of the 5000 bytes its header gives".
std::optional<trace::Trace> read_trace_file(const std::string& path, std::string* error);

// The reader proper: checks and decodes a whole file held in memory. `error` gets the problem
// without a file name. Never reads outside `bytes`; safe on any input (fuzzed).
std::optional<trace::Trace> parse_trace(std::span<const uint8_t> bytes, std::string* error);

// Writes `bytes` to `path` atomically: `<path>.tmp.<pid>` is written, fsync'ed and renamed to
// `path`. On failure returns false, sets `error` and removes the temporary file.
bool write_file_atomically(const std::string& path, std::string_view bytes, std::string* error);

namespace detail {

// CRC-32 (IEEE 802.3, as zlib's crc32) of a trace file's bytes with its checksum field read as
// zero: the value the header's checksum field must hold.
uint32_t trace_checksum(std::span<const uint8_t> bytes);

// Sets the file-size and checksum fields of encoded trace bytes (at least a full header) so they
// match the bytes as they are now. For tests and the fuzzer, which change bytes on purpose and
// want the reader to look past those two fields. Does nothing to a shorter buffer.
void reseal_trace_bytes(std::span<uint8_t> bytes);

}  // namespace detail
}  // namespace umswap
