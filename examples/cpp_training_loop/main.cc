// A minimal C++ training loop on shardstream: iterate epochs over a data set,
// and when a CUDA device is present copy every batch to it with
// cudaMemcpyAsync on a stream (from pinned memory: the loader allocates its
// batch slots with cudaHostAlloc when CUDA is there).
//
//   train_loop MANIFEST [EPOCHS] [--tokens FIELD] [--seq-len N] [--batch N]
// Without --tokens the loop batches the fields "x.npy" and "cls".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <shardstream/loader.h>

#include "cuda_runtime_loader.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MANIFEST [EPOCHS] [--tokens FIELD] [--seq-len N] [--batch N]\n",
                 argv[0]);
    return 2;
  }
  shardstream::LoaderOptions options;
  options.manifest = argv[1];
  int epochs = 2;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--tokens") options.tokens.field = value();
    else if (a == "--seq-len") options.tokens.seq_len = std::atoll(value());
    else if (a == "--batch") options.batch_size = std::atoll(value());
    else epochs = std::atoi(a.c_str());
  }
  if (options.tokens.field.empty()) {
    options.fields = {shardstream::FieldSpec{"x.npy"}, shardstream::FieldSpec{"cls"}};
  }
  options.shuffle_buffer = 1000;
  options.seed = 1234;

  auto loader = shardstream::Loader::Create(options);
  if (!loader.ok()) {
    std::fprintf(stderr, "loader: %s\n", loader.status().ToString().c_str());
    return 1;
  }

  CudaRuntime cuda;
  const char* why = "";
  const bool gpu = cuda.Load(&why);
  CudaRuntime::Stream stream = nullptr;
  std::vector<void*> device;        // one buffer per tensor, grown as needed
  std::vector<size_t> device_bytes;
  if (gpu) {
    cuda.StreamCreate(&stream);
    std::printf("CUDA device found: batches are copied with cudaMemcpyAsync\n");
  } else {
    std::printf("no CUDA (%s): batches stay on the host\n", why);
  }

  for (int epoch = 0; epoch < epochs; ++epoch) {
    if (!(*loader)->set_epoch(epoch).ok()) return 1;
    auto t0 = std::chrono::steady_clock::now();
    int64_t batches = 0, samples = 0;
    shardstream::Batch in_flight;  // kept alive until its copy has finished
    while (true) {
      auto batch = (*loader)->next();
      if (!batch.ok()) {
        std::fprintf(stderr, "next: %s\n", batch.status().ToString().c_str());
        return 1;
      }
      if (batch->empty()) break;
      if (gpu) {
        cuda.StreamSynchronize(stream);  // the previous copy is done: its slot may go back
        in_flight = *batch;
        for (size_t t = 0; t < batch->num_tensors(); ++t) {
          shardstream::TensorView v = batch->tensor(t);
          if (v.is_bytes) continue;
          if (device.size() <= t) {
            device.resize(t + 1, nullptr);
            device_bytes.resize(t + 1, 0);
          }
          if (device_bytes[t] < v.nbytes) {
            if (device[t]) cuda.Free(device[t]);
            cuda.Malloc(&device[t], v.nbytes);
            device_bytes[t] = v.nbytes;
          }
          int rc = cuda.MemcpyAsync(device[t], v.data, v.nbytes, /*host to device*/ 1, stream);
          if (rc != 0) {
            std::fprintf(stderr, "cudaMemcpyAsync: %s\n", cuda.GetErrorString(rc));
            return 1;
          }
        }
        // ... launch the training step on `stream` here ...
      }
      ++batches;
      samples += batch->num_samples();
    }
    if (gpu) cuda.StreamSynchronize(stream);
    if (gpu && !in_flight.empty()) {
      // The device holds what the host slot held: copy the last batch back.
      size_t checked = 0;
      for (size_t t = 0; t < in_flight.num_tensors(); ++t) {
        shardstream::TensorView v = in_flight.tensor(t);
        if (v.is_bytes) continue;
        std::vector<unsigned char> back(v.nbytes);
        if (cuda.MemcpyAsync(back.data(), device[t], v.nbytes, /*device to host*/ 2, stream) != 0 ||
            cuda.StreamSynchronize(stream) != 0 ||
            std::memcmp(back.data(), v.data, v.nbytes) != 0) {
          std::fprintf(stderr, "epoch %d: tensor %zu of the last batch differs on the device\n",
                       epoch, t);
          return 1;
        }
        checked += v.nbytes;
      }
      std::printf("epoch %d: the last batch's %zu bytes read back from the device match\n", epoch,
                  checked);
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("epoch %d: %lld batches, %lld samples, %.2f s\n", epoch,
                static_cast<long long>(batches), static_cast<long long>(samples), s);
  }
  std::printf("%s\n", (*loader)->stats().ToString().c_str());
  if (gpu) {
    for (void* p : device)
      if (p) cuda.Free(p);
    cuda.StreamDestroy(stream);
  }
  return 0;
}
