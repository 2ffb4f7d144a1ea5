// docs/options.md is what umswap_options_doc renders from the option table, the README's
// paragraph that links it names exactly the table's user options, and the removed options are
// in the lab's tried-and-removed.md.
#include "umswap/cli/options_doc.h"

#include <gtest/gtest.h>
#include <stdio.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "umswap/core/options.h"

#ifndef UMSWAP_TEST_SOURCE_DIR
#error "UMSWAP_TEST_SOURCE_DIR must name the source tree"
#endif
#ifndef UMSWAP_TEST_OPTIONS_DOC_BINARY
#error "UMSWAP_TEST_OPTIONS_DOC_BINARY must name umswap_options_doc"
#endif

namespace umswap {
namespace {

namespace fs = std::filesystem;

std::string read_source(const std::string& relative) {
  std::ifstream in(fs::path(UMSWAP_TEST_SOURCE_DIR) / relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// "line N: expected ... / found ..." for the first line where the two texts differ.
std::string first_difference(const std::string& expected, const std::string& found) {
  std::istringstream e(expected), f(found);
  std::string el, fl;
  for (int n = 1;; ++n) {
    const bool more_e = static_cast<bool>(std::getline(e, el));
    const bool more_f = static_cast<bool>(std::getline(f, fl));
    if (!more_e && !more_f) return "only in the last newline";
    if (!more_e || !more_f || el != fl) {
      return "line " + std::to_string(n) + ":\n  expected: " + (more_e ? el : "(end of file)") +
             "\n  found:    " + (more_f ? fl : "(end of file)");
    }
  }
}

TEST(OptionsDoc, IsWhatTheTableGives) {
  const std::string expected = cli::options_markdown();
  const std::string found = read_source("docs/options.md");
  if (found != expected) {
    ADD_FAILURE() << "docs/options.md differs from the option table (core/options.cpp) at "
                  << first_difference(expected, found)
                  << "\nRegenerate it: build/bin/umswap_options_doc > docs/options.md"
                  << "\nor paste the text between the lines:\n-----\n"
                  << expected << "-----";
  }
}

// The command the file's first lines name prints the same text.
TEST(OptionsDoc, TheProgramPrintsIt) {
  FILE* pipe = popen(UMSWAP_TEST_OPTIONS_DOC_BINARY, "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0);
  EXPECT_EQ(out, cli::options_markdown());
  EXPECT_NE(out.find("umswap_options_doc > docs/options.md"), std::string::npos);
}

TEST(OptionsDoc, ListsEveryOptionOnceUserOptionsFirst) {
  const std::string doc = cli::options_markdown();
  const size_t advanced_section = doc.find("\n## Experiments and diagnostics\n");
  const size_t removed_section = doc.find("\n## Removed options\n");
  ASSERT_NE(advanced_section, std::string::npos);
  ASSERT_NE(removed_section, std::string::npos);
  for (const OptionInfo& option : option_table()) {
    const std::string row = "| `" + std::string(option.name) + "` |";
    const size_t at = doc.find(row);
    ASSERT_NE(at, std::string::npos) << option.name;
    EXPECT_EQ(doc.find(row, at + 1), std::string::npos) << option.name << " twice";
    EXPECT_EQ(at > advanced_section, option.advanced) << option.name;
    EXPECT_LT(at, removed_section) << option.name;
  }
  for (const RemovedOption& removed : removed_options()) {
    const size_t at = doc.find("| `" + std::string(removed.name) + "` |");
    ASSERT_NE(at, std::string::npos) << removed.name;
    EXPECT_GT(at, removed_section) << removed.name;
  }
}

// docs/options.md sends the reader there for why each removed option went; one that was
// replaced names an option of the table instead, and its row says which.
TEST(OptionsDoc, RemovedOptionsAreInTheLabOrNameTheirReplacement) {
  const std::string lab = read_source("docs/lab/tried-and-removed.md");
  ASSERT_FALSE(lab.empty());
  const std::string doc = cli::options_markdown();
  size_t replaced = 0;
  for (const RemovedOption& removed : removed_options()) {
    if (!removed.replacement) {
      EXPECT_NE(lab.find("`" + std::string(removed.name)), std::string::npos) << removed.name;
      continue;
    }
    ++replaced;
    const std::string replacement = removed.replacement;
    const std::string variable = replacement.substr(0, replacement.find('='));
    bool in_table = false;
    for (const OptionInfo& option : option_table()) in_table = in_table || option.name == variable;
    EXPECT_TRUE(in_table) << removed.name << " -> " << replacement;
    EXPECT_NE(doc.find("| `" + std::string(removed.name) + "` | replaced by `" + replacement + "`"),
              std::string::npos)
        << removed.name;
  }
  EXPECT_GT(replaced, 0u);
}

std::set<std::string> user_options() {
  std::set<std::string> names;
  for (const OptionInfo& option : option_table()) {
    if (!option.advanced) names.insert(std::string(option.name));
  }
  return names;
}

// The README's paragraph that links docs/options.md names exactly the user options (`umswap
// --help`'s), no experiment or diagnostic.
TEST(OptionsDoc, ReadmeNamesExactlyTheUserOptions) {
  const std::string readme = read_source("README.md");
  const size_t link = readme.find("](docs/options.md)");
  ASSERT_NE(link, std::string::npos) << "README.md does not link docs/options.md";
  const size_t begin = readme.rfind("\n\n", link);
  const size_t end = readme.find("\n\n", link);
  ASSERT_NE(begin, std::string::npos);
  const std::string paragraph = readme.substr(begin, end - begin);
  std::set<std::string> named;
  static const std::regex kName("UMSWAP_[A-Z_]+");
  for (std::sregex_iterator it(paragraph.begin(), paragraph.end(), kName), last; it != last; ++it) {
    named.insert(it->str());
  }
  EXPECT_EQ(named, user_options()) << paragraph;
}

TEST(OptionsDoc, CliDocLinksIt) {
  EXPECT_NE(read_source("docs/cli.md").find("](options.md)"), std::string::npos);
}

}  // namespace
}  // namespace umswap
