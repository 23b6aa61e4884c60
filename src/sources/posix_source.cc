// Local files through POSIX calls: pread for random access, read with a
// sequential read-ahead hint for streams, write/fsync/rename for writing.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <string>

#include "shardstream/source.h"
#include "shardstream/url.h"
#include "sources/posix_read.h"

namespace shardstream {
namespace {

Status Errno(const char* op, const std::string& url, int64_t offset = -1) {
  int err = errno;
  Status s = Status::FromErrno(err, std::string(op) + " " + url);
  return Status(s.code(), s.message(), url, offset);
}

class FdGuard {
 public:
  explicit FdGuard(int fd = -1) : fd_(fd) {}
  ~FdGuard() { reset(); }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
 private:
  int fd_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string url, int fd, uint64_t size)
      : url_(std::move(url)), fd_(fd), size_(size) {}
  const std::string& url() const override { return url_; }
  Result<uint64_t> Size() override { return size_; }
  Result<size_t> ReadAt(uint64_t offset, size_t n, void* out) override {
    size_t done = 0;
    char* dst = static_cast<char*>(out);
    while (done < n) {
      ssize_t r = ::pread(fd_.get(), dst + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return Errno("read", url_, static_cast<int64_t>(offset + done));
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }
  Result<size_t> ReadVAt(uint64_t offset, const ReadPiece* pieces, size_t n) override {
    return internal::PReadVAll(fd_.get(), offset, pieces, n, url_);
  }
  Result<View> MapView() override { return mapping_.Get(fd_.get(), size_, url_); }
  Result<uint64_t> SizeNow() override { return internal::LazyMapping::SizeNow(fd_.get(), url_); }
  void ReleaseView(uint64_t offset, uint64_t n) override { mapping_.Release(offset, n); }

 private:
  std::string url_;
  FdGuard fd_;
  uint64_t size_;
  internal::LazyMapping mapping_;  // declared last: unmapped before the fd closes
};

class PosixInputStream final : public InputStream {
 public:
  PosixInputStream(std::string url, int fd, uint64_t offset, uint64_t size)
      : url_(std::move(url)), fd_(fd), pos_(offset), size_(size) {}
  const std::string& url() const override { return url_; }
  Result<size_t> Read(size_t n, void* out) override {
    while (true) {
      ssize_t r = ::read(fd_.get(), out, n);
      if (r < 0) {
        if (errno == EINTR) continue;
        return Errno("read", url_, static_cast<int64_t>(pos_));
      }
      pos_ += static_cast<uint64_t>(r);
      return static_cast<size_t>(r);
    }
  }
  uint64_t position() const override { return pos_; }
  std::optional<uint64_t> size() const override { return size_; }

 private:
  std::string url_;
  FdGuard fd_;
  uint64_t pos_;
  uint64_t size_;
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string url, std::string path, int fd)
      : url_(std::move(url)), path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_.get() >= 0 || !closed_) (void)Abort();
  }
  const std::string& url() const override { return url_; }
  Status Append(std::string_view data) override {
    if (fd_.get() < 0) return Status::Io("append to closed file " + url_);
    while (!data.empty()) {
      ssize_t r = ::write(fd_.get(), data.data(), data.size());
      if (r < 0) {
        if (errno == EINTR) continue;
        return Errno("write", url_, static_cast<int64_t>(written_));
      }
      written_ += static_cast<uint64_t>(r);
      data.remove_prefix(static_cast<size_t>(r));
    }
    // Writeback starts as the file grows, a window at a time, so that Sync
    // at the end flushes only the last window instead of the whole file
    // (a 1 GiB cache entry's fdatasync took 0.7 s here; a checkpoint's
    // shards alike). Advisory: an error leaves it to Sync.
    if (written_ - writeback_from_ >= kWritebackWindow) {
      (void)::sync_file_range(fd_.get(), static_cast<off_t>(writeback_from_),
                              static_cast<off_t>(written_ - writeback_from_),
                              SYNC_FILE_RANGE_WRITE);
      writeback_from_ = written_;
    }
    return Status::OK();
  }
  Status Preallocate(uint64_t bytes) override {
    if (fd_.get() < 0 || bytes == 0) return Status::OK();
    // A reservation that cannot fit is refused before fallocate: fallocate
    // takes blocks until the disk is full before it fails, and meanwhile
    // every other writer on the disk (a checkpoint, another download) gets
    // ENOSPC too. Blocks the file holds already count as reserved.
    struct statvfs vfs;
    struct stat st;
    // (Only where the file system reports its size: some FUSE mounts say
    // 0 blocks; there fallocate decides.)
    if (::fstatvfs(fd_.get(), &vfs) == 0 && vfs.f_blocks > 0 && ::fstat(fd_.get(), &st) == 0) {
      const uint64_t held = static_cast<uint64_t>(st.st_blocks) * 512;
      const uint64_t need = bytes > held ? bytes - held : 0;
      // The space any user may take: a cache has no claim on the blocks
      // a file system keeps back for root.
      if (need > static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize) {
        errno = ENOSPC;
        return Errno("reserve space for", url_, 0);
      }
    }
    while (::fallocate(fd_.get(), FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes)) != 0) {
      if (errno == EINTR) continue;
      // ENOSPC and EDQUOT are answers; anything else means "not here".
      if (errno == ENOSPC || errno == EDQUOT) return Errno("reserve space for", url_, 0);
      return Status::OK();
    }
    return Status::OK();
  }
  Status Sync() override {
    if (fd_.get() < 0) return Status::Io("sync of closed file " + url_);
    if (::fdatasync(fd_.get()) != 0) return Errno("fsync", url_);
    return Status::OK();
  }
  Status Close() override {
    if (fd_.get() < 0) return Status::OK();
    int fd = fd_.release();
    closed_ = true;
    if (::close(fd) != 0) return Errno("close", url_);
    return Status::OK();
  }
  Status Abort() override {
    fd_.reset();
    if (aborted_) return Status::OK();
    aborted_ = true;
    closed_ = true;
    if (::unlink(path_.c_str()) != 0 && errno != ENOENT) return Errno("unlink", url_);
    return Status::OK();
  }

 private:
  std::string url_;
  std::string path_;
  FdGuard fd_;
  static constexpr uint64_t kWritebackWindow = uint64_t{16} << 20;
  uint64_t written_ = 0;
  uint64_t writeback_from_ = 0;  // where the next writeback window begins
  bool closed_ = false;
  bool aborted_ = false;
};

