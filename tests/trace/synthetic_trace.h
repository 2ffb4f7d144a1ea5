// Synthetic traces for the trace file and report tests, and equality for trace::Trace (which has
// no operator== of its own).
#pragma once

#include "umswap/core/trace.h"

namespace umswap::trace {

bool operator==(const Buffer& a, const Buffer& b);
bool operator==(const Access& a, const Access& b);
bool operator==(const Step& a, const Step& b);
bool operator==(const Counters& a, const Counters& b);
bool operator==(const Iteration& a, const Iteration& b);
bool operator==(const Fault& a, const Fault& b);
bool operator==(const Lifetime& a, const Lifetime& b);
bool operator==(const Transfer& a, const Transfer& b);
bool operator==(const Detection& a, const Detection& b);
bool operator==(const Trace& a, const Trace& b);

}  // namespace umswap::trace

namespace umswap::test {

// Every field of every record set to a value other than its default, somewhere.
trace::Trace full_trace();

// A run with known figures (see the comments in synthetic_trace.cpp): 1 warm-up memcpy, then 3
// iterations of conv, relu, sgd on two streams; 4 buffers; 3 faults.
trace::Trace three_iteration_trace();

}  // namespace umswap::test
