#include "umswap/tracer/own_calls.h"

namespace umswap::tracer {

thread_local bool t_own_calls __attribute__((tls_model("initial-exec"))) = false;

}  // namespace umswap::tracer
