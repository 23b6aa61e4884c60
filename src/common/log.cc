#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace shardstream::internal {

spdlog::logger& Log() {
  // Never destroyed: the transfer engine's threads are never joined and may
  // log (a stalled part giving up) while the process runs its exit handlers.
  static auto* logger = new std::shared_ptr<spdlog::logger>([] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto l = std::make_shared<spdlog::logger>("shardstream", sink);
    l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [shardstream] [%l] %v");
    const char* env = std::getenv("SHARDSTREAM_LOG_LEVEL");
    l->set_level(env ? spdlog::level::from_str(env) : spdlog::level::warn);
    return l;
  }());
  return **logger;
}

}  // namespace shardstream::internal
