// LaneReader: one lane's reader of shards. It reads the lane's ranges one
// after another and turns each into ring items: samples through a
// TarReader (from the shard cache when there is one, else from the source),
// or, for token documents of an uncompressed shard with a version 2 index
// that is a local file or a complete cache entry, chunks of documents
// placed by index (DirectRange, read later by the batch's direct reads). A range that cannot be read directly, or
// stops being readable so part way, goes on the usual way from there.
// Bytes are counted by where they come from (ByteSource).
//
// Thread-safety: Produce/FlushCount/Close by one thread at a time (the
// worker that holds the lane, handed over under the scheduler's lock);
// Cancel() from any thread.
#ifndef SHARDSTREAM_PIPELINE_LANE_READER_H_
#define SHARDSTREAM_PIPELINE_LANE_READER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "pipeline/kept_mappings.h"
#include "plan/entry_format.h"
#include "shardstream/decode.h"
#include "shardstream/export.h"
#include "shardstream/rows.h"
#include "shardstream/shard_cache.h"
#include "shardstream/tar_reader.h"
#include "tar/direct_range.h"
#include "tar/direct_reads.h"

namespace shardstream::internal {

// Where a range's bytes come from (decided once per range, from its url and
// whether a cache is in use), for the byte counters.
enum class ByteSource : uint8_t { kCache, kFile, kHttp, kS3, kOther };

struct LaneRange {
  int64_t shard = 0;   // index into the epoch's shard list
  int64_t first = 0;   // samples of the shard file
  int64_t end = 0;     // -1: the whole shard
  // The epoch's shard is part of the file from this sample on (mixed
  // streams): sample ids are file samples minus this.
  int64_t index_offset = 0;
  EntryFormat format = EntryFormat::kTar;
  std::string mds_layout;  // kMds: the shard's layout (FormatMdsLayout)
  // Read by a reader of its own that passes over what it skips (MDS, JSON
  // Lines, Parquet: rows.h): the range ends by sample number.
  bool own_reader() const { return format != EntryFormat::kTar; }
};

struct LaneItem {
  // kDirect: a chunk of a range read directly, its documents taken
  // straight from `direct` (the chunk's records, and its first sample) by
  // the consumer.
  enum Kind { kSample, kEnd, kError, kDirect };
  Kind kind = kSample;
  int64_t shard = -1;  // index of the sample's shard in the epoch's list
  int64_t index_offset = 0;  // LaneRange::index_offset of its range
  uint64_t bytes = 0;  // the sample's field bytes (what it holds in memory)
  Sample sample;
  Status status;
  // Set by LaneConfig::prepare in the worker that read it: a field decoded ahead
  // (a view into `sample`), or why it could not be.
  size_t decoded_field = 0;  // index in sample.fields
  DecodedField decoded;
  Status decode_status;
  // Image fields decoded ahead (one per fixed-size image field, in field
  // order; a missing field leaves its entry empty): the pixels, and the
  // tensor viewing them. The buffers travel with the item (swaps), so they
  // are reused rather than allocated per sample.
  std::vector<std::vector<uint8_t>> pixels;
  std::vector<DecodedField> images;
  std::vector<bool> image_present;
  // kDirect: the chunk and its first sample (direct_reads.h), and where
  // its bytes come from.
  DirectDoc direct;
  ByteSource source = ByteSource::kFile;
  // Member-wise (the shuffle buffer and the rings swap items).
  friend void swap(LaneItem& a, LaneItem& b) noexcept {
    using std::swap;
    swap(a.kind, b.kind);
    swap(a.shard, b.shard);
    swap(a.index_offset, b.index_offset);
    swap(a.bytes, b.bytes);
    swap(a.sample, b.sample);
    swap(a.status, b.status);
    swap(a.decoded_field, b.decoded_field);
    swap(a.decoded, b.decoded);
    swap(a.decode_status, b.decode_status);
    swap(a.pixels, b.pixels);
    swap(a.images, b.images);
    swap(a.image_present, b.image_present);
    a.direct.shard.swap(b.direct.shard);
    swap(a.direct.sample, b.direct.sample);
    swap(a.source, b.source);
  }
};

// Shards read through the cache whose sample index could not be had: not
// asked for again (kept across a loader's epochs). Any thread.
class MissingIndexes {
 public:
  bool Has(const std::string& url) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return urls_.count(url) > 0;
  }
  void Add(const std::string& url) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    urls_.insert(url);
  }

 private:
  Mutex mu_;
  std::set<std::string> urls_ GUARDED_BY(mu_);
};

