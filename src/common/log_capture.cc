#include "common/log_capture.h"

#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "common/log.h"

namespace shardstream::internal {

namespace {

// The log as a string. Text() takes the sink's own lock, so it may be read
// while other threads log (an ostream sink's stream cannot be).
class StringSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::string Text() {
    std::lock_guard<std::mutex> lock(mutex_);
    return text_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    text_.append(formatted.data(), formatted.size());
  }
  void flush_() override {}

 private:
  std::string text_;
};

}  // namespace

struct ScopedLogCapture::Impl {
  std::shared_ptr<StringSink> sink;
  spdlog::level::level_enum old_level;
};

ScopedLogCapture::ScopedLogCapture() : impl_(new Impl) {
  impl_->sink = std::make_shared<StringSink>();
  auto& log = Log();
  impl_->old_level = log.level();
  log.sinks().push_back(impl_->sink);
  log.set_level(spdlog::level::debug);
}

ScopedLogCapture::~ScopedLogCapture() {
  auto& log = Log();
  auto& sinks = log.sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), impl_->sink), sinks.end());
  log.set_level(impl_->old_level);
}

std::string ScopedLogCapture::Text() const { return impl_->sink->Text(); }

}  // namespace shardstream::internal
