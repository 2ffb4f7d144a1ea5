#include "umswap/cli/verify_report.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <utility>

namespace umswap::cli {
namespace {

using nlohmann::json;

uint64_t number(const json& j, std::initializer_list<const char*> path) {
  const json* at = &j;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return 0;
    at = &(*at)[key];
  }
  return at->is_number_unsigned() || at->is_number_integer() ? at->get<uint64_t>() : 0;
}

std::string gib(uint64_t bytes) {
  return fmt::format("{:.2f} GiB", bytes / double(1ull << 30));
}

// GPU page faults inside kernels (the stats' fault_kernels): not a failure umswap can judge, but
// a fault changes what some kernels compute (cuDNN's fused attention with dropout), so the run
// names the kernels that took them. Empty without faults in kernels.
std::string fault_kernels_warning(const json& s, const std::string& prefix) {
  const uint64_t faults = number(s, {"fault_kernels", "faults"});
  const uint64_t outside = number(s, {"fault_kernels", "outside_kernels"});
  if (faults <= outside) return {};
  std::string top;
  size_t shown = 0;
  for (const json& k : s["fault_kernels"].value("kernels", json::array())) {
    if (shown++ == 3) break;
    top += fmt::format("{}{} ({})", top.empty() ? "" : "; ", k.value("kernel", "?").substr(0, 100),
                       number(k, {"faults"}));
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
  const uint64_t faults = number(s, {"fault_kernels", "must_be_resident", "faults"});
  if (faults == 0) return {};
  std::string which;
  for (const json& k : s["fault_kernels"]["must_be_resident"].value("kernels", json::array())) {
    which += fmt::format("{}{} ({})", which.empty() ? "" : "; ",
                         k.value("kernel", "?").substr(0, 100), number(k, {"faults"}));
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
  if (!s.contains("advisor") || !s["advisor"].contains("evict_copy") ||
      !s["advisor"]["evict_copy"].contains("round_trips")) {
    return {};
  }
  const json& r = s["advisor"]["evict_copy"]["round_trips"];
  if (!r.value("hashed", false)) {
    const std::string why = r.contains("off_reason") && r["off_reason"].is_string()
                                ? r["off_reason"].get<std::string>()
                                : std::string("?");
    return prefix + "note: the round trips were not hashed (" + why + ")\n";
  }
  const uint64_t page = number(r, {"page_bytes"}) ? number(r, {"page_bytes"}) : (2ull << 20);
  const uint64_t bad = number(r, {"mismatched_pages"});
  const uint64_t skipped = number(r, {"not_compared_pages", "no_slot"}) +
                           number(r, {"not_compared_pages", "unmatched"}) +
                           number(r, {"not_compared_pages", "away_at_exit"}) +
                           number(r, {"not_compared_pages", "returning_at_exit"});
  std::string out;
  if (bad > 0) {
    *mismatched = true;
    out += prefix + fmt::format(
                        "FAILED: {} pages ({}) came back from the host different from what left "
                        "the GPU (each hashed on the GPU as it left and once it was back)\n",
                        bad, gib(bad * page));
    size_t shown = 0;
    for (const json& m : r.value("first_mismatches", json::array())) {
      if (shown++ == 4) break;
      std::string where = "page " + m.value("page", "?");
      if (m.contains("buffer")) {
        where += fmt::format(" in buffer {} at {}", number(m, {"buffer", "index"}),
                             m["buffer"].value("base", "?"));
      }
      out += prefix +
             fmt::format("  {}: out at launch {} ({}), back at launch {} ({})\n", where,
                         number(m, {"left_at_launch"}), m.value("left_kernel", "?").substr(0, 80),
                         number(m, {"back_at_launch"}), m.value("back_kernel", "?").substr(0, 80));
    }
  } else {
    const uint64_t checked = number(r, {"checked_pages"});
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
  if (!s.contains("advisor") || !s["advisor"].contains("evict_copy")) return {};
  const json& ec = s["advisor"]["evict_copy"];
  if (!ec.contains("off_reason") || !ec["off_reason"].is_string()) return {};
  const std::string why = ec["off_reason"].get<std::string>();
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
    const uint64_t out = number(s, {"advisor", "evict_copy", "copied_out_bytes"});
    const uint64_t in = number(s, {"advisor", "evict_copy", "copied_in_bytes"});
    const uint64_t faults = number(s, {"copy_check", "unforeseen", "faults"});
    const uint64_t windows = number(s, {"copy_check", "unforeseen", "windows"});
    const uint64_t early =
        number(s, {"copy_check", "unforeseen", "copies_out_before_copy_back_ended"});
    const uint64_t harmful = number(s, {"copy_check", "harmful"});
    const uint64_t lost = number(s, {"advisor", "evict_copy", "lost_bytes"});
    const uint64_t dropped = number(s, {"detection", "dropped_records"});
    if (const std::string f = resident_faults_failure(s, p + who); !f.empty()) {
      resident_failed = true;
      lines += f;
    }
    if (out == 0) {
      lines += p + who + "nothing was copied to the host";
      const json* ec = s.contains("advisor") && s["advisor"].contains("evict_copy")
                           ? &s["advisor"]["evict_copy"]
                           : nullptr;
      if (ec && ec->contains("off_reason") && (*ec)["off_reason"].is_string() &&
          !(*ec)["off_reason"].get<std::string>().empty()) {
        lines += fmt::format(" (copies off: {})", (*ec)["off_reason"].get<std::string>());
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
      if (s["copy_check"]["unforeseen"].contains("first")) {
        size_t shown = 0;
        for (const json& f : s["copy_check"]["unforeseen"]["first"]) {
          if (shown++ == 4) break;
          std::string where = f.value("address", "?");
          if (f.contains("buffer")) {
            where +=
                fmt::format(" in buffer {} at {} ({})", number(f, {"buffer", "index"}),
                            f["buffer"].value("base", "?"), gib(number(f, {"buffer", "size"})));
          }
          std::string steps;
          if (f.contains("steps_running")) {
            for (const json& st : f["steps_running"]) {
              steps += (steps.empty() ? "" : "; ") + st.get<std::string>();
            }
          }
          lines += p + who +
                   fmt::format("  {} ({}), while on the GPU: {}\n", where,
                               number(f, {"access"}) == 2   ? "write"
                               : number(f, {"access"}) == 3 ? "atomic"
                                                            : "read",
                               steps.empty() ? "no step recorded" : steps);
        }
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
