// ForkJoin: one helper thread that runs the second half of a job while the
// caller runs the first, so a batch's copies use two cores. The split is
// fixed by the caller (part 0 and part 1), never by timing: which thread
// writes a byte does not change the byte.
//
// No allocation per job (a function pointer and a context pointer), so the
// pipeline's steady state stays allocation-free.
//
// Thread-safety: Run() from one thread at a time; the helper starts at the
// first Run() and is joined by the destructor.
#ifndef SHARDSTREAM_PIPELINE_FORK_JOIN_H_
#define SHARDSTREAM_PIPELINE_FORK_JOIN_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include <pthread.h>

namespace shardstream::internal {

class ForkJoin {
 public:
  using Fn = void (*)(void* ctx, int part);

  ForkJoin() = default;
  ForkJoin(const ForkJoin&) = delete;
  ForkJoin& operator=(const ForkJoin&) = delete;
  ~ForkJoin() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    work_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  // fn(ctx, 1) on the helper, fn(ctx, 0) here; returns when both are done.
  void Run(Fn fn, void* ctx) {
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = fn;
      ctx_ = ctx;
      ++posted_;
    }
    work_.notify_one();
    fn(ctx, 0);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done_ == posted_; });
  }

 private:
  void Loop() {
    pthread_setname_np(pthread_self(), "ss-copy");
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      work_.wait(lock, [&] { return quit_ || done_ != posted_; });
      if (done_ != posted_) {
        Fn fn = fn_;
        void* ctx = ctx_;
        lock.unlock();
        fn(ctx, 1);
        lock.lock();
        done_ = posted_;
        done_cv_.notify_one();
        continue;
      }
      return;  // quit_, nothing posted
    }
  }

  std::mutex mu_;
  std::condition_variable work_, done_cv_;
  Fn fn_ = nullptr;
  void* ctx_ = nullptr;
  uint64_t posted_ = 0, done_ = 0;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_FORK_JOIN_H_
