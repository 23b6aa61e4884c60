// Pageable and CUDA-pinned host allocators. libcudart is opened with dlopen
// on first use so that neither building nor running needs CUDA.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "common/log.h"
#include "shardstream/pinned_pool.h"

namespace shardstream {

HostAllocator::~HostAllocator() = default;
void HostAllocator::Fence(HostBuffer*) {}
bool HostAllocator::WaitFence(HostBuffer*) { return false; }
void HostAllocator::DropFence(HostBuffer*) {}

const char* HostMemoryKindName(HostMemoryKind kind) {
  return kind == HostMemoryKind::kCudaPinned ? "cuda_pinned" : "pageable";
}

namespace {

constexpr size_t kAlign = 4096;

class Pageable final : public HostAllocator {
 public:
  HostMemoryKind kind() const override { return HostMemoryKind::kPageable; }
  Result<void*> Allocate(size_t bytes) override {
    void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    if (p == nullptr)
      return Status::Io("cannot allocate " + std::to_string(bytes) + " bytes of host memory");
    return p;
  }
  void Free(void* p, size_t) override { std::free(p); }
};

// The few libcudart entry points we need, resolved at run time.
struct CudaRuntime {
  using HostAllocFn = int (*)(void**, size_t, unsigned int);
  using FreeHostFn = int (*)(void*);
  using DeviceCountFn = int (*)(int*);
  using ErrorStringFn = const char* (*)(int);
  using EventCreateFn = int (*)(void**, unsigned int);
  using EventRecordFn = int (*)(void*, void*);
  using EventFn = int (*)(void*);
  using GetDeviceFn = int (*)(int*);
  using SetDeviceFn = int (*)(int);
  using CtxGetCurrentFn = int (*)(void**);  // the driver's cuCtxGetCurrent
  HostAllocFn host_alloc = nullptr;
  FreeHostFn free_host = nullptr;
  ErrorStringFn error_string = nullptr;
  // Copy fences (all set, or none: then slots are reused without one).
  EventCreateFn event_create = nullptr;
  EventRecordFn event_record = nullptr;
  EventFn event_query = nullptr, event_synchronize = nullptr, event_destroy = nullptr;
  GetDeviceFn get_device = nullptr;
  SetDeviceFn set_device = nullptr;
  CtxGetCurrentFn ctx_get_current = nullptr;

  bool fences() const {
    return event_create && event_record && event_query && event_synchronize && event_destroy &&
           get_device && set_device;
  }

  // Whether the calling thread has a CUDA context: a thread without one has
  // queued no copy, and a runtime call there would create a context on
  // device 0 (memory on a GPU the process may not use).
  bool ThreadHasContext() const {
    CtxGetCurrentFn get = ctx_get_current;
    if (get == nullptr) {
      // libcuda is loaded by the runtime at its first real call; until then
      // nothing can have been queued.
      void* drv = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
      if (drv == nullptr) return false;
      get = reinterpret_cast<CtxGetCurrentFn>(::dlsym(drv, "cuCtxGetCurrent"));
      if (get == nullptr) return false;
    }
    void* ctx = nullptr;
    return get(&ctx) == 0 && ctx != nullptr;
  }

  static void* OpenRuntime() {
    const char* names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                           "libcudart.so.11.0"};
    // A runtime the process already holds (PyTorch's) first, so that its
    // streams and ours are one runtime's.
    for (const char* n : names)
      if (void* lib = ::dlopen(n, RTLD_NOW | RTLD_NOLOAD)) return lib;
    for (const char* n : names)
      if (void* lib = ::dlopen(n, RTLD_NOW | RTLD_LOCAL)) return lib;
    return nullptr;
  }

