// Option parsing: the size and boolean grammar, the option table, and parse_options() with a fake
// environment (no getenv here).
#include "umswap/core/options.h"
#include "umswap/core/log.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <iomanip>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

namespace umswap {

// Readable failure messages (found by GoogleTest through argument-dependent lookup).
void PrintTo(const SizeSpec& spec, std::ostream* os) {
  if (spec.is_percent) {
    *os << std::setprecision(17) << spec.percent << "%";
  } else {
    *os << spec.bytes << " bytes";
  }
}

namespace {

constexpr uint64_t KiB = uint64_t{1} << 10;
constexpr uint64_t MiB = uint64_t{1} << 20;
constexpr uint64_t GiB = uint64_t{1} << 30;
constexpr uint64_t TiB = uint64_t{1} << 40;
constexpr uint64_t PiB = uint64_t{1} << 50;

SizeSpec bytes_spec(uint64_t bytes) {
  return SizeSpec{.bytes = bytes};
}
SizeSpec percent_spec(double percent) {
  return SizeSpec{.percent = percent, .is_percent = true};
}

// --- parse_size: accepted forms ---------------------------------------------------------------

TEST(ParseSize, AcceptsBinarySuffixes) {
  EXPECT_EQ(parse_size("16G"), bytes_spec(16 * GiB));
  EXPECT_EQ(parse_size("512m"), bytes_spec(512 * MiB));
  EXPECT_EQ(parse_size("1.5T"), bytes_spec(TiB + TiB / 2));
  EXPECT_EQ(parse_size("4K"), bytes_spec(4 * KiB));
  EXPECT_EQ(parse_size("2P"), bytes_spec(2 * PiB));
  EXPECT_EQ(parse_size("100b"), bytes_spec(100));
}

TEST(ParseSize, AcceptsPlainByteCounts) {
  EXPECT_EQ(parse_size("4096"), bytes_spec(4096));
  EXPECT_EQ(parse_size("1"), bytes_spec(1));
}

TEST(ParseSize, ZeroMeansNone) {
  const auto zero = parse_size("0");
  ASSERT_TRUE(zero);
  EXPECT_FALSE(zero->is_percent);
  EXPECT_EQ(zero->bytes, 0u);
  EXPECT_TRUE(zero->is_zero());
  const auto zero_percent = parse_size("0%");
  ASSERT_TRUE(zero_percent);
  EXPECT_TRUE(zero_percent->is_percent);
  EXPECT_TRUE(zero_percent->is_zero());
  EXPECT_FALSE(parse_size("1")->is_zero());
  EXPECT_FALSE(parse_size("1%")->is_zero());
}

TEST(ParseSize, AcceptsPercentages) {
  const auto spec = parse_size("75%");
  ASSERT_TRUE(spec);
  EXPECT_TRUE(spec->is_percent);
  EXPECT_DOUBLE_EQ(spec->percent, 75.0);
  EXPECT_EQ(parse_size("12.5%"), percent_spec(12.5));
  EXPECT_EQ(parse_size("1000%"), percent_spec(1000.0));  // the largest accepted
}

TEST(ParseSize, IgnoresSpacesAroundNumberAndUnit) {
  EXPECT_EQ(parse_size(" 8 G "), bytes_spec(8 * GiB));
  EXPECT_EQ(parse_size("\t75 %\n"), percent_spec(75.0));
}

TEST(ParseSize, AcceptsLongUnitSpellingsInAnyCase) {
  EXPECT_EQ(parse_size("16GiB"), bytes_spec(16 * GiB));
  EXPECT_EQ(parse_size("16GB"), bytes_spec(16 * GiB));  // binary, like the short form
  EXPECT_EQ(parse_size("16gib"), bytes_spec(16 * GiB));
  EXPECT_EQ(parse_size("3mB"), bytes_spec(3 * MiB));
}

TEST(ParseSize, LargestSizeBelowTwoToThe64IsAccepted) {
  EXPECT_EQ(parse_size("16383P"), bytes_spec(16383 * PiB));
}

// --- parse_size: rejected forms, each with a message ------------------------------------------

struct Rejection {
  const char* text;
  const char* message_part;  // a word the message must contain
};

class ParseSizeRejects : public testing::TestWithParam<Rejection> {};

TEST_P(ParseSizeRejects, WithAMessage) {
  const Rejection& r = GetParam();
  std::string error;
  EXPECT_EQ(parse_size(r.text, &error), std::nullopt) << "'" << r.text << "' was accepted";
  EXPECT_NE(error.find(r.message_part), std::string::npos) << "'" << r.text << "' gave: " << error;
  // Without an error string the answer is the same and nothing crashes.
  EXPECT_EQ(parse_size(r.text), std::nullopt);
}

INSTANTIATE_TEST_SUITE_P(
    BadSizes, ParseSizeRejects,
    testing::Values(Rejection{"", "empty"}, Rejection{"   ", "empty"},
                    Rejection{"abc", "not a size"}, Rejection{"-1G", "not a size"},
                    Rejection{"+1G", "not a size"}, Rejection{"1.2.3G", "not a size"},
                    Rejection{".", "not a size"}, Rejection{"G", "not a size"},
                    Rejection{"12Q", "unknown unit"}, Rejection{"1e9", "unknown unit"},
                    Rejection{"0x10", "unknown unit"}, Rejection{"5 GG", "unknown unit"},
                    Rejection{"1.5", "fraction of a byte"}, Rejection{"0.5B", "fraction"},
                    Rejection{"2000%", "1000%"}, Rejection{"1000.5%", "1000%"},
                    Rejection{"99999999999P", "too large"}, Rejection{"16384P", "too large"},
                    Rejection{"18446744073709551616", "too large"}));

TEST(ParseSize, ErrorNamesExamplesForNonsense) {
  std::string error;
  ASSERT_FALSE(parse_size("lots", &error));
  EXPECT_NE(error.find("16G"), std::string::npos) << error;
}

// --- SizeSpec::resolve and to_string ----------------------------------------------------------

TEST(SizeSpec, ResolveBytesIgnoresTheTotal) {
  EXPECT_EQ(bytes_spec(16 * GiB).resolve(80 * GiB), 16 * GiB);
  EXPECT_EQ(bytes_spec(16 * GiB).resolve(0), 16 * GiB);
}

TEST(SizeSpec, ResolvePercentOfTheTotal) {
  EXPECT_EQ(percent_spec(75).resolve(80 * GiB), 60 * GiB);
  EXPECT_EQ(percent_spec(50).resolve(1001), 500u);  // rounds down
  EXPECT_EQ(percent_spec(0).resolve(80 * GiB), 0u);
  EXPECT_EQ(percent_spec(200).resolve(10 * GiB), 20 * GiB);
  EXPECT_EQ(percent_spec(100).resolve(0), 0u);
}

TEST(SizeSpec, ResolvePercentSaturatesInsteadOfWrapping) {
  EXPECT_EQ(percent_spec(1000).resolve(UINT64_MAX), UINT64_MAX);
}

TEST(SizeSpec, ToStringIsCanonical) {
  EXPECT_EQ(bytes_spec(0).to_string(), "0");
  EXPECT_EQ(bytes_spec(16 * GiB).to_string(), "16G");
  EXPECT_EQ(bytes_spec(1536 * MiB).to_string(), "1536M");
  EXPECT_EQ(bytes_spec(2 * TiB).to_string(), "2T");
  EXPECT_EQ(bytes_spec(4 * KiB).to_string(), "4K");
  EXPECT_EQ(bytes_spec(4097).to_string(), "4097");
  EXPECT_EQ(percent_spec(75).to_string(), "75%");
  EXPECT_EQ(percent_spec(12.5).to_string(), "12.5%");
}

class SizeRoundTrip : public testing::TestWithParam<const char*> {};

// The CLI hands --budget/--limit to the traced program as to_string() text, which the preload
// library parses again: the two must agree exactly.
TEST_P(SizeRoundTrip, ParseOfToStringGivesTheSameSpec) {
  const auto spec = parse_size(GetParam());
  ASSERT_TRUE(spec) << GetParam();
  const std::string text = spec->to_string();
  std::string error;
  const auto again = parse_size(text, &error);
  ASSERT_TRUE(again) << GetParam() << " -> '" << text << "' is rejected: " << error;
  EXPECT_EQ(*again, *spec) << GetParam() << " -> '" << text << "'";
}

INSTANTIATE_TEST_SUITE_P(Bytes, SizeRoundTrip,
                         testing::Values("0", "1", "4096", "4097", "512m", "16G", "1.5T", "1.3M",
                                         "2P", "16383P", "12345678901"));
INSTANTIATE_TEST_SUITE_P(Percent, SizeRoundTrip,
                         testing::Values("0%", "75%", "12.5%", "1000%", "0.5%"));
// BUG: to_string() prints percentages with "{:g}" (6 significant digits, exponent below 1e-4), so
// `33.3333333%` comes back as `33.3333%` and `0.00001%` as `1e-05%`, which parse_size rejects.
INSTANTIATE_TEST_SUITE_P(PercentPrecision, SizeRoundTrip,
                         testing::Values("33.3333333%", "0.00001%"));

// --- parse_bool, parse_mode --------------------------------------------------------------------

TEST(ParseBool, AcceptsEveryDocumentedSpelling) {
  for (const char* t : {"1", "on", "true", "yes", "ON", "True", " yes "}) {
    EXPECT_EQ(parse_bool(t), std::optional<bool>(true)) << t;
  }
  for (const char* t : {"0", "off", "false", "no", "OFF", "False", "\tno\n"}) {
    EXPECT_EQ(parse_bool(t), std::optional<bool>(false)) << t;
  }
}

TEST(ParseBool, RejectsEverythingElse) {
  for (const char* t : {"", "2", "y", "n", "enable", "truee", "-1", "o n"}) {
    EXPECT_EQ(parse_bool(t), std::nullopt) << t;
  }
}

TEST(ParseMode, KnownModesInAnyCase) {
  EXPECT_EQ(parse_mode("online"), Mode::online);
  EXPECT_EQ(parse_mode("Replay"), Mode::replay);
  EXPECT_EQ(parse_mode("managed"), Mode::managed);
  EXPECT_EQ(parse_mode("passthrough"), Mode::passthrough);
  EXPECT_EQ(parse_mode(" PassThrough "), Mode::passthrough);
  EXPECT_EQ(parse_mode(""), std::nullopt);
  EXPECT_EQ(parse_mode("manage"), std::nullopt);
  EXPECT_EQ(parse_mode("off"), std::nullopt);
}

TEST(ParseMode, ToStringRoundTrips) {
  for (Mode m : {Mode::online, Mode::replay, Mode::managed, Mode::passthrough}) {
    EXPECT_EQ(parse_mode(to_string(m)), m);
  }
  EXPECT_EQ(to_string(Mode::online), "online");
  EXPECT_EQ(to_string(Mode::managed), "managed");
  EXPECT_EQ(to_string(Mode::passthrough), "passthrough");
}

// --- parse_options with a fake environment ----------------------------------------------------

class FakeEnv {
 public:
  explicit FakeEnv(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}
  EnvLookup lookup() {
    return [this](const char* name) -> const char* {
      asked_.insert(name);
      const auto it = vars_.find(name);
      return it == vars_.end() ? nullptr : it->second.c_str();
    };
  }
  const std::set<std::string>& asked() const { return asked_; }

