// The library's logger (spdlog, name "shardstream"). Level from the
// environment variable SHARDSTREAM_LOG_LEVEL (trace, debug, info, warn,
// error, off; default warn). Never log a url without RedactUrl().
#ifndef SHARDSTREAM_COMMON_LOG_H_
#define SHARDSTREAM_COMMON_LOG_H_

#include <spdlog/spdlog.h>

#include <memory>

namespace shardstream::internal {

// Created on first use (not in a static initializer), thread-safe.
spdlog::logger& Log();

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_COMMON_LOG_H_
