/* umswap's public C API for programs that want to help it (all optional).
 *
 * A program needs nothing of this to run under umswap. Including this header and calling
 * umswap_mark_iteration() at the top of each training iteration replaces umswap's automatic
 * iteration detection with an exact boundary. Outside umswap the call does nothing: the
 * function is resolved weakly, so the program links and runs without libumswap.so. */
#ifndef UMSWAP_UMSWAP_H_
#define UMSWAP_UMSWAP_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Exported by libumswap.so; absent (null) when the program runs without it. */
void umswap_mark_iteration_v1(void) __attribute__((weak));

/* Marks the start of a training iteration. Cheap; thread-safe; a no-op without umswap. */
static inline void umswap_mark_iteration(void) {
  if (umswap_mark_iteration_v1) umswap_mark_iteration_v1();
}

#ifdef __cplusplus
}
#endif

#endif /* UMSWAP_UMSWAP_H_ */
