// ShardCache: creation, the decision where a reader reads from (hit, join a
// download, start one, or stream from the source), eviction and statistics.
#include "shardstream/shard_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "cache/cache_impl.h"
#include "common/log.h"
#include "shardstream/checksum.h"
#include "shardstream/url.h"

namespace shardstream {

using internal::Attachment;
using internal::Download;
using internal::FileLock;

CachedShard::~CachedShard() = default;

ShardRef ShardRef::FromEntry(const ShardEntry& entry) {
  return ShardRef(entry.resolved.empty() ? entry.url : entry.resolved, entry.size, entry.checksum);
}

std::string CacheKey(const std::string& url) {
  // "xxh3_128:<32 hex>" -> the hex digits.
  std::string sum = ChecksumOf(RedactUrl(url), "xxh3_128");
  return sum.substr(sum.find(':') + 1);
}

namespace internal {
Attachment::Attachment(Attachment&& o) noexcept
    : kind(o.kind), hit(o.hit), file(std::move(o.file)), identity_fd(o.identity_fd),
      pin(std::move(o.pin)), size(o.size), download(std::move(o.download)),
      stream(std::move(o.stream)) {
  o.identity_fd = -1;
}
Attachment& Attachment::operator=(Attachment&& o) noexcept {
  if (this != &o) {
    if (identity_fd >= 0) ::close(identity_fd);
    kind = o.kind;
    hit = o.hit;
    file = std::move(o.file);
    identity_fd = o.identity_fd;
    o.identity_fd = -1;
    pin = std::move(o.pin);
    size = o.size;
    download = std::move(o.download);
    stream = std::move(o.stream);
  }
  return *this;
}
Attachment::~Attachment() {
  if (identity_fd >= 0) ::close(identity_fd);
}
}  // namespace internal

ShardCache::Impl::Impl(ShardCacheOptions options) : opts(std::move(options)) {}
ShardCache::Impl::~Impl() { Stop(); }

void ShardCache::Impl::CountSourceBytes(const std::string& url, uint64_t n) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.bytes_from_source += n;
  stats_.source_bytes_by_scheme[UrlScheme(url)] += n;
}

std::shared_ptr<Download> ShardCache::Impl::ActiveDownload(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(key);
  if (it == active_.end()) return nullptr;
  auto d = it->second.lock();
  if (d == nullptr) active_.erase(it);
  return d;
}

bool ShardCache::Impl::CachingSuspended() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::chrono::steady_clock::now() < suspended_until_;
}

std::unique_ptr<RandomAccessFile> ShardCache::Impl::OpenEntry(const std::string& key,
                                                              const ShardRef& ref,
                                                              uint64_t* size_out) {
  const std::string path = internal::EntryPath(opts.dir, key);
  auto file = opts.fs->OpenRandomAccess(path);
  if (!file.ok()) {
    if (file.status().code() != StatusCode::kNotFound)
      internal::Log().warn("shard cache: entry of {} unreadable, fetched again: {}",
                           RedactUrl(ref.url), file.status().ToString());
    return nullptr;
  }
  auto size = (*file)->Size();
  bool ok = size.ok() && (ref.size < 0 || *size == static_cast<uint64_t>(ref.size));
  if (ok && !ref.checksum.empty()) {
    // An entry of an older version of the object (the manifest changed) is
    // stale: it is replaced by a fresh download.
    auto meta = ReadFileToString(*opts.fs, internal::MetaPath(opts.dir, key));
    auto j = meta.ok() ? nlohmann::json::parse(*meta, nullptr, false) : nlohmann::json();
    ok = j.is_object() && j.value("checksum", std::string()) == ref.checksum;
  }
  if (!ok) return nullptr;
  // LRU: the entry's time of last use (its modification time, as eviction reads it).
  if (opts.mode == CacheMode::kReadWrite) (void)::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  *size_out = *size;
  return std::move(*file);
}

Result<Attachment> ShardCache::Impl::FromSource(const ShardRef& ref, uint64_t pos) {
  std::shared_ptr<Source> source = opts.source;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto stream, source->OpenInputStream(ref.url, pos));
  Attachment att;
  att.kind = Attachment::kSource;
  att.stream = std::move(stream);
  return att;
}

