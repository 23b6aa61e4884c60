#include "pipeline/kept_mappings.h"

#include <utility>

namespace shardstream::internal {
namespace {

// A kept file handed to one range: every call goes to the kept file but
// ReleaseView, so that its pages stay mapped for the next epoch.
class KeptFile final : public RandomAccessFile {
 public:
  explicit KeptFile(std::shared_ptr<RandomAccessFile> file) : file_(std::move(file)) {}
  const std::string& url() const override { return file_->url(); }
  Result<uint64_t> Size() override { return file_->Size(); }
  Result<size_t> ReadAt(uint64_t offset, size_t n, void* out) override {
    return file_->ReadAt(offset, n, out);
  }
  Result<size_t> ReadVAt(uint64_t offset, const ReadPiece* pieces, size_t n) override {
    return file_->ReadVAt(offset, pieces, n);
  }
  Result<View> MapView() override { return file_->MapView(); }
  void ReleaseView(uint64_t, uint64_t) override {}
  void CountViewBytes(uint64_t n) override { file_->CountViewBytes(n); }
  Result<uint64_t> SizeNow() override { return file_->SizeNow(); }

 private:
  std::shared_ptr<RandomAccessFile> file_;
};

}  // namespace

Result<std::unique_ptr<RandomAccessFile>> KeptMappings::Open(Source& source,
                                                             const std::string& url) {
  if (budget_ == 0) return source.OpenRandomAccess(url);
  // Asked every time: a shard rewritten since it was kept is read anew.
  Result<FileInfo> info = source.Stat(url);
  {
    MutexLock lock(&mu_);
    auto it = kept_.find(url);
    if (it != kept_.end() && info.ok() && it->second.size == info->size &&
        it->second.mtime_ns == info->mtime_ns)
      return std::unique_ptr<RandomAccessFile>(new KeptFile(it->second.file));
  }
  Forget(url);  // changed or gone: ranges still on the old file keep it open
  // A file that does not stat (deleted, or a source without Stat) is opened
  // as it would be without keeping, and not kept.
  if (!info.ok()) return source.OpenRandomAccess(url);
  SHARDSTREAM_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                               source.OpenRandomAccess(url));
  // A file the source cannot map is read the usual way: nothing to keep.
  if (!file->MapView().ok()) return file;
  MutexLock lock(&mu_);
  if (kept_bytes_ + info->size > budget_ || kept_.size() >= kMaxFiles || kept_.count(url) > 0)
    return file;
  std::shared_ptr<RandomAccessFile> shared = std::move(file);
  kept_.emplace(url, Kept{shared, info->size, info->mtime_ns});
  kept_bytes_ += info->size;
  return std::unique_ptr<RandomAccessFile>(new KeptFile(std::move(shared)));
}

void KeptMappings::Forget(const std::string& url) {
  std::shared_ptr<RandomAccessFile> gone;  // unmapped after the lock is let go
  MutexLock lock(&mu_);
  auto it = kept_.find(url);
  if (it == kept_.end()) return;
  gone = std::move(it->second.file);
  kept_bytes_ -= it->second.size;
  kept_.erase(it);
}

uint64_t KeptMappings::kept_bytes() {
  MutexLock lock(&mu_);
  return kept_bytes_;
}

}  // namespace shardstream::internal
