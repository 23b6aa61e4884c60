// Direct reads: token documents read from an uncompressed shard straight
// into their place in a batch slot, one copy (page cache to slot) instead
// of two (page cache to a read buffer, then to the slot). The shard's
// version 2 sample index says where every document's values lie
// (DirectRange, direct_range.h, walks it a chunk at a time), so the packer
// places documents before a byte of them is read; a batch's reads then run
// as a few vectored reads (RandomAccessFile::ReadVAt) per shard, on
// whichever workers are free. The tar and .npy headers in front of each
// document are read along and checked against the index, so a shard that
// does not match its index fails with its url and the byte offset, never
// with wrong tokens. Every byte is read through the shard's
// RandomAccessFile: a local file, a shard cache entry, or a test's
// fault-injecting file.
#ifndef SHARDSTREAM_TAR_DIRECT_READS_H_
#define SHARDSTREAM_TAR_DIRECT_READS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "shardstream/dtype.h"
#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream::internal {

class DirectRecycler;

// A document's tar header and .npy header together, at most: a document
// with a longer .npy header is read the usual way.
constexpr uint64_t kDirectMaxHeaders = 4096 + 512;

// What direct reads keep of a shard's index for a run of samples (a chunk
// of a range): 64 bytes and the key per sample. Shared by the lane's
// consumer and every document placed from it; the shard's file closes (and
// a cache entry is unpinned) with the last chunk of it.
struct SHARDSTREAM_EXPORT DirectShard {
  struct Doc {
    uint64_t offset = 0, length = 0;  // the sample's (SampleIndexEntry)
    uint64_t field = 0;               // the token field's data offset
    uint64_t payload = 0, count = 0;  // its values: offset and number
    uint64_t header_hash = 0;         // of its .npy header
    uint32_t key_at = 0, key_len = 0;  // in keys
    // A document of a group (docs/shards.md): its group's array's .npy
    // header length, `field` that array's data offset, `header_hash` its
    // header's; 0 for a document alone in its member.
    uint32_t group_head = 0;
  };
  DirectShard() = default;
  DirectShard(const DirectShard&) = delete;
  DirectShard& operator=(const DirectShard&) = delete;
  ~DirectShard();
  // What it keeps in memory, roughly.
  uint64_t memory() const { return docs.capacity() * sizeof(Doc) + keys.capacity(); }
  const Doc& doc(int64_t sample) const { return docs[static_cast<size_t>(sample - first)]; }
  std::string_view key(int64_t sample) const {
    const Doc& d = doc(sample);
    return std::string_view(keys).substr(d.key_at, d.key_len);
  }
  std::shared_ptr<RandomAccessFile> file;  // the shard's bytes
  // The file mapped (RandomAccessFile::MapView), when the loader chose to
  // copy documents from memory (shuffled documents lie apart: a read each
  // would cost a system call); data null: they are read.
  RandomAccessFile::View view;
  std::string url;    // credentials redacted
  std::string field;  // the token field's name
  DType dtype = DType::kInt32;
  int64_t first = 0;  // the first sample
  std::vector<Doc> docs;
  std::string keys;
  std::shared_ptr<DirectRecycler> recycler;  // gets docs and keys back, if set
};

// Memory for DirectShards' records, kept across chunks and epochs: each
// epoch walks every shard's index again, and fresh pages for the records (a
// fault per 4 KiB) cost more than the walk. Keeps at most `max_bytes` of
// idle capacity. Any thread.
class SHARDSTREAM_EXPORT DirectRecycler : public std::enable_shared_from_this<DirectRecycler> {
 public:
  explicit DirectRecycler(uint64_t max_bytes) : max_bytes_(max_bytes) {}
  // Gives `s` kept (empty) vectors, if any, and makes it give them back.
  void Take(DirectShard* s);
  void Give(DirectShard* s);
  uint64_t idle_bytes();

 private:
  struct Kept {
    std::vector<DirectShard::Doc> docs;
    std::string keys;
  };
  static uint64_t Bytes(const Kept& k) {
    return k.docs.capacity() * sizeof(DirectShard::Doc) + k.keys.capacity();
  }
  Mutex mu_;
  const uint64_t max_bytes_;
  uint64_t kept_bytes_ GUARDED_BY(mu_) = 0;
  std::vector<Kept> free_ GUARDED_BY(mu_);
};

// A document placed by index: the chunk of its shard's records, and its
// sample (its number in the shard).
struct DirectDoc {
  std::shared_ptr<const DirectShard> shard;
  int64_t sample = -1;
  bool valid() const { return shard != nullptr; }
  const DirectShard::Doc& doc() const { return shard->doc(sample); }
};

// One batch's reads. Add* by one thread, then Plan(), then RunJob(j) for
// each j once, on any threads at once; Clear() keeps the capacity.
class DirectReads {
 public:
  // Reads and checks the document's headers (once per document and batch).
  void AddCheck(const DirectDoc& doc);
  // `bytes` of the document's values, from value byte `from`, to dst.
  void AddValues(const DirectDoc& doc, uint64_t from, char* dst, size_t bytes);
  bool empty() const { return count_ == 0; }
  // Puts each shard's pieces in file order (a mapped shard's: as placed)
  // and cuts them into jobs.
  void Plan();
  size_t jobs() const { return jobs_.size(); }
  Status RunJob(size_t j);
  // Gives the calling thread the buffers RunJob keeps per thread, so that a
  // worker's first job in steady state allocates nothing either (a worker
  // may run none for a while when another takes every job).
  static void PrepareThread();
  void Clear();
  friend void swap(DirectReads& a, DirectReads& b) noexcept {
    a.keep_.swap(b.keep_);
    a.group_checked_.swap(b.group_checked_);
    a.pieces_.swap(b.pieces_);
    std::swap(a.count_, b.count_);
    a.jobs_.swap(b.jobs_);
  }

 private:
  // Bytes [offset, offset + len) of a shard: the first `head` of them a
  // document's headers, to be checked (read into the worker's buffer), the
  // rest values, to dst. A document's headers and its first values are one
  // piece. 32 bytes: the workers read a batch's pieces from the core that
  // wrote them.
  struct Piece {
    uint64_t offset = 0;
    char* dst = nullptr;
    uint32_t len = 0;
    uint32_t doc = 0;   // with head > 0: the sample, from its shard's first
    uint32_t head = 0;
  };
  struct Job {
    size_t slot, first, end;  // pieces_[slot][first, end)
  };
  // The slot of the document's shard in this batch.
  size_t Keep(const DirectDoc& doc);
  // `h`: the piece's headers as read.
  Status Check(const DirectShard& s, const Piece& p, const char* h) const;
  // Check for a document of a group: its group's headers.
  Status CheckGroup(const DirectShard& s, const Piece& p, const char* h) const;
  // RunJob for a mapped shard: each piece copied from memory.
  Status CopyJob(const DirectShard& s, const std::vector<Piece>& v, const Job& job) const;

  std::vector<std::shared_ptr<const DirectShard>> keep_;  // the shards in use, by slot
  // Each slot's group whose headers were checked last (its array's data
  // offset + 1; 0: none): a group's documents come one after the other, and
  // its headers are read and checked once for them.
  std::vector<uint64_t> group_checked_;
  // Each slot's pieces: they come in by shard, so planning gathers nothing.
  // Every vector keeps its capacity for the batches after.
  std::vector<std::vector<Piece>> pieces_;
  size_t count_ = 0;
  std::vector<Job> jobs_;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_DIRECT_READS_H_
