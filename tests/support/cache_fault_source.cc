#include "support/cache_fault_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <thread>

namespace shardstream::testing {
namespace {

class FaultStream final : public InputStream {
 public:
  FaultStream(std::unique_ptr<InputStream> in, std::shared_ptr<CacheFaultKnobs> knobs, bool corrupt,
              bool may_fail)
      : in_(std::move(in)), knobs_(std::move(knobs)), corrupt_(corrupt), may_fail_(may_fail) {}
  const std::string& url() const override { return in_->url(); }
  uint64_t position() const override { return in_->position(); }
  std::optional<uint64_t> size() const override { return in_->size(); }

  Result<size_t> Read(size_t n, void* out) override { return ReadOrNot(n, out, true); }
  // Like a network stream: what "has arrived" comes back at once, a closed
  // gate is a pause (0), not a wait.
  Result<size_t> ReadWithin(size_t n, void* out, std::chrono::microseconds) override {
    if (!knobs_->read_within) return size_t{0};
    return ReadOrNot(n, out, false);
  }

 private:
  Result<size_t> ReadOrNot(size_t n, void* out, bool wait) {
    if (size_t cap = knobs_->max_read.load(); cap > 0) n = std::min(n, cap);
    if (int us = knobs_->delay_us.load(); us > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    uint64_t pos = in_->position();
    int64_t gate = knobs_->gate_after.load();
    if (gate >= 0) {
      if (pos >= static_cast<uint64_t>(gate)) {
        if (!wait && ::access(knobs_->gate_file.c_str(), F_OK) != 0) return size_t{0};
        while (::access(knobs_->gate_file.c_str(), F_OK) != 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      } else {
        n = std::min<uint64_t>(n, static_cast<uint64_t>(gate) - pos);
      }
    }
    int64_t fail = may_fail_ ? knobs_->fail_after.load() : -1;
    if (fail >= 0 && pos + n > static_cast<uint64_t>(fail)) {
      if (pos >= static_cast<uint64_t>(fail))
        return Status(StatusCode::kUnavailable, "injected reset of " + url(), url(),
                      static_cast<int64_t>(pos));
      n = static_cast<size_t>(fail - static_cast<int64_t>(pos));
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, in_->Read(n, out));
    if (corrupt_ && pos <= 100 && pos + got > 100) static_cast<char*>(out)[100 - pos] ^= 0x5a;
    return got;
  }

  std::unique_ptr<InputStream> in_;
  std::shared_ptr<CacheFaultKnobs> knobs_;
  bool corrupt_;
  bool may_fail_;
};

class SmallDiskFile final : public WritableFile {
 public:
  SmallDiskFile(std::unique_ptr<WritableFile> file, std::shared_ptr<std::atomic<int64_t>> free,
                SmallDiskFs* fs)
      : file_(std::move(file)), free_(std::move(free)), fs_(fs) {}
  const std::string& url() const override { return file_->url(); }
  Status Append(std::string_view data) override {
    int64_t n = std::max<int64_t>(0, written_ + static_cast<int64_t>(data.size()) - reserved_) -
                std::max<int64_t>(0, written_ - reserved_);
    if (n > 0 && free_->fetch_sub(n) < n) {
      free_->fetch_add(n);
      fs_->nospace_errors.fetch_add(1);
      return Status::FromErrno(ENOSPC, "write " + url());
    }
    const int64_t chunk = fs_->chunk.load();
    const bool crosses = chunk > 0 && !data.empty() &&
                         written_ / chunk != (written_ + static_cast<int64_t>(data.size()) - 1) / chunk;
    written_ += static_cast<int64_t>(data.size());
    SHARDSTREAM_RETURN_IF_ERROR(file_->Append(data));
    if (crosses) fs_->chunk_crossings.fetch_add(1);
    fs_->appended_bytes.fetch_add(static_cast<int64_t>(data.size()));
    fs_->appends.fetch_add(1);
    return Status::OK();
  }
  // Reserves like fallocate: all or nothing, appends then use the reservation.
  Status Preallocate(uint64_t bytes) override {
    int64_t more = static_cast<int64_t>(bytes) - std::max(written_, reserved_);
    if (more <= 0) return Status::OK();
    if (free_->fetch_sub(more) < more) {
      free_->fetch_add(more);
      fs_->nospace_errors.fetch_add(1);
      return Status::FromErrno(ENOSPC, "reserve space for " + url());
    }
    reserved_ = static_cast<int64_t>(bytes);
    return Status::OK();
  }
  Status Sync() override { return file_->Sync(); }
  Status Close() override { return file_->Close(); }
  Status Abort() override {
    free_->fetch_add(std::max(written_, reserved_));
    written_ = reserved_ = 0;
    return file_->Abort();
  }

 private:
  std::unique_ptr<WritableFile> file_;
  std::shared_ptr<std::atomic<int64_t>> free_;
  SmallDiskFs* fs_;
  int64_t written_ = 0;
  int64_t reserved_ = 0;  // bytes taken from free_ ahead of the appends
};

}  // namespace

std::string CacheFaultSource::Map(const std::string& url) const {
  if (!knobs_->remote_prefix.empty() && url.rfind(knobs_->remote_prefix, 0) == 0)
    return knobs_->local_dir + "/" + url.substr(knobs_->remote_prefix.size());
  return url;
}

void CacheFaultSource::LogFetch(const std::string& url) {
  knobs_->fetches++;
  if (knobs_->fetch_log.empty()) return;
  int fd = ::open(knobs_->fetch_log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::string line = url + "\n";
  (void)!::write(fd, line.data(), line.size());  // one write: atomic with O_APPEND
  ::close(fd);
}

Result<std::unique_ptr<RandomAccessFile>> CacheFaultSource::OpenRandomAccess(const std::string& url) {
  LogFetch(url);
  return SourceWrapper::OpenRandomAccess(Map(url));
}

Result<std::unique_ptr<InputStream>> CacheFaultSource::OpenInputStream(const std::string& url,
                                                                  uint64_t offset) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto in, SourceWrapper::OpenInputStream(Map(url), offset));
  LogFetch(url);
  bool corrupt = knobs_->corrupt_fetches.fetch_sub(1) > 0;
  bool may_fail = knobs_->fail_fetches.fetch_sub(1) > 0;
  return std::unique_ptr<InputStream>(new FaultStream(std::move(in), knobs_, corrupt, may_fail));
}

Result<FileInfo> CacheFaultSource::Stat(const std::string& url) { return SourceWrapper::Stat(Map(url)); }

std::map<std::string, int> CountFetches(const std::string& fetch_log) {
  std::map<std::string, int> out;
  std::ifstream in(fetch_log);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out[line]++;
  return out;
}

Result<std::unique_ptr<WritableFile>> SmallDiskFs::NewWritableFile(const std::string& url) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto file, SourceWrapper::NewWritableFile(url));
  return std::unique_ptr<WritableFile>(new SmallDiskFile(std::move(file), free_, this));
}

Status SmallDiskFs::Remove(const std::string& url) {
  struct stat st;
  bool exists = ::stat(url.c_str(), &st) == 0;
  Status s = SourceWrapper::Remove(url);
  if (s.ok() && exists) free_->fetch_add(st.st_size);
  return s;
}

}  // namespace shardstream::testing

#include <dirent.h>

#include "support/cache_fixture.h"

namespace shardstream::testing {

std::vector<std::string> FilesWithSuffix(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t CacheBytesOnDisk(const std::string& dir) {
  uint64_t total = 0;
  for (const char* suffix : {".shard", ".tmp"}) {
    for (const auto& name : FilesWithSuffix(dir, suffix)) {
      if (name.find(".meta.") != std::string::npos) continue;  // metadata, not shard data
      struct stat st;
      if (::stat((dir + "/" + name).c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_size);
    }
  }
  return total;
}

}  // namespace shardstream::testing
