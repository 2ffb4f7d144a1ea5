// The `umswap` command: parse, then act. Prints to stdout/stderr and may run a process.
#pragma once

#include "umswap/cli/run_flags.h"

namespace umswap::cli {

// Runs `flags.command` under umswap: finds libumswap.so, sets the environment (and prints it with
// --verbose), runs the command and returns its exit code; 2 when libumswap.so cannot be found.
int run_command(const RunFlags& flags);

// main() of `umswap`.
int cli_main(int argc, char** argv);

}  // namespace umswap::cli
