// The advisor's calls on its own streams, followed there by a write of their number to a word of
// pinned memory (op_log.h): always one write between a stream's event waits and the managed-memory
// call after them (without it the advisor thread was seen to block for good in a prefetch,
// docs/advisor.md "Closing the advisor's calls"), every call with UMSWAP_DEBUG=op-log.
// One per process (the advisor is one), set up by the advisor thread before its streams exist;
// never freed (launches may still go through the wrappers at exit).
//
// Threads: start_logged_calls() and name_logged_stream() on the advisor thread; the wrappers on
// whichever thread makes the call (the advisor thread, and with op-log the launch path's
// event records and word waits); logged_calls_state() on any thread (the watchdog's reports): it
// reads plain memory the GPU writes and makes no driver call.
#pragma once

#include <cstdint>
#include <string>

#include "umswap/advisor/advisor.h"

namespace umswap::advisor {

// Puts the logging calls in `d`'s place (those it has): with `every_call` (op-log) every call on
// a followed stream, each followed by its write; else the event waits and managed calls, with one
// write before a managed call that follows event waits, none after. False, leaving `d` as it
// was, when the words cannot be had (or they are set up already).
bool start_logged_calls(AdvisorDriver& d, bool every_call);
// Follows stream `s` under `name` (no-op while the calls are not logged).
void name_logged_stream(CUstream s, const char* name);
// For a stall report: the advisor thread's driver call in progress ("in cuMemPrefetchAsync since
// 2.10 s ago", or "-"), and each stream's numbered calls (all of them with op-log). `now_ns` is
// steady_clock's now.
struct LoggedCallsState {
  std::string in_call = "-";
  std::string streams;
};
LoggedCallsState logged_calls_state(int64_t now_ns, bool with_streams);
bool logged_calls_on();

}  // namespace umswap::advisor
