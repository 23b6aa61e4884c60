#include "support/fault_source.h"

#include <chrono>
#include <thread>
#include <vector>
#include <algorithm>

#include "shardstream/url.h"

namespace shardstream::testing {
namespace {

bool IsMutating(FaultSource::Op op) {
  return op != FaultSource::Op::kOpen && op != FaultSource::Op::kStat &&
         op != FaultSource::Op::kList && op != FaultSource::Op::kRead;
}

std::string Trim(std::string url) {
  while (url.size() > 1 && url.back() == '/') url.pop_back();
  return url;
}

// p renamed by from -> to, if it is `from` or below it.
std::string ApplyRename(const std::string& p, const std::string& from, const std::string& to) {
  if (p == from) return to;
  if (p.size() > from.size() && p.compare(0, from.size(), from) == 0 && p[from.size()] == '/')
    return to + p.substr(from.size());
  return p;
}

// Reads with the owner's read faults: failures by rule (Op::kRead), a cut,
// a corrupt byte. Vectored reads are vectored below too, so the fast path
// under test stays the one that runs.
class FaultRandomAccessFile final : public RandomAccessFile {
 public:
  FaultRandomAccessFile(FaultSource* owner, std::string url, std::unique_ptr<RandomAccessFile> target)
      : owner_(owner), url_(std::move(url)), target_(std::move(target)) {}
  const std::string& url() const override { return target_->url(); }
  Result<uint64_t> Size() override { return target_->Size(); }
  Result<size_t> ReadAt(uint64_t offset, size_t n, void* out) override {
    ReadPiece p{out, n};
    return ReadVAt(offset, &p, 1);
  }
  Result<size_t> ReadVAt(uint64_t offset, const ReadPiece* pieces, size_t n) override {
    owner_->CountRead();
    SHARDSTREAM_RETURN_IF_ERROR(owner_->Check(FaultSource::Op::kRead, url_));
    int64_t cut = -1, corrupt = -1;
    owner_->ReadFaults(url_, &cut, &corrupt);
    std::vector<ReadPiece> v(pieces, pieces + n);
    if (cut >= 0) {  // drop what lies past the cut
      uint64_t room = static_cast<uint64_t>(cut) > offset ? static_cast<uint64_t>(cut) - offset : 0;
      size_t k = 0;
      for (; k < v.size() && room > 0; ++k) {
        v[k].len = static_cast<size_t>(std::min<uint64_t>(v[k].len, room));
        room -= v[k].len;
      }
      v.resize(k);
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, target_->ReadVAt(offset, v.data(), v.size()));
    if (corrupt >= 0 && static_cast<uint64_t>(corrupt) >= offset &&
        static_cast<uint64_t>(corrupt) < offset + got) {
      uint64_t at = static_cast<uint64_t>(corrupt) - offset;
      for (const ReadPiece& p : v) {
        if (at < p.len) {
          static_cast<char*>(p.data)[at] ^= 0xff;
          break;
        }
        at -= p.len;
      }
    }
    return got;
  }

 private:
  FaultSource* owner_;
  std::string url_;
  std::unique_ptr<RandomAccessFile> target_;
};

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultSource* owner, std::string url, std::unique_ptr<WritableFile> target)
      : owner_(owner), url_(std::move(url)), target_(std::move(target)) {}
  const std::string& url() const override { return target_->url(); }
  Status Append(std::string_view data) override {
    SHARDSTREAM_RETURN_IF_ERROR(owner_->Check(FaultSource::Op::kAppend, url_));
    SHARDSTREAM_RETURN_IF_ERROR(owner_->CheckSpace(data.size()));
    SHARDSTREAM_RETURN_IF_ERROR(target_->Append(data));
    size_ += data.size();
    owner_->OnAppend(url_, size_);
    return Status::OK();
  }
  Status Sync() override {
    SHARDSTREAM_RETURN_IF_ERROR(owner_->Check(FaultSource::Op::kSync, url_));
    if (owner_->forward_syncs()) SHARDSTREAM_RETURN_IF_ERROR(target_->Sync());
    owner_->OnSync(url_, size_);
    return Status::OK();
  }
  Status Close() override {
    SHARDSTREAM_RETURN_IF_ERROR(owner_->Check(FaultSource::Op::kClose, url_));
    return target_->Close();
  }
  Status Abort() override {
    // A dead process cleans nothing up.
    if (owner_->crashed()) return Status::Io("injected crash: " + url_);
    return target_->Abort();
  }

