// ChunkReader: large reads into reference-counted chunks (default 4 MiB), so
// the fast parser can hand out field bytes as views that outlive the reader.
// A chunk still referenced by a field is never overwritten: the reader moves
// on to a fresh one and copies only the unread tail.
#ifndef SHARDSTREAM_TAR_CHUNK_READER_H_
#define SHARDSTREAM_TAR_CHUNK_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "shardstream/result.h"
#include "tar/byte_stream.h"

namespace shardstream::internal {

class ChunkReader {
 public:
  ChunkReader(ByteStream* in, size_t chunk_size, uint64_t base_offset);

  // Makes up to n (<= chunk_size / 2) bytes contiguous at the cursor.
  // Returns how many are available: fewer than n only at the end.
  Result<size_t> Ensure(size_t n);
  const char* cursor() const { return chunk_.get() + pos_; }
  size_t available() const { return end_ - pos_; }
  // Absolute offset of the cursor in the tar.
  uint64_t offset() const { return offset_; }
  void Advance(size_t n) { pos_ += n; offset_ += n; }

  // The next n bytes as a view, sharing the chunk when they fit in one and
  // in their own buffer otherwise. Returns false at a premature end.
  Result<bool> Take(uint64_t n, std::string_view* data, std::shared_ptr<const void>* owner);
  // Skips n bytes; returns false at a premature end.
  Result<bool> Skip(uint64_t n);

  // Chunks whose last view is gone come back to a process-wide pool for reuse: a fresh
  // chunk costs a page fault per 4 KiB, more than the read itself.
  struct Pool;

 private:
  Result<size_t> Fill();  // reads into the free tail of the chunk
  std::shared_ptr<char> NewChunk();

  ByteStream* in_;
  size_t chunk_size_;
  std::shared_ptr<Pool> pool_;
  std::shared_ptr<char> chunk_;
  size_t pos_ = 0, end_ = 0;
  uint64_t offset_;
  bool eof_ = false;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_CHUNK_READER_H_
