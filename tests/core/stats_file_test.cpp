// The stats file: path pattern, atomic write, and the checks a reader makes before trusting it.
#include "umswap/core/stats_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace umswap {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class StatsFileTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "umswap_stats_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_text(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
  }
  std::vector<std::string> entries(const fs::path& dir) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

nlohmann::json sample_stats() {
  return {{"umswap_stats_version", kStatsFormatVersion},
          {"allocations", 42},
          {"managed_bytes_peak", uint64_t{1} << 40},
          {"options", {{"budget", "16G"}, {"managed_limit", "75%"}}},
          {"by_api", nlohmann::json::array({1, 2, 3})}};
}

// --- expand_stats_path -------------------------------------------------------------------------

TEST(ExpandStatsPath, ReplacesEachPercentP) {
  EXPECT_EQ(expand_stats_path("/tmp/stats.%p.json", 1234), "/tmp/stats.1234.json");
  EXPECT_EQ(expand_stats_path("%p/%p", 7), "7/7");
  EXPECT_EQ(expand_stats_path("%p", 99999), "99999");
}

TEST(ExpandStatsPath, DoublePercentIsOnePercent) {
  EXPECT_EQ(expand_stats_path("/tmp/100%%.json", 1), "/tmp/100%.json");
  EXPECT_EQ(expand_stats_path("%%p", 5), "%p");   // an escaped percent, then a plain p
  EXPECT_EQ(expand_stats_path("%%%p", 5), "%5");  // escaped percent, then the pid
  EXPECT_EQ(expand_stats_path("%%%%", 5), "%%");
}

TEST(ExpandStatsPath, OtherTextIsKept) {
  EXPECT_EQ(expand_stats_path("", 5), "");
  EXPECT_EQ(expand_stats_path("/tmp/plain.json", 5), "/tmp/plain.json");
  EXPECT_EQ(expand_stats_path("stats%", 5), "stats%");  // trailing percent stays
  EXPECT_EQ(expand_stats_path("%", 5), "%");
  EXPECT_EQ(expand_stats_path("a%xb", 5), "a%xb");  // unknown escapes stay
  EXPECT_EQ(expand_stats_path("%P", 5), "%P");      // case matters
}

// --- write then read ---------------------------------------------------------------------------

TEST_F(StatsFileTest, WriteThenReadRoundTrips) {
  std::string error;
  ASSERT_TRUE(write_stats_file(path("s.json"), sample_stats(), &error)) << error;
  const auto back = read_stats_file(path("s.json"), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(*back, sample_stats());
  // Only the file itself: the temporary was renamed into place.
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"s.json"});
}

TEST_F(StatsFileTest, WriteReplacesAnExistingFile) {
  write_text("s.json", "old contents that are not JSON");
  nlohmann::json stats = sample_stats();
  stats["allocations"] = 7;
  std::string error;
  ASSERT_TRUE(write_stats_file(path("s.json"), stats, &error)) << error;
  const auto back = read_stats_file(path("s.json"), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ((*back)["allocations"], 7);
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"s.json"});
}

TEST_F(StatsFileTest, WrittenFileIsReadableJsonEndingInANewline) {
  ASSERT_TRUE(write_stats_file(path("s.json"), sample_stats(), nullptr));
  std::ifstream in(path("s.json"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(nlohmann::json::parse(text), sample_stats());
}

// --- write errors ------------------------------------------------------------------------------

TEST_F(StatsFileTest, WriteIntoMissingDirectoryFailsWithAMessage) {
  const std::string target = path("no/such/dir/s.json");
  std::string error;
  EXPECT_FALSE(write_stats_file(target, sample_stats(), &error));
  EXPECT_NE(error.find(path("no/such/dir/")), std::string::npos) << error;
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
  EXPECT_TRUE(entries(dir_).empty());
  EXPECT_FALSE(write_stats_file(target, sample_stats(), nullptr));  // no error string: no crash
}

TEST_F(StatsFileTest, WriteBelowARegularFileFails) {
  write_text("file", "x");
  std::string error;
  EXPECT_FALSE(write_stats_file(path("file/s.json"), sample_stats(), &error));
  EXPECT_NE(error.find("Not a directory"), std::string::npos) << error;
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"file"});
}

