#include "umswap/cli/plan_cache.h"

#include "umswap/cli/compare.h"
#include "umswap/core/options.h"
#include "umswap/core/trace_file.h"
#include "umswap/core/trace_iterations.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <sstream>
#include <system_error>

namespace umswap::cli {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kTraceSuffix = ".umtrace";
constexpr std::string_view kDescriptionSuffix = ".json";

// FNV-1a, 64 bits.
struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  }
  // A field: its length first, so that ("ab", "c") and ("a", "bc") differ.
  void field(std::string_view s) {
    bytes(std::to_string(s.size()));
    bytes(":");
    bytes(s);
  }
};

bool is_key(std::string_view s) {
  return s.size() == 16 && is_plan_key_prefix(s);
}

fs::path trace_path(const fs::path& dir, const std::string& key) {
  return dir / (key + std::string(kTraceSuffix));
}
fs::path description_path(const fs::path& dir, const std::string& key) {
  return dir / (key + std::string(kDescriptionSuffix));
}

// A name in `dir` for a file about to be renamed to `final_name`: another umswap may be writing
// the same entry.
fs::path temporary_path(const fs::path& dir, std::string_view final_name) {
  return dir / fmt::format(".{}.{}.tmp", final_name, ::getpid());
}

nlohmann::json describe(const PlanCacheEntry& e) {
  return {{"key", e.key},
          {"command", e.identity.command},
          {"cwd", e.identity.cwd},
          {"alloc_conf", e.identity.alloc_conf},
          {"version", e.identity.version},
          {"files", e.identity.files},
          {"recorded", e.recorded},
          {"used", e.used},
          {"runs", e.runs},
          {"bytes", e.bytes},
          {"iterations", e.iterations},
          {"period", e.period}};
}

