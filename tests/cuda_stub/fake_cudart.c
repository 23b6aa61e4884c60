/* A stand-in for libcudart with the four entry points shardstream resolves
 * at run time (cudaGetDeviceCount, cudaHostAlloc, cudaFreeHost,
 * cudaGetErrorString). It lets a machine without a GPU run the library's
 * dlopen path, its pinned-slot accounting and its error messages; it pins
 * nothing. Environment: FAKE_CUDART_DEVICES (default 1), FAKE_CUDART_FAIL
 * (any value: every cudaHostAlloc fails with cudaErrorMemoryAllocation). */
#include <stdlib.h>

int fake_cudart_allocs = 0;
int fake_cudart_frees = 0;
unsigned int fake_cudart_last_flags = 0;

int cudaGetDeviceCount(int* n) {
  const char* e = getenv("FAKE_CUDART_DEVICES");
  *n = e ? atoi(e) : 1;
  return 0;
}

int cudaHostAlloc(void** p, size_t bytes, unsigned int flags) {
  if (getenv("FAKE_CUDART_FAIL")) {
    *p = NULL;
    return 2; /* cudaErrorMemoryAllocation */
  }
  *p = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
  if (*p == NULL) return 2;
  __atomic_fetch_add(&fake_cudart_allocs, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&fake_cudart_last_flags, flags, __ATOMIC_RELAXED);
  return 0;
}

int cudaFreeHost(void* p) {
  free(p);
  __atomic_fetch_add(&fake_cudart_frees, 1, __ATOMIC_RELAXED);
  return 0;
}

const char* cudaGetErrorString(int e) { return e == 2 ? "out of memory" : "unknown error"; }
