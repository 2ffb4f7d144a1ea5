// The stats file's schema (core/include/umswap/core/stats_schema.h): its table is a tree, it
// finds what it names, docs/stats.md documents every field as the schema does, a file holding
// every field is read by compare and --verify, and the stats fixtures of the tests here use only
// the schema's fields and still read.
#include "umswap/core/stats_schema.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "umswap/cli/compare.h"
#include "umswap/cli/run_summary.h"
#include "umswap/cli/verify_report.h"
#include "umswap/core/stats_file.h"

#ifndef UMSWAP_TEST_SOURCE_DIR
#error "UMSWAP_TEST_SOURCE_DIR must name the source tree"
#endif

namespace umswap {
namespace {

namespace fs = std::filesystem;
namespace schema = stats_schema;
using nlohmann::json;

std::string read_source(const std::string& relative) {
  std::ifstream in(fs::path(UMSWAP_TEST_SOURCE_DIR) / relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The path of the object or array `path` is in ("" at the top) and whether it is an array.
std::pair<std::string, bool> parent_of(std::string_view path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string_view::npos) return {"", false};
  std::string parent(path.substr(0, dot));
  if (parent.ends_with("[]")) return {parent.substr(0, parent.size() - 2), true};
  return {parent, false};
}

TEST(StatsSchema, IsATreeOfUniquePathsWithKnownTypes) {
  const std::set<std::string_view> types = {"integer", "integer or null", "number", "boolean",
                                            "string",  "string or null",  "object", "array"};
  std::set<std::string_view> seen;
  for (const schema::Field& f : schema::fields()) {
    SCOPED_TRACE(std::string(f.path));
    EXPECT_TRUE(seen.insert(f.path).second) << "listed twice";
    EXPECT_TRUE(types.contains(f.type)) << f.type;
    EXPECT_FALSE(f.meaning.empty());
    EXPECT_FALSE(f.written.empty());
    EXPECT_TRUE(f.meaning.find('|') == std::string_view::npos) << "breaks docs/stats.md's table";
    const auto [parent, in_array] = parent_of(f.path);
    if (parent.empty()) continue;
    const schema::Field* p = schema::find_field(parent);
    ASSERT_NE(p, nullptr) << "its parent " << parent << " is not a field";
    EXPECT_EQ(p->type, in_array ? "array" : "object") << parent;
    if (f.kind == schema::Kind::user) {
      EXPECT_EQ(p->kind, schema::Kind::user) << "a user-facing field in a diagnostic " << parent;
    }
  }
  EXPECT_EQ(schema::kVersion.path, "umswap_stats_version");
  EXPECT_EQ(schema::find_field("advisor.no_such_field"), nullptr);
}

TEST(StatsSchema, NamesAndRelativePaths) {
  EXPECT_EQ(schema::advisor::evict_copy::kCopiedOutBytes.path,
            "advisor.evict_copy.copied_out_bytes");
  EXPECT_EQ(schema::advisor::evict_copy::kCopiedOutBytes.name(), "copied_out_bytes");
  EXPECT_EQ(schema::advisor::evict_copy::kCopiedOutBytes.relative_path(),
            "advisor.evict_copy.copied_out_bytes");
  EXPECT_EQ(schema::iterations::kWallMs.name(), "wall_ms");
  EXPECT_EQ(schema::iterations::kWallMs.relative_path(), "wall_ms");
  namespace first = schema::copy_check::unforeseen::first;
  EXPECT_EQ(first::buffer::kSize.relative_path(), "buffer.size");
  EXPECT_EQ(schema::kIterations.name(), "iterations");
}

TEST(StatsSchema, FindWalksThePathAndReportsWhatIsMissing) {
  const json s = json::parse(R"({
    "advisor": {"evict_copy": {"copied_out_bytes": 7, "kept_reached": 3}, "mode": "online"},
    "iterations": [{"wall_ms": 1.5}],
    "copy_check": {"unforeseen": {"first": [{"buffer": {"size": 9}}]}}})");
  namespace ec = schema::advisor::evict_copy;
  ASSERT_NE(schema::find(s, ec::kCopiedOutBytes), nullptr);
  EXPECT_EQ(*schema::find(s, ec::kCopiedOutBytes), 7);
  EXPECT_EQ(*schema::find(s, schema::advisor::kMode), "online");
  EXPECT_EQ(schema::find(s, ec::kCopiedInBytes), nullptr);                    // missing
  EXPECT_EQ(schema::find(s, ec::kept_reached::kBytes), nullptr);              // a number on the way
  EXPECT_EQ(schema::find(json::parse("[1]"), ec::kCopiedOutBytes), nullptr);  // not an object
  EXPECT_EQ(schema::find(json(), schema::kVersion), nullptr);
  // A field of an array's elements: from the element.
  EXPECT_EQ(*schema::find(s["iterations"][0], schema::iterations::kWallMs), 1.5);
  const json& first = s["copy_check"]["unforeseen"]["first"][0];
  EXPECT_EQ(*schema::find(first, schema::copy_check::unforeseen::first::buffer::kSize), 9);
}

// --- docs/stats.md --------------------------------------------------------------------------

struct DocRow {
  std::string section, type, meaning;
};

// The table rows of docs/stats.md, by path, with the `## ` section each is in.
std::map<std::string, DocRow> doc_rows(const std::string& text, std::vector<std::string>* twice) {
  std::map<std::string, DocRow> rows;
  std::string section;
  std::istringstream in(text);
  static const std::regex kRow(R"(^\| `([^`]+)` \| ([^|]+?) \| ([^|]+?) \|$)");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("## ")) section = line.substr(3);
    std::smatch m;
    if (!std::regex_match(line, m, kRow)) continue;
    if (!rows.emplace(m[1], DocRow{section, m[2], m[3]}).second) twice->push_back(m[1]);
  }
  return rows;
}

