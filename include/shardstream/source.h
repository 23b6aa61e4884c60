// Source: one interface for every place bytes live (local files, memory, and
// later http(s)://, s3://, pipe:). It is the library's I/O seam: everything
// that reads shards or writes files goes through a Source, so tests can drive
// real servers, in-memory stores and fault injection through the same code.
//
// Urls: a plain path or file:// url for local files; other schemes are handled
// by the Source registered for them (see DefaultSource()).
//
// Thread-safety: Source methods may be called concurrently. A RandomAccessFile
// allows concurrent ReadAt; an InputStream or WritableFile is used by one
// thread at a time.
#ifndef SHARDSTREAM_SOURCE_H_
#define SHARDSTREAM_SOURCE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/status.h"

namespace shardstream {

struct FileInfo {
  std::string url;
  uint64_t size = 0;
  bool is_dir = false;
  int64_t mtime_ns = 0;
  std::string etag;  // object version where the source has one; else empty.
};

// One piece of a vectored read: the next `len` bytes go to `data`. Laid out
// as POSIX's struct iovec, so files can hand an array of them to preadv.
struct ReadPiece {
  void* data = nullptr;
  size_t len = 0;
};

// Reads at arbitrary offsets.
class SHARDSTREAM_EXPORT RandomAccessFile {
 public:
  virtual ~RandomAccessFile();
  // The url, credentials redacted, for messages.
  virtual const std::string& url() const = 0;
  virtual Result<uint64_t> Size() = 0;
  // Reads up to n bytes at offset into out. Returns the count read, which is
  // less than n only at the end of the file. Safe to call concurrently.
  virtual Result<size_t> ReadAt(uint64_t offset, size_t n, void* out) = 0;
  // Reads the bytes from `offset` on into pieces[0], then pieces[1], ...:
  // one positional read scattered over many buffers (the loader reads a
  // batch's documents straight into their places this way). Returns the
  // count read, which is less than the pieces' total only at the end of
  // the file. Safe to call concurrently. The default calls ReadAt for each
  // piece; local files (and the shard cache's) make it one preadv.
  virtual Result<size_t> ReadVAt(uint64_t offset, const ReadPiece* pieces, size_t n);

  // EXPERIMENTAL. The whole file as read-only memory, for a reader that
  // copies many small scattered pieces (the loader's shuffled documents): no
  // system call per piece. Local files and shard cache entries map
  // themselves at the first call and stay mapped until destroyed; other
  // files return kConfig ("not supported"), and the caller reads instead.
  // Safe to call concurrently. A local file truncated by another process
  // while it is mapped makes a later access fault (SIGBUS), as with any
  // memory-mapped reader: shard files are not to be rewritten in place.
  struct View {
    const char* data = nullptr;
    uint64_t size = 0;
  };
  virtual Result<View> MapView();
  // Says bytes [offset, offset + n) of the view will not be read soon: their
  // pages leave the process's resident memory (they stay in the page cache,
  // and a later read of them faults them back in). Keeps a reader that
  // walks a large file through its view at a bounded RSS. Default: nothing.
  virtual void ReleaseView(uint64_t offset, uint64_t n);
  // Counts n bytes read through MapView in the file's statistics (the shard
  // cache's bytes_from_cache). Default: nothing to count.
  virtual void CountViewBytes(uint64_t n);
  // The size as it is now (Size() may answer from the open). A reader of a
  // view checks it before copying a run of bytes, so that a file cut short
  // since it was mapped is an error naming where it ends, not a fault.
  // Default: Size().
  virtual Result<uint64_t> SizeNow();
};

// Reads a byte stream front to back.
class SHARDSTREAM_EXPORT InputStream {
 public:
  virtual ~InputStream();
  virtual const std::string& url() const = 0;
  // Reads up to n bytes; returns 0 only at the end of the stream. May return
  // fewer than n bytes before the end.
  virtual Result<size_t> Read(size_t n, void* out) = 0;
  // Like Read, but waits at most `wait` for a first byte; 0 means nothing
  // arrived in time or the stream ended (Read then tells which). Lets a
  // caller gather bytes into bigger pieces without holding back bytes that
  // already arrived when the source pauses. Streams that cannot bound the
  // wait return 0 at once (the default).
  virtual Result<size_t> ReadWithin(size_t n, void* out, std::chrono::microseconds wait);
  // The offset in the underlying object of the next byte Read returns.
  virtual uint64_t position() const = 0;
  // The object's total size, when known.
  virtual std::optional<uint64_t> size() const { return std::nullopt; }
};

// A file being written. Nothing is visible under its final name until the
// caller renames it there (see Source::Rename); Sync makes written bytes
// durable. Close or Abort must be called before destruction; the destructor
// aborts a file that was not closed.
class SHARDSTREAM_EXPORT WritableFile {
 public:
  virtual ~WritableFile();
  virtual const std::string& url() const = 0;
  virtual Status Append(std::string_view data) = 0;
  // Reserves disk space for `bytes` in all, without changing the file's
  // size: a full disk shows up here rather than part way through, and
  // appends skip the file system's per-block allocation. More than the
  // free space is refused (ENOSPC) before any block is taken, so a failed
  // reservation never fills the disk under other writers. Files that cannot
  // reserve return OK and do nothing (the default).
  virtual Status Preallocate(uint64_t bytes);
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
  // Discards the file (removes what was written). Idempotent.
  virtual Status Abort() = 0;
};

// Optional settings for Source::OpenInputStreamWith.
struct StreamOptions {
  // First byte to read. Default: 0.
  uint64_t offset = 0;
  // The object's size when the caller knows it (from a manifest); sources
  // that can check it fail a body that ends early or runs longer.
  // Default: unknown.
  std::optional<uint64_t> expected_size;
  // Set to true (from any thread) to make a Read blocked on the network or a
  // retry backoff return kCancelled promptly, where the source supports it
  // (http, https, s3). Default: none.
  std::shared_ptr<const std::atomic<bool>> cancel;
};

class SHARDSTREAM_EXPORT Source {
 public:
  virtual ~Source();

