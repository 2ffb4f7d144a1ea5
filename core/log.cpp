#include "umswap/core/log.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace umswap {
namespace {
std::atomic<int> g_verbosity{0};
}

void set_log_verbosity(int verbosity) {
  g_verbosity.store(verbosity, std::memory_order_relaxed);
}

bool log_enabled(LogLevel level) {
  // Errors and warnings always (quiet is -1), notices from 0, info from 1, debug from 2.
  return static_cast<int>(level) <= 2 + g_verbosity.load(std::memory_order_relaxed);
}

void log_write(LogLevel level, std::string_view message) {
  const int saved_errno = errno;  // logging must not disturb the traced program's errno
  std::string_view prefix = "umswap: ";
  if (level == LogLevel::error) prefix = "umswap: error: ";
  if (level == LogLevel::warning) prefix = "umswap: warning: ";
  char line[1200];
  size_t n = 0;
  auto append = [&](std::string_view s) {
    const size_t k = s.size() < sizeof(line) - 1 - n ? s.size() : sizeof(line) - 1 - n;
    std::memcpy(line + n, s.data(), k);
    n += k;
  };
  append(prefix);
  append(message);
  if (prefix.size() + message.size() > sizeof(line) - 1) {
    std::memcpy(line + n - 3, "...", 3);  // cut: say so
  }
  line[n++] = '\n';
  for (size_t off = 0; off < n;) {
    const ssize_t w = ::write(STDERR_FILENO, line + off, n - off);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      break;
    }
    off += static_cast<size_t>(w);
  }
  errno = saved_errno;
}

}  // namespace umswap