constexpr std::string_view kUserSection = "User-facing fields";
constexpr std::string_view kDiagnosticSection = "Diagnostic fields";

std::string expected_table(schema::Kind kind) {
  std::string out = "| Field | Type | Meaning |\n| --- | --- | --- |\n";
  for (const schema::Field& f : schema::fields()) {
    if (f.kind != kind) continue;
    out += "| `" + std::string(f.path) + "` | " + std::string(f.type) + " | " +
           std::string(f.meaning) + " |\n";
  }
  return out;
}

TEST(StatsDoc, DocumentsEveryFieldAsTheSchemaDoes) {
  const std::string text = read_source("docs/stats.md");
  ASSERT_FALSE(text.empty()) << "docs/stats.md not found under " << UMSWAP_TEST_SOURCE_DIR;
  EXPECT_NE(text.find("The current version is " + std::to_string(kStatsFormatVersion) + ","),
            std::string::npos)
      << "docs/stats.md does not give version " << kStatsFormatVersion;
  EXPECT_NE(text.find("## " + std::string(kUserSection) + "\n"), std::string::npos);
  EXPECT_NE(text.find("## " + std::string(kDiagnosticSection) + "\n"), std::string::npos);
  std::vector<std::string> twice;
  const std::map<std::string, DocRow> rows = doc_rows(text, &twice);
  EXPECT_TRUE(twice.empty()) << "documented twice: " << testing::PrintToString(twice);
  bool all_good = true;
  for (const schema::Field& f : schema::fields()) {
    SCOPED_TRACE(std::string(f.path));
    const auto it = rows.find(std::string(f.path));
    if (it == rows.end()) {
      ADD_FAILURE() << "not in docs/stats.md";
      all_good = false;
      continue;
    }
    const DocRow& row = it->second;
    const std::string_view section =
        f.kind == schema::Kind::user ? kUserSection : kDiagnosticSection;
    all_good = all_good && row.section == section && row.type == f.type && row.meaning == f.meaning;
    EXPECT_EQ(row.section, section);
    EXPECT_EQ(row.type, f.type);
    EXPECT_EQ(row.meaning, f.meaning);
  }
  for (const auto& [path, row] : rows) {
    if (!schema::find_field(path)) {
      ADD_FAILURE() << "docs/stats.md documents " << path << ", which the schema does not have";
      all_good = false;
    }
  }
  if (!all_good) {
    ADD_FAILURE() << "docs/stats.md's tables, from the schema:\n\n## " << kUserSection << "\n\n"
                  << expected_table(schema::Kind::user) << "\n## " << kDiagnosticSection << "\n\n"
                  << expected_table(schema::Kind::diagnostic);
  }
}

// --- The readers on a file holding every field ------------------------------------------------

