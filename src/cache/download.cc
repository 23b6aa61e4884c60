// The download pool: threads (started on first use) that copy shards from
// their source into verified cache entries, for readers (Open) and ahead of
// them (Prefetch).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <limits>

#include <nlohmann/json.hpp>

#include "cache/cache_impl.h"
#include "common/log.h"
#include "shardstream/checksum.h"
#include "shardstream/url.h"

namespace shardstream {

using internal::Download;
using internal::FileLock;

namespace {

std::string Basename(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// How long caching stays off after the disk was found full twice, or failed.
constexpr auto kNoSpaceBackoff = std::chrono::seconds(30);
// The longest a download holds received bytes back from readers to gather
// a whole chunk.
constexpr auto kMaxHold = std::chrono::milliseconds(2);

Status SizeMismatch(const std::string& redacted, int64_t size, const std::string& what,
                    uint64_t offset) {
  return Status(StatusCode::kChecksum,
                "size mismatch for " + redacted + ": expected " + std::to_string(size) +
                    " bytes, " + what, redacted, static_cast<int64_t>(offset));
}

// Appends of whole chunks at chunk-aligned offsets let the page cache hold
// the entry in large folios (kernels whose file system has them): measured
// here, a fill at 256 KiB per append runs 5-15% faster than one append per
// network read (about 16 KiB from curl), and later epochs read the entry 1.4x
// faster. Bigger chunks pause the receive longer: the socket's buffer runs
// full and loopback TCP stalls (1 MiB lost most of the gain with a checksum).
// Bytes that arrived still reach readers within kMaxHold when the source
// slows down or pauses.
//
// Reads up to the next multiple of `chunk` past `received` bytes from `in`
// into buf, hashed into `hasher` if any; 0 at its end. `announce`, if given,
// is called before the source is waited on for longer than kMaxHold.
Result<size_t> ReceiveChunk(InputStream& in, uint64_t received, char* buf, size_t chunk,
                            Hasher* hasher, const std::function<void()>* announce) {
  const size_t want = chunk - static_cast<size_t>(received % chunk);
  size_t filled = 0;
  if (announce) {
    SHARDSTREAM_ASSIGN_OR_RETURN(filled, in.ReadWithin(want, buf, kMaxHold));
    if (filled == 0) (*announce)();
  }
  // Each piece is hashed as it lands, while it is in the CPU's cache, and so
  // that no long pause between receives lets the socket's buffer run full.
  if (filled == 0) {
    SHARDSTREAM_ASSIGN_OR_RETURN(filled, in.Read(want, buf));
  }
  if (hasher) hasher->Update(buf, filled);
  const auto until = std::chrono::steady_clock::now() + kMaxHold;
  while (filled > 0 && filled < want) {
    auto left = until - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) break;
    SHARDSTREAM_ASSIGN_OR_RETURN(
        size_t more,
        in.ReadWithin(want - filled, buf + filled,
                      std::chrono::duration_cast<std::chrono::microseconds>(left)));
    if (more == 0) break;
    if (hasher) hasher->Update(buf + filled, more);
    filled += more;
  }
  return filled;
}

}  // namespace

void ShardCache::Impl::EnqueueDownload(std::shared_ptr<Download> d) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping()) {  // raced with Stop(): no new thread may start now
    lock.unlock();
    return FinishDownload(*d, Status::Cancelled("shard cache is shutting down"), false);
  }
  reader_queue_.push_back(std::move(d));
  // A reader is waiting for this one: never queue it behind busy threads.
  if (idle_threads_ == 0 && static_cast<int>(threads_.size()) < 2 * opts.download_threads)
    threads_.emplace_back([this] { WorkerLoop(); });
  work_cv_.notify_one();
}