Result<Attachment> ShardCache::Impl::Acquire(const ShardRef& ref, uint64_t pos, bool count_open,
                                             bool cached_only) {
  auto not_cached = [&]() -> Result<Attachment> {
    const std::string url = RedactUrl(ref.url);
    return Status(StatusCode::kNotFound, "not cached (yet): " + url, url);
  };
  auto uncached = [&]() -> Result<Attachment> {
    if (cached_only) return not_cached();
    if (count_open) UpdateStats([](CacheStats& s) { s.uncached++; });
    return FromSource(ref, pos);
  };
  if (opts.mode == CacheMode::kOff) return uncached();
  const std::string key = CacheKey(ref.url);
  const std::string lock_path = internal::LockPath(opts.dir, key);
  const bool writable = opts.mode == CacheMode::kReadWrite;
  auto deadline = std::chrono::steady_clock::now() + opts.stall_timeout;
  auto backoff = std::chrono::microseconds(200);

  while (true) {
    if (stopping()) return Status::Cancelled("shard cache is shutting down");
    // 1. This process is downloading it: follow that download.
    if (auto d = ActiveDownload(key)) {
      std::lock_guard<std::mutex> lock(d->mu);
      if (!d->done) {
        if (cached_only) return not_cached();
        if (count_open) UpdateStats([](CacheStats& s) { s.joined++; });
        Attachment att;
        att.kind = Attachment::kGrowing;
        att.download = d;
        return att;
      }
    }
    // 2. A complete entry: pin it (shared lock) and read it.
    auto locked = internal::LockFile(lock_path, false, false, /*create=*/writable);
    // Read-only: an entry without lock file (never pinned) is read unpinned.
    bool no_lock_file = !writable && locked.status().code() == StatusCode::kNotFound;
    if (!locked.ok() && !no_lock_file) return locked.status();
    FileLock pin = locked.ok() ? std::move(*locked) : FileLock();
    if (pin.held() || no_lock_file) {
      uint64_t size;
      if (auto file = OpenEntry(key, ref, &size)) {
        if (count_open) UpdateStats([](CacheStats& s) { s.hits++; });
        Attachment att;
        att.kind = Attachment::kFile;
        att.hit = pos == 0;
        att.file = std::move(file);
        att.size = size;
        att.pin = std::move(pin);
        return att;
      }
      pin.Release();
      if (cached_only) return not_cached();
      if (!writable || CachingSuspended() ||
          (ref.size >= 0 && static_cast<uint64_t>(ref.size) > opts.limit_bytes)) {
        return uncached();
      }
      // 3. Nobody has it: become its downloader.
      SHARDSTREAM_ASSIGN_OR_RETURN(FileLock owner, internal::LockFile(lock_path, true, false));
      if (owner.held()) {
        if (OpenEntry(key, ref, &size)) continue;  // published meanwhile
        auto d = std::make_shared<Download>();
        d->ref = ref;
        d->key = key;
        d->entry_lock = std::move(owner);
        // Opened here so that not-found and auth errors reach the caller of Open.
        SHARDSTREAM_ASSIGN_OR_RETURN(d->first_stream, OpenDownloadStream(ref.url));
        {
          std::lock_guard<std::mutex> lock(mu_);
          active_[key] = d;
        }
        if (count_open) UpdateStats([](CacheStats& s) { s.misses++; });
        Attachment att;
        att.kind = Attachment::kGrowing;
        att.download = d;
        EnqueueDownload(d);
        return att;
      }
    } else {
      // 4. Another process holds the entry exclusively: it is downloading
      // (the lock file names its temporary) or evicting.
      if (cached_only) return not_cached();
      std::string temp = internal::ReadLockContent(lock_path);
      if (!temp.empty() && temp.find('/') == std::string::npos) {
        // Its identity first: a temporary replaced between the two opens is
        // then seen as discarded, never read as the one we hold.
        const std::string path = opts.dir + "/" + temp;
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && ::fstat(fd, &st) == 0 && st.st_nlink > 0) {
          auto file = opts.fs->OpenRandomAccess(path);
          if (file.ok()) {
            if (count_open) UpdateStats([](CacheStats& s) { s.joined++; });
            Attachment att;
            att.kind = Attachment::kGrowing;
            att.file = std::move(*file);
            att.identity_fd = fd;
            return att;
          }
        }
        if (fd >= 0) ::close(fd);
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      internal::Log().warn("shard cache: no progress on {} for {} ms; streaming it uncached",
                           RedactUrl(ref.url), opts.stall_timeout.count());
      return uncached();
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::microseconds(5000));
  }
}

