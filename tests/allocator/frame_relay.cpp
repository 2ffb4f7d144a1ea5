// A shared library that only calls back: built twice, once under a name call_site.cpp treats as
// a CUDA library (whose frames it skips) and once under a neutral name (whose frames it keeps).
#ifndef UMSWAP_RELAY_NAME
#error "UMSWAP_RELAY_NAME must name the exported function"
#endif

extern "C" __attribute__((visibility("default"), noinline)) void UMSWAP_RELAY_NAME(
    void (*callback)(void*), void* context) {
  callback(context);
  asm volatile("" ::: "memory");  // keeps this frame on the stack (no tail call)
}