 private:
  FaultSource* owner_;
  std::string url_;
  std::unique_ptr<WritableFile> target_;
  uint64_t size_ = 0;
};

}  // namespace

void FaultSource::FailNth(Op op, int nth, Status error, bool sticky, std::string url_filter) {
  std::lock_guard<std::mutex> l(mu_);
  rules_.push_back(Rule{op, nth, std::move(error), sticky, std::move(url_filter)});
}

void FaultSource::FailNthErrno(Op op, int nth, int err, bool sticky, std::string url_filter) {
  FailNth(op, nth, Status::FromErrno(err, "injected fault"), sticky, std::move(url_filter));
}

void FaultSource::SetSpaceLimit(int64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  space_left_ = bytes;
}

void FaultSource::CrashAfter(int64_t n) {
  std::lock_guard<std::mutex> l(mu_);
  crash_after_ = n;
}

void FaultSource::ClearFaults() {
  std::lock_guard<std::mutex> l(mu_);
  rules_.clear();
  space_left_ = -1;
  crash_after_ = -1;
  crashed_.store(false);
  delay_us_.store(0);
  truncate_at_ = corrupt_at_ = -1;
}

Status FaultSource::Check(Op op, const std::string& url) {
  if (int64_t us = delay_us_.load(); us > 0 && op != Op::kRead)
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  std::lock_guard<std::mutex> l(mu_);
  if (crashed_.load()) return Status::Io("injected crash: no call succeeds after it (" + url + ")");
  if (IsMutating(op)) {
    mutating_++;
    if (crash_after_ == 0) {
      crashed_.store(true);
      return Status::Io("injected crash at " + url);
    }
    if (crash_after_ > 0) crash_after_--;
  }
  for (Rule& r : rules_) {
    if (r.op != op || (!r.filter.empty() && url.find(r.filter) == std::string::npos)) continue;
    if (r.fired) {
      if (r.sticky) return r.error.WithContext(url, url);
      continue;
    }
    if (--r.remaining <= 0) {
      r.fired = true;
      return r.error.WithContext(url, url);
    }
  }
  return Status::OK();
}

void FaultSource::TruncateReads(int64_t bytes, std::string url_filter) {
  std::lock_guard<std::mutex> l(mu_);
  truncate_at_ = bytes;
  truncate_filter_ = std::move(url_filter);
}

void FaultSource::CorruptReadByte(int64_t offset, std::string url_filter) {
  std::lock_guard<std::mutex> l(mu_);
  corrupt_at_ = offset;
  corrupt_filter_ = std::move(url_filter);
}

void FaultSource::ReadFaults(const std::string& url, int64_t* truncate_at, int64_t* corrupt_at) {
  auto matches = [&](const std::string& f) {
    return url.size() >= f.size() && url.compare(url.size() - f.size(), f.size(), f) == 0;
  };
  std::lock_guard<std::mutex> l(mu_);
  *truncate_at = matches(truncate_filter_) ? truncate_at_ : -1;
  *corrupt_at = matches(corrupt_filter_) ? corrupt_at_ : -1;
}

Status FaultSource::CheckSpace(size_t n) {
  std::lock_guard<std::mutex> l(mu_);
  if (space_left_ < 0) return Status::OK();
  if (static_cast<int64_t>(n) > space_left_) {
    space_left_ = 0;
    return Status::FromErrno(ENOSPC, "injected write");
  }
  space_left_ -= static_cast<int64_t>(n);
  return Status::OK();
}

void FaultSource::OnAppend(const std::string& url, uint64_t new_size) {
  if (!tracking_.load()) return;
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(url);
  if (it != files_.end()) it->second.first = new_size;
}

void FaultSource::OnSync(const std::string& url, uint64_t size) {
  if (!tracking_.load()) return;
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(url);
  if (it != files_.end()) it->second.second = size;
}