  static const CudaRuntime* Load() {
    static const CudaRuntime* runtime = [] () -> const CudaRuntime* {
      const char* env = std::getenv("SHARDSTREAM_PINNED");
      if (env != nullptr && std::strcmp(env, "0") == 0) return nullptr;
      void* lib = OpenRuntime();
      if (lib == nullptr) return nullptr;
      auto* rt = new CudaRuntime();  // lives for the process, like the library
      auto sym = [lib](auto* fn, const char* name) {
        *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(::dlsym(lib, name));
      };
      sym(&rt->host_alloc, "cudaHostAlloc");
      sym(&rt->free_host, "cudaFreeHost");
      sym(&rt->error_string, "cudaGetErrorString");
      sym(&rt->event_create, "cudaEventCreateWithFlags");
      sym(&rt->event_record, "cudaEventRecord");
      sym(&rt->event_query, "cudaEventQuery");
      sym(&rt->event_synchronize, "cudaEventSynchronize");
      sym(&rt->event_destroy, "cudaEventDestroy");
      sym(&rt->get_device, "cudaGetDevice");
      sym(&rt->set_device, "cudaSetDevice");
      DeviceCountFn count = nullptr;
      sym(&count, "cudaGetDeviceCount");
      int devices = 0;
      if (!rt->host_alloc || !rt->free_host || !count || count(&devices) != 0 || devices <= 0) {
        internal::Log().info("CUDA runtime found but no usable device; using pageable memory");
        delete rt;
        return nullptr;
      }
      if (void* drv = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD))
        rt->ctx_get_current = reinterpret_cast<CtxGetCurrentFn>(::dlsym(drv, "cuCtxGetCurrent"));
      if (!rt->fences())
        internal::Log().warn("this CUDA runtime lacks the event calls: a batch slot may be "
                             "rewritten while an asynchronous copy still reads it");
      internal::Log().info("using CUDA pinned host memory ({} device(s))", devices);
      return rt;
    }();
    return runtime;
  }
};

class CudaPinned final : public HostAllocator {
 public:
  explicit CudaPinned(const CudaRuntime* rt) : rt_(rt) {}
  HostMemoryKind kind() const override { return HostMemoryKind::kCudaPinned; }
  Result<void*> Allocate(size_t bytes) override {
    void* p = nullptr;
    // cudaHostAllocPortable (1): pinned for every CUDA context in the process.
    int err = rt_->host_alloc(&p, bytes, 1);
    if (err != 0 || p == nullptr)
      return Status::Io("cudaHostAlloc of " + std::to_string(bytes) + " bytes failed: " +
                        (rt_->error_string ? rt_->error_string(err) : std::to_string(err)));
    return p;
  }
  void Free(void* p, size_t) override { rt_->free_host(p); }

  // An event on the legacy default stream, where PyTorch queues
  // .cuda(non_blocking=True) unless told otherwise: it completes once every
  // copy queued before it (on that stream, or on any blocking stream) is done.
  void Fence(HostBuffer* b) override {
    HostBuffer::FenceState& f = b->fence();
    f.pending = false;
    if (!rt_->fences() || !rt_->ThreadHasContext()) return;
    int device = -1;
    if (rt_->get_device(&device) != 0) return;
    if (f.event != nullptr && f.device != device) DropFence(b);
    // cudaEventDisableTiming (2): the cheapest event, for ordering only.
    if (f.event == nullptr && rt_->event_create(&f.event, 2) != 0) {
      f.event = nullptr;
      return;
    }
    f.device = device;
    f.pending = rt_->event_record(f.event, nullptr) == 0;
  }

  bool WaitFence(HostBuffer* b) override {
    HostBuffer::FenceState& f = b->fence();
    if (!f.pending) return false;
    f.pending = false;
    // The event's device, so that this (reader) thread makes no context on
    // another GPU; cudaErrorNotReady (600): the copy is still queued.
    rt_->set_device(f.device);
    if (rt_->event_query(f.event) != 600) return false;
    rt_->event_synchronize(f.event);
    return true;
  }

  void DropFence(HostBuffer* b) override {
    HostBuffer::FenceState& f = b->fence();
    if (f.event != nullptr) rt_->event_destroy(f.event);
    f = HostBuffer::FenceState{};
  }

 private:
  const CudaRuntime* rt_;
};

}  // namespace

std::shared_ptr<HostAllocator> PageableAllocator() {
  static auto a = std::make_shared<Pageable>();
  return a;
}

std::shared_ptr<HostAllocator> CudaPinnedAllocator() {
  const CudaRuntime* rt = CudaRuntime::Load();
  if (rt == nullptr) return nullptr;
  static auto a = std::make_shared<CudaPinned>(rt);
  return a;
}

std::shared_ptr<HostAllocator> DefaultHostAllocator() {
  auto pinned = CudaPinnedAllocator();
  return pinned ? pinned : PageableAllocator();
}

}  // namespace shardstream