void ShardCache::Impl::Prefetch(const std::vector<ShardRef>& upcoming) {
  if (opts.mode != CacheMode::kReadWrite) return;
  std::lock_guard<std::mutex> lock(mu_);
  // Under the lock, as in EnqueueDownload: a thread started after Stop()
  // took threads_ would never be joined (std::terminate at destruction).
  if (stopping()) return;
  prefetch_queue_.clear();  // superseded by the new plan position
  int n = std::min<int>(opts.prefetch_lookahead, static_cast<int>(upcoming.size()));
  for (int i = 0; i < n; ++i) {
    const ShardRef& ref = upcoming[static_cast<size_t>(i)];
    std::string key = CacheKey(ref.url);
    auto it = active_.find(key);
    if (it != active_.end() && !it->second.expired()) continue;
    struct stat st;
    if (::stat(internal::EntryPath(opts.dir, key).c_str(), &st) == 0 &&
        (ref.size < 0 || st.st_size == ref.size))
      continue;
    prefetch_queue_.push_back(ref);
  }
  // Prefetch leaves one thread for reader misses (when there are several).
  int max_prefetch = std::max(1, opts.download_threads - 1);
  int wanted = std::min<int>(max_prefetch, static_cast<int>(prefetch_queue_.size()));
  int free_threads = idle_threads_;
  while (free_threads < wanted && static_cast<int>(threads_.size()) < opts.download_threads) {
    threads_.emplace_back([this] { WorkerLoop(); });
    free_threads++;
  }
  work_cv_.notify_all();
}

void ShardCache::Impl::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  int max_prefetch = std::max(1, opts.download_threads - 1);
  while (true) {
    idle_threads_++;
    work_cv_.wait(lock, [&] {
      return stopping() || !reader_queue_.empty() ||
             (!prefetch_queue_.empty() && running_prefetch_ < max_prefetch);
    });
    idle_threads_--;
    if (stopping()) break;
    running_++;
    if (!reader_queue_.empty()) {
      auto d = std::move(reader_queue_.front());
      reader_queue_.pop_front();
      lock.unlock();
      RunDownload(*d);
      d.reset();
      lock.lock();
    } else {
      ShardRef ref = std::move(prefetch_queue_.front());
      prefetch_queue_.pop_front();
      running_prefetch_++;
      lock.unlock();
      PrefetchOne(ref);
      lock.lock();
      running_prefetch_--;
    }
    running_--;
    idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void ShardCache::Impl::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] {
    return stopping() || (reader_queue_.empty() && prefetch_queue_.empty() && running_ == 0);
  });
}

void ShardCache::Impl::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    *cancel_ = true;  // network reads of running downloads return kCancelled
    prefetch_queue_.clear();
    threads.swap(threads_);
    // Readers waiting on a download in this process wake up and see stopping.
    for (auto& [key, weak] : active_) {
      if (auto d = weak.lock()) d->cv.notify_all();
    }
  }
  work_cv_.notify_all();
  idle_cv_.notify_all();
  for (auto& t : threads) t.join();
  // Downloads queued but never started: release their readers.
  std::deque<std::shared_ptr<Download>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(reader_queue_);
  }
  for (auto& d : left) FinishDownload(*d, Status::Cancelled("shard cache is shutting down"), false);
}

void ShardCache::Impl::PrefetchOne(const ShardRef& ref) {
  const std::string key = CacheKey(ref.url);
  if (ActiveDownload(key) != nullptr || CachingSuspended()) return;
  if (ref.size >= 0 && static_cast<uint64_t>(ref.size) > opts.limit_bytes) return;
  const std::string lock_path = internal::LockPath(opts.dir, key);
  auto owner = internal::LockFile(lock_path, true, false);
  if (!owner.ok() || !owner->held()) return;  // in use or being downloaded elsewhere
  uint64_t size;
  if (OpenEntry(key, ref, &size)) return;
  auto d = std::make_shared<Download>();
  d->ref = ref;
  d->key = key;
  d->prefetch = true;
  d->entry_lock = std::move(*owner);
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_[key] = d;
  }
  UpdateStats([](CacheStats& s) { s.prefetches++; });
  RunDownload(*d);
}

