#include "common/log_capture.h"

#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <mutex>
#include <sstream>

#include "common/log.h"

namespace shardstream::internal {

struct ScopedLogCapture::Impl {
  std::ostringstream out;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink;
  spdlog::level::level_enum old_level;
};

ScopedLogCapture::ScopedLogCapture() : impl_(new Impl) {
  impl_->sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(impl_->out);
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

std::string ScopedLogCapture::Text() const {
  impl_->sink->flush();
  return impl_->out.str();
}

}  // namespace shardstream::internal