// A value of `f`'s type; integers and numbers distinct per field, so a reader that took the
// wrong field shows.
json sample_value(const schema::Field& f, uint64_t n) {
  if (f.type == "integer") return n;
  if (f.type == "number") return static_cast<double>(n) + 0.5;
  if (f.type == "boolean") return true;
  if (f.type == "array") return json::array();
  if (f.type == "object") return json::object();
  return "text " + std::to_string(n);
}

// Sets `f` in `root` unless it is there, making the objects and arrays (of one element) on its
// way.
void set_field(json& root, const schema::Field& f, const json& value) {
  json* at = &root;
  std::string_view rest = f.path;
  while (true) {
    const size_t dot = rest.find('.');
    std::string key(rest.substr(0, dot));
    const bool element = key.ends_with("[]");
    if (element) key.resize(key.size() - 2);
    if (dot == std::string_view::npos) {
      if (!at->contains(key)) (*at)[key] = value;
      return;
    }
    if (element) {
      json& array = (*at)[key];
      if (!array.is_array() || array.empty()) array = json::array({json::object()});
      at = &array[0];
    } else {
      at = &(*at)[key];
      if (!at->is_object()) *at = json::object();
    }
    rest.remove_prefix(dot + 1);
  }
}

json every_field() {
  json s = json::object();
  uint64_t n = 1;
  for (const schema::Field& f : schema::fields()) set_field(s, f, sample_value(f, n++));
  s[schema::kVersion.path] = kStatsFormatVersion;
  return s;
}

TEST(StatsSchema, AFileWithEveryFieldHasEachWhereTheSchemaSays) {
  const json s = every_field();
  for (const schema::Field& f : schema::fields()) {
    SCOPED_TRACE(std::string(f.path));
    // A field of an array's elements: in the first element of each array on the way.
    const json* at = &s;
    std::string_view path = f.path;
    for (size_t b; (b = path.find("[].")) != std::string_view::npos;) {
      const schema::Field* array = schema::find_field(path.substr(0, b));
      ASSERT_NE(array, nullptr);
      const json* found = schema::find(*at, *array);
      ASSERT_TRUE(found && found->is_array() && !found->empty());
      at = &(*found)[0];
      path.remove_prefix(b + 3);
    }
    const json* v = schema::find(*at, f);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->is_object(), f.type == "object");
    EXPECT_EQ(v->is_array(), f.type == "array");
  }
}

