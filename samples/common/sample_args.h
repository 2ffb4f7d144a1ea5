// Command-line helpers the sample trainers share (mlp_train, cudnn_vgg16): a bad argument ends the
// program with exit code 2 and one line naming it. Samples stand for ordinary CUDA programs:
// nothing here knows about umswap.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace samples {

// The program's name for the error line; each sample sets it before parsing.
inline const char* g_program = "sample";

[[noreturn]] inline void bad_arg(const std::string& msg) {
  std::fprintf(stderr, "%s: %s (see --help)\n", g_program, msg.c_str());
  std::exit(2);
}

// A whole decimal number in [lo, hi], or exit 2.
inline unsigned long long parse_number(const char* flag, const char* text, unsigned long long lo,
                                       unsigned long long hi) {
  if (!text) bad_arg(std::string(flag) + " needs a value");
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    bad_arg(std::string(flag) + ": '" + text + "' is not a whole number in [" + std::to_string(lo) +
            ", " + std::to_string(hi) + "]");
  }
  return v;
}

}  // namespace samples