std::optional<std::string> FaultSource::Follow(std::string url, size_t from, bool durable_only,
                                               bool self) const {
  for (size_t i = from; i < log_.size(); ++i) {
    const Entry& e = log_[i];
    if (e.kind != Entry::kRename || (durable_only && !e.durable)) continue;
    if (self && url == e.a) return std::nullopt;
    url = ApplyRename(url, e.a, e.b);
  }
  return url;
}

int FaultSource::pending_entries() {
  std::lock_guard<std::mutex> l(mu_);
  int n = 0;
  for (const auto& e : log_) n += e.durable ? 0 : 1;
  return n;
}

void FaultSource::Prune() {
  size_t n = 0;
  while (n < log_.size() && log_[n].durable) ++n;
  log_.erase(log_.begin(), log_.begin() + static_cast<long>(n));
}

Result<std::unique_ptr<RandomAccessFile>> FaultSource::OpenRandomAccess(const std::string& url) {
  SHARDSTREAM_RETURN_IF_ERROR(Check(Op::kOpen, url));
  SHARDSTREAM_ASSIGN_OR_RETURN(auto file, SourceWrapper::OpenRandomAccess(url));
  return std::unique_ptr<RandomAccessFile>(new FaultRandomAccessFile(this, url, std::move(file)));
}
Result<std::unique_ptr<InputStream>> FaultSource::OpenInputStream(const std::string& url,
                                                                  uint64_t offset) {
  SHARDSTREAM_RETURN_IF_ERROR(Check(Op::kOpen, url));
  return SourceWrapper::OpenInputStream(url, offset);
}
Result<FileInfo> FaultSource::Stat(const std::string& url) {
  SHARDSTREAM_RETURN_IF_ERROR(Check(Op::kStat, url));
  return SourceWrapper::Stat(url);
}
Result<std::vector<FileInfo>> FaultSource::List(const std::string& url) {
  SHARDSTREAM_RETURN_IF_ERROR(Check(Op::kList, url));
  return SourceWrapper::List(url);
}

Result<std::unique_ptr<WritableFile>> FaultSource::NewWritableFile(const std::string& url) {
  SHARDSTREAM_RETURN_IF_ERROR(Check(Op::kNewFile, url));
  bool existed = target()->Stat(url).ok();
  SHARDSTREAM_ASSIGN_OR_RETURN(auto file, SourceWrapper::NewWritableFile(url));
  if (tracking_.load()) {
    std::lock_guard<std::mutex> l(mu_);
    files_[url] = {0, 0};
    if (!existed) log_.push_back(Entry{Entry::kCreate, url, {}});
  }
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, url, std::move(file)));
}

Status FaultSource::Rename(const std::string& from, const std::string& to) {
  SHARDSTREAM_RETURN_IF_ERROR(Check(Op::kRename, from + " -> " + to));
  Entry e{Entry::kRename, Trim(from), Trim(to)};
  if (tracking_.load()) {
    auto info = target()->Stat(to);
    if (info.ok() && !info->is_dir) {
      auto old = ReadFileToString(*target(), to);
      if (old.ok()) {
        e.had_old = true;
        e.old_content = std::move(*old);
      }
    }
  }
  SHARDSTREAM_RETURN_IF_ERROR(SourceWrapper::Rename(from, to));
  if (tracking_.load()) {
    std::lock_guard<std::mutex> l(mu_);
    std::map<std::string, std::pair<uint64_t, uint64_t>> moved;
    for (auto it = files_.begin(); it != files_.end();) {
      std::string now = ApplyRename(it->first, e.a, e.b);
      if (now != it->first || it->first == e.b) {
        if (now != it->first) moved[now] = it->second;
        it = files_.erase(it);
      } else {
        ++it;
      }
    }
    files_.insert(moved.begin(), moved.end());
    log_.push_back(std::move(e));
  }
  return Status::OK();
}

Status FaultSource::Remove(const std::string& url) {
  SHARDSTREAM_RETURN_IF_ERROR(Check(Op::kRemove, url));
  SHARDSTREAM_RETURN_IF_ERROR(SourceWrapper::Remove(url));
  std::lock_guard<std::mutex> l(mu_);
  files_.erase(url);
  return Status::OK();
}

