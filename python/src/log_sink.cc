// Routes the library's spdlog records into Python's logging without ever
// taking the GIL on a library thread: a sink collects records in a bounded
// queue, and Python drains it (shardstream/_logging.py: after each batch, on
// close and at exit) and re-emits them on the "shardstream" logger. A sink
// calling into Python instead would need the GIL from arbitrary threads and
// could deadlock at interpreter exit.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spdlog/sinks/base_sink.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/log.h"

namespace py = pybind11;

namespace shardstream::python {
namespace {

struct Record {
  int level;  // Python logging level number
  std::string message;
  double time;  // seconds since the epoch
};

int PythonLevel(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
    case spdlog::level::debug: return 10;
    case spdlog::level::info: return 20;
    case spdlog::level::warn: return 30;
    case spdlog::level::err: return 40;
    case spdlog::level::critical: return 50;
    default: return 0;
  }
}

class QueueSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  static constexpr size_t kMaxRecords = 10000;

  std::vector<Record> Drain() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Record> out(records_.begin(), records_.end());
    records_.clear();
    pending_.store(false, std::memory_order_relaxed);
    if (dropped_ > 0) {
      out.push_back({30, std::to_string(dropped_) + " log records dropped (not drained in time)",
                     0});
      dropped_ = 0;
    }
    return out;
  }
  bool pending() const { return pending_.load(std::memory_order_relaxed); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (records_.size() >= kMaxRecords) {
      records_.pop_front();
      ++dropped_;
    }
    double t = std::chrono::duration<double>(msg.time.time_since_epoch()).count();
    records_.push_back({PythonLevel(msg.level), std::string(msg.payload.data(), msg.payload.size()),
                        t});
    pending_.store(true, std::memory_order_relaxed);
  }
  void flush_() override {}

 private:
  std::deque<Record> records_;
  uint64_t dropped_ = 0;
  std::atomic<bool> pending_{false};
};

// Leaked on purpose: library threads may log during interpreter teardown.
QueueSink* g_sink = nullptr;

}  // namespace

void RegisterLogSink(py::module_& m) {
  // Installed at import, before any library thread exists.
  auto sink = std::make_shared<QueueSink>();
  g_sink = sink.get();
  new std::shared_ptr<QueueSink>(sink);  // never freed (see above)
  internal::Log().sinks().clear();
  internal::Log().sinks().push_back(sink);

  m.def("_drain_logs", [] {
    py::list out;
    if (!g_sink->pending()) return out;
    std::vector<Record> records;
    {
      py::gil_scoped_release release;
      records = g_sink->Drain();
    }
    for (Record& r : records) out.append(py::make_tuple(r.level, r.message, r.time));
    return out;
  }, "Records logged by the library since the last call: [(level, message, time)].");
  m.def("_set_log_level", [](int python_level) {
    spdlog::level::level_enum l = python_level <= 10   ? spdlog::level::debug
                                  : python_level <= 20 ? spdlog::level::info
                                  : python_level <= 30 ? spdlog::level::warn
                                  : python_level <= 40 ? spdlog::level::err
                                                       : spdlog::level::critical;
    internal::Log().set_level(l);
  }, py::arg("level"), "Sets the library's level from a Python logging level.");
  m.def("_log", [](int python_level, const std::string& message) {
    internal::Log().log(python_level >= 40 ? spdlog::level::err
                        : python_level >= 30 ? spdlog::level::warn
                                             : spdlog::level::info, "{}", message);
  }, "Logs through the library's logger (tests).");
}

}  // namespace shardstream::python
