// Vectored positional reads of a local file descriptor, shared by the local
// source's files and the shard cache's entries.
#ifndef SHARDSTREAM_SOURCES_POSIX_READ_H_
#define SHARDSTREAM_SOURCES_POSIX_READ_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream::internal {

// RandomAccessFile::ReadVAt for `fd`: preadv until every piece is full or
// the file ends (at most IOV_MAX pieces a call; EINTR retried). On failure
// returns the errno's kind naming `url` and the byte offset.
Result<size_t> PReadVAll(int fd, uint64_t offset, const ReadPiece* pieces, size_t n,
                         const std::string& url);

// RandomAccessFile::MapView for a local file: maps `fd` read-only at the
// first Get (once, whatever the threads) and unmaps when destroyed. The fd
// may be closed after the mapping is made.
class LazyMapping {
 public:
  LazyMapping() = default;
  LazyMapping(const LazyMapping&) = delete;
  LazyMapping& operator=(const LazyMapping&) = delete;
  ~LazyMapping();
  Result<RandomAccessFile::View> Get(int fd, uint64_t size, const std::string& url);
  // RandomAccessFile::ReleaseView: the whole pages inside the range.
  void Release(uint64_t offset, uint64_t n);
  // RandomAccessFile::SizeNow of `fd` (fstat).
  static Result<uint64_t> SizeNow(int fd, const std::string& url);

 private:
  std::once_flag once_;
  void* data_ = nullptr;
  uint64_t size_ = 0;
  Status status_;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SOURCES_POSIX_READ_H_
