/* A stand-in for the CUDA driver (libcuda.so.1), loaded with fake_cudart as
 * the real runtime loads the real driver: the one driver call shardstream
 * makes, cuCtxGetCurrent, which tells whether the calling thread has a
 * context (and so may have queued a copy). Threads have one only when the
 * environment sets FAKE_CUDA_CONTEXT, or after fake_cuda_make_current(1). */
#include <stdlib.h>

static int context_token;
/* -1: as the environment says. Initial-exec: dynamic TLS in a dlopen'ed
 * library trips LeakSanitizer's scan of glibc's dynamic thread vectors
 * (its tracer faults at exit); the static TLS surplus holds one int. */
static __thread int current __attribute__((tls_model("initial-exec"))) = -1;

int cuInit(unsigned int flags) {
  (void)flags;
  return 0;
}

void fake_cuda_make_current(int on) { current = on; }

int cuCtxGetCurrent(void** ctx) {
  int on = current >= 0 ? current : getenv("FAKE_CUDA_CONTEXT") != NULL;
  *ctx = on ? &context_token : NULL;
  return 0;
}
