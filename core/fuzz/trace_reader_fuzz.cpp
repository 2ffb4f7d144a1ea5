// libFuzzer target for the trace reader. Each input is parsed as it is (header, size and checksum
// checks), then again with its size and checksum fields made to match, so mutations reach the
// section table and the records. What the reader accepts must be consistent, must encode back to
// a file that reads the same, and must render as a report and a timeline.
#include "umswap/core/trace_file.h"
#include "umswap/core/trace_report.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "trace_reader_fuzz: %s\n", what);
    std::abort();
  }
}

void check_accepted(const umswap::trace::Trace& trace) {
  expect(!umswap::check_trace(trace), "accepted a trace that check_trace rejects");
  const std::vector<uint8_t> encoded = umswap::encode_trace(trace);
  std::string error;
  const auto again = umswap::parse_trace(encoded, &error);
  expect(again.has_value(), "rejected its own encoding of an accepted trace");
  expect(umswap::encode_trace(*again) == encoded, "round trip changed the trace");
  expect(!umswap::render_report(trace).empty(), "empty report");
  const std::string json =
      umswap::render_timeline(trace).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  expect(!json.empty(), "empty timeline");
}

void parse(const std::vector<uint8_t>& bytes) {
  std::string error;
  const auto trace = umswap::parse_trace(bytes, &error);
  if (trace) {
    check_accepted(*trace);
  } else {
    expect(!error.empty(), "rejected without a message");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  parse(bytes);
  umswap::detail::reseal_trace_bytes(bytes);
  parse(bytes);
  return 0;
}