Status FaultSource::CreateDir(const std::string& url) {
  SHARDSTREAM_RETURN_IF_ERROR(Check(Op::kCreateDir, url));
  std::vector<std::string> created;
  if (tracking_.load()) {
    for (std::string d = Trim(url); !d.empty() && d != "." && d != "/"; d = UrlDirname(d)) {
      if (target()->Stat(d).ok()) break;
      created.insert(created.begin(), d);
      if (UrlDirname(d) == d) break;
    }
  }
  SHARDSTREAM_RETURN_IF_ERROR(SourceWrapper::CreateDir(url));
  std::lock_guard<std::mutex> l(mu_);
  for (auto& d : created) log_.push_back(Entry{Entry::kMkdir, d, {}});
  return Status::OK();
}

Status FaultSource::RemoveDir(const std::string& url) {
  SHARDSTREAM_RETURN_IF_ERROR(Check(Op::kRemoveDir, url));
  return SourceWrapper::RemoveDir(url);
}

Status FaultSource::SyncDir(const std::string& url) {
  SHARDSTREAM_RETURN_IF_ERROR(Check(Op::kSyncDir, url));
  if (forward_syncs()) SHARDSTREAM_RETURN_IF_ERROR(SourceWrapper::SyncDir(url));
  if (tracking_.load()) {
    std::lock_guard<std::mutex> l(mu_);
    std::string dir = Trim(url);
    for (size_t i = 0; i < log_.size(); ++i) {
      Entry& e = log_[i];
      if (e.durable) continue;
      // The entry's directory as it is named now.
      std::string entry = e.kind == Entry::kRename ? e.b : e.a;
      if (UrlDirname(*Follow(entry, i + 1, /*durable_only=*/false)) == dir) e.durable = true;
    }
    Prune();
  }
  return Status::OK();
}

namespace {
void RemoveTree(Source& s, const std::string& url) {
  auto entries = s.List(url);
  if (entries.ok())
    for (const auto& e : *entries) e.is_dir ? RemoveTree(s, e.url) : (void)s.Remove(e.url);
  (void)s.RemoveDir(url);
}
}  // namespace

Status FaultSource::DropUnsyncedData(int keep_newest) {
  std::lock_guard<std::mutex> l(mu_);
  Source& t = *target();
  // Contents first, under today's names.
  for (const auto& [url, st] : files_) {
    if (st.second >= st.first) continue;
    auto data = ReadFileToString(t, url);
    if (!data.ok()) continue;
    data->resize(std::min<size_t>(data->size(), st.second));
    SHARDSTREAM_ASSIGN_OR_RETURN(auto f, t.NewWritableFile(url));
    SHARDSTREAM_RETURN_IF_ERROR(f->Append(*data));
    SHARDSTREAM_RETURN_IF_ERROR(f->Sync());
    SHARDSTREAM_RETURN_IF_ERROR(f->Close());
  }
  for (size_t i = log_.size(); i-- > 0 && keep_newest > 0;) {
    if (log_[i].durable) continue;
    log_[i].durable = true;
    --keep_newest;
  }
  // Then the directory entries, newest first. By the time entry i is undone
  // every later non-durable one is, so its names are the original ones moved
  // by the later durable renames only.
  for (size_t i = log_.size(); i-- > 0;) {
    const Entry& e = log_[i];
    if (e.durable) continue;
    std::optional<std::string> a = Follow(e.a, i + 1, true, e.kind != Entry::kRename);
    if (!a) continue;  // the entry itself was durably renamed: it survives
    switch (e.kind) {
      case Entry::kCreate: (void)t.Remove(*a); break;
      case Entry::kMkdir: RemoveTree(t, *a); break;
      case Entry::kRename: {
        std::optional<std::string> b = Follow(e.b, i + 1, true, true);
        if (!b || !t.Stat(*b).ok()) break;
        SHARDSTREAM_RETURN_IF_ERROR(t.Rename(*b, *a));
        if (e.had_old) {
          SHARDSTREAM_ASSIGN_OR_RETURN(auto f, t.NewWritableFile(*b));
          SHARDSTREAM_RETURN_IF_ERROR(f->Append(e.old_content));
          SHARDSTREAM_RETURN_IF_ERROR(f->Close());
        }
        break;
      }
    }
  }
  files_.clear();
  log_.clear();
  rules_.clear();
  space_left_ = -1;
  crash_after_ = -1;
  crashed_.store(false);
  return Status::OK();
}

}  // namespace shardstream::testing