  virtual Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const std::string& url) = 0;
  // A stream starting at byte `offset`. The default adapts OpenRandomAccess.
  virtual Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                               uint64_t offset = 0);
  // OpenInputStream with StreamOptions. The default ignores expected_size and
  // cancel and calls OpenInputStream(url, options.offset), so every Source
  // (and every override of OpenInputStream in a wrapper) keeps working.
  virtual Result<std::unique_ptr<InputStream>> OpenInputStreamWith(const std::string& url,
                                                                   const StreamOptions& options);
  // Says `url` will soon be opened as a stream from its first byte (with
  // OpenInputStream(url, 0)). A source that reads over a network may start
  // fetching now and hand what it fetched to that open; the default does
  // nothing. Bytes fetched for an open that never comes are dropped after a
  // minute or when newer hints push them out. Never fails: an error waits
  // for the open, which then tries again itself.
  virtual void Prefetch(const std::string& url);
  // On failure returns NotFound if url does not exist.
  virtual Result<FileInfo> Stat(const std::string& url) = 0;
  // Entries directly below a directory url (or with a key prefix, for object
  // stores), sorted by url.
  virtual Result<std::vector<FileInfo>> List(const std::string& url);

  // Writing. Sources that cannot write return kConfig.
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url);
  // Atomically replaces `to` with `from` where the source supports it.
  virtual Status Rename(const std::string& from, const std::string& to);
  virtual Status Remove(const std::string& url);
  // Creates a directory and its missing parents; OK if it exists.
  virtual Status CreateDir(const std::string& url);
  // Removes an empty directory.
  virtual Status RemoveDir(const std::string& url);
  // Makes renames and creations inside directory `url` durable.
  virtual Status SyncDir(const std::string& url);
};

// Forwards every call to a target; subclass it to intercept some calls
// (fault injection, counting, latency). OpenInputStreamWith is not forwarded
// as such: it reaches the target through this wrapper's OpenInputStream (so
// an intercepting override stays on the path), without expected_size and
// cancel; override it to pass them on.
class SHARDSTREAM_EXPORT SourceWrapper : public Source {
 public:
  explicit SourceWrapper(std::shared_ptr<Source> target) : target_(std::move(target)) {}
  Source* target() const { return target_.get(); }

  Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const std::string& url) override;
  Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                       uint64_t offset) override;
  void Prefetch(const std::string& url) override;
  Result<FileInfo> Stat(const std::string& url) override;
  Result<std::vector<FileInfo>> List(const std::string& url) override;
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& url) override;
  Status CreateDir(const std::string& url) override;
  Status RemoveDir(const std::string& url) override;
  Status SyncDir(const std::string& url) override;

 private:
  std::shared_ptr<Source> target_;
};

// Local files: plain paths and file:// urls. Reads use pread and sequential
// read-ahead hints; writes go through write/fsync.
SHARDSTREAM_EXPORT std::shared_ptr<Source> LocalSource();

// An in-memory file system keyed by url (tests, small data). Thread-safe.
SHARDSTREAM_EXPORT std::shared_ptr<Source> NewMemorySource();

// The process-wide router: dispatches each url to the Source registered for
// its scheme ("file" handles plain paths). Later modules register "http",
// "https", "s3" and "pipe".
SHARDSTREAM_EXPORT std::shared_ptr<Source> DefaultSource();
// Registers (or replaces) the Source for a scheme in DefaultSource().
SHARDSTREAM_EXPORT void RegisterSource(const std::string& scheme, std::shared_ptr<Source> source);

// Whole-object helpers over any Source.
SHARDSTREAM_EXPORT Result<std::string> ReadFileToString(Source& source, const std::string& url);
// Writes data under a temporary name, syncs, renames into place and syncs the
// directory: readers see the old content or the new, never a mix. Where
// objects are written whole (WritesWholeObjects: s3://, http(s)://), one
// write to the url itself.
SHARDSTREAM_EXPORT Status WriteFileAtomic(Source& source, const std::string& url,
                                          std::string_view data);

}  // namespace shardstream

#endif  // SHARDSTREAM_SOURCE_H_