// The temporary can be written but not renamed over the target (a directory): the temporary
// must not be left behind.
TEST_F(StatsFileTest, FailedRenameRemovesTheTemporary) {
  fs::create_directory(path("s.json"));
  write_text("s.json/keep", "x");
  std::string error;
  EXPECT_FALSE(write_stats_file(path("s.json"), sample_stats(), &error));
  EXPECT_NE(error.find("cannot rename"), std::string::npos) << error;
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"s.json"});
  EXPECT_EQ(entries(path("s.json")), std::vector<std::string>{"keep"});
}

TEST_F(StatsFileTest, WriteIntoReadOnlyDirectoryFails) {
  const std::string ro = path("ro");
  fs::create_directory(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  if (access(ro.c_str(), W_OK) == 0) {
    GTEST_SKIP() << "running with privileges that ignore directory permissions (root?)";
  }
  std::string error;
  EXPECT_FALSE(write_stats_file(ro + "/s.json", sample_stats(), &error));
  EXPECT_NE(error.find("Permission denied"), std::string::npos) << error;
  fs::permissions(ro, fs::perms::owner_all);
  EXPECT_TRUE(entries(ro).empty());
}

// --- read errors -------------------------------------------------------------------------------

void expect_read_error(const std::string& file, const std::string& problem) {
  std::string error;
  EXPECT_EQ(read_stats_file(file, &error), std::nullopt);
  EXPECT_EQ(error.rfind(file, 0), 0u) << "message does not start with the path: " << error;
  EXPECT_NE(error.find(problem), std::string::npos) << error;
  EXPECT_EQ(read_stats_file(file, nullptr), std::nullopt);
}

TEST_F(StatsFileTest, ReadMissingFile) {
  expect_read_error(path("missing.json"), "cannot open");
}

TEST_F(StatsFileTest, ReadInvalidJson) {
  write_text("bad.json", "{\"umswap_stats_version\": 1,");
  expect_read_error(path("bad.json"), "not valid JSON");
  write_text("empty.json", "");
  expect_read_error(path("empty.json"), "not valid JSON");
}

TEST_F(StatsFileTest, ReadJsonThatIsNotAnObject) {
  write_text("array.json", "[1, 2, 3]");
  expect_read_error(path("array.json"), "not a JSON object");
  write_text("number.json", "1");
  expect_read_error(path("number.json"), "not a JSON object");
}

TEST_F(StatsFileTest, ReadWithoutVersion) {
  write_text("s.json", R"({"allocations": 3})");
  expect_read_error(path("s.json"), "umswap_stats_version");
}

TEST_F(StatsFileTest, ReadWithVersionOfTheWrongType) {
  write_text("s.json", R"({"umswap_stats_version": "1"})");
  expect_read_error(path("s.json"), "umswap_stats_version");
  write_text("s.json", R"({"umswap_stats_version": 1.5})");
  expect_read_error(path("s.json"), "umswap_stats_version");
}

TEST_F(StatsFileTest, ReadWithUnsupportedVersion) {
  write_text("s.json", R"({"umswap_stats_version": 2})");
  expect_read_error(path("s.json"), "stats version 2 is not the supported version 1");
  write_text("s.json", R"({"umswap_stats_version": 0})");
  expect_read_error(path("s.json"), "stats version 0");
}

TEST_F(StatsFileTest, ReadMinimalValidFile) {
  write_text("s.json", R"({"umswap_stats_version": 1})");
  std::string error;
  const auto j = read_stats_file(path("s.json"), &error);
  ASSERT_TRUE(j) << error;
  EXPECT_EQ((*j)["umswap_stats_version"], 1);
}

}  // namespace
}  // namespace umswap
