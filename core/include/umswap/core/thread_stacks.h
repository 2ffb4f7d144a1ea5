// A diagnostic for hangs: every thread of the process writes its own call stack (glibc's
// backtrace, symbols as the dynamic symbol tables have them) to a file descriptor. Used by the
// advisor's watchdog when launches have waited long for the advisor thread and
// UMSWAP_DEBUG=hang-stacks: the devices umswap runs on have no debugger to attach.
#pragma once

namespace umswap {

// Signals each thread but the caller, one at a time, and waits (at most 200 ms each) for it to
// write "umswap: thread TID (NAME):" and its frames to `fd`. A thread blocked with the signal
// masked writes nothing. Before its stack, a thread blocked in a futex (a lock or a condition)
// has "umswap: thread TID waits in futex UADDR op OP, words from UADDR-8: ..." written for it (ten
// ints, the futex word third; for a glibc mutex the fifth is its owner's TID), another blocked one
// its /proc syscall line. The handler (on SIGRTMAX - 3) stays installed. Returns the number of
// threads that wrote.
int dump_thread_stacks(int fd);

}  // namespace umswap
