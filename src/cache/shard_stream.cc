// The reader side of the cache: a stream that reads a complete entry, a
// temporary while it grows (written by this process or another one), or the
// source itself, switching between them at the same byte position, and that
// verifies the bytes it delivers against the manifest before the last one.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "cache/cache_impl.h"
#include "shardstream/checksum.h"
#include "shardstream/url.h"

namespace shardstream::internal {
namespace {

using Clock = std::chrono::steady_clock;

// How often a reader of another process's download checks whether that
// process is still alive (its lock is free once it is gone).
constexpr auto kOwnerProbe = std::chrono::milliseconds(100);

// Reads of an entry or a temporary name the shard and the byte, not the
// cache's file (its name is a hash).
Result<size_t> NameTheShard(Result<size_t> got, uint64_t pos, const std::string& url) {
  if (got.ok()) return got;
  const Status& e = got.status();
  return Status(e.code(), "read cached " + url + ": " + e.message(), url,
                e.offset() >= 0 ? e.offset() : static_cast<int64_t>(pos));
}

Result<size_t> ReadCached(RandomAccessFile& file, uint64_t pos, size_t n, void* out,
                          const std::string& url) {
  return NameTheShard(file.ReadAt(pos, n, out), pos, url);
}

bool SameFile(int fd, const std::string& path) {
  struct stat a, b;
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_ino == b.st_ino &&
         a.st_dev == b.st_dev;
}

class ShardStream final : public CachedShard {
 public:
  ShardStream(std::shared_ptr<ShardCache::Impl> impl, const ShardRef& ref, Attachment att)
      : impl_(std::move(impl)), ref_(ref), redacted_(RedactUrl(ref.url)), att_(std::move(att)) {
    hit_ = att_.kind == Attachment::kFile && att_.hit;
    if (!ref_.checksum.empty() && (!hit_ || impl_->opts.verify_hits)) {
      auto algorithm = ParseChecksum(ref_.checksum);
      if (algorithm.ok()) hasher_ = std::move(Hasher::Create(*algorithm).value());
    }
  }

  const std::string& url() const override { return redacted_; }
  uint64_t position() const override { return pos_; }
  std::optional<uint64_t> size() const override {
    if (ref_.size >= 0) return static_cast<uint64_t>(ref_.size);
    if (att_.kind == Attachment::kFile) return att_.size;
    return std::nullopt;
  }
  bool hit() const override { return hit_; }
  // Waits are sliced (<= 50 ms), so a flag is enough.
  void Cancel() override { cancelled_ = true; }

  Result<size_t> Read(size_t n, void* out) override {
    if (cancelled_) return Cancelled();
    if (eof_) return size_t{0};
    if (ref_.size >= 0) n = std::min<uint64_t>(n, static_cast<uint64_t>(ref_.size) - pos_);
    if (n == 0 && ref_.size >= 0) {
      eof_ = true;
      return size_t{0};
    }
    size_t got;
    while (true) {
      bool reattach = false;
      SHARDSTREAM_ASSIGN_OR_RETURN(got, ReadBackend(n, out, &reattach));
      if (!reattach) break;
      SHARDSTREAM_ASSIGN_OR_RETURN(att_, impl_->Acquire(ref_, pos_, false));
    }
    if (got == 0) {
      if (ref_.size >= 0 && pos_ < static_cast<uint64_t>(ref_.size)) {
        return Status(StatusCode::kChecksum,
                      "truncated: " + redacted_ + " ended at byte " + std::to_string(pos_) +
                          ", the manifest says " + std::to_string(ref_.size) + " bytes",
                      redacted_, static_cast<int64_t>(pos_));
      }
      SHARDSTREAM_RETURN_IF_ERROR(Verify());
      eof_ = true;
      return size_t{0};
    }
    if (hasher_ && trusted_ == 0) hasher_->Update(out, got);
    pos_ += got;
    // The last byte is handed out only once everything read is verified.
    if (ref_.size >= 0 && pos_ == static_cast<uint64_t>(ref_.size)) SHARDSTREAM_RETURN_IF_ERROR(Verify());
    return got;
  }

 private:
  Status Cancelled() const { return Status(StatusCode::kCancelled, "reading " + redacted_ + " was cancelled", redacted_); }

