// GIL helpers for blocking calls (tensorstore's InterruptibleWait): the
// calling thread gives up the GIL and waits in short slices, taking the GIL
// back between slices only to run PyErr_CheckSignals(), so Ctrl-C raises
// KeyboardInterrupt within a slice even while C++ is blocked.
#ifndef SHARDSTREAM_PYTHON_INTERRUPTIBLE_H_
#define SHARDSTREAM_PYTHON_INTERRUPTIBLE_H_

#include <pybind11/pybind11.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace shardstream::python {

// How long a blocked call sleeps before it checks for signals.
inline constexpr std::chrono::milliseconds kSignalSlice{20};

// Waits on `cv` until `done()` holds, then runs `take()`; both run with `mu`
// held and the GIL released (so they must not touch Python objects). The GIL
// is never requested while `mu` is held, so a thread holding the GIL and
// waiting for `mu` cannot deadlock with us. Throws py::error_already_set
// (KeyboardInterrupt, or whatever a signal handler raised) when a signal
// handler fails; `take` has then not run. REQUIRES: the GIL is held.
template <typename Pred, typename Take>
void InterruptibleWait(std::mutex& mu, std::condition_variable& cv, Pred done, Take take) {
  while (true) {
    bool ready;
    {
      pybind11::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(mu);
      ready = cv.wait_for(lock, kSignalSlice, done);
      if (ready) take();
    }
    if (ready) return;
    if (PyErr_CheckSignals() != 0) throw pybind11::error_already_set();
  }
}


}  // namespace shardstream::python

#endif  // SHARDSTREAM_PYTHON_INTERRUPTIBLE_H_
