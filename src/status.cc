#include "shardstream/status.h"

#include <cerrno>
#include <cstring>

namespace shardstream {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kIo: return "io";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kChecksum: return "checksum";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kNotFound: return "not-found";
    case StatusCode::kAuth: return "auth";
    case StatusCode::kConfig: return "config";
    case StatusCode::kCancelled: return "cancelled";
  }
  return "unknown";
}

Status::Status(StatusCode code, std::string message, std::string url, int64_t offset) {
  if (code != StatusCode::kOk) {
    state_ = std::make_shared<const State>(
        State{code, std::move(message), std::move(url), offset});
  }
}

Status Status::FromErrno(int err, std::string_view what) {
  std::string msg = std::string(what) + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Status(StatusCode::kNotFound, std::move(msg));
    case EACCES:
    case EPERM:
      return Status(StatusCode::kAuth, std::move(msg));
    case EINTR:
    case EAGAIN:
      return Status(StatusCode::kUnavailable, std::move(msg));
    default:
      return Status(StatusCode::kIo, std::move(msg));
  }
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return ok() ? kEmpty : state_->message;
}

const std::string& Status::url() const {
  static const std::string kEmpty;
  return ok() ? kEmpty : state_->url;
}

Status Status::WithContext(std::string_view context, std::string_view url,
                           int64_t offset) const {
  if (ok()) return *this;
  std::string msg(context);
  if (!msg.empty()) msg += ": ";
  msg += state_->message;
  return Status(state_->code, std::move(msg),
                state_->url.empty() ? std::string(url) : state_->url,
                state_->offset >= 0 ? state_->offset : offset);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(state_->code));
  s += ": ";
  s += state_->message;
  return s;
}

}  // namespace shardstream
