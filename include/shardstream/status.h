// Status: the outcome of an operation, as a value. Errors travel as Status
// from worker threads to the consumer (see DESIGN.md "Errors and threads").
//
// An OK status holds nothing (one null pointer, as in leveldb); an error holds
// a code that says whether a retry can help, a message, and optionally the
// url (already redacted) and byte offset it concerns.
//
// Thread-safety: a Status is an immutable value; distinct objects may be used
// from distinct threads, and one object may be read concurrently.
#ifndef SHARDSTREAM_STATUS_H_
#define SHARDSTREAM_STATUS_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

#include "shardstream/export.h"

namespace shardstream {

// The error kinds of DESIGN.md. Python maps each to an exception class.
enum class StatusCode : int {
  kOk = 0,
  kIo = 1,           // local I/O failed (EIO, ENOSPC, ...); see message.
  kCorrupt = 2,      // the bytes are not what the format says. Not retryable.
  kChecksum = 3,     // the bytes differ from the manifest's checksum/size.
  kUnavailable = 4,  // transient: server down, 5xx, reset. Retryable.
  kNotFound = 5,     // no such file, key or object.
  kAuth = 6,         // credentials missing or rejected (401/403).
  kConfig = 7,       // invalid option, argument or manifest.
  kCancelled = 8,    // the operation was stopped (shutdown, Ctrl-C).
};

SHARDSTREAM_EXPORT std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] SHARDSTREAM_EXPORT Status {
 public:
  Status() noexcept = default;
  Status(StatusCode code, std::string message, std::string url = {},
         int64_t offset = -1);

  static Status OK() { return Status(); }
  static Status Io(std::string msg) { return {StatusCode::kIo, std::move(msg)}; }
  static Status Corrupt(std::string msg) { return {StatusCode::kCorrupt, std::move(msg)}; }
  static Status Checksum(std::string msg) { return {StatusCode::kChecksum, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status Auth(std::string msg) { return {StatusCode::kAuth, std::move(msg)}; }
  static Status Config(std::string msg) { return {StatusCode::kConfig, std::move(msg)}; }
  static Status Cancelled(std::string msg) { return {StatusCode::kCancelled, std::move(msg)}; }
  // An error from errno, classified: ENOENT -> NotFound, EACCES -> Auth,
  // everything else -> Io. `what` names the operation and the path.
  static Status FromErrno(int err, std::string_view what);

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return ok() ? StatusCode::kOk : state_->code; }
  // The message without the code name; empty when ok().
  const std::string& message() const;
  // The url the error concerns (credentials redacted), or empty.
  const std::string& url() const;
  // The byte offset in url the error concerns, or -1.
  int64_t offset() const { return ok() ? -1 : state_->offset; }
  // True where trying again may succeed (kUnavailable).
  bool retryable() const { return code() == StatusCode::kUnavailable; }

  // A copy with context added in front of the message ("while reading X: ").
  // Fills url/offset only where still unset. OK stays OK.
  Status WithContext(std::string_view context, std::string_view url = {},
                     int64_t offset = -1) const;

  // "corrupt: <message>" or "OK".
  std::string ToString() const;

 private:
  struct State {
    StatusCode code;
    std::string message;
    std::string url;
    int64_t offset;
  };
  std::shared_ptr<const State> state_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) {
  return os << s.ToString();
}

}  // namespace shardstream

// Returns from the enclosing function if `expr` (a Status) is an error.
#define SHARDSTREAM_RETURN_IF_ERROR(expr)               \
  do {                                                  \
    ::shardstream::Status _ss_status = (expr);          \
    if (!_ss_status.ok()) return _ss_status;            \
  } while (0)

#endif  // SHARDSTREAM_STATUS_H_
