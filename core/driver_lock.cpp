#include "umswap/core/driver_lock.h"

namespace umswap {

std::shared_mutex& driver_setup_mutex() {
  static std::shared_mutex* mutex = new std::shared_mutex();  // never destroyed: used at exit
  return *mutex;
}

}  // namespace umswap
