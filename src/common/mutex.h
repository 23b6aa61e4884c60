// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with
// clang's thread-safety attributes (libstdc++'s own types carry none), so a
// clang build with -Wthread-safety checks that what a mutex guards is only
// touched under it (leveldb's port::Mutex, abseil's Mutex). Annotate shared
// members GUARDED_BY(mu_) and functions that expect the lock REQUIRES(mu_).
#ifndef SHARDSTREAM_COMMON_MUTEX_H_
#define SHARDSTREAM_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define SHARDSTREAM_TSA(x) __attribute__((x))
#else
#define SHARDSTREAM_TSA(x)
#endif
#define SHARDSTREAM_CAPABILITY(x) SHARDSTREAM_TSA(capability(x))
#define SHARDSTREAM_SCOPED_CAPABILITY SHARDSTREAM_TSA(scoped_lockable)
#define GUARDED_BY(x) SHARDSTREAM_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) SHARDSTREAM_TSA(pt_guarded_by(x))
#define REQUIRES(...) SHARDSTREAM_TSA(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) SHARDSTREAM_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) SHARDSTREAM_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) SHARDSTREAM_TSA(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) SHARDSTREAM_TSA(try_acquire_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS SHARDSTREAM_TSA(no_thread_safety_analysis)

namespace shardstream::internal {

class SHARDSTREAM_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SHARDSTREAM_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// A condition variable waited on with a Mutex held.
class CondVar {
 public:
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held, by the caller
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_COMMON_MUTEX_H_
