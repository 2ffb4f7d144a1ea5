#include "umswap/cli/verify_report.h"

#include "umswap/core/stats_schema.h"

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace umswap::cli {
namespace {

using nlohmann::json;
namespace schema = umswap::stats_schema;
namespace evict_copy = schema::advisor::evict_copy;
namespace round_trips = schema::advisor::evict_copy::round_trips;
namespace fault_kernels = schema::fault_kernels;
namespace unforeseen = schema::copy_check::unforeseen;

// Readers of the stats' fields (stats_schema.h): `j` is the file, or the array element that a
// field with `[]` in its path belongs to. A field that is missing or of another type reads as 0,
// nullopt (or `otherwise`), false, or an empty array.
uint64_t number(const json& j, const schema::Field& f) {
  const json* at = schema::find(j, f);
  return at && (at->is_number_unsigned() || at->is_number_integer()) ? at->get<uint64_t>() : 0;
}

std::optional<std::string> text(const json& j, const schema::Field& f) {
  const json* at = schema::find(j, f);
  return at && at->is_string() ? std::optional<std::string>(at->get<std::string>()) : std::nullopt;
}

std::string text(const json& j, const schema::Field& f, const char* otherwise) {
  return text(j, f).value_or(otherwise);
}

bool flag(const json& j, const schema::Field& f) {
  const json* at = schema::find(j, f);
  return at && at->is_boolean() && at->get<bool>();
}

const json& array(const json& j, const schema::Field& f) {
  static const json kNone = json::array();
  const json* at = schema::find(j, f);
  return at && at->is_array() ? *at : kNone;
}

bool has(const json& j, const schema::Field& f) {
  return schema::find(j, f) != nullptr;
}

std::string gib(uint64_t bytes) {
  return fmt::format("{:.2f} GiB", bytes / double(1ull << 30));
}

// GPU page faults inside kernels (the stats' fault_kernels): not a failure umswap can judge, but
// a fault changes what some kernels compute (cuDNN's fused attention with dropout), so the run
// names the kernels that took them. Empty without faults in kernels.
std::string fault_kernels_warning(const json& s, const std::string& prefix) {
  const uint64_t faults = number(s, fault_kernels::kFaults);
  const uint64_t outside = number(s, fault_kernels::kOutsideKernels);
  if (faults <= outside) return {};
  std::string top;
  size_t shown = 0;
  for (const json& k : array(s, fault_kernels::kKernels)) {
    if (shown++ == 3) break;
    top += fmt::format("{}{} ({})", top.empty() ? "" : "; ",
                       text(k, fault_kernels::kernels::kKernel, "?").substr(0, 100),
                       number(k, fault_kernels::kernels::kFaults));
  }
  return prefix +
         fmt::format(
             "warning: {} GPU page faults came while kernels ran, most while: {}. A fault changes "
             "what some kernels compute (cuDNN's fused attention with dropout; "
             "docs/RELIABILITY.md, \"Kernels that a page fault changes\"): if one of these is "
             "such a kernel, this run's results may differ from native's\n",
             faults - outside, top.empty() ? "?" : top);
}

// GPU page faults inside kernels that compute differently on memory not on the GPU (the stats'
// fault_kernels.must_be_resident; advisor/resident_launches.h): umswap brings such a kernel's
// memory to the GPU before it runs, so a fault inside one means a pointer it could not see or a
// migration it did not hold back, and the run's results may not be the program's. Empty if none.
std::string resident_faults_failure(const json& s, const std::string& prefix) {
  namespace resident = fault_kernels::must_be_resident;
  const uint64_t faults = number(s, resident::kFaults);
  if (faults == 0) return {};
  std::string which;
  for (const json& k : array(s, resident::kKernels)) {
    which += fmt::format("{}{} ({})", which.empty() ? "" : "; ",
                         text(k, resident::kernels::kKernel, "?").substr(0, 100),
                         number(k, resident::kernels::kFaults));
  }
  return prefix + fmt::format(
                      "FAILED: {} GPU page faults inside kernels that compute differently on "
                      "memory not on the GPU: {}. This run's results may differ from native's "
                      "(docs/RELIABILITY.md, \"Kernels that a page fault changes\")\n",
                      faults, which.empty() ? "?" : which);
}

// The round trips (advisor.evict_copy.round_trips; advisor/round_trips.h): each range copied to
// the host hashed on the GPU as it left and once back. A difference fails the run (*mismatched);
// otherwise one line says how many agreed and how many were not compared.
std::string round_trips_report(const json& s, const std::string& prefix, bool* mismatched) {
  if (!has(s, evict_copy::kRoundTrips)) return {};
  if (!flag(s, round_trips::kHashed)) {
    return prefix + "note: the round trips were not hashed (" +
           text(s, round_trips::kOffReason, "?") + ")\n";
  }
  const uint64_t page =
      number(s, round_trips::kPageBytes) ? number(s, round_trips::kPageBytes) : (2ull << 20);
  const uint64_t bad = number(s, round_trips::kMismatchedPages);
  namespace not_compared = round_trips::not_compared_pages;
  const uint64_t skipped = number(s, not_compared::kNoSlot) + number(s, not_compared::kUnmatched) +
                           number(s, not_compared::kAwayAtExit) +
                           number(s, not_compared::kReturningAtExit);
  std::string out;
  if (bad > 0) {
    *mismatched = true;
    out += prefix + fmt::format(
                        "FAILED: {} pages ({}) came back from the host different from what left "
                        "the GPU (each hashed on the GPU as it left and once it was back)\n",
                        bad, gib(bad * page));
    size_t shown = 0;
    namespace mismatch = round_trips::first_mismatches;
    for (const json& m : array(s, round_trips::kFirstMismatches)) {
      if (shown++ == 4) break;
      std::string where = "page " + text(m, mismatch::kPage, "?");
      if (has(m, mismatch::kBuffer)) {
        where += fmt::format(" in buffer {} at {}", number(m, mismatch::buffer::kIndex),
                             text(m, mismatch::buffer::kBase, "?"));
      }
      out += prefix + fmt::format("  {}: out at launch {} ({}), back at launch {} ({})\n", where,
                                  number(m, mismatch::kLeftAtLaunch),
                                  text(m, mismatch::kLeftKernel, "?").substr(0, 80),
                                  number(m, mismatch::kBackAtLaunch),
                                  text(m, mismatch::kBackKernel, "?").substr(0, 80));
    }
  } else {
    const uint64_t checked = number(s, round_trips::kCheckedPages);
    out += prefix + fmt::format(
                        "round trips: {} pages ({}) hashed on the GPU as they left and once "
                        "back, every one the same",
                        checked, gib(checked * page));
    out += skipped == 0 ? std::string("\n")
                        : fmt::format(
                              "; {} pages not compared (no hash slot free, not seen "
                              "leaving, or not back by the end)\n",
                              skipped);
  }
  return out;
}

// The copy path stopped before the program's end (a stall, a call the tracer cannot see into, a
// failure: advisor.evict_copy.off_reason): the evictions after it went through the driver, which
// keeps data coherent, and the check covers the run before it. Empty if it ran to the end.
std::string copies_stopped_note(const json& s, const std::string& prefix) {
  const std::optional<std::string> off = text(s, evict_copy::kOffReason);
  if (!off) return {};
  const std::string& why = *off;
  if (why.empty() || why.starts_with("the program ends") || why.starts_with("the plan ends")) {
    return {};
  }
  return prefix + "note: the copy path stopped before the end (" + why +
         "); the evictions after that went through the driver, which keeps the data coherent, "
         "so this check covers the run before it\n";
}

}  // namespace

VerifyVerdict judge_verify(const std::vector<json>& stats, const std::vector<std::string>& names) {
  VerifyVerdict v;
  const std::string p = "umswap: verify: ";
  if (stats.empty()) {
    v.text = p + "NOT VERIFIED: no stats file was written (did the program use CUDA?)\n";
    return v;
  }
  bool failed = false, copied_any = false, resident_failed = false, mismatched = false;
  std::string lines;
  for (size_t i = 0; i < stats.size(); ++i) {
    const json& s = stats[i];
    const std::string who = stats.size() > 1 ? fmt::format("{}: ", names[i]) : std::string();
    const uint64_t out = number(s, evict_copy::kCopiedOutBytes);
    const uint64_t in = number(s, evict_copy::kCopiedInBytes);
    const uint64_t faults = number(s, unforeseen::kFaults);
    const uint64_t windows = number(s, unforeseen::kWindows);
    const uint64_t early = number(s, unforeseen::kCopiesOutBeforeCopyBackEnded);
    const uint64_t harmful = number(s, schema::copy_check::kHarmful);
    const uint64_t lost = number(s, evict_copy::kLostBytes);
    const uint64_t dropped = number(s, schema::detection::kDroppedRecords);
    if (const std::string f = resident_faults_failure(s, p + who); !f.empty()) {
      resident_failed = true;
      lines += f;
    }
    if (out == 0) {
      lines += p + who + "nothing was copied to the host";
      if (const std::optional<std::string> off = text(s, evict_copy::kOffReason);
          off && !off->empty()) {
        lines += fmt::format(" (copies off: {})", *off);
      }
      lines += "\n";
      continue;
    }
    copied_any = true;
    if (faults > 0) {
      failed = true;
      lines += p + who +
               fmt::format(
                   "FAILED: {} GPU page faults on pages umswap held on the host (their GPU "
                   "pages discarded): a kernel reached them through a pointer umswap cannot see "
                   "(a pointer table in device memory), read garbage or wrote bytes the copy "
                   "back then overwrote\n",
                   faults);
      namespace fault = unforeseen::first;
      size_t shown = 0;
      for (const json& f : array(s, unforeseen::kFirst)) {
        if (shown++ == 4) break;
        std::string where = text(f, fault::kAddress, "?");
        if (has(f, fault::kBuffer)) {
          where +=
              fmt::format(" in buffer {} at {} ({})", number(f, fault::buffer::kIndex),
                          text(f, fault::buffer::kBase, "?"), gib(number(f, fault::buffer::kSize)));
        }
        std::string steps;
        for (const json& st : array(f, fault::kStepsRunning)) {
          steps +=
              (steps.empty() ? "" : "; ") + (st.is_string() ? st.get<std::string>() : st.dump());
        }
        const uint64_t access = number(f, fault::kAccess);
        lines += p + who +
                 fmt::format("  {} ({}), while on the GPU: {}\n", where,
                             access == 2   ? "write"
                             : access == 3 ? "atomic"
                                           : "read",
                             steps.empty() ? "no step recorded" : steps);
      }
    }
    // The other failures: one line each, with what was counted.
    const std::pair<uint64_t, std::string> others[] = {
        {early, fmt::format("{} copies to the host began before the copy back of their pages had "
                            "ended (they may have saved pages not yet filled)",
                            early)},
        {harmful, fmt::format("{} steps ran on a page while it was discarded or coming back "
                              "(copy_check.first names them)",
                              harmful)},
        {lost, fmt::format("{} of copies back failed and were lost", gib(lost))},
    };
    for (const auto& [count, what] : others) {
      if (count == 0) continue;
      failed = true;
      lines += p + who + "FAILED: " + what + "\n";
    }
    const std::string trips = round_trips_report(s, p + who, &mismatched);
    if (faults == 0 && early == 0 && harmful == 0 && lost == 0 && !mismatched) {
      lines += p + who +
               fmt::format(
                   "passed: {} copied to the host and {} back; {} page windows from a copy out "
                   "to its copy back, no access to a discarded page, no copy out before its copy "
                   "back had ended, no step on a page while it was away\n",
                   gib(out), gib(in), windows);
    }
    lines += trips;
    lines += copies_stopped_note(s, p + who);
    if (dropped > 0) {
      lines += p + who +
               fmt::format(
                   "note: CUPTI dropped {} records: an access in what was dropped is not "
                   "checked\n",
                   dropped);
    }
    lines += fault_kernels_warning(s, p + who);
  }
  if (!copied_any && !resident_failed) {
    v.text = lines + p +
             "NOT VERIFIED: nothing was evicted by copy; give --budget below the program's "
             "footprint so that umswap evicts\n";
    return v;
  }
  v.ok = !failed && !resident_failed && !mismatched;
  v.text = lines;
  if (mismatched) {
    v.text += p +
              "a range that came back different is umswap's fault, not the program's: please "
              "report it with the stats file (advisor.evict_copy.round_trips)\n";
  }
  if (failed) {
    v.text += p +
              "the copy path (UMSWAP_EVICT_COPY=1) is not safe for this program; umswap's "
              "default (UMSWAP_EVICT_COPY=0, the driver's migrations) keeps its data coherent\n";
  }
  return v;
}

}  // namespace umswap::cli