 private:
  std::map<std::string, std::string> vars_;
  std::set<std::string> asked_;
};

Options parse(std::map<std::string, std::string> vars, std::vector<std::string>* warnings) {
  FakeEnv env(std::move(vars));
  return parse_options(env.lookup(), warnings);
}

void expect_defaults(const Options& o) {
  const Options d;
  EXPECT_EQ(o.mode, d.mode);
  EXPECT_EQ(o.budget, d.budget);
  EXPECT_EQ(o.managed_limit, d.managed_limit);
  EXPECT_EQ(o.stats_path, d.stats_path);
  EXPECT_EQ(o.verbose, d.verbose);
  EXPECT_EQ(o.callsite_depth, d.callsite_depth);
  EXPECT_EQ(o.prefetch_wait, d.prefetch_wait);
  EXPECT_EQ(o.evict_wait, d.evict_wait);
  EXPECT_EQ(o.evict_copy, d.evict_copy);
  EXPECT_EQ(o.debug, d.debug);
  EXPECT_EQ(o.async_slabs, d.async_slabs);
  EXPECT_EQ(o.lifetimes, d.lifetimes);
  EXPECT_EQ(o.placement, d.placement);
}

TEST(ParseOptions, DefaultsWhenNothingIsSet) {
  std::vector<std::string> warnings;
  const Options o = parse({}, &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(o.mode, Mode::online);
  // On since 2026-11-30 (issue 39): the matrix with it held 31 of 76 planned rows' budgets in
  // every planned iteration against 15, in 0.83x the time (run 105, H200).
  EXPECT_TRUE(o.prefetch_wait);
  EXPECT_FALSE(o.evict_wait);
  EXPECT_TRUE(o.async_slabs);
  EXPECT_EQ(o.replay_path, "");
  EXPECT_TRUE(o.budget.is_zero());
  EXPECT_TRUE(o.managed_limit.is_zero());
  EXPECT_EQ(o.stats_path, "");
  EXPECT_EQ(o.verbose, 0);
  EXPECT_EQ(o.callsite_depth, 8);
}

TEST(ParseOptions, NoLookupAndNoWarningsVectorAreAllowed) {
  expect_defaults(parse_options(EnvLookup{}, nullptr));
  expect_defaults(parse({{"UMSWAP_BUDGET", "12Q"}}, nullptr));
}

TEST(ParseOptions, EachVariableIsRead) {
  std::vector<std::string> warnings;
  const Options o = parse({{"UMSWAP_MODE", "passthrough"},
                           {"UMSWAP_BUDGET", "40G"},
                           {"UMSWAP_MANAGED_LIMIT", "90%"},
                           {"UMSWAP_STATS", "/tmp/stats.%p.json"},
                           {"UMSWAP_VERBOSE", "1"},
                           {"UMSWAP_CALLSITE_DEPTH", "12"}},
                          &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(o.mode, Mode::passthrough);
  EXPECT_EQ(o.budget, bytes_spec(40 * GiB));
  EXPECT_EQ(o.managed_limit, percent_spec(90));
  EXPECT_EQ(o.stats_path, "/tmp/stats.%p.json");
  EXPECT_EQ(o.verbose, 1);
  EXPECT_EQ(o.callsite_depth, 12);
}

TEST(ParseOptions, ValuesAreTrimmed) {
  std::vector<std::string> warnings;
  const Options o = parse({{"UMSWAP_STATS", "  /tmp/s.json "},
                           {"UMSWAP_CALLSITE_DEPTH", " 3 "},
                           {"UMSWAP_VERBOSE", " 2\n"},
                           {"UMSWAP_MODE", " passthrough "}},
                          &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(o.stats_path, "/tmp/s.json");
  EXPECT_EQ(o.callsite_depth, 3);
  EXPECT_EQ(o.verbose, 2);
  EXPECT_EQ(o.mode, Mode::passthrough);
}

TEST(ParseOptions, EmptyOrWhitespaceValuesCountAsUnset) {
  for (const char* blank : {"", " ", "\t \n"}) {
    std::vector<std::string> warnings;
    const Options o = parse({{"UMSWAP_MODE", blank},
                             {"UMSWAP_BUDGET", blank},
                             {"UMSWAP_MANAGED_LIMIT", blank},
                             {"UMSWAP_STATS", blank},
                             {"UMSWAP_VERBOSE", blank},
                             {"UMSWAP_CALLSITE_DEPTH", blank}},
                            &warnings);
    EXPECT_TRUE(warnings.empty()) << "'" << blank << "': " << warnings.front();
    expect_defaults(o);
  }
}

TEST(ParseOptions, VerboseLevels) {
  const std::pair<const char*, int> cases[] = {
      {"0", 0},   {"1", 1},   {"2", 2},    {"on", 1},
      {"off", 0}, {"yes", 1}, {"true", 1}, {"quiet", kQuietVerbosity}};
  for (const auto& [text, level] : cases) {
    std::vector<std::string> warnings;
    EXPECT_EQ(parse({{"UMSWAP_VERBOSE", text}}, &warnings).verbose, level) << text;
    EXPECT_TRUE(warnings.empty()) << text;
  }
}

TEST(ParseOptions, CallsiteDepthRange) {
  for (const auto& [text, depth] : {std::pair{"0", 0}, std::pair{"32", 32}, std::pair{"1", 1}}) {
    std::vector<std::string> warnings;
    EXPECT_EQ(parse({{"UMSWAP_CALLSITE_DEPTH", text}}, &warnings).callsite_depth, depth);
    EXPECT_TRUE(warnings.empty()) << text;
  }
}

struct BadValue {
  const char* variable;
  const char* value;
  const char* default_text;
};

class ParseOptionsBadValue : public testing::TestWithParam<BadValue> {};

TEST_P(ParseOptionsBadValue, OneWarningNamingVariableAndDefaultAndDefaultKept) {
  const BadValue& b = GetParam();
  std::vector<std::string> warnings;
  const Options o = parse({{b.variable, b.value}}, &warnings);
  ASSERT_EQ(warnings.size(), 1u) << b.variable << "=" << b.value;
  const std::string& w = warnings.front();
  EXPECT_EQ(w.rfind(b.variable, 0), 0u) << w;  // starts with the variable's name
  EXPECT_NE(w.find(std::string("'") + b.value + "'"), std::string::npos) << w;
  EXPECT_NE(w.find(std::string("using the default ") + b.default_text), std::string::npos) << w;
  expect_defaults(o);
}

INSTANTIATE_TEST_SUITE_P(
    All, ParseOptionsBadValue,
    testing::Values(
        BadValue{"UMSWAP_MODE", "turbo", "online"}, BadValue{"UMSWAP_PREFETCH_WAIT", "maybe", "1"},
        BadValue{"UMSWAP_EVICT_WAIT", "sometimes", "0"},
        BadValue{"UMSWAP_EVICT_COPY", "sometimes", "0"}, BadValue{"UMSWAP_EVICT_COPY", "keep", "0"},
        BadValue{"UMSWAP_DEBUG", "op-log,stacks", "(unset)"},
        BadValue{"UMSWAP_DEBUG", "1", "(unset)"}, BadValue{"UMSWAP_ASYNC_SLABS", "some", "1"},
        BadValue{"UMSWAP_LIFETIMES", "maybe", "1"}, BadValue{"UMSWAP_PLACEMENT", "perhaps", "1"},
        BadValue{"UMSWAP_BUDGET", "12Q", "0"}, BadValue{"UMSWAP_BUDGET", "-1G", "0"},
        BadValue{"UMSWAP_MANAGED_LIMIT", "lots", "0"},
        BadValue{"UMSWAP_MANAGED_LIMIT", "2000%", "0"}, BadValue{"UMSWAP_VERBOSE", "3", "0"},
        BadValue{"UMSWAP_VERBOSE", "loud", "0"}, BadValue{"UMSWAP_CALLSITE_DEPTH", "33", "8"},
        BadValue{"UMSWAP_CALLSITE_DEPTH", "-1", "8"}, BadValue{"UMSWAP_CALLSITE_DEPTH", "+4", "8"},
        BadValue{"UMSWAP_CALLSITE_DEPTH", "8x", "8"},
        BadValue{"UMSWAP_CALLSITE_DEPTH", "99999999999", "8"}));

TEST(ParseOptions, TheSizeWarningSaysWhatWasExpected) {
  std::vector<std::string> warnings;
  parse({{"UMSWAP_BUDGET", "12Q"}}, &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(
      warnings[0],
      "UMSWAP_BUDGET='12Q' has an unknown unit (use K, M, G, T, P or %); using the default 0");
}

TEST(ParseOptions, OneWarningPerBadVariableAndGoodOnesStillApply) {
  std::vector<std::string> warnings;
  const Options o = parse({{"UMSWAP_MODE", "x"},
                           {"UMSWAP_BUDGET", "x"},
                           {"UMSWAP_MANAGED_LIMIT", "x"},
                           {"UMSWAP_VERBOSE", "x"},
                           {"UMSWAP_CALLSITE_DEPTH", "x"},
                           {"UMSWAP_STATS", "/tmp/ok.json"}},
                          &warnings);
  EXPECT_EQ(warnings.size(), 5u);
  std::set<std::string> named;
  for (const auto& w : warnings) named.insert(w.substr(0, w.find('=')));
  EXPECT_EQ(named, (std::set<std::string>{"UMSWAP_MODE", "UMSWAP_BUDGET", "UMSWAP_MANAGED_LIMIT",
                                          "UMSWAP_VERBOSE", "UMSWAP_CALLSITE_DEPTH"}));
  EXPECT_EQ(o.stats_path, "/tmp/ok.json");
  EXPECT_EQ(o.mode, Mode::online);
}

TEST(ParseOptions, EngineIsUmUnlessVmmIsAsked) {
  std::vector<std::string> warnings;
  EXPECT_EQ(parse({}, &warnings).engine, Engine::um);
  EXPECT_EQ(parse({{"UMSWAP_ENGINE", "um"}}, &warnings).engine, Engine::um);
  EXPECT_EQ(parse({{"UMSWAP_ENGINE", " VMM "}}, &warnings).engine, Engine::vmm);
  EXPECT_TRUE(warnings.empty()) << testing::PrintToString(warnings);
  // Every mode but replay runs under vmm (online as placement only: no advisor).
  for (const char* mode : {"online", "managed", "passthrough"}) {
    const Options o = parse({{"UMSWAP_ENGINE", "vmm"}, {"UMSWAP_MODE", mode}}, &warnings);
    EXPECT_EQ(o.engine, Engine::vmm) << mode;
    EXPECT_EQ(to_string(o.mode), mode);
  }
  EXPECT_TRUE(warnings.empty()) << testing::PrintToString(warnings);
  const Options bad = parse({{"UMSWAP_ENGINE", "hbm"}}, &warnings);
  EXPECT_EQ(bad.engine, Engine::um);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "UMSWAP_ENGINE='hbm' is not an engine (um, vmm); using the default um");
  EXPECT_EQ(parse_engine("vmm"), Engine::vmm);
  EXPECT_FALSE(parse_engine(""));
  EXPECT_EQ(to_string(Engine::um), "um");
}

TEST(ParseOptions, EngineVmmWithReplayOrVerifyFallsBackToUmWithAWarning) {
  std::vector<std::string> warnings;
  const Options replay =
      parse({{"UMSWAP_ENGINE", "vmm"}, {"UMSWAP_MODE", "replay"}, {"UMSWAP_REPLAY", "/t.umtrace"}},
            &warnings);
  EXPECT_EQ(replay.engine, Engine::um);
  EXPECT_EQ(replay.mode, Mode::replay);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("UMSWAP_ENGINE=vmm"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("replay"), std::string::npos) << warnings[0];
  warnings.clear();
  const Options verify = parse({{"UMSWAP_ENGINE", "vmm"}, {"UMSWAP_VERIFY", "1"}}, &warnings);
  EXPECT_EQ(verify.engine, Engine::um);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("UMSWAP_VERIFY"), std::string::npos) << warnings[0];
}

TEST(ParseOptions, ReplayWithoutTraceFallsBackToOnlineWithAWarning) {
  std::vector<std::string> warnings;
  const Options o = parse({{"UMSWAP_MODE", "replay"}}, &warnings);
  EXPECT_EQ(o.mode, Mode::online);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("UMSWAP_REPLAY"), std::string::npos) << warnings[0];
  const Options r = parse({{"UMSWAP_MODE", "replay"},
                           {"UMSWAP_REPLAY", "/t.umtrace"},
                           {"UMSWAP_PREFETCH_WAIT", "off"},
                           {"UMSWAP_EVICT_WAIT", "1"}},
                          &warnings);
  EXPECT_EQ(r.mode, Mode::replay);
  EXPECT_EQ(r.replay_path, "/t.umtrace");
  EXPECT_FALSE(r.prefetch_wait);
  EXPECT_TRUE(r.evict_wait);
}

// Off by default since 2026-11-28 (issue 36): copies with discards lose what a kernel reaches
// through a pointer table; the driver's migrations keep every access correct.
TEST(ParseOptions, EvictCopyIsABooleanOffByDefault) {
  std::vector<std::string> warnings;
  EXPECT_FALSE(parse({}, &warnings).evict_copy);
  EXPECT_FALSE(parse({{"UMSWAP_EVICT_COPY", "0"}}, &warnings).evict_copy);
  EXPECT_TRUE(parse({{"UMSWAP_EVICT_COPY", "1"}}, &warnings).evict_copy);
  EXPECT_TRUE(parse({{"UMSWAP_EVICT_COPY", " on "}}, &warnings).evict_copy);
  EXPECT_TRUE(warnings.empty());
  EXPECT_FALSE(parse({{"UMSWAP_EVICT_COPY", "perhaps"}}, &warnings).evict_copy);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("UMSWAP_EVICT_COPY"), std::string::npos);
}

// `keep` went to UMSWAP_DEBUG=keep-pages: a bad value, as any other, whose warning says where.
TEST(ParseOptions, EvictCopyKeepIsABadValueThatNamesTheDebugOption) {
  for (const char* keep : {"keep", " KEEP "}) {
    std::vector<std::string> warnings;
    const Options o = parse({{"UMSWAP_EVICT_COPY", keep}}, &warnings);
    EXPECT_FALSE(o.evict_copy) << keep;
    EXPECT_FALSE(o.debug.keep_pages) << keep;
    ASSERT_EQ(warnings.size(), 1u) << keep;
    EXPECT_EQ(warnings[0], std::string("UMSWAP_EVICT_COPY='") + keep +
                               "' is no longer a value (for the copies with their GPU pages kept "
                               "set UMSWAP_EVICT_COPY=1 UMSWAP_DEBUG=keep-pages); using the "
                               "default 0");
  }
}

// --- UMSWAP_DEBUG ------------------------------------------------------------------------------

DebugOptions debug_of(std::map<std::string, std::string> vars, std::vector<std::string>* warnings) {
  return parse(std::move(vars), warnings).debug;
}

TEST(ParseOptions, DebugIsNoneUnsetOrEmpty) {
  for (const char* none : {"", " ", ",", " , ,"}) {
    std::vector<std::string> warnings;
    EXPECT_EQ(debug_of({{"UMSWAP_DEBUG", none}}, &warnings), DebugOptions{}) << "'" << none << "'";
    EXPECT_TRUE(warnings.empty()) << "'" << none << "'";
  }
  std::vector<std::string> warnings;
  EXPECT_EQ(debug_of({}, &warnings), DebugOptions{});
  EXPECT_TRUE(warnings.empty());
}

TEST(ParseOptions, DebugTakesEachWordAlone) {
  std::vector<std::string> warnings;
  EXPECT_EQ(debug_of({{"UMSWAP_DEBUG", "hang-stacks"}}, &warnings),
            (DebugOptions{.hang_stacks = true, .op_log = false, .keep_pages = false}));
  EXPECT_EQ(debug_of({{"UMSWAP_DEBUG", "op-log"}}, &warnings),
            (DebugOptions{.hang_stacks = false, .op_log = true, .keep_pages = false}));
  EXPECT_EQ(debug_of({{"UMSWAP_DEBUG", "keep-pages"}}, &warnings),
            (DebugOptions{.hang_stacks = false, .op_log = false, .keep_pages = true}));
  EXPECT_TRUE(warnings.empty()) << testing::PrintToString(warnings);
  // keep-pages sets no copies by itself: it applies with UMSWAP_EVICT_COPY=1.
  EXPECT_FALSE(parse({{"UMSWAP_DEBUG", "keep-pages"}}, &warnings).evict_copy);
  const Options both =
      parse({{"UMSWAP_DEBUG", "keep-pages"}, {"UMSWAP_EVICT_COPY", "1"}}, &warnings);
  EXPECT_TRUE(both.evict_copy);
  EXPECT_TRUE(both.debug.keep_pages);
  EXPECT_TRUE(warnings.empty());
}

TEST(ParseOptions, DebugTakesWordsCommaSeparatedInAnyOrderAndCase) {
  const std::pair<const char*, DebugOptions> cases[] = {
      {"hang-stacks,op-log", {.hang_stacks = true, .op_log = true, .keep_pages = false}},
      {"op-log, keep-pages", {.hang_stacks = false, .op_log = true, .keep_pages = true}},
      {" keep-pages , HANG-STACKS ", {.hang_stacks = true, .op_log = false, .keep_pages = true}},
      {"keep-pages,op-log,hang-stacks", {.hang_stacks = true, .op_log = true, .keep_pages = true}},
      {"op-log,,op-log,", {.hang_stacks = false, .op_log = true, .keep_pages = false}},
  };
  for (const auto& [text, want] : cases) {
    std::vector<std::string> warnings;
    EXPECT_EQ(debug_of({{"UMSWAP_DEBUG", text}}, &warnings), want) << text;
    EXPECT_TRUE(warnings.empty()) << text << ": " << testing::PrintToString(warnings);
  }
}

// An unknown word is a bad value: one warning naming the variable, the value and the word, and
// none of the value's words taken (the default, none, used).
TEST(ParseOptions, DebugUnknownWordWarnsAndTakesNone) {
  const std::pair<const char*, const char*> cases[] = {
      {"op-log,stacks", "stacks"},
      {"keep", "keep"},
      {"hang-stacks;op-log", "hang-stacks;op-log"},
      {"op-log, all ", "all"},
  };
  for (const auto& [text, word] : cases) {
    std::vector<std::string> warnings;
    EXPECT_EQ(debug_of({{"UMSWAP_DEBUG", text}}, &warnings), DebugOptions{}) << text;
    ASSERT_EQ(warnings.size(), 1u) << text;
    EXPECT_EQ(warnings[0], std::string("UMSWAP_DEBUG='") + text + "' has an unknown word '" + word +
                               "' (use hang-stacks, op-log or keep-pages, comma-separated); using "
                               "the default (unset)");
  }
}

TEST(ParseDebug, ToStringListsTheWordsSetInOneOrderAndParsesBack) {
  EXPECT_EQ(to_string(DebugOptions{}), "");
  EXPECT_EQ(to_string(DebugOptions{.hang_stacks = false, .op_log = true, .keep_pages = false}),
            "op-log");
  const DebugOptions all{.hang_stacks = true, .op_log = true, .keep_pages = true};
  EXPECT_EQ(to_string(all), "hang-stacks,op-log,keep-pages");
  for (const DebugOptions& d :
       {DebugOptions{}, all,
        DebugOptions{.hang_stacks = true, .op_log = false, .keep_pages = true}}) {
    EXPECT_EQ(parse_debug(to_string(d)), d) << to_string(d);
  }
  std::string error;
  EXPECT_FALSE(parse_debug("op-log,verbose", &error));
  EXPECT_EQ(
      error,
      "has an unknown word 'verbose' (use hang-stacks, op-log or keep-pages, comma-separated)");
}

// --- removed options ---------------------------------------------------------------------------

TEST(ParseOptions, RemovedOptionsAreNamedAndIgnored) {
  std::vector<std::string> warnings;
  parse({{"UMSWAP_POPULATE_AHEAD", "4"}, {"UMSWAP_POPULATE_SIDE", "8"}}, &warnings);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("UMSWAP_POPULATE_AHEAD is no longer an option"), std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[1].find("UMSWAP_POPULATE_SIDE is no longer an option"), std::string::npos)
      << warnings[1];
  warnings.clear();
  parse({}, &warnings);
  EXPECT_TRUE(warnings.empty());
  for (const OptionInfo& o : option_table()) {
    EXPECT_NE(std::string(o.name), "UMSWAP_POPULATE_AHEAD");
    EXPECT_NE(std::string(o.name), "UMSWAP_POPULATE_SIDE");
  }
}

// The measured losers of issue 37: each named with why, ignored whatever its value (the winner,
// the only behaviour left, stays).
TEST(ParseOptions, RemovedChoicesOfTheCopyPathAreNamedAndIgnored) {
  const std::pair<const char*, const char*> cases[] = {
      {"UMSWAP_CLOSE_CALLS", "0"},
      {"UMSWAP_CLOSE_CALLS", "waits"},
      {"UMSWAP_EVICT_COPY_SIDE_STREAMS", "0"},
      {"UMSWAP_EVICT_COPY_PATH", "engine"},
  };
  for (const auto& [name, value] : cases) {
    std::vector<std::string> warnings;
    const Options o = parse({{name, value}}, &warnings);
    ASSERT_EQ(warnings.size(), 1u) << name;
    EXPECT_EQ(warnings[0].rfind(std::string(name) + " is no longer an option (", 0), 0u)
        << warnings[0];
    EXPECT_TRUE(warnings[0].ends_with("); ignored")) << warnings[0];
    expect_defaults(o);
  }
}

// The diagnostics folded into UMSWAP_DEBUG: the warning names the replacement, and the old name
// sets nothing.
TEST(ParseOptions, ReplacedDiagnosticsNameUmswapDebugAndAreIgnored) {
  std::vector<std::string> warnings;
  const Options o = parse({{"UMSWAP_HANG_STACKS", "1"}, {"UMSWAP_OP_LOG", "1"}}, &warnings);
  EXPECT_EQ(o.debug, DebugOptions{});
  EXPECT_EQ(warnings, (std::vector<std::string>{
                          "UMSWAP_HANG_STACKS was replaced by UMSWAP_DEBUG=hang-stacks; ignored",
                          "UMSWAP_OP_LOG was replaced by UMSWAP_DEBUG=op-log; ignored"}));
  warnings.clear();
  const Options both = parse({{"UMSWAP_OP_LOG", "1"}, {"UMSWAP_DEBUG", "op-log"}}, &warnings);
  EXPECT_TRUE(both.debug.op_log);
  ASSERT_EQ(warnings.size(), 1u);
  for (const RemovedOption& r : removed_options()) {
    if (!r.replacement) continue;
    EXPECT_TRUE(std::string_view(r.replacement).starts_with("UMSWAP_DEBUG=")) << r.name;
    EXPECT_TRUE(parse_debug(std::string_view(r.replacement).substr(13)).has_value()) << r.name;
  }
}

TEST(ParseOptions, LearnEvictIsABooleanOnByDefault) {
  std::vector<std::string> warnings;
  EXPECT_TRUE(parse({}, &warnings).learn_evict);
  EXPECT_FALSE(parse({{"UMSWAP_LEARN_EVICT", "0"}}, &warnings).learn_evict);
  EXPECT_TRUE(warnings.empty());
  EXPECT_TRUE(parse({{"UMSWAP_LEARN_EVICT", "lru"}}, &warnings).learn_evict);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("UMSWAP_LEARN_EVICT"), std::string::npos);
}

