// ScopedLogCapture: while alive, the library's log is also written to a
// string and its level is lowered to debug, so tests can check what would be
// logged (e.g. that no secret ever is). Not for production use.
// Thread-safety: Text() may be called while other threads log.
#ifndef SHARDSTREAM_COMMON_LOG_CAPTURE_H_
#define SHARDSTREAM_COMMON_LOG_CAPTURE_H_

#include <memory>
#include <string>

#include "shardstream/export.h"

namespace shardstream::internal {

class SHARDSTREAM_EXPORT ScopedLogCapture {
 public:
  ScopedLogCapture();
  ~ScopedLogCapture();
  ScopedLogCapture(const ScopedLogCapture&) = delete;
  ScopedLogCapture& operator=(const ScopedLogCapture&) = delete;
  std::string Text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_COMMON_LOG_CAPTURE_H_