Result<uint64_t> ShardCache::Impl::EvictTo(uint64_t bytes, uint64_t free_at_least) {
  SHARDSTREAM_ASSIGN_OR_RETURN(
      FileLock dir_lock, internal::LockFile(opts.dir + "/" + internal::kDirLock, true, true));
  SHARDSTREAM_ASSIGN_OR_RETURN(auto items, internal::ScanDir(opts.dir));
  internal::RemoveAbandonedTemps(*opts.fs, items);
  uint64_t usage = internal::Usage(items);
  bytes = std::min(bytes, usage > free_at_least ? usage - free_at_least : 0);
  auto out = internal::EvictLru(*opts.fs, opts.dir, items, bytes);
  UpdateStats([&](CacheStats& s) {
    s.evictions += out.count;
    s.evicted_bytes += out.bytes;
  });
  return internal::Usage(items);
}

// --- ShardCache --------------------------------------------------------------

Result<std::unique_ptr<ShardCache>> ShardCache::Create(ShardCacheOptions options) {
  if (!options.source) options.source = DefaultSource();
  if (!options.fs) options.fs = LocalSource();
  if (options.mode != CacheMode::kOff) {
    if (options.dir.empty()) return Status::Config("shard cache: no directory given");
    if (options.mode == CacheMode::kReadWrite && options.limit_bytes == 0)
      return Status::Config("shard cache: limit_bytes must be > 0 for " + options.dir);
  }
  if (options.low_watermark <= 0 || options.low_watermark > 1)
    return Status::Config("shard cache: low_watermark must be in (0, 1]");
  if (options.max_attempts < 1 || options.download_threads < 1 || options.chunk_size == 0 ||
      options.prefetch_lookahead < 0)
    return Status::Config("shard cache: max_attempts, download_threads and chunk_size must be "
                          "positive, prefetch_lookahead >= 0");
  while (options.dir.size() > 1 && options.dir.back() == '/') options.dir.pop_back();

  if (options.mode == CacheMode::kReadWrite) {
    SHARDSTREAM_RETURN_IF_ERROR(options.fs->CreateDir(options.dir));
    std::string marker = options.dir + "/" + internal::kCacheMarker;
    if (::access(marker.c_str(), F_OK) != 0) {
      SHARDSTREAM_RETURN_IF_ERROR(internal::WriteSmallFileAtomic(
          *options.fs, options.dir, internal::kCacheMarker, marker, internal::kCacheFormat, true));
    }
    // Temporaries of crashed processes (their lock is free, their pid gone).
    auto lock = internal::LockFile(options.dir + "/" + internal::kDirLock, true, true);
    if (!lock.ok()) return lock.status();
    auto items = internal::ScanDir(options.dir);
    if (!items.ok()) return items.status();
    int removed = internal::RemoveAbandonedTemps(*options.fs, *items);
    if (removed > 0)
      internal::Log().info("shard cache {}: removed {} abandoned temporaries", options.dir,
                           removed);
  } else if (options.mode == CacheMode::kReadOnly && ::access(options.dir.c_str(), R_OK) != 0) {
    return Status::FromErrno(errno, "shard cache directory " + options.dir);
  }
  return std::unique_ptr<ShardCache>(new ShardCache(std::make_shared<Impl>(std::move(options))));
}