TEST(ParseOptions, WarningsAreAppended) {
  std::vector<std::string> warnings = {"earlier"};
  parse({{"UMSWAP_MODE", "x"}}, &warnings);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0], "earlier");
}

// --- option table and describe() --------------------------------------------------------------

std::set<std::string> table_names() {
  std::set<std::string> names;
  for (const OptionInfo& info : option_table()) names.insert(std::string(info.name));
  return names;
}

TEST(OptionTable, ListsExactlyTheVariablesParseOptionsReads) {
  FakeEnv env({});
  parse_options(env.lookup(), nullptr);
  std::set<std::string> asked = env.asked();
  for (const RemovedOption& r : removed_options()) {
    EXPECT_EQ(asked.erase(std::string(r.name)), 1u) << r.name;  // asked, to be named if set
    EXPECT_FALSE(table_names().contains(std::string(r.name))) << r.name;
  }
  EXPECT_EQ(table_names(), asked);
  EXPECT_EQ(table_names(), (std::set<std::string>{"UMSWAP_MODE",
                                                  "UMSWAP_ENGINE",
                                                  "UMSWAP_BUDGET",
                                                  "UMSWAP_MANAGED_LIMIT",
                                                  "UMSWAP_STATS",
                                                  "UMSWAP_VERBOSE",
                                                  "UMSWAP_CALLSITE_DEPTH",
                                                  "UMSWAP_TRACE",
                                                  "UMSWAP_TRACE_ITERATIONS",
                                                  "UMSWAP_ITERATION_MARKER",
                                                  "UMSWAP_CUPTI_LIBRARY",
                                                  "UMSWAP_REPLAY",
                                                  "UMSWAP_PREFETCH_WAIT",
                                                  "UMSWAP_EVICT_WAIT",
                                                  "UMSWAP_EVICT_COPY",
                                                  "UMSWAP_VERIFY",
                                                  "UMSWAP_LEARN_EVICT",
                                                  "UMSWAP_DEBUG",
                                                  "UMSWAP_ASYNC_SLABS",
                                                  "UMSWAP_LIFETIMES",
                                                  "UMSWAP_PLACEMENT"}));
  EXPECT_EQ(option_table().size(), 21u);  // no duplicates
}

