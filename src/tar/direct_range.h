// DirectRange: samples [first, end) of an uncompressed shard opened for
// direct reads of one token field (direct_reads.h). It reads the shard's
// version 2 sample index through a RandomAccessFile, checks it whole once,
// then walks its records a window at a time, handing them out as chunks
// (DirectShard) of bounded size, so what a lane keeps does not grow with
// the shard. The shard's bytes are read later, through its own
// RandomAccessFile, by DirectReads.
//
// Thread-safety: one thread at a time (a lane's reader); the chunks it
// returns are immutable and may be shared.
#ifndef SHARDSTREAM_TAR_DIRECT_RANGE_H_
#define SHARDSTREAM_TAR_DIRECT_RANGE_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardstream/dtype.h"
#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/source.h"
#include "tar/direct_reads.h"
#include "tar/index_records.h"

namespace shardstream::internal {

class SHARDSTREAM_EXPORT DirectRange {
 public:
  // The shard `url` (for messages; redacted here), its bytes `shard` and
  // its sample index `index`. On failure returns why the range cannot be
  // read directly (the caller then reads it the usual way): kCorrupt for a
  // damaged index, kConfig when it is compressed, of version 1, stale (not
  // made from a shard of this size) or lists fewer than `end` samples, or
  // the index file's read error.
  static Result<std::unique_ptr<DirectRange>> Open(const std::string& url,
                                                   std::shared_ptr<RandomAccessFile> shard,
                                                   std::unique_ptr<RandomAccessFile> index,
                                                   const std::string& field, DType dtype,
                                                   int64_t first, int64_t end);
  // The records of the samples from next() on, as many as fit in
  // `max_bytes`; null once the range is done. Each sample needs `field` as
  // a 1-D .npy array of `dtype` with headers of at most 4 KiB: a chunk ends
  // before one that has not, and the call after returns why (kConfig), with
  // next() that sample (read it, and the rest, the usual way). A broken
  // index or a failed read of it returns its error at once.
  Result<std::shared_ptr<const DirectShard>> Next(uint64_t max_bytes,
                                                  const std::shared_ptr<DirectRecycler>& recycler);
  int64_t next() const { return next_; }

  // The document group the walk is in (docs/shards.md): where its array's
  // data starts, its .npy header's length and hash, from the record of its
  // first document.
  struct Group {
    uint64_t field = 0, hash = 0;
    uint32_t head = 0;
    bool known = false;
    void Start(const IndexFieldRecord& f) {
      field = f.offset;
      hash = f.header_hash;
      head = static_cast<uint32_t>(std::min<uint64_t>(f.payload - f.offset, UINT32_MAX));
      known = true;
    }
  };
  int64_t end() const { return end_; }
  // The shard mapped in memory: the chunks from Next() on carry the view,
  // and their documents are copied from it rather than read (DirectShard).
  void SetView(const RandomAccessFile::View& view) { view_ = view; }

 private:
  DirectRange() = default;
  // Walks with `sink` up to sample `until`, reading windows as it needs them.
  template <class Sink>
  Status WalkTo(Sink* sink, uint64_t until);
  // The index's bytes from the walker's position on, into window_.
  Status ReadWindow();

  std::unique_ptr<RandomAccessFile> index_;
  RandomAccessFile::View view_;
  std::string index_url_;
  std::vector<char> window_;
  size_t window_bytes_ = 0;  // the next window's size (grows for a record larger than it)
  uint64_t window_at_ = 0;   // the file offset window_ starts at
  uint64_t records_end_ = 0;  // where the index's records end
  IndexWalker walk_;
  std::shared_ptr<RandomAccessFile> shard_;
  std::string url_, field_;
  DType dtype_ = DType::kInt32;
  int64_t next_ = 0, end_ = 0;
  Status why_;  // why the samples from next_ on cannot be read directly
  Group group_;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_DIRECT_RANGE_H_