ShardCache::ShardCache(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardCache::~ShardCache() { impl_->Stop(); }

Result<std::unique_ptr<CachedShard>> ShardCache::Open(const ShardRef& shard) {
  SHARDSTREAM_ASSIGN_OR_RETURN(Attachment att, impl_->Acquire(shard, 0, true));
  return internal::NewShardStream(impl_, shard, std::move(att));
}

Result<std::unique_ptr<RandomAccessFile>> ShardCache::OpenRandomAccess(const ShardRef& shard) {
  return internal::OpenPinnedRandomAccess(impl_, shard);
}

Result<std::unique_ptr<RandomAccessFile>> ShardCache::OpenIfCached(const ShardRef& shard) {
  return internal::OpenPinnedRandomAccess(impl_, shard, /*cached_only=*/true);
}

void ShardCache::Prefetch(const std::vector<ShardRef>& upcoming) { impl_->Prefetch(upcoming); }
void ShardCache::WaitIdle() { impl_->WaitIdle(); }

Result<uint64_t> ShardCache::EvictTo(uint64_t bytes) {
  if (impl_->opts.mode != CacheMode::kReadWrite)
    return Status::Config("shard cache: eviction needs read-write mode");
  return impl_->EvictTo(bytes);
}

Status ShardCache::Evict(const std::string& url) {
  if (impl_->opts.mode != CacheMode::kReadWrite)
    return Status::Config("shard cache: eviction needs read-write mode");
  const auto& dir = impl_->opts.dir;
  std::string key = CacheKey(url);
  struct stat st;
  if (::stat(internal::EntryPath(dir, key).c_str(), &st) != 0)
    return Status(StatusCode::kNotFound, "not cached: " + RedactUrl(url), RedactUrl(url));
  SHARDSTREAM_ASSIGN_OR_RETURN(FileLock dir_lock,
                               internal::LockFile(dir + "/" + internal::kDirLock, true, true));
  if (!internal::RemoveEntryIfUnused(*impl_->opts.fs, dir, key))
    return Status(StatusCode::kUnavailable, "in use, not evicted: " + RedactUrl(url),
                  RedactUrl(url));
  impl_->UpdateStats([&](CacheStats& s) {
    s.evictions++;
    s.evicted_bytes += static_cast<uint64_t>(st.st_size);
  });
  return Status::OK();
}

CacheStats ShardCache::stats() const { return impl_->stats(); }
const ShardCacheOptions& ShardCache::options() const { return impl_->opts; }

// --- directory-level helpers --------------------------------------------------

Result<std::vector<CacheEntryInfo>> ListCacheEntries(const std::string& dir) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto items, internal::ScanDir(dir));
  std::vector<CacheEntryInfo> out;
  for (const auto& item : items) {
    CacheEntryInfo info;
    info.key = item.key;
    info.size = item.size;
    info.last_use_ns = item.mtime_ns;
    info.temporary = item.kind == internal::DirItem::kTemp;
    auto meta = ReadFileToString(*LocalSource(), internal::MetaPath(dir, item.key));
    if (meta.ok()) {
      auto j = nlohmann::json::parse(*meta, nullptr, false);
      if (j.is_object()) {
        info.url = j.value("url", std::string());
        info.checksum = j.value("checksum", std::string());
      }
    }
    if (info.temporary) {
      info.in_use = !internal::TempAbandoned(item);
    } else {
      auto lock = internal::LockFile(internal::LockPath(dir, item.key), true, false,
                                     /*create=*/false);  // listing never writes
      info.in_use = lock.ok() && !lock->held();
    }
    out.push_back(std::move(info));
  }
  return out;
}

Status ClearCache(const std::string& dir) {
  if (::access((dir + "/" + internal::kCacheMarker).c_str(), F_OK) != 0)
    return Status::Config(dir + " is not a shardstream cache (no " +
                          internal::kCacheMarker + " file); refusing to clear it");
  auto fs = LocalSource();
  SHARDSTREAM_ASSIGN_OR_RETURN(
      FileLock dir_lock, internal::LockFile(dir + "/" + internal::kDirLock, true, true));
  SHARDSTREAM_ASSIGN_OR_RETURN(auto items, internal::ScanDir(dir));
  internal::RemoveAbandonedTemps(*fs, items);
  internal::EvictLru(*fs, dir, items, 0);
  return Status::OK();
}

}  // namespace shardstream