  Status Verify() {
    if (!hasher_ || verified_) return Status::OK();
    if (trusted_ != 0) {
      Status verdict;
      SHARDSTREAM_ASSIGN_OR_RETURN(bool checked, AwaitCheck(&verdict));
      if (checked) {
        verified_ = true;
        return verdict.ok() ? verdict : BadAttempt(verdict);
      }
    }
    verified_ = true;
    std::string actual = hasher_->Finish();
    if (actual == ref_.checksum) return Status::OK();
    return Status(StatusCode::kChecksum,
                  "checksum mismatch for " + redacted_ + ": expected " + ref_.checksum + ", got " +
                      actual + " over " + std::to_string(pos_) +
                      " bytes read (the download is retried; open the shard again)",
                  redacted_, 0);
  }

  // The stream delivered bytes of an attempt that failed its check.
  Status BadAttempt(const Status& check) const {
    return Status(StatusCode::kChecksum,
                  check.message() + "; " + std::to_string(pos_) +
                      " bytes of it were read (the download is retried; open the shard again)",
                  redacted_, 0);
  }

  // Waits for the download's check of the trusted attempt: true and its
  // outcome in *verdict, or false when that attempt ended unchecked (the
  // stream has then hashed what it delivered and goes on hashing).
  Result<bool> AwaitCheck(Status* verdict) {
    Download& d = *att_.download;
    {
      std::unique_lock<std::mutex> lock(d.mu);
      while (true) {
        if (cancelled_ || impl_->stopping()) return Cancelled();
        if (d.checked_generation == trusted_) {
          *verdict = d.check_status;
          return true;
        }
        if (d.generation != trusted_ || d.done) break;
        d.cv.wait_for(lock, std::chrono::milliseconds(50));
      }
    }
    SHARDSTREAM_RETURN_IF_ERROR(StopTrusting());
    return false;
  }

  // Hashes the bytes delivered so far from the trusted attempt's file (still
  // open, even if it was unlinked since): they are exactly what was read.
  Status StopTrusting() {
    std::vector<char> buf(std::min<uint64_t>(pos_, 1 << 20));
    for (uint64_t off = 0; off < pos_;) {
      SHARDSTREAM_ASSIGN_OR_RETURN(
          size_t got, ReadCached(*att_.file, off, std::min<uint64_t>(buf.size(), pos_ - off),
                                 buf.data(), redacted_));
      if (got == 0) {
        return Status(StatusCode::kIo,
                      "cached " + redacted_ + " shrank below the " + std::to_string(pos_) +
                          " bytes read from it", redacted_, static_cast<int64_t>(off));
      }
      hasher_->Update(buf.data(), got);
      off += got;
    }
    trusted_ = 0;
    return Status::OK();
  }

  Result<size_t> ReadBackend(size_t n, void* out, bool* reattach) {
    switch (att_.kind) {
      case Attachment::kFile: {
        SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, ReadCached(*att_.file, pos_, n, out, redacted_));
        impl_->UpdateStats([&](CacheStats& s) { s.bytes_from_cache += got; });
        return got;
      }
      case Attachment::kSource: {
        SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, att_.stream->Read(n, out));
        impl_->CountSourceBytes(ref_.url, got);
        return got;
      }
      case Attachment::kGrowing:
        return att_.download ? ReadOwnDownload(n, out, reattach) : ReadForeign(n, out, reattach);
    }
    return size_t{0};
  }