// docs/options.md and the help text give each entry's meaning on one line of a table.
TEST(OptionTable, EveryEntryHasValuesAndAOneLineMeaning) {
  for (const OptionInfo& info : option_table()) {
    EXPECT_FALSE(info.meaning.empty()) << info.name;
    EXPECT_EQ(info.meaning.find('\n'), std::string_view::npos) << info.name;
    EXPECT_FALSE(info.grammar.empty()) << info.name;
    EXPECT_TRUE(info.name.starts_with("UMSWAP_")) << info.name;
  }
}

// Values of each form OptionInfo::grammar names, and values just outside it (a range's ends, a
// list with a word too many); a word stands for itself.
std::vector<std::string> examples_of(std::string_view form, std::vector<std::string>* outside) {
  if (form == "SIZE") return {"16G", "512M", "1.5T", "4096", "75%", "0"};
  if (form == "BOOL") return {"1", "0", "on", "off", "true", "false", "yes", "no"};
  if (form == "N") return {"0", "5"};
  if (form == "PATH") return {"/tmp/umswap-options-test"};
  if (form == "NAME") return {"step"};
  if (form.find(',') != std::string_view::npos) {  // a,b: any of the words, comma-separated
    std::vector<std::string> values = {std::string(form)};
    for (std::string_view rest = form; !rest.empty();) {
      const size_t comma = rest.find(',');
      values.emplace_back(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    outside->push_back(std::string(form) + ",none-such");
    return values;
  }
  if (const size_t dash = form.find('-'); dash != std::string_view::npos) {  // LO-HI
    const int lo = std::stoi(std::string(form.substr(0, dash)));
    const int hi = std::stoi(std::string(form.substr(dash + 1)));
    outside->push_back(std::to_string(lo - 1));
    outside->push_back(std::to_string(hi + 1));
    return {std::to_string(lo), std::to_string(hi)};
  }
  return {std::string(form)};
}

// The grammar the docs give is the one parse_options() takes: every value of every form it
// names, and the default, are read without a warning; a value outside it warns (unless any text
// is a PATH or NAME).
TEST(OptionTable, GrammarIsWhatTheParserTakes) {
  for (const OptionInfo& info : option_table()) {
    SCOPED_TRACE(std::string(info.name) + "=" + std::string(info.grammar));
    const std::string name(info.name);
    // replay mode without a trace to replay warns; give it one.
    const std::map<std::string, std::string> base = {{"UMSWAP_REPLAY", "/tmp/r.umtrace"}};
    std::set<std::string> values;
    std::vector<std::string> outside = {"99999999999999999999x"};
    bool any_text = false;
    std::string_view rest = info.grammar;
    while (!rest.empty()) {
      const size_t bar = rest.find('|');
      const std::string_view form = rest.substr(0, bar);
      rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
      EXPECT_FALSE(form.empty());
      any_text = any_text || form == "PATH" || form == "NAME";
      for (const std::string& v : examples_of(form, &outside)) values.insert(v);
    }
    if (!info.default_text.empty()) values.insert(std::string(info.default_text));
    for (const std::string& value : values) {
      std::map<std::string, std::string> vars = base;
      vars[name] = value;
      std::vector<std::string> warnings;
      parse(vars, &warnings);
      EXPECT_TRUE(warnings.empty()) << value << ": " << testing::PrintToString(warnings);
    }
    if (any_text) continue;
    for (const std::string& value : outside) {
      std::map<std::string, std::string> vars = base;
      vars[name] = value;
      std::vector<std::string> warnings;
      parse(vars, &warnings);
      EXPECT_EQ(warnings.size(), 1u) << value << " is outside the grammar, and taken";
    }
  }
}

// The table's default text is what a user would write to get the default: describe() of a
// default Options must print exactly it.
TEST(OptionTable, DefaultTextsMatchTheRealDefaults) {
  const std::vector<std::string> lines = describe(Options{});
  std::set<std::string> described(lines.begin(), lines.end());
  for (const OptionInfo& info : option_table()) {
    const std::string line = std::string(info.name) + "=" + std::string(info.default_text);
    EXPECT_TRUE(described.contains(line)) << line;
  }
}

TEST(Describe, PrintsEveryOptionAsResolved) {
  Options o;
  o.mode = Mode::passthrough;
  o.engine = Engine::vmm;
  o.budget = bytes_spec(40 * GiB);
  o.managed_limit = percent_spec(90);
  o.stats_path = "/tmp/s.json";
  o.verbose = 2;
  o.callsite_depth = 0;
  o.trace_path = "/tmp/t.umtrace";
  o.trace_iterations = 5;
  o.iteration_marker = "step";
  o.replay_path = "/tmp/r.umtrace";
  o.prefetch_wait = true;
  o.evict_wait = true;
  o.async_slabs = false;
  o.lifetimes = false;
  o.placement = false;
  o.evict_copy = false;
  o.learn_evict = false;
  o.debug.hang_stacks = true;
  o.debug.keep_pages = true;
  const std::vector<std::string> lines = describe(o);
  // clang-format off
  EXPECT_EQ(lines, (std::vector<std::string>{"UMSWAP_MODE=passthrough",
                                             "UMSWAP_ENGINE=vmm",
                                             "UMSWAP_BUDGET=40G",
                                             "UMSWAP_MANAGED_LIMIT=90%",
                                             "UMSWAP_STATS=/tmp/s.json",
                                             "UMSWAP_VERBOSE=2",
                                             "UMSWAP_CALLSITE_DEPTH=0",
                                             "UMSWAP_TRACE=/tmp/t.umtrace",
                                             "UMSWAP_TRACE_ITERATIONS=5",
                                             "UMSWAP_ITERATION_MARKER=step",
                                             "UMSWAP_CUPTI_LIBRARY=",
                                             "UMSWAP_REPLAY=/tmp/r.umtrace",
                                             "UMSWAP_PREFETCH_WAIT=1",
                                             "UMSWAP_EVICT_WAIT=1",
                                             "UMSWAP_EVICT_COPY=0",
                                             "UMSWAP_VERIFY=0",
                                             "UMSWAP_LEARN_EVICT=0",
                                             "UMSWAP_DEBUG=hang-stacks,keep-pages",
                                             "UMSWAP_ASYNC_SLABS=0",
                                             "UMSWAP_LIFETIMES=0",
                                             "UMSWAP_PLACEMENT=0"}));
  // clang-format on
  std::set<std::string> names;
  for (const auto& line : lines) names.insert(line.substr(0, line.find('=')));
  EXPECT_EQ(names, table_names());
}

// What describe() prints, parse_options() reads back to the same options.
TEST(Describe, OutputParsesBackToTheSameOptions) {
  Options o;
  o.mode = Mode::passthrough;
  o.engine = Engine::vmm;
  o.budget = bytes_spec(1536 * MiB);
  o.managed_limit = percent_spec(12.5);
  o.stats_path = "/x/y.json";
  o.verbose = 1;
  o.callsite_depth = 31;
  o.evict_copy = true;
  o.debug.op_log = true;
  o.debug.keep_pages = true;
  std::map<std::string, std::string> vars;
  for (const auto& line : describe(o)) {
    const size_t eq = line.find('=');
    vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  std::vector<std::string> warnings;
  const Options back = parse(vars, &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(back.mode, o.mode);
  EXPECT_EQ(back.engine, o.engine);
  EXPECT_EQ(back.budget, o.budget);
  EXPECT_EQ(back.managed_limit, o.managed_limit);
  EXPECT_EQ(back.stats_path, o.stats_path);
  EXPECT_EQ(back.verbose, o.verbose);
  EXPECT_EQ(back.callsite_depth, o.callsite_depth);
  EXPECT_EQ(back.evict_copy, o.evict_copy);
  EXPECT_EQ(back.debug, o.debug);
}

// --- format_bytes ------------------------------------------------------------------------------

TEST(FormatBytes, SmallCountsInBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(12), "12 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
}

TEST(FormatBytes, LargerCountsInBinaryUnitsWithTwoDecimals) {
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(512 * MiB), "512.00 MiB");
  EXPECT_EQ(format_bytes(GiB + GiB / 2), "1.50 GiB");
  EXPECT_EQ(format_bytes(80 * GiB), "80.00 GiB");
  EXPECT_EQ(format_bytes(3 * TiB), "3.00 TiB");
  EXPECT_EQ(format_bytes(PiB), "1.00 PiB");
  EXPECT_EQ(format_bytes(4096 * PiB), "4096.00 PiB");  // no unit past PiB
}

}  // namespace
}  // namespace umswap
