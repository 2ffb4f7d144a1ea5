// The one place umswap reads the process environment (getenv appears nowhere else).
#pragma once

namespace umswap {

// getenv, nothing more; nullptr when unset. Safe to call before main and from any thread that
// does not race with setenv.
const char* env_get(const char* name);

}  // namespace umswap
