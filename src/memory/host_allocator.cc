// Pageable and CUDA-pinned host allocators. libcudart is opened with dlopen
// on first use so that neither building nor running needs CUDA.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/log.h"
#include "shardstream/pinned_pool.h"

namespace shardstream {

HostAllocator::~HostAllocator() = default;

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
  HostAllocFn host_alloc = nullptr;
  FreeHostFn free_host = nullptr;
  ErrorStringFn error_string = nullptr;

  static const CudaRuntime* Load() {
    static const CudaRuntime* runtime = [] () -> const CudaRuntime* {
      const char* env = std::getenv("SHARDSTREAM_PINNED");
      if (env != nullptr && std::strcmp(env, "0") == 0) return nullptr;
      const char* names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                             "libcudart.so.11.0"};
      void* lib = nullptr;
      for (const char* n : names)
        if ((lib = ::dlopen(n, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
      if (lib == nullptr) return nullptr;
      auto* rt = new CudaRuntime();  // lives for the process, like the library
      rt->host_alloc = reinterpret_cast<HostAllocFn>(::dlsym(lib, "cudaHostAlloc"));
      rt->free_host = reinterpret_cast<FreeHostFn>(::dlsym(lib, "cudaFreeHost"));
      rt->error_string = reinterpret_cast<ErrorStringFn>(::dlsym(lib, "cudaGetErrorString"));
      auto count = reinterpret_cast<DeviceCountFn>(::dlsym(lib, "cudaGetDeviceCount"));
      int devices = 0;
      if (!rt->host_alloc || !rt->free_host || !count || count(&devices) != 0 || devices <= 0) {
        internal::Log().info("CUDA runtime found but no usable device; using pageable memory");
        delete rt;
        return nullptr;
      }
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
