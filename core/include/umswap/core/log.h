// Logging that never allocates: a message is formatted into a stack buffer and written to stderr
// with one write(2), prefixed `umswap: `. Safe from any thread, inside hooks and after fork.
// Messages longer than the buffer are cut and end in `...`.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <string_view>

namespace umswap {

// notice: a line a user reads by default (a plan taking effect), silenced only by quiet.
enum class LogLevel { error = 0, warning = 1, notice = 2, info = 3, debug = 4 };

// -1 (quiet): errors and warnings; 0: + notices; 1: + info; 2: + debug. Set once from
// UMSWAP_VERBOSE.
inline constexpr int kQuietVerbosity = -1;
void set_log_verbosity(int verbosity);
bool log_enabled(LogLevel level);
// Writes `umswap: <level prefix><message>\n` in one write(2) call.
void log_write(LogLevel level, std::string_view message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (!log_enabled(level)) return;
  char buffer[1024];
  const auto result = fmt::format_to_n(buffer, sizeof(buffer), format, std::forward<Args>(args)...);
  std::string_view message(buffer, result.size < sizeof(buffer) ? result.size : sizeof(buffer));
  if (result.size > sizeof(buffer)) {
    buffer[sizeof(buffer) - 3] = buffer[sizeof(buffer) - 2] = buffer[sizeof(buffer) - 1] = '.';
  }
  log_write(level, message);
}

template <typename... Args>
void log_warning(fmt::format_string<Args...> format, Args&&... args) {
  log(LogLevel::warning, format, std::forward<Args>(args)...);
}
template <typename... Args>
void log_notice(fmt::format_string<Args...> format, Args&&... args) {
  log(LogLevel::notice, format, std::forward<Args>(args)...);
}
template <typename... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  log(LogLevel::info, format, std::forward<Args>(args)...);
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> format, Args&&... args) {
  log(LogLevel::debug, format, std::forward<Args>(args)...);
}

// For "say so once" messages: `static OnceFlag f; if (f.first()) log_warning(...)`.
class OnceFlag {
 public:
  bool first() { return !done_.exchange(true, std::memory_order_relaxed); }

 private:
  std::atomic<bool> done_{false};
};

}  // namespace umswap