std::optional<PlanCacheEntry> read_description(const fs::path& dir, const std::string& key) {
  std::ifstream in(description_path(dir, key));
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  try {
    PlanCacheEntry e;
    e.key = j.at("key").get<std::string>();
    if (e.key != key) return std::nullopt;
    e.trace = trace_path(dir, key);
    e.identity.command = j.at("command").get<std::vector<std::string>>();
    e.identity.cwd = j.at("cwd").get<std::string>();
    e.identity.alloc_conf = j.at("alloc_conf").get<std::string>();
    e.identity.version = j.at("version").get<std::string>();
    e.identity.files = j.at("files").get<std::string>();
    e.recorded = j.at("recorded").get<std::string>();
    e.used = j.at("used").get<std::string>();
    e.runs = j.at("runs").get<uint64_t>();
    e.bytes = j.at("bytes").get<uint64_t>();
    e.iterations = j.at("iterations").get<uint64_t>();
    e.period = j.at("period").get<uint64_t>();
    return e;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

bool write_description(const fs::path& dir, const PlanCacheEntry& e, std::string* error) {
  const fs::path final_path = description_path(dir, e.key);
  const fs::path temp = temporary_path(dir, final_path.filename().string());
  {
    std::ofstream out(temp, std::ios::trunc);
    out << describe(e).dump(2) << "\n";
    if (!out.flush()) {
      if (error) *error = fmt::format("cannot write {}", temp.string());
      std::error_code ec;
      fs::remove(temp, ec);
      return false;
    }
  }
  std::error_code ec;
  fs::rename(temp, final_path, ec);
  if (ec) {
    if (error) *error = fmt::format("cannot write {}: {}", final_path.string(), ec.message());
    fs::remove(temp, ec);
    return false;
  }
  return true;
}

void remove_entry(const fs::path& dir, const std::string& key) {
  std::error_code ec;
  fs::remove(trace_path(dir, key), ec);
  fs::remove(description_path(dir, key), ec);
}

}  // namespace

bool is_plan_key_prefix(std::string_view text) {
  return !text.empty() && text.size() <= 16 && std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

std::optional<fs::path> plan_cache_dir(const char* xdg_cache_home, const char* home) {
  if (xdg_cache_home && fs::path(xdg_cache_home).is_absolute()) {
    return fs::path(xdg_cache_home) / "umswap" / "plans";
  }
  if (home && fs::path(home).is_absolute()) return fs::path(home) / ".cache" / "umswap" / "plans";
  return std::nullopt;
}

std::string identity_alloc_conf(const char* pytorch_cuda_alloc_conf,
                                const char* pytorch_alloc_conf) {
  if (pytorch_cuda_alloc_conf) return pytorch_cuda_alloc_conf;
  return pytorch_alloc_conf ? pytorch_alloc_conf : "";
}

std::string identity_files(std::span<const std::string> command, const fs::path& cwd) {
  Fnv f;
  bool any = false;
  for (const std::string& arg : command) {
    if (arg.empty()) continue;
    const fs::path path = fs::path(arg).is_absolute() ? fs::path(arg) : cwd / arg;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) continue;
    const uintmax_t size = fs::file_size(path, ec);
    if (ec || size > kPlanCacheFileBytes) continue;
    std::ifstream in(path, std::ios::binary);
    std::ostringstream contents;
    contents << in.rdbuf();
    if (!in && !in.eof()) continue;
    f.field(arg);
    f.field(contents.str());
    any = true;
  }
  return any ? fmt::format("{:016x}", f.h) : std::string();
}

std::string plan_cache_key(const PlanIdentity& identity) {
  Fnv f;
  f.field("umswap plan cache 1");
  f.field(std::to_string(identity.command.size()));
  for (const std::string& arg : identity.command) f.field(arg);
  f.field(identity.cwd);
  f.field(identity.alloc_conf);
  f.field(identity.version);
  f.field(identity.files);
  return fmt::format("{:016x}", f.h);
}

std::optional<std::string> plan_cache_skip_reason(
    const RunFlags& flags, const std::function<const char*(const char*)>& env) {
  const auto set = [&](const char* name) {
    const char* v = env(name);
    return v && *v;
  };
  if (flags.no_cache) return "--no-cache was given";
  if (flags.record) return "record writes its own trace";
  if (flags.replay_trace) return "replay follows the trace it is given";
  if (flags.verify) return "--verify checks an online run";
  if (is_torchrun_command(flags.command)) {
    return "torchrun starts a process per rank, and one cached plan cannot serve them all";
  }
  if (set("UMSWAP_TRACE") || set("UMSWAP_REPLAY")) {
    return "UMSWAP_TRACE or UMSWAP_REPLAY is set in the environment";
  }
  const char* mode_text = env("UMSWAP_MODE");
  const std::optional<Mode> mode =
      flags.mode ? flags.mode : (mode_text ? parse_mode(mode_text) : std::optional(Mode::online));
  if (mode != Mode::online) return "the mode is not online";
  const char* engine_text = env("UMSWAP_ENGINE");
  const std::optional<Engine> engine =
      flags.engine ? flags.engine
                   : (engine_text ? parse_engine(engine_text) : std::optional(Engine::um));
  if (engine != Engine::um) return "the engine is not um";
  std::optional<SizeSpec> budget = flags.budget;
  if (!budget) {
    const char* v = env("UMSWAP_BUDGET");
    if (v) budget = parse_size(v);
  }
  if (!budget || budget->is_zero()) return "no budget, so nothing is evicted";
  return std::nullopt;
}

std::optional<PlanCacheEntry> PlanCache::find(const std::string& key, std::string* problem) const {
  problem->clear();
  std::error_code ec;
  const bool has_trace = fs::exists(trace_path(dir_, key), ec);
  const bool has_description = fs::exists(description_path(dir_, key), ec);
  if (!has_trace && !has_description) return std::nullopt;
  std::optional<PlanCacheEntry> entry = read_description(dir_, key);
  if (!entry) {
    *problem =
        fmt::format("its description {} does not read", description_path(dir_, key).string());
  } else {
    std::string why;
    const std::optional<trace::Trace> t = read_trace_file(entry->trace.string(), &why);
    if (!t) {
      *problem = why;
    } else if (!trace::replay_iteration(*t)) {
      *problem = fmt::format("{} holds no iteration of its period", entry->trace.string());
    }
  }
  if (!problem->empty()) {
    remove_entry(dir_, key);
    return std::nullopt;
  }
  return entry;
}

bool PlanCache::store(const std::string& key, const PlanIdentity& identity, const fs::path& trace,
                      const std::optional<PlanCacheEntry>& previous, const std::string& now,
                      std::string* error, uint64_t max_bytes) const {
  std::string why;
  const std::optional<trace::Trace> t = read_trace_file(trace.string(), &why);
  if (!t) {
    *error = why;
    return false;
  }
  if (!trace::replay_iteration(*t)) {
    *error = fmt::format("the trace holds no iteration of its period ({} iterations, {} steps)",
                         t->iterations.size(), t->steps.size());
    return false;
  }
  if (previous && t->iterations.size() < previous->iterations) {
    *error = fmt::format("it holds {} iterations, the cached one {}: the run stopped early",
                         t->iterations.size(), previous->iterations);
    return false;
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    *error = fmt::format("cannot make {}: {}", dir_.string(), ec.message());
    return false;
  }
  // Copied, then renamed: the trace is usually on another file system (a temporary folder).
  const fs::path final_trace = trace_path(dir_, key);
  const fs::path temp = temporary_path(dir_, final_trace.filename().string());
  fs::copy_file(trace, temp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(temp, final_trace, ec);
  if (ec) {
    *error = fmt::format("cannot write {}: {}", final_trace.string(), ec.message());
    fs::remove(temp, ec);
    return false;
  }
  PlanCacheEntry e;
  e.key = key;
  e.trace = final_trace;
  e.identity = identity;
  e.recorded = now;
  e.used = now;
  e.runs = (previous ? previous->runs : 0) + 1;
  e.bytes = fs::file_size(final_trace, ec);
  if (ec) e.bytes = 0;
  e.iterations = t->iterations.size();
  e.period = t->detection.period;
  if (!write_description(dir_, e, error)) {
    remove_entry(dir_, key);
    return false;
  }
  // The least recently used past the limits go (list() puts the most recent first); the one just
  // stored counts first and stays.
  std::vector<PlanCacheEntry> all = list();
  std::stable_partition(all.begin(), all.end(),
                        [&](const PlanCacheEntry& x) { return x.key == key; });
  uint64_t bytes = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    bytes += all[i].bytes;
    if (i > 0 && (i >= kPlanCacheMaxEntries || bytes > max_bytes)) remove_entry(dir_, all[i].key);
  }
  return true;
}

void PlanCache::mark_used(const PlanCacheEntry& entry, const std::string& now) const {
  PlanCacheEntry e = entry;
  e.used = now;
  ++e.runs;
  write_description(dir_, e, nullptr);
}

std::vector<PlanCacheEntry> PlanCache::list() const {
  std::vector<PlanCacheEntry> out;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir_, ec)) {
    const std::string name = f.path().filename().string();
    if (!name.ends_with(kDescriptionSuffix)) continue;
    const std::string key = name.substr(0, name.size() - kDescriptionSuffix.size());
    if (!is_key(key)) continue;
    if (std::optional<PlanCacheEntry> e = read_description(dir_, key)) out.push_back(*e);
  }
  // The times' text sorts as the times do; then by key, so the order is stable.
  std::sort(out.begin(), out.end(), [](const PlanCacheEntry& a, const PlanCacheEntry& b) {
    return a.used != b.used ? a.used > b.used : a.key < b.key;
  });
  return out;
}

std::vector<std::string> PlanCache::remove(std::span<const std::string> prefixes) const {
  std::vector<std::string> keys;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir_, ec)) {
    const std::string name = f.path().filename().string();
    for (std::string_view suffix : {kTraceSuffix, kDescriptionSuffix}) {
      if (!name.ends_with(suffix)) continue;
      const std::string key = name.substr(0, name.size() - suffix.size());
      if (is_key(key)) keys.push_back(key);
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<std::string> removed;
  for (const std::string& key : keys) {
    const bool wanted =
        prefixes.empty() || std::any_of(prefixes.begin(), prefixes.end(),
                                        [&](const auto& p) { return key.starts_with(p); });
    if (!wanted) continue;
    remove_entry(dir_, key);
    removed.push_back(key);
  }
  return removed;
}

std::string plan_cache_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
  return text;
}

}  // namespace umswap::cli
