// Usage lines of `umswap report`, `umswap timeline` and `umswap plans`, shared by the parser and
// the help text. Internal to cli/.
#pragma once

#include <string_view>

namespace umswap::cli::detail {

inline constexpr std::string_view kReportUsage = "umswap report FILE";
inline constexpr std::string_view kTimelineUsage =
    "umswap timeline FILE -o OUT.json [--iterations A-B]";
inline constexpr std::string_view kPlansUsage = "umswap plans [list] | umswap plans clear [KEY...]";

}  // namespace umswap::cli::detail
