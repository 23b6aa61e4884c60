// The few CUDA runtime calls the example needs, resolved from libcudart at
// run time, so the example neither needs CUDA to build nor to run.
#ifndef CPP_TRAINING_LOOP_CUDA_RUNTIME_LOADER_H_
#define CPP_TRAINING_LOOP_CUDA_RUNTIME_LOADER_H_

#include <cstddef>

struct CudaRuntime {
  using Stream = void*;
  int (*GetDeviceCount)(int*) = nullptr;
  int (*SetDevice)(int) = nullptr;
  int (*Malloc)(void**, size_t) = nullptr;
  int (*Free)(void*) = nullptr;
  int (*StreamCreate)(Stream*) = nullptr;
  int (*StreamDestroy)(Stream) = nullptr;
  int (*StreamSynchronize)(Stream) = nullptr;
  // cudaMemcpyAsync(dst, src, bytes, kind, stream); kind 1 = host to device,
  // 2 = device to host.
  int (*MemcpyAsync)(void*, const void*, size_t, int, Stream) = nullptr;
  const char* (*GetErrorString)(int) = nullptr;

  // Loads libcudart and checks for a device. False (with *why) otherwise.
  bool Load(const char** why);
};

#endif  // CPP_TRAINING_LOOP_CUDA_RUNTIME_LOADER_H_
