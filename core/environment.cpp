#include "umswap/core/environment.h"

#include <cstdlib>

namespace umswap {

const char* env_get(const char* name) {
  return std::getenv(name);
}

}  // namespace umswap