Result<std::unique_ptr<WritableFile>> ShardCache::Impl::Reserve(const std::string& key,
                                                                int64_t size, std::string* temp,
                                                                bool* fits) {
  *fits = true;
  uint64_t need = size >= 0 ? static_cast<uint64_t>(size) : 0;
  if (need > opts.limit_bytes) {
    *fits = false;
    return std::unique_ptr<WritableFile>();
  }
  // Scan, evict and create the temporary under the directory lock, so that
  // processes reserving at the same time see each other's reservations.
  SHARDSTREAM_ASSIGN_OR_RETURN(
      FileLock dir_lock, internal::LockFile(opts.dir + "/" + internal::kDirLock, true, true));
  SHARDSTREAM_ASSIGN_OR_RETURN(auto items, internal::ScanDir(opts.dir));
  internal::RemoveAbandonedTemps(*opts.fs, items);
  uint64_t usage = internal::Usage(items);
  if (usage + need > opts.limit_bytes) {
    uint64_t low = static_cast<uint64_t>(opts.low_watermark * static_cast<double>(opts.limit_bytes));
    uint64_t target = need <= low ? low - need : opts.limit_bytes - need;
    auto out = internal::EvictLru(*opts.fs, opts.dir, items, target, key);
    UpdateStats([&](CacheStats& s) {
      s.evictions += out.count;
      s.evicted_bytes += out.bytes;
    });
    usage = internal::Usage(items);
    if (usage + need > opts.limit_bytes) {
      *fits = false;  // everything left is in use
      return std::unique_ptr<WritableFile>();
    }
  }
  *temp = internal::NewTempPath(opts.dir, key, size);
  return opts.fs->NewWritableFile(*temp);
}

Status ShardCache::Impl::Publish(Download& d, WritableFile& file, const std::string& temp,
                                 const std::string& checksum, uint64_t size) {
  if (opts.sync_entries) SHARDSTREAM_RETURN_IF_ERROR(file.Sync());
  SHARDSTREAM_RETURN_IF_ERROR(file.Close());
  nlohmann::json meta = {{"url", RedactUrl(d.ref.url)},
                         {"size", size},
                         {"checksum", d.ref.checksum.empty() ? checksum : d.ref.checksum}};
  // The metadata goes first: an entry is never visible without it.
  SHARDSTREAM_RETURN_IF_ERROR(internal::WriteSmallFileAtomic(
      *opts.fs, opts.dir, d.key, internal::MetaPath(opts.dir, d.key), meta.dump() + "\n",
      opts.sync_entries));
  {
    // Under the directory lock: a scan that raced with the rename could see
    // the file under neither name and over-commit the space.
    SHARDSTREAM_ASSIGN_OR_RETURN(
        FileLock dir_lock, internal::LockFile(opts.dir + "/" + internal::kDirLock, true, true));
    SHARDSTREAM_RETURN_IF_ERROR(opts.fs->Rename(temp, internal::EntryPath(opts.dir, d.key)));
  }
  {
    // A reader of this attempt that attaches from now on (before the sync
    // below ends the download) opens the entry: the same file, renamed.
    std::lock_guard<std::mutex> lock(d.mu);
    d.temp_path = internal::EntryPath(opts.dir, d.key);
  }
  if (opts.sync_entries) SHARDSTREAM_RETURN_IF_ERROR(opts.fs->SyncDir(opts.dir));
  return Status::OK();
}

void ShardCache::Impl::OnNoSpace(const Status& s, bool give_up, uint64_t need) {
  UpdateStats([](CacheStats& st) { st.nospace_events++; });
  if (!give_up) {
    // The disk is smaller than the limit says: free what the shard needs.
    (void)EvictTo(opts.limit_bytes, need);
    return;
  }
  if (SuspendCaching(&warned_nospace_)) {
    internal::Log().warn(
        "shard cache {}: disk full ({}); streaming shards without caching for now",
        opts.dir, s.message());
  }
}

bool ShardCache::Impl::SuspendCaching(bool* warned) {
  std::lock_guard<std::mutex> lock(mu_);
  suspended_until_ = std::chrono::steady_clock::now() + kNoSpaceBackoff;
  const bool first = !*warned;
  *warned = true;
  return first;
}

