// Usage lines of `umswap report` and `umswap timeline`, shared by the parser and the help text.
// Internal to cli/.
#pragma once

#include <string_view>

namespace umswap::cli::detail {

inline constexpr std::string_view kReportUsage = "umswap report FILE";
inline constexpr std::string_view kTimelineUsage =
    "umswap timeline FILE -o OUT.json [--iterations A-B]";

}  // namespace umswap::cli::detail