  // A download run by this process: wait on its condition variable.
  Result<size_t> ReadOwnDownload(size_t n, void* out, bool* reattach) {
    Download& d = *att_.download;
    std::unique_lock<std::mutex> lock(d.mu);
    auto last_progress = Clock::now();
    uint64_t last_written = d.written;
    while (true) {
      if (cancelled_ || impl_->stopping()) return Cancelled();
      if (d.generation != generation_ && !d.temp_path.empty()) {
        if (trusted_ != 0 && pos_ > 0) {
          // The attempt we read ended: before reading another, check what we
          // delivered, by its verdict or by hashing it now.
          if (d.checked_generation == trusted_ && !d.check_status.ok())
            return BadAttempt(d.check_status);
          lock.unlock();
          SHARDSTREAM_RETURN_IF_ERROR(StopTrusting());
          lock.lock();
          continue;
        }
        // A new attempt (or the first): read its temporary from our position.
        auto file = impl_->opts.fs->OpenRandomAccess(d.temp_path);
        if (file.ok()) {
          att_.file = std::move(*file);
          generation_ = d.generation;
          // Read from its first byte, the attempt's own check covers us
          // (if it checks the same checksum: manifests may disagree).
          if (hasher_ && !verified_ && pos_ == 0 && d.ref.checksum == ref_.checksum)
            trusted_ = generation_;
        }
      }
      if (att_.file && generation_ == d.generation && d.written > pos_) {
        size_t want = std::min<uint64_t>(n, d.written - pos_);
        lock.unlock();
        SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, ReadCached(*att_.file, pos_, want, out, redacted_));
        impl_->UpdateStats([&](CacheStats& s) { s.bytes_from_cache += got; });
        return got;
      }
      if (ref_.size < 0 && generation_ == d.generation && d.size >= 0 &&
          pos_ >= static_cast<uint64_t>(d.size)) {
        // The whole shard, by the source's own size (Content-Length): done
        // without waiting for the entry to be synced and published. Bytes
        // past that size fail the download, never this reader's data.
        return size_t{0};
      }
      if (d.done) {
        if (d.uncached) {
          lock.unlock();
          if (trusted_ != 0) SHARDSTREAM_RETURN_IF_ERROR(StopTrusting());
          SHARDSTREAM_ASSIGN_OR_RETURN(att_, impl_->FromSource(ref_, pos_));
          *reattach = false;
          return ReadBackend(n, out, reattach);
        }
        if (!d.status.ok()) return d.status;
        if (generation_ == d.generation && pos_ >= d.written) return size_t{0};  // all read
        // Published before we caught up: read the entry, which may be
        // another file by then, so hash what we read first.
        if (trusted_ != 0) {
          lock.unlock();
          SHARDSTREAM_RETURN_IF_ERROR(StopTrusting());
          lock.lock();
        }
        *reattach = true;
        return size_t{0};
      }
      // Woken once the bytes asked for are there (or fewer, see download.cc).
      uint64_t want_end = pos_ + n;
      if (d.size >= 0) want_end = std::min<uint64_t>(want_end, static_cast<uint64_t>(d.size));
      d.wake_at = std::min(d.wake_at, want_end);
      d.cv.wait_for(lock, std::chrono::milliseconds(50));
      if (d.written != last_written) {
        last_written = d.written;
        last_progress = Clock::now();
      } else if (Clock::now() - last_progress > impl_->opts.stall_timeout) {
        return Stalled();
      }
    }
  }

  // Another process's download: poll the temporary's size; it is complete
  // when the entry's name points at the same file.
  Result<size_t> ReadForeign(size_t n, void* out, bool* reattach) {
    const std::string& dir = impl_->opts.dir;
    const std::string key = CacheKey(ref_.url);
    auto last_progress = Clock::now();
    auto next_probe = Clock::now() + kOwnerProbe;
    uint64_t last_size = 0;
    auto sleep = std::chrono::microseconds(100);
    while (true) {
      if (cancelled_ || impl_->stopping()) return Cancelled();
      struct stat st;
      if (::fstat(att_.identity_fd, &st) != 0)
        return Status::FromErrno(errno, "stat cached " + redacted_);
      SHARDSTREAM_ASSIGN_OR_RETURN(uint64_t size, att_.file->SizeNow());
      if (size > pos_) {
        SHARDSTREAM_ASSIGN_OR_RETURN(
            size_t got,
            ReadCached(*att_.file, pos_, std::min<uint64_t>(n, size - pos_), out, redacted_));
        impl_->UpdateStats([&](CacheStats& s) { s.bytes_from_cache += got; });
        return got;
      }
      if (SameFile(att_.identity_fd, EntryPath(dir, key))) {
        // Published, so complete; but the last appends and the rename may
        // have come between the size above and this check.
        auto now_size = att_.file->SizeNow();
        if (now_size.ok() && *now_size > pos_) continue;
        return size_t{0};
      }
      if (st.st_nlink == 0) {  // that attempt was discarded
        *reattach = true;
        return size_t{0};
      }
      auto now = Clock::now();
      if (now >= next_probe) {
        next_probe = now + kOwnerProbe;
        auto probe = LockFile(LockPath(dir, key), false, false, /*create=*/false);
        if (!probe.ok() || probe->held()) {
          // The writer released the entry: published, or it died.
          if (SameFile(att_.identity_fd, EntryPath(dir, key))) continue;
          *reattach = true;
          return size_t{0};
        }
      }
      if (size != last_size) {
        last_size = size;
        last_progress = now;
        sleep = std::chrono::microseconds(100);
      } else if (now - last_progress > impl_->opts.stall_timeout) {
        return Stalled();
      }
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(5000));
    }
  }

  Status Stalled() const {
    return Status(StatusCode::kUnavailable,
                  "download of " + redacted_ + " stalled at byte " + std::to_string(pos_) +
                      " for " + std::to_string(impl_->opts.stall_timeout.count()) + " ms",
                  redacted_, static_cast<int64_t>(pos_));
  }

  std::shared_ptr<ShardCache::Impl> impl_;
  const ShardRef ref_;
  const std::string redacted_;
  Attachment att_;
  uint64_t generation_ = 0;
  // Reading one attempt of this process's download from its first byte, the
  // stream leaves the checksum to the download, which hashes the same bytes
  // anyway; it hashes them itself only if it must read anything else.
  uint64_t trusted_ = 0;  // that attempt's generation; 0: hash what is read
  uint64_t pos_ = 0;
  bool hit_ = false;
  bool eof_ = false;
  bool verified_ = false;
  std::unique_ptr<Hasher> hasher_;
  std::atomic<bool> cancelled_{false};
};

