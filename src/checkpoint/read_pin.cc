// CheckpointReadPin, and the exclusive hold rotation takes before it moves a
// checkpoint away. Like the writer lock, the pin is an flock outside the
// Source: Source has no locking call, and only a lock excludes another
// process.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "checkpoint/internal.h"
#include "shardstream/checkpoint.h"
#include "shardstream/url.h"

namespace shardstream {

namespace {

bool SameFile(int fd, const std::string& path) {
  struct stat a, b;
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

}  // namespace

Result<CheckpointReadPin> CheckpointReadPin::Acquire(const std::string& ckpt_url) {
  CheckpointReadPin pin;
  const std::string dir = LocalPath(ckpt_url);
  if (dir.empty()) return pin;
  const std::string path = dir + "/" + internal::kManifestName;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return Status(StatusCode::kNotFound,
                    "checkpoint " + RedactUrl(ckpt_url) + " is gone (rotated away?)", ckpt_url);
    return Status::FromErrno(errno, "open " + path);
  }
  pin.fd_ = fd;  // closed by the pin on every return below
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return Status(StatusCode::kUnavailable,
                    "checkpoint " + RedactUrl(ckpt_url) + " is being removed by rotation",
                    ckpt_url);
    return Status::FromErrno(errno, "flock " + path);
  }
  // Renamed away (and unlocked) between the open and the lock: not a pin.
  if (!SameFile(fd, path))
    return Status(StatusCode::kNotFound,
                  "checkpoint " + RedactUrl(ckpt_url) + " is gone (rotated away?)", ckpt_url);
  return pin;
}

CheckpointReadPin::CheckpointReadPin(CheckpointReadPin&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }

CheckpointReadPin& CheckpointReadPin::operator=(CheckpointReadPin&& o) noexcept {
  if (this != &o) {
    Release();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

CheckpointReadPin::~CheckpointReadPin() { Release(); }

void CheckpointReadPin::Release() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
  fd_ = -1;
}

namespace internal {

Result<RemovalHold> HoldForRemoval(const std::string& ckpt_url) {
  RemovalHold hold;
  const std::string dir = LocalPath(ckpt_url);
  if (dir.empty()) return hold;
  const std::string path = dir + "/" + kManifestName;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // No manifest: a broken checkpoint nobody can be reading.
    if (errno == ENOENT) return hold;
    return Status::FromErrno(errno, "open " + path);
  }
  hold.fd = fd;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Status::FromErrno(errno, "flock " + path);
    hold.pinned = true;
  }
  return hold;
}

RemovalHold::~RemovalHold() {
  if (fd >= 0) ::close(fd);
}

}  // namespace internal
}  // namespace shardstream