TEST(StatsSchema, CompareAndVerifyReadEveryFieldOfAFile) {
  std::string dir = (fs::temp_directory_path() / "umswap_schema_test.XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string file = dir + "/stats.json";
  std::string error;
  ASSERT_TRUE(write_stats_file(file, every_field(), &error)) << error;
  const std::optional<json> read = read_stats_file(file, &error);
  fs::remove_all(dir);
  ASSERT_TRUE(read) << error;

  const cli::StatsFigures f = cli::parse_stats_figures(*read);
  EXPECT_TRUE(f.managed_bytes_peak && f.advisor_mode && f.advisor_state && f.advisor_fallback &&
              f.budget_bytes && f.prefetched_bytes && f.evicted_bytes && f.peak_resident_bytes &&
              f.peak_resident_plan_bytes && f.plan_applied_from && f.prefetch_wait &&
              f.evict_wait && f.wait_stalls && f.graph_launches && f.kept_reached_evictions &&
              f.kept_reached_bytes && f.plan_unfit_steps && f.plan_largest_step_bytes &&
              f.detection_source && f.detection_period && f.detection_confidence &&
              f.detection_warmup_steps && f.detection_steps);
  ASSERT_EQ(f.iterations.size(), 1u);
  const cli::StatsIteration& it = f.iterations[0];
  EXPECT_TRUE(it.index && it.first_step && it.wall_ms && it.gpu_page_faults && it.bytes_htod &&
              it.bytes_dtoh && it.prefetched_bytes && it.evicted_bytes && it.peak_resident_bytes);
  // The driver's bytes and umswap's copies, added.
  const auto value = [&](const schema::Field& field) {
    return schema::find((*read)["iterations"][0], field)->get<uint64_t>();
  };
  EXPECT_EQ(*it.bytes_htod,
            value(schema::iterations::kBytesHtod) + value(schema::iterations::kCopiedInBytes));

  // Every figure --verify judges is non-zero here: it fails, and says so for each.
  const cli::VerifyVerdict v = cli::judge_verify({*read}, {"stats.json"});
  EXPECT_FALSE(v.ok);
  for (const char* part : {"GPU page faults on pages umswap held on the host",
                           "copies to the host began before the copy back",
                           "steps ran on a page while it was discarded", "of copies back failed",
                           "came back from the host different", "CUPTI dropped",
                           "GPU page faults inside kernels that compute differently"}) {
    EXPECT_NE(v.text.find(part), std::string::npos) << part << "\n" << v.text;
  }
}

// The run summary names the engine from the file and, under engine vmm, reads its fields.
TEST(StatsSchema, TheRunSummaryReadsTheEngineAndVmmsFields) {
  json s = every_field();
  s[schema::kEngine.path] = "vmm";
  const std::string t = cli::run_summary_text({{"stats.json", s}}, true);
  for (const char* part : {"peak on GPU chunks", "for a pool of", "peak on host chunks",
                           "engine vmm: ", "refused for want of room", " windows held the program ",
                           " CUDA graph launches "}) {
    EXPECT_NE(t.find(part), std::string::npos) << part << "\n" << t;
  }
  s[schema::kEngine.path] = "um";
  const std::string u = cli::run_summary_text({{"stats.json", s}}, true);
  EXPECT_NE(u.find("(engine um)"), std::string::npos) << u;
  EXPECT_NE(u.find(" CUDA graph launches "), std::string::npos) << u;  // advisor.graph_launches
  EXPECT_EQ(u.find("engine vmm"), std::string::npos) << u;
}

// --- The stats fixtures of tests/cli --------------------------------------------------------

// The leaf paths in `j` ("iterations[].wall_ms"); a scalar in an array belongs to the array.
void leaf_paths(const json& j, const std::string& path, std::set<std::string>* out) {
  if (j.is_object()) {
    if (j.empty() && !path.empty()) out->insert(path);
    for (const auto& [key, value] : j.items()) {
      leaf_paths(value, path.empty() ? key : path + "." + key, out);
    }
  } else if (j.is_array()) {
    bool scalars = j.empty();
    for (const json& e : j) {
      if (e.is_object()) {
        leaf_paths(e, path + "[]", out);
      } else {
        scalars = true;
      }
    }
    if (scalars) out->insert(path);
  } else {
    out->insert(path);
  }
}

// The stats files the tests here write or parse as JSON text: each JSON object in their sources
// whose first key is the version.
std::vector<std::pair<std::string, std::string>> stats_fixtures() {
  std::vector<std::pair<std::string, std::string>> out;
  static const std::regex kStart(R"(\{\s*"umswap_stats_version")");
  for (const char* source :
       {"tests/cli/compare_test.cpp", "tests/cli/compare_end_to_end_test.cpp"}) {
    const std::string text = read_source(source);
    EXPECT_FALSE(text.empty()) << source << " not found";
    for (auto m = std::sregex_iterator(text.begin(), text.end(), kStart);
         m != std::sregex_iterator(); ++m) {
      const size_t line = std::count(text.begin(), text.begin() + m->position(), '\n') + 1;
      out.emplace_back(std::string(source) + ":" + std::to_string(line),
                       text.substr(m->position()));
    }
  }
  return out;
}

TEST(StatsFixtures, UseOnlyTheSchemasFieldsAndStillRead) {
  const auto fixtures = stats_fixtures();
  EXPECT_GE(fixtures.size(), 5u);  // compare_test.cpp's three, compare_end_to_end_test.cpp's two
  for (const auto& [where, text] : fixtures) {
    SCOPED_TRACE(where);
    std::istringstream in(text);
    json j;
    try {
      in >> j;  // the one JSON value at the start; the source's text after it is left
    } catch (const json::exception& e) {
      ADD_FAILURE() << "does not parse: " << e.what();
      continue;
    }
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j[schema::kVersion.path], kStatsFormatVersion);
    std::set<std::string> paths;
    leaf_paths(j, "", &paths);
    for (const std::string& path : paths) {
      EXPECT_NE(schema::find_field(path), nullptr) << path << " is not in stats_schema.h";
    }
    EXPECT_NO_THROW(cli::parse_stats_figures(j));
    EXPECT_NO_THROW(cli::judge_verify({j}, {"fixture"}));
  }
}

}  // namespace
}  // namespace umswap
