/* A stand-in for libcudart: the entry points shardstream resolves at run
 * time (cudaGetDeviceCount, cudaHostAlloc, cudaFreeHost, cudaGetErrorString)
 * and those the C++ example uses to copy batches (cudaSetDevice, cudaMalloc,
 * cudaFree, streams, cudaMemcpyAsync as a plain memcpy into host memory). It
 * lets a machine without a GPU run the library's dlopen path, its pinned-slot
 * accounting, its error messages and the example's copy loop; it pins and
 * copies to no device. Environment: FAKE_CUDART_DEVICES (default 1),
 * FAKE_CUDART_FAIL (any value: every cudaHostAlloc fails with
 * cudaErrorMemoryAllocation), FAKE_CUDART_REPORT (any value: print the call
 * counts at exit).
 *
 * Events (the copy fences of the batch slots): an event is pending after
 * cudaEventRecord until the first cudaEventQuery, which answers
 * cudaErrorNotReady once, as an event behind a queued copy would; the counts
 * are exported for the tests. Records happen only in a thread that has a
 * context, which fake_cuda.c (the driver, libcuda.so.1) decides. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fake_cudart_allocs = 0;
int fake_cudart_frees = 0;
unsigned int fake_cudart_last_flags = 0;
int fake_cudart_set_device = -1;

int cuInit(unsigned int flags); /* fake_cuda.c: linking it loads libcuda.so.1, as the real runtime does */

int cudaGetDeviceCount(int* n) {
  cuInit(0);
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

const char* cudaGetErrorString(int e) {
  return e == 2 ? "out of memory" : e == 1 ? "invalid argument" : "unknown error";
}

static int copies = 0;
static size_t copied = 0;
static int stream_token;

int cudaSetDevice(int d) {
  __atomic_store_n(&fake_cudart_set_device, d, __ATOMIC_RELAXED);
  return d == 0 ? 0 : 1;
}
int cudaMalloc(void** p, size_t n) {
  *p = malloc(n ? n : 1);
  return *p ? 0 : 2;
}
int cudaFree(void* p) {
  free(p);
  return 0;
}
int cudaStreamCreate(void** s) {
  *s = &stream_token;
  return 0;
}
int cudaStreamDestroy(void* s) { return s == &stream_token ? 0 : 1; }
int cudaStreamSynchronize(void* s) { return s == &stream_token ? 0 : 1; }
/* kind 1 is cudaMemcpyHostToDevice, 2 DeviceToHost: anything else is a
 * mistake here. */
int cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, void* s) {
  if ((kind != 1 && kind != 2) || s != &stream_token || dst == NULL || src == NULL) return 1;
  memcpy(dst, src, n);
  __atomic_fetch_add(&copies, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&copied, n, __ATOMIC_RELAXED);
  return 0;
}

__attribute__((destructor)) static void Report(void) {
  if (getenv("FAKE_CUDART_REPORT"))
    fprintf(stderr, "fake_cudart: %d cudaHostAlloc, %d cudaFreeHost, %d cudaMemcpyAsync, %zu bytes\n",
            fake_cudart_allocs, fake_cudart_frees, copies, copied);
}

int fake_cudart_event_records = 0;
int fake_cudart_event_syncs = 0;
int fake_cudart_events_live = 0;

struct FakeEvent {
  int pending;
};

int cudaEventCreateWithFlags(void** e, unsigned int flags) {
  (void)flags;
  *e = calloc(1, sizeof(struct FakeEvent));
  if (*e == NULL) return 2;
  __atomic_fetch_add(&fake_cudart_events_live, 1, __ATOMIC_RELAXED);
  return 0;
}
int cudaEventRecord(void* e, void* stream) {
  if (e == NULL || stream != NULL) return 1; /* the legacy default stream only */
  __atomic_store_n(&((struct FakeEvent*)e)->pending, 1, __ATOMIC_RELEASE);
  __atomic_fetch_add(&fake_cudart_event_records, 1, __ATOMIC_RELAXED);
  return 0;
}
int cudaEventQuery(void* e) {
  if (e == NULL) return 1;
  return __atomic_exchange_n(&((struct FakeEvent*)e)->pending, 0, __ATOMIC_ACQ_REL) ? 600 : 0;
}
int cudaEventSynchronize(void* e) {
  if (e == NULL) return 1;
  __atomic_fetch_add(&fake_cudart_event_syncs, 1, __ATOMIC_RELAXED);
  return 0;
}
int cudaEventDestroy(void* e) {
  if (e == NULL) return 1;
  free(e);
  __atomic_fetch_sub(&fake_cudart_events_live, 1, __ATOMIC_RELAXED);
  return 0;
}
int cudaGetDevice(int* d) {
  *d = 0;
  return 0;
}
