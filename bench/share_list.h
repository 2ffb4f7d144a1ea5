// The trace benches' arguments (window_plan_bench, vmm_residency_sim): a list of shares, and
// bytes printed as GB.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace umswap::bench {

// "0.25,0.5": numbers in (0, 1], separated by commas; false (and `out` partly filled) otherwise.
inline bool parse_share_list(const char* text, std::vector<double>* out) {
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v > 0 && v <= 1)) return false;
    out->push_back(v);
  }
  return !out->empty();
}

inline double gb(uint64_t bytes) {
  return static_cast<double>(bytes) / 1e9;
}

}  // namespace umswap::bench
