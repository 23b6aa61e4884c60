// "pipe:COMMAND" (WebDataset's convention): the shard is the standard output
// of `/bin/sh -c COMMAND`. The command runs in its own process group so that
// closing the stream early stops the whole pipeline it started; it is always
// reaped (no zombies). A non-zero exit is an error naming the status.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "common/spawn.h"
#include "shardstream/url.h"
#include "sources/builtin_sources.h"


namespace shardstream {
namespace {

// Commands often carry urls; redact each word.
std::string RedactCommand(const std::string& url) {
  std::istringstream words(url);
  std::string word, out;
  while (words >> word) {
    if (!out.empty()) out += ' ';
    out += RedactUrl(word);
  }
  return out;
}

class PipeStream final : public InputStream {
 public:
  explicit PipeStream(std::string url) : url_(RedactCommand(url)), command_(url.substr(5)) {}
  ~PipeStream() override {
    if (fd_ >= 0) ::close(fd_);
    if (pid_ > 0) {
      // Closed early: stop the command's whole process group, then reap.
      ::kill(-pid_, SIGTERM);
      int status;
      for (int i = 0; i < 100; ++i) {
        if (::waitpid(pid_, &status, WNOHANG) == pid_) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
  }

  Status Start() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe for " + url_);
    pid_ = internal::SpawnShell(command_, fds[1], -1);
    const int rc = pid_ < 0 ? -pid_ : 0;
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      pid_ = -1;
      return Status::FromErrno(rc, "spawn " + url_);
    }
    fd_ = fds[0];
    internal::Log().debug("pipe: started pid {} for {}", pid_, url_);
    return Status::OK();
  }

  const std::string& url() const override { return url_; }
  uint64_t position() const override { return pos_; }

  // Waits on the pipe with poll(); the end of the output and the command's
  // exit status are left to Read.
  Result<size_t> ReadWithin(size_t n, void* out, std::chrono::microseconds wait) override {
    if (fd_ < 0 || n == 0) return size_t{0};
    struct pollfd p = {fd_, POLLIN, 0};
    const int ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
    int rc;
    do {
      rc = ::poll(&p, 1, ms);
    } while (rc < 0 && errno == EINTR);
    if (rc <= 0) return size_t{0};
    ssize_t got;
    do {
      got = ::read(fd_, out, n);
    } while (got < 0 && errno == EINTR);
    if (got <= 0) return size_t{0};
    pos_ += static_cast<uint64_t>(got);
    return static_cast<size_t>(got);
  }

  Result<size_t> Read(size_t n, void* out) override {
    if (fd_ < 0) return size_t{0};
    while (true) {
      ssize_t got = ::read(fd_, out, n);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return Status::FromErrno(errno, "read " + url_);
      if (got > 0) {
        pos_ += static_cast<uint64_t>(got);
        return static_cast<size_t>(got);
      }
      break;
    }
    ::close(fd_);
    fd_ = -1;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return size_t{0};
    std::string how = WIFEXITED(status)
                          ? "exited with status " + std::to_string(WEXITSTATUS(status))
                          : "was killed by signal " + std::to_string(WTERMSIG(status));
    return Status(StatusCode::kIo,
                  "command of " + url_ + " " + how + " after " + std::to_string(pos_) +
                      " bytes",
                  url_, static_cast<int64_t>(pos_));
  }

 private:
  std::string url_;
  std::string command_;
  pid_t pid_ = -1;
  int fd_ = -1;
  uint64_t pos_ = 0;
};

class PipeSource final : public Source {
 public:
  Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const std::string& url) override {
    return Status::Config("random access is not possible on " + RedactCommand(url) +
                          " (a command's output is a stream)");
  }
  Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                       uint64_t offset) override {
    if (url.rfind("pipe:", 0) != 0 || url.size() == 5)
      return Status::Config("not a pipe:COMMAND url: " + RedactCommand(url));
    auto stream = std::make_unique<PipeStream>(url);
    SHARDSTREAM_RETURN_IF_ERROR(stream->Start());
    // Skip to the offset: a command can only be read from the start.
    char buf[1 << 16];
    for (uint64_t left = offset; left > 0;) {
      SHARDSTREAM_ASSIGN_OR_RETURN(
          size_t got, stream->Read(static_cast<size_t>(std::min<uint64_t>(left, sizeof(buf))), buf));
      if (got == 0) break;
      left -= got;
    }
    return std::unique_ptr<InputStream>(std::move(stream));
  }
  Result<FileInfo> Stat(const std::string& url) override {
    return Status::Config("Stat is not possible on " + RedactCommand(url) +
                          " (a command's output has no size until read)");
  }
};

}  // namespace

namespace internal {
std::shared_ptr<Source> NewPipeSource() { return std::make_shared<PipeSource>(); }
}  // namespace internal

}  // namespace shardstream
