// SpoolFile: the temporary file a remote writable file (http PUT, s3 upload)
// collects its bytes in before sending them, in $TMPDIR (else /tmp). It is
// unlinked by Discard() and on destruction.
#ifndef SHARDSTREAM_SOURCES_SPOOL_FILE_H_
#define SHARDSTREAM_SOURCES_SPOOL_FILE_H_

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <string_view>

#include "shardstream/status.h"

namespace shardstream::internal {

class SpoolFile {
 public:
  SpoolFile() = default;
  SpoolFile(const SpoolFile&) = delete;
  SpoolFile& operator=(const SpoolFile&) = delete;
  ~SpoolFile() { Discard(); }

  // Creates "<tmpdir>/<prefix>-XXXXXX".
  Status Create(const char* prefix) {
    const char* tmp = ::getenv("TMPDIR");
    path_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
    fd_ = ::mkstemp(path_.data());
    if (fd_ < 0) return Status::FromErrno(errno, "mkstemp " + path_);
    return Status::OK();
  }
  Status Append(std::string_view data) {
    while (!data.empty()) {
      ssize_t w = ::write(fd_, data.data(), data.size());
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "write " + path_);
      }
      data.remove_prefix(static_cast<size_t>(w));
    }
    return Status::OK();
  }
  void Discard() {
    if (fd_ < 0) return;
    ::close(fd_);
    ::unlink(path_.c_str());
    fd_ = -1;
  }
  bool open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SOURCES_SPOOL_FILE_H_