class PosixSource final : public Source {
 public:
  Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const std::string& url) override {
    std::string path = LocalPath(url);
    FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return Errno("open", url);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return Errno("stat", url);
    if (S_ISDIR(st.st_mode)) return Status(StatusCode::kConfig, url + " is a directory", url);
    return std::unique_ptr<RandomAccessFile>(
        new PosixRandomAccessFile(url, fd.release(), static_cast<uint64_t>(st.st_size)));
  }

  Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                       uint64_t offset) override {
    std::string path = LocalPath(url);
    FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return Errno("open", url);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return Errno("stat", url);
    if (S_ISDIR(st.st_mode)) return Status(StatusCode::kConfig, url + " is a directory", url);
    if (offset > 0 && ::lseek(fd.get(), static_cast<off_t>(offset), SEEK_SET) < 0)
      return Errno("seek", url, static_cast<int64_t>(offset));
    // Streams are read front to back: ask for aggressive read-ahead.
    (void)::posix_fadvise(fd.get(), static_cast<off_t>(offset), 0, POSIX_FADV_SEQUENTIAL);
    return std::unique_ptr<InputStream>(
        new PosixInputStream(url, fd.release(), offset, static_cast<uint64_t>(st.st_size)));
  }

  Result<FileInfo> Stat(const std::string& url) override {
    struct stat st;
    if (::stat(LocalPath(url).c_str(), &st) != 0) return Errno("stat", url);
    return ToInfo(url, st);
  }

  Result<std::vector<FileInfo>> List(const std::string& url) override {
    std::string path = LocalPath(url);
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return Errno("list", url);
    std::vector<FileInfo> out;
    while (struct dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string child = JoinUrl(url, name);
      struct stat st;
      if (::lstat(LocalPath(child).c_str(), &st) != 0) continue;  // raced with a removal
      out.push_back(ToInfo(child, st));
    }
    ::closedir(dir);
    std::sort(out.begin(), out.end(),
              [](const FileInfo& a, const FileInfo& b) { return a.url < b.url; });
    return out;
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url) override {
    std::string path = LocalPath(url);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("create", url);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(url, path, fd));
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(LocalPath(from).c_str(), LocalPath(to).c_str()) != 0)
      return Errno("rename", from + " -> " + to);
    return Status::OK();
  }
  Status Remove(const std::string& url) override {
    if (::unlink(LocalPath(url).c_str()) != 0) return Errno("remove", url);
    return Status::OK();
  }
  Status CreateDir(const std::string& url) override {
    std::string path = LocalPath(url);
    for (size_t i = 1; i <= path.size(); ++i) {
      if (i != path.size() && path[i] != '/') continue;
      std::string prefix = path.substr(0, i);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
        return Errno("mkdir", prefix);
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return Status(StatusCode::kIo, "mkdir " + url + ": exists and is not a directory", url);
    return Status::OK();
  }
  Status RemoveDir(const std::string& url) override {
    if (::rmdir(LocalPath(url).c_str()) != 0) return Errno("rmdir", url);
    return Status::OK();
  }
  Status SyncDir(const std::string& url) override {
    std::string path = LocalPath(url);
    if (path.empty()) path = ".";
    FdGuard fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0) return Errno("open dir", url);
    if (::fsync(fd.get()) != 0) return Errno("fsync dir", url);
    return Status::OK();
  }

 private:
  static FileInfo ToInfo(const std::string& url, const struct stat& st) {
    FileInfo info;
    info.url = url;
    info.size = static_cast<uint64_t>(st.st_size);
    info.is_dir = S_ISDIR(st.st_mode);
    info.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    return info;
  }
};

}  // namespace