struct LaneConfig {
  TarReaderOptions tar;
  // Readers of Parquet files (LoaderOptions::parquet).
  const ParquetReaders* parquet = nullptr;
  ShardCache* cache = nullptr;
  size_t ring = 256;
  // A lane stops reading ahead at `ring` samples or at this many bytes of
  // samples, whichever comes first (large samples would otherwise keep
  // ring x their size in memory).
  uint64_t ring_bytes = uint64_t{4} << 20;
  // The resolved url, size and checksum of entry `shard` of the epoch's
  // list, made when a range is opened rather than kept for every range: a
  // consumer of a million-shard data set has tens of thousands.
  std::function<ShardRef(int64_t shard)> ref_of;
  int lanes = 4;
  int threads = 2;  // workers
  std::vector<int> cpus;  // the workers' CPUs (none: the process's)
  int nice = 0;           // niceness the workers add
  // Per-sample work moved off the consumer: run by the worker that read the
  // sample, before it is published (pure: it may read the sample and fill
  // the item's decoded fields, nothing else).
  std::function<void(LaneItem*)> prepare;
  // The consumer step (required), run by one worker at a time: takes items
  // with TryPop() and returns the lane it found empty (it is called again
  // once that lane has an item), or -1 when it is done for good; the
  // workers then leave.
  std::function<int()> consume;
  // Optional work any idle worker may do after PostSide() (the consumer's
  // batches to complete): runs it if there is some, returning whether it did.
  // Comes before filling lanes; may run while a worker holds the consumer.
  std::function<bool()> side;
  // Token documents: read directly (no bytes in the ring; see
  // direct_reads.h) where a range allows it, else the usual way: local
  // files (through tar.source, if set), and with a cache, shards whose
  // entry is complete (their index is fetched into the cache beside them).
  bool direct = false;
  // With a sample shuffle: only ranges whose file maps into memory
  // (RandomAccessFile::MapView) are read directly, their documents copied
  // from the mapping; the others go the usual way (a read per shuffled
  // document would cost more than the second copy it saves).
  bool direct_mapped = false;
  std::string direct_field;
  DType direct_dtype = DType::kInt32;
  std::shared_ptr<DirectRecycler> direct_recycler;  // optional
  std::shared_ptr<MissingIndexes> missing_indexes;  // optional
  // With direct_mapped: local shards kept mapped across epochs (optional).
  std::shared_ptr<KeptMappings> kept_mappings;
};

struct LaneCounters {
  std::atomic<uint64_t> bytes_file{0}, bytes_http{0}, bytes_s3{0}, bytes_other{0};
  std::atomic<uint64_t> bytes_cache{0};
  void AddBytes(ByteSource from, uint64_t n) {
    switch (from) {
      case ByteSource::kCache: bytes_cache += n; break;
      case ByteSource::kFile: bytes_file += n; break;
      case ByteSource::kHttp: bytes_http += n; break;
      case ByteSource::kS3: bytes_s3 += n; break;
      case ByteSource::kOther: bytes_other += n; break;
    }
  }
  std::atomic<uint64_t> cache_hits{0}, cache_opens{0};
  std::atomic<uint64_t> skipped_samples{0}, skipped_shards{0};
  std::atomic<uint64_t> direct_samples{0};
  std::atomic<uint64_t> consumer_wait_ns{0};  // the consumer waited for an empty lane
};

class SHARDSTREAM_EXPORT LaneReader {
 public:
  // `ranges`: every range of the run (the cache is told which come next);
  // `mine`: this lane's, as indices into them, in the order it reads them.
  LaneReader(const std::vector<LaneRange>* ranges, std::vector<size_t> mine,
             const LaneConfig* config, LaneCounters* counters);
  ~LaneReader();
  const std::vector<size_t>& ranges() const { return mine_; }
  // Fills `item` with the lane's next item: a sample, a chunk of direct
  // documents, the end of a range or an error. Returns true when the lane
  // has nothing more to produce (after its last range's end, or an error).
  bool Produce(LaneItem* item);
  // Counts the bytes read since the last call (once per burst: an atomic add
  // per sample is a cache line bouncing between the workers).
  void FlushCount();
  // Closes the range being read, if any (a lane left mid-range).
  void Close();
  // Makes a read blocked on a download, now or later, return kCancelled.
  void Cancel();
  // Where the lane is, for the watchdog: any thread may call it while the
  // lane reads. "opening shard 3 (url)", "reading shard 3 (url) after
  // sample 41 at byte 524288", "between shards", "done".
  std::string Describe() const;

 private:
  ShardRef RefOf(const LaneRange& r) const { return config_->ref_of(r.shard); }
  Status OpenRange(const LaneRange& r, LaneItem* scratch);
  Result<std::unique_ptr<DirectRange>> OpenDirect(const LaneRange& r);
  // With direct_mapped, the shard's mapping (an error when it has none);
  // else an empty view.
  Result<RandomAccessFile::View> ViewIfMapped(RandomAccessFile* shard);
  // A tar reader for the range from sample `at` on.
  Status OpenReader(const LaneRange& r, int64_t at, LaneItem* scratch);
  // A JSON Lines range opened at row `at` by the file's index: false when
  // it cannot be (compressed, no or a stale index), and the file is read from
  // its start; an error reading the index (not its absence) is returned.
  Result<bool> OpenRowsAt(const LaneRange& r, int64_t at);
  // Source::Prefetch for this lane's next range, if it starts at a shard's
  // first sample.
  void PrefetchNext();

  // What Describe() reports, published with relaxed stores (read only by a
  // consumer that has waited a long time, so no cache line bounces).
  enum Phase : int { kBetween, kOpening, kReading, kDone };
  std::atomic<int> phase_{kBetween};
  std::atomic<int64_t> at_range_{-1};   // index into all_
  std::atomic<int64_t> at_sample_{-1};  // the last sample read, in its shard
  std::atomic<uint64_t> at_byte_{0};    // where that sample starts
  static constexpr uint64_t kUnknownByte = ~uint64_t{0};  // documents read by index

  const std::vector<LaneRange>* all_;
  std::vector<size_t> mine_;
  const LaneConfig* config_;
  LaneCounters* counters_;
  std::vector<ByteSource> sources_;  // of mine_, by position
  size_t next_range_ = 0;
  int64_t read_ = 0;
  uint64_t unpublished_bytes_ = 0;  // read since the last FlushCount
  std::unique_ptr<TarReader> reader_;
  std::unique_ptr<DirectRange> direct_;  // instead of reader_
  // Shared with the reader's stream so Cancel() can reach a read blocked
  // in TarReader::Open as safely as one blocked later.
  Mutex mu_;
  std::shared_ptr<CachedShard> cached_ GUARDED_BY(mu_);
  bool cancelled_ GUARDED_BY(mu_) = false;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_LANE_READER_H_
