// What `umswap run` (and record, replay) prints to stderr when the program has ended, unless
// --quiet: for each process whose advisor ran, a few lines read from its stats file — iterations
// and the steady iterations' median time, what moved each way and the GPU page faults per steady
// iteration, the peak GPU-resident bytes against the budget, where the advisor ended, and the
// memory path (engine, stream-ordered allocations or not). Under engine vmm (the file's
// `engine`), which runs no advisor yet: the iterations, the peaks on GPU and host chunks against
// the pool, and the engine's allocations. Pure: the stats are read by the caller.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace umswap::cli {

struct SummaryInput {
  std::string name;      // the stats file's name, shown when there are several processes
  nlohmann::json stats;  // its contents (a stats file that read_stats_file() accepted)
};

// The text to print (each line starts with "umswap: "), empty when no process's advisor ran and
// none ran engine vmm.
// `budget_given`: the run had a budget (else budget_bytes is the GPU's memory: not judged).
// At most `max_processes` are shown; a last line counts the rest.
std::string run_summary_text(const std::vector<SummaryInput>& processes, bool budget_given,
                             size_t max_processes = 8);

// Whether the run put a plan in force: true when any process's advisor did (its first or its last
// plan has a launch it applied from), false when every file that has the advisor's first-plan
// field says none did, nullopt when no file has it (no stats, no advisor).
std::optional<bool> run_made_a_plan(const std::vector<SummaryInput>& processes);

}  // namespace umswap::cli