std::shared_ptr<Source> LocalSource() {
  static std::shared_ptr<Source> source = std::make_shared<PosixSource>();
  return source;
}

}  // namespace shardstream

namespace shardstream::internal {

static_assert(sizeof(ReadPiece) == sizeof(iovec) && offsetof(ReadPiece, data) == offsetof(iovec, iov_base) &&
                  offsetof(ReadPiece, len) == offsetof(iovec, iov_len),
              "ReadPiece must be laid out as iovec");

Result<size_t> PReadVAll(int fd, uint64_t offset, const ReadPiece* pieces, size_t n,
                         const std::string& url) {
  // preadv takes IOV_MAX pieces a call and may stop part way through one:
  // the piece it stopped in is finished from a copy of its iovec.
  size_t done = 0;
  iovec partial{};
  while (n > 0) {
    const iovec* iov = reinterpret_cast<const iovec*>(pieces);
    size_t count = std::min<size_t>(n, IOV_MAX);
    if (partial.iov_len > 0) {
      iov = &partial;
      count = 1;
    }
    const ssize_t got = ::preadv(fd, iov, static_cast<int>(count), static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Errno("read", url, static_cast<int64_t>(offset + done));
    }
    if (got == 0) break;  // the end of the file
    done += static_cast<size_t>(got);
    size_t left = static_cast<size_t>(got);
    if (partial.iov_len > 0) {
      partial.iov_base = static_cast<char*>(partial.iov_base) + left;
      partial.iov_len -= left;
      if (partial.iov_len == 0) {
        ++pieces;
        --n;
      }
      continue;
    }
    while (n > 0 && left >= pieces->len) {
      left -= pieces->len;
      ++pieces;
      --n;
    }
    if (n > 0 && left > 0) {
      partial.iov_base = static_cast<char*>(pieces->data) + left;
      partial.iov_len = pieces->len - left;
    }
  }
  return done;
}

LazyMapping::~LazyMapping() {
  if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(size_));
}

void LazyMapping::Release(uint64_t offset, uint64_t n) {
  // Ordered after the mapping by the call_once a view was taken through.
  if (data_ == nullptr || offset >= size_) return;
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (offset + page - 1) / page * page;
  const uint64_t end = std::min(offset + n, size_) / page * page;
  if (end > begin) (void)::madvise(static_cast<char*>(data_) + begin, end - begin, MADV_DONTNEED);
}

Result<uint64_t> LazyMapping::SizeNow(int fd, const std::string& url) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Errno("stat", url, -1);
  return static_cast<uint64_t>(st.st_size);
}

Result<RandomAccessFile::View> LazyMapping::Get(int fd, uint64_t size, const std::string& url) {
  std::call_once(once_, [&] {
    if (size == 0) return;  // nothing to map: an empty view
    void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      status_ = Status::FromErrno(errno, "mmap " + url);
      return;
    }
    data_ = p;
    size_ = size;
  });
  if (!status_.ok()) return status_;
  return RandomAccessFile::View{static_cast<const char*>(data_), size_};
}

}  // namespace shardstream::internal
