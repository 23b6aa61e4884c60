#include "cuda_runtime_loader.h"

#include <dlfcn.h>

#include <initializer_list>

bool CudaRuntime::Load(const char** why) {
  void* lib = nullptr;
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                           "libcudart.so.11.0"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) {
    *why = "no libcudart found";
    return false;
  }
  auto sym = [&](const char* n) { return dlsym(lib, n); };
  GetDeviceCount = reinterpret_cast<int (*)(int*)>(sym("cudaGetDeviceCount"));
  SetDevice = reinterpret_cast<int (*)(int)>(sym("cudaSetDevice"));
  Malloc = reinterpret_cast<int (*)(void**, size_t)>(sym("cudaMalloc"));
  Free = reinterpret_cast<int (*)(void*)>(sym("cudaFree"));
  StreamCreate = reinterpret_cast<int (*)(Stream*)>(sym("cudaStreamCreate"));
  StreamDestroy = reinterpret_cast<int (*)(Stream)>(sym("cudaStreamDestroy"));
  StreamSynchronize = reinterpret_cast<int (*)(Stream)>(sym("cudaStreamSynchronize"));
  MemcpyAsync =
      reinterpret_cast<int (*)(void*, const void*, size_t, int, Stream)>(sym("cudaMemcpyAsync"));
  GetErrorString = reinterpret_cast<const char* (*)(int)>(sym("cudaGetErrorString"));
  if (!GetDeviceCount || !SetDevice || !Malloc || !Free || !StreamCreate || !StreamDestroy ||
      !StreamSynchronize || !MemcpyAsync || !GetErrorString) {
    *why = "libcudart lacks a needed symbol";
    return false;
  }
  int n = 0;
  if (GetDeviceCount(&n) != 0 || n == 0) {
    *why = "no CUDA device";
    return false;
  }
  return SetDevice(0) == 0;
}
