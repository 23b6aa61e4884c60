// An in-memory file system: urls map to immutable byte strings. Writes
// become visible at Close (as if renamed from a private temporary).
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "shardstream/source.h"
#include "shardstream/url.h"

namespace shardstream {
namespace {

using Bytes = std::shared_ptr<const std::string>;

class MemoryState {
 public:
  Bytes Get(const std::string& url) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(url);
    return it == files_.end() ? nullptr : it->second;
  }
  void Put(const std::string& url, Bytes data) {
    std::lock_guard<std::mutex> lock(mu_);
    files_[url] = std::move(data);
  }
  bool Erase(const std::string& url) {
    std::lock_guard<std::mutex> lock(mu_);
    return files_.erase(url) > 0;
  }
  bool Move(const std::string& from, const std::string& to) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(from);
    if (it == files_.end()) return false;
    files_[to] = it->second;
    files_.erase(from);
    return true;
  }
  std::vector<FileInfo> List(const std::string& dir) {
    std::string prefix = dir;
    if (!prefix.empty() && prefix.back() != '/') prefix += '/';
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<FileInfo> out;
    for (auto it = files_.lower_bound(prefix); it != files_.end(); ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) break;
      if (it->first.find('/', prefix.size()) != std::string::npos) continue;
      out.push_back(FileInfo{it->first, it->second->size(), false, 0, {}});
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::map<std::string, Bytes> files_;
};

class MemoryFile final : public RandomAccessFile {
 public:
  MemoryFile(std::string url, Bytes data) : url_(std::move(url)), data_(std::move(data)) {}
  const std::string& url() const override { return url_; }
  Result<uint64_t> Size() override { return data_->size(); }
  Result<size_t> ReadAt(uint64_t offset, size_t n, void* out) override {
    if (offset >= data_->size()) return size_t{0};
    size_t k = std::min<uint64_t>(n, data_->size() - offset);
    std::memcpy(out, data_->data() + offset, k);
    return k;
  }

 private:
  std::string url_;
  Bytes data_;
};

class MemoryWritableFile final : public WritableFile {
 public:
  MemoryWritableFile(std::string url, std::shared_ptr<MemoryState> state)
      : url_(std::move(url)), state_(std::move(state)) {}
  const std::string& url() const override { return url_; }
  Status Append(std::string_view data) override {
    if (done_) return Status::Io("append to closed file " + url_);
    buf_.append(data);
    return Status::OK();
  }
  Status Sync() override { return Status::OK(); }
  Status Close() override {
    if (done_) return Status::OK();
    done_ = true;
    state_->Put(url_, std::make_shared<const std::string>(std::move(buf_)));
    return Status::OK();
  }
  Status Abort() override {
    done_ = true;
    buf_.clear();
    return Status::OK();
  }

 private:
  std::string url_;
  std::shared_ptr<MemoryState> state_;
  std::string buf_;
  bool done_ = false;
};

class MemorySource final : public Source {
 public:
  Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const std::string& url) override {
    Bytes data = state_->Get(url);
    if (!data) return Status(StatusCode::kNotFound, "no such file: " + url, url);
    return std::unique_ptr<RandomAccessFile>(new MemoryFile(url, std::move(data)));
  }
  Result<FileInfo> Stat(const std::string& url) override {
    Bytes data = state_->Get(url);
    if (!data) return Status(StatusCode::kNotFound, "no such file: " + url, url);
    return FileInfo{url, data->size(), false, 0, {}};
  }
  Result<std::vector<FileInfo>> List(const std::string& url) override {
    return state_->List(url);
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url) override {
    return std::unique_ptr<WritableFile>(new MemoryWritableFile(url, state_));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (!state_->Move(from, to)) return Status(StatusCode::kNotFound, "no such file: " + from, from);
    return Status::OK();
  }
  Status Remove(const std::string& url) override {
    if (!state_->Erase(url)) return Status(StatusCode::kNotFound, "no such file: " + url, url);
    return Status::OK();
  }
  Status CreateDir(const std::string&) override { return Status::OK(); }
  Status RemoveDir(const std::string&) override { return Status::OK(); }
  Status SyncDir(const std::string&) override { return Status::OK(); }

 private:
  std::shared_ptr<MemoryState> state_ = std::make_shared<MemoryState>();
};

}  // namespace

std::shared_ptr<Source> NewMemorySource() { return std::make_shared<MemorySource>(); }

}  // namespace shardstream