void ShardCache::Impl::OnCacheError(const Status& s) {
  if (SuspendCaching(&warned_error_)) {
    internal::Log().warn("shard cache {}: cannot write ({}); streaming shards without caching "
                         "for now", opts.dir, s.ToString());
  }
}

void ShardCache::Impl::FinishDownload(Download& d, Status status, bool uncached) {
  {
    std::lock_guard<std::mutex> lock(d.mu);
    d.done = true;
    d.uncached = uncached;
    d.status = std::move(status);
  }
  d.cv.notify_all();
  d.entry_lock.Release();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(d.key);
  if (it != active_.end() && (it->second.expired() || it->second.lock().get() == &d))
    active_.erase(it);
}

void ShardCache::Impl::RunDownload(Download& d) {
  const std::string& url = d.ref.url;
  const std::string redacted = RedactUrl(url);
  std::vector<char> buf(opts.chunk_size);
  std::string last_mismatch;
  bool nospace_retried = false;
  int attempt = 0;
  while (true) {
    attempt++;
    if (attempt > 1) UpdateStats([](CacheStats& s) { s.retries++; });
    if (stopping()) return FinishDownload(d, Status::Cancelled("shard cache is shutting down"), false);
    std::unique_ptr<InputStream> in = std::move(d.first_stream);
    if (in == nullptr) {
      auto opened = OpenDownloadStream(url);
      if (!opened.ok()) {
        if (opened.status().retryable() && attempt < opts.max_attempts) continue;
        return FinishDownload(d, opened.status(), false);
      }
      in = std::move(*opened);
    }
    int64_t size = d.ref.size;
    if (size < 0 && in->size()) size = static_cast<int64_t>(*in->size());

    std::string temp;
    bool fits;
    auto file = Reserve(d.key, size, &temp, &fits);
    if (file.ok() && !fits) return FinishDownload(d, Status::OK(), true);
    if (!file.ok()) {
      if (internal::IsNoSpace(file.status())) {
        OnNoSpace(file.status(), nospace_retried, size >= 0 ? static_cast<uint64_t>(size) : opts.chunk_size);
        if (!nospace_retried) { nospace_retried = true; attempt--; continue; }
        return FinishDownload(d, Status::OK(), true);
      }
      OnCacheError(file.status());
      return FinishDownload(d, Status::OK(), true);
    }
    // The writer's lock on its own temporary tells cleaners it is alive.
    auto temp_lock = internal::LockFile(temp, true, false);
    internal::SetLockContent(d.entry_lock, Basename(temp) + "\n");
    {
      std::lock_guard<std::mutex> lock(d.mu);
      d.temp_path = temp;
      d.generation++;
      d.written = 0;
      d.wake_at = 0;
      d.size = size;
    }
    d.cv.notify_all();

    // Only a checksum from the manifest is checked. Without one, hashing
    // would check nothing and cost the fill a tenth of its speed.
    std::unique_ptr<Hasher> hasher;
    Status failed;
    if (!d.ref.checksum.empty()) {
      auto algorithm = ParseChecksum(d.ref.checksum);
      if (algorithm.ok()) hasher = std::move(Hasher::Create(*algorithm).value());
      failed = algorithm.status();
    }
    uint64_t written = 0;
    // A full disk fails here, before any byte is received; and appends into
    // reserved blocks cost the file system less than allocating each one.
    bool fs_error = false;  // the cache's disk failed, not the source
    if (failed.ok() && size > 0) {
      failed = (*file)->Preallocate(static_cast<uint64_t>(size));
      fs_error = !failed.ok();
    }
    // Waking a reader at every append took about a tenth of a fill's CPU (a
    // futex wake and a context switch per chunk, on 2 cores): a waiting
    // reader is woken when the bytes it asked for are there, when a piece
    // comes short (the source slowed down) or before the download waits on a
    // pausing source.
    bool unannounced = false;
    const std::function<void()> announce = [&] {
      {
        std::lock_guard<std::mutex> lock(d.mu);
        d.wake_at = std::numeric_limits<uint64_t>::max();
      }
      d.cv.notify_all();
      unannounced = false;
    };
    while (failed.ok()) {
      if (stopping()) { failed = Status::Cancelled("shard cache is shutting down"); break; }
      auto got = ReceiveChunk(*in, written, buf.data(), buf.size(), hasher.get(),
                              unannounced ? &announce : nullptr);
      if (!got.ok()) { failed = got.status(); break; }
      if (*got == 0) break;
      CountSourceBytes(url, *got);
      if (size >= 0 && written + *got > static_cast<uint64_t>(size)) {
        failed = SizeMismatch(redacted, size, "the source has more", size);
        break;
      }
      Status s = (*file)->Append(std::string_view(buf.data(), *got));
      if (!s.ok()) { failed = s; fs_error = true; break; }
      written += *got;
      {
        std::lock_guard<std::mutex> lock(d.mu);
        d.written = written;
        // A short piece means the source slowed down: its bytes go out now.
        unannounced = written < d.wake_at && written % buf.size() == 0;
      }
      if (!unannounced) announce();
    }
    std::string actual = hasher ? hasher->Finish() : std::string();
    if (failed.ok() && size >= 0 && written != static_cast<uint64_t>(size))
      failed = SizeMismatch(redacted, size, "got " + std::to_string(written), written);
    if (failed.ok() && hasher && actual != d.ref.checksum) {
      failed = Status(StatusCode::kChecksum,
                      "checksum mismatch for " + redacted + ": expected " + d.ref.checksum +
                          ", got " + actual + " (" + std::to_string(written) + " bytes)",
                      redacted);
    }
    if (hasher && (failed.ok() || failed.code() == StatusCode::kChecksum)) {
      // Readers of this attempt in this process leave the check to us.
      {
        std::lock_guard<std::mutex> lock(d.mu);
        d.checked_generation = d.generation;
        d.check_status = failed;
      }
      d.cv.notify_all();
    }
    if (failed.ok()) {
      failed = Publish(d, **file, temp, actual, written);
      fs_error = !failed.ok();
    }
    if (failed.ok()) {
      UpdateStats([](CacheStats& s) { s.downloads++; });
      return FinishDownload(d, Status::OK(), false);
    }
    (void)(*file)->Abort();
    (void)opts.fs->Remove(temp);  // Abort may have failed; never leave it behind
    if (failed.code() == StatusCode::kCancelled) return FinishDownload(d, failed, false);
    if (internal::IsNoSpace(failed)) {
      OnNoSpace(failed, nospace_retried, size >= 0 ? static_cast<uint64_t>(size) : written);
      if (!nospace_retried) { nospace_retried = true; attempt--; continue; }
      return FinishDownload(d, Status::OK(), true);
    }
    if (fs_error) {  // a failing cache disk must not stop training
      OnCacheError(failed);
      return FinishDownload(d, Status::OK(), true);
    }
    bool mismatch = failed.code() == StatusCode::kChecksum;
    if (mismatch) UpdateStats([](CacheStats& s) { s.checksum_failures++; });
    if ((mismatch || failed.retryable()) && attempt < opts.max_attempts) {
      internal::Log().warn("shard cache: attempt {} of {} for {} failed: {}", attempt,
                           opts.max_attempts, redacted, failed.ToString());
      continue;
    }
    if (mismatch) {
      // The same bytes every time: the manifest, not the network, is wrong.
      failed = Status(StatusCode::kChecksum,
                      failed.message() + " after " + std::to_string(attempt) +
                          " attempt(s); the manifest's entry does not match the object (a stale "
                          "manifest, or a shard rewritten): check with `shardstream verify "
                          "MANIFEST` and rebuild the manifest (`shardstream manifest`)",
                      redacted, failed.offset());
    }
    return FinishDownload(d, failed.WithContext("downloading " + redacted, redacted), false);
  }
}

}  // namespace shardstream