// A complete entry, pinned for as long as the file is open.
class PinnedFile final : public RandomAccessFile {
 public:
  PinnedFile(std::shared_ptr<ShardCache::Impl> impl, std::string url, Attachment att)
      : impl_(std::move(impl)), url_(std::move(url)), att_(std::move(att)) {}
  const std::string& url() const override { return url_; }
  Result<uint64_t> Size() override { return att_.size; }
  Result<size_t> ReadAt(uint64_t offset, size_t n, void* out) override {
    size_t done = 0;
    char* dst = static_cast<char*>(out);
    while (done < n) {
      SHARDSTREAM_ASSIGN_OR_RETURN(size_t got,
                                   ReadCached(*att_.file, offset + done, n - done, dst + done, url_));
      if (got == 0) break;
      done += got;
    }
    impl_->UpdateStats([&](CacheStats& s) { s.bytes_from_cache += done; });
    return done;
  }
  Result<size_t> ReadVAt(uint64_t offset, const ReadPiece* pieces, size_t n) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t done,
                                 NameTheShard(att_.file->ReadVAt(offset, pieces, n), offset, url_));
    impl_->UpdateStats([&](CacheStats& s) { s.bytes_from_cache += done; });
    return done;
  }
  // The entry is complete and immutable (a new version is a new file), so a
  // mapping of it stays valid while the pin holds it; a Source whose files
  // have no mapping (a fault-injecting one) is read instead.
  Result<View> MapView() override { return att_.file->MapView(); }
  Result<uint64_t> SizeNow() override { return att_.file->SizeNow(); }
  void ReleaseView(uint64_t offset, uint64_t n) override { att_.file->ReleaseView(offset, n); }
  void CountViewBytes(uint64_t n) override {
    impl_->UpdateStats([&](CacheStats& s) { s.bytes_from_cache += n; });
  }

 private:
  std::shared_ptr<ShardCache::Impl> impl_;
  std::string url_;
  Attachment att_;
};

}  // namespace

std::unique_ptr<CachedShard> NewShardStream(std::shared_ptr<ShardCache::Impl> impl,
                                            const ShardRef& ref, Attachment att) {
  return std::make_unique<ShardStream>(std::move(impl), ref, std::move(att));
}

Result<std::unique_ptr<RandomAccessFile>> OpenPinnedRandomAccess(
    std::shared_ptr<ShardCache::Impl> impl, const ShardRef& ref, bool cached_only) {
  const std::string redacted = RedactUrl(ref.url);
  if (cached_only) {
    SHARDSTREAM_ASSIGN_OR_RETURN(Attachment att, impl->Acquire(ref, 0, true, /*cached_only=*/true));
    return std::unique_ptr<RandomAccessFile>(new PinnedFile(impl, redacted, std::move(att)));
  }
  bool first = true;
  auto last_progress = Clock::now();
  uint64_t last_size = 0;
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(Attachment att, impl->Acquire(ref, 0, first));
    first = false;
    switch (att.kind) {
      case Attachment::kFile:
        return std::unique_ptr<RandomAccessFile>(new PinnedFile(impl, redacted, std::move(att)));
      case Attachment::kSource:
        return impl->opts.source->OpenRandomAccess(ref.url);
      case Attachment::kGrowing:
        break;
    }
    if (auto d = att.download) {
      std::unique_lock<std::mutex> lock(d->mu);
      d->cv.wait(lock, [&] { return d->done || impl->stopping(); });
      if (impl->stopping()) return Status::Cancelled("shard cache is shutting down");
      if (d->uncached) return impl->opts.source->OpenRandomAccess(ref.url);
      if (!d->status.ok()) return d->status;
      continue;
    }
    auto size = att.file->SizeNow();
    if (size.ok() && *size != last_size) {
      last_size = *size;
      last_progress = Clock::now();
    } else if (Clock::now() - last_progress > impl->opts.stall_timeout) {
      return Status(StatusCode::kUnavailable, "download of " + redacted + " stalled", redacted);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace shardstream::internal
