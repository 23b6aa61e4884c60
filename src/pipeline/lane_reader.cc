#include "pipeline/lane_reader.h"

#include <utility>

#include "common/log.h"
#include "shardstream/mds.h"
#include "shardstream/rows.h"
#include "rows/rows_internal.h"
#include "shardstream/shard_index.h"
#include "shardstream/url.h"

namespace shardstream::internal {
namespace {

// Lends a stream to a TarReader while the lane keeps a reference to cancel it.
class SharedStream final : public InputStream {
 public:
  explicit SharedStream(std::shared_ptr<CachedShard> s) : s_(std::move(s)) {}
  const std::string& url() const override { return s_->url(); }
  Result<size_t> Read(size_t n, void* out) override { return s_->Read(n, out); }
  uint64_t position() const override { return s_->position(); }
  std::optional<uint64_t> size() const override { return s_->size(); }

 private:
  std::shared_ptr<CachedShard> s_;
};

bool IsLocal(const std::string& url) {
  const std::string scheme = UrlScheme(url);
  return scheme.empty() || scheme == "file";
}

ByteSource SourceOf(const std::string& url, bool cache) {
  if (cache) return ByteSource::kCache;
  const std::string scheme = UrlScheme(url);
  if (scheme.empty() || scheme == "file") return ByteSource::kFile;
  if (scheme == "http" || scheme == "https") return ByteSource::kHttp;
  if (scheme == "s3") return ByteSource::kS3;
  return ByteSource::kOther;
}

// What to do about a file whose size is not its manifest entry's.
const char* StaleSizeAdvice(EntryFormat format) {
  switch (format) {
    case EntryFormat::kMds:
      return " (from the MDS set's index.json): the shard changed after index.json was written, "
             "or is damaged";
    case EntryFormat::kJsonl:
    case EntryFormat::kParquet:  // (a Parquet file is opened by pyarrow, before a size is read)
      return ": the file changed after its index (<file>.idx) or manifest was written; remove "
             "the stale .idx";
    case EntryFormat::kTar:
      break;
  }
  return ": the manifest is stale or wrong; check the data set with `shardstream verify "
         "MANIFEST`, or rebuild the manifest (`shardstream manifest`)";
}

}  // namespace

LaneReader::LaneReader(const std::vector<LaneRange>* ranges, std::vector<size_t> mine,
                       const LaneConfig* config, LaneCounters* counters)
    : all_(ranges), mine_(std::move(mine)), config_(config), counters_(counters) {
  // Decided once: no string work per sample.
  for (size_t j : mine_) sources_.push_back(SourceOf(RefOf((*all_)[j]).url, config_->cache != nullptr));
}

LaneReader::~LaneReader() { Close(); }

void LaneReader::Cancel() {
  MutexLock lock(&mu_);
  cancelled_ = true;
  if (cached_ != nullptr) cached_->Cancel();  // a read blocked on a download
}

void LaneReader::FlushCount() {
  // Close() flushes at the end of each range, so what is left belongs to
  // the range being read.
  if (unpublished_bytes_ == 0 || next_range_ >= mine_.size()) return;
  counters_->AddBytes(sources_[next_range_], unpublished_bytes_);
  unpublished_bytes_ = 0;
}

std::string LaneReader::Describe() const {
  const int phase = phase_.load(std::memory_order_relaxed);
  if (phase == kDone) return "done";
  if (phase == kBetween) return "between shards";
  const int64_t ri = at_range_.load(std::memory_order_relaxed);
  if (ri < 0 || static_cast<size_t>(ri) >= all_->size()) return "starting";
  const LaneRange& r = (*all_)[static_cast<size_t>(ri)];
  const ShardRef ref = RefOf(r);
  std::string s = (phase == kOpening ? "opening shard " : "reading shard ") +
                  std::to_string(r.shard) + " (" + RedactUrl(ref.url) + ")";
  const int64_t sample = at_sample_.load(std::memory_order_relaxed);
  const uint64_t byte = at_byte_.load(std::memory_order_relaxed);
  if (phase == kReading && sample >= 0)
    s += " after sample " + std::to_string(sample) +
         (byte == kUnknownByte ? std::string(" (read by index)") : " at byte " + std::to_string(byte));
  else if (phase == kReading)
    s += " before its first sample";
  return s;
}

void LaneReader::Close() {
  FlushCount();
  direct_.reset();
  if (!reader_) return;
  const TarStats& st = reader_->stats();
  counters_->skipped_samples += st.skipped_samples;
  counters_->skipped_shards += st.skipped_shards;
  {
    MutexLock lock(&mu_);
    cached_ = nullptr;
  }
  reader_.reset();
}

Result<std::unique_ptr<DirectRange>> LaneReader::OpenDirect(const LaneRange& r) {
  const ShardRef ref = RefOf(r);
  if (config_->cache != nullptr) {
    // A complete entry only: a shard still to download streams through the
    // usual way (its bytes are read as they arrive). Its index is fetched
    // into the cache beside it (once: a small file), or, where the source
    // has none, not asked for again.
    const std::string index_url = IndexUrlFor(ref.url);
    MissingIndexes* missing = config_->missing_indexes.get();
    if (missing != nullptr && missing->Has(index_url))
      return Status::NotFound("no sample index " + RedactUrl(index_url));
    SHARDSTREAM_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> shard,
                                 config_->cache->OpenIfCached(ref));
    SHARDSTREAM_ASSIGN_OR_RETURN(RandomAccessFile::View view, ViewIfMapped(shard.get()));
    auto index = config_->cache->OpenRandomAccess(ShardRef(index_url));
    if (!index.ok()) {
      if (missing != nullptr && index.status().code() == StatusCode::kNotFound)
        missing->Add(index_url);
      return index.status();
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(auto range, DirectRange::Open(ref.url, std::move(shard),
                                                               std::move(*index),
                                                               config_->direct_field,
                                                               config_->direct_dtype, r.first,
                                                               r.end));
    range->SetView(view);
    ++counters_->cache_opens;
    ++counters_->cache_hits;
    return range;
  }
  if (!IsLocal(ref.url)) return Status::Config("not a local file");
  Source& source = config_->tar.source != nullptr ? *config_->tar.source : *DefaultSource();
  SHARDSTREAM_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> index,
                               source.OpenRandomAccess(IndexUrlFor(ref.url)));
  KeptMappings* kept = config_->direct_mapped ? config_->kept_mappings.get() : nullptr;
  SHARDSTREAM_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> shard,
                               kept != nullptr ? kept->Open(source, ref.url)
                                               : source.OpenRandomAccess(ref.url));
  SHARDSTREAM_ASSIGN_OR_RETURN(RandomAccessFile::View view, ViewIfMapped(shard.get()));
  auto range = DirectRange::Open(ref.url, std::move(shard), std::move(index),
                                 config_->direct_field, config_->direct_dtype, r.first, r.end);
  if (!range.ok()) {
    if (kept != nullptr) kept->Forget(ref.url);  // read the usual way: nothing to keep it for
    return range.status();
  }
  (*range)->SetView(view);
  return std::move(*range);
}

Result<RandomAccessFile::View> LaneReader::ViewIfMapped(RandomAccessFile* shard) {
  if (!config_->direct_mapped) return RandomAccessFile::View{};
  return shard->MapView();  // not mappable: the range is read the usual way
}

Status LaneReader::OpenRange(const LaneRange& r, LaneItem* scratch) {
  const ShardRef ref = RefOf(r);
  read_ = 0;
  if (config_->direct && !r.own_reader()) {
    auto direct = OpenDirect(r);
    if (direct.ok()) {
      direct_ = std::move(*direct);
      return Status::OK();
    }
    Log().debug("reading {} through read buffers, not directly: {}", RedactUrl(ref.url),
                direct.status().ToString());
  }
  return OpenReader(r, r.first, scratch);
}

void LaneReader::PrefetchNext() {
  if (next_range_ + 1 >= mine_.size()) return;
  const LaneRange& next = (*all_)[mine_[next_range_ + 1]];
  if (next.first != 0) return;  // opened at an offset: nothing to continue
  Source* source = config_->tar.source ? config_->tar.source : DefaultSource().get();
  source->Prefetch(RefOf(next).url);
}

Status LaneReader::OpenReader(const LaneRange& r, int64_t at, LaneItem* scratch) {
  const ShardRef ref = RefOf(r);
  int64_t skip = at;
  MdsLayout mds;
  if (r.format == EntryFormat::kMds) {
    SHARDSTREAM_ASSIGN_OR_RETURN(mds, ParseMdsLayout(r.mds_layout, RedactUrl(ref.url)));
  }
  // MDS and rows readers start at `at` themselves (MDS by its offsets table,
  // rows passing over lines unparsed).
  if (r.own_reader()) skip = 0;
  if (r.format == EntryFormat::kParquet) {
    // Parquet is read by its own reader (pyarrow's, from Python) through
    // the source: the footer first, then the row groups from `at`'s on.
    if (config_->parquet == nullptr || !*config_->parquet)
      return Status::Config("Parquet file " + RedactUrl(ref.url) +
                            ": Parquet is read from the Python package (pyarrow)");
    SHARDSTREAM_ASSIGN_OR_RETURN(reader_, config_->parquet->open(ref.url, config_->tar.source, at, config_->tar.policy));
    return Status::OK();
  }
  // Samples from a stream of the shard's bytes, whatever its format.
  auto open = [&](std::unique_ptr<InputStream> stream) -> Result<std::unique_ptr<TarReader>> {
    if (r.format == EntryFormat::kMds) return OpenMdsReader(std::move(stream), mds, config_->tar, at);
    if (r.format == EntryFormat::kJsonl) return OpenJsonlReader(std::move(stream), config_->tar, at);
    return TarReader::Open(std::move(stream), config_->tar);
  };
  auto open_from_start = [&]() -> Status {
    // From the start: the object's size is checked against the manifest's
    // (free: the stream knows it), so a stale manifest is an error here
    // rather than a short or long read later.
    Source* source = config_->tar.source ? config_->tar.source : DefaultSource().get();
    StreamOptions so;
    if (ref.size >= 0) so.expected_size = static_cast<uint64_t>(ref.size);
    SHARDSTREAM_ASSIGN_OR_RETURN(auto stream, source->OpenInputStreamWith(ref.url, so));
    if (so.expected_size && stream->size() && *stream->size() != *so.expected_size)
      return Status(StatusCode::kChecksum,
                    "shard " + RedactUrl(ref.url) + " has " + std::to_string(*stream->size()) +
                        " bytes, its manifest entry says " + std::to_string(ref.size) +
                        StaleSizeAdvice(r.format),
                    RedactUrl(ref.url), 0);
    SHARDSTREAM_ASSIGN_OR_RETURN(reader_, open(std::move(stream)));
    return Status::OK();
  };
  // Without a cache, the shard of this lane's next range starts arriving
  // now: the lane moving on does not wait at the boundary. (The other lanes
  // see to theirs; with a cache, the cache's prefetch does this.)
  if (config_->cache == nullptr) PrefetchNext();
  bool opened_at = false;
  if (config_->cache == nullptr && at > 0 && r.format == EntryFormat::kJsonl) {
    SHARDSTREAM_ASSIGN_OR_RETURN(opened_at, OpenRowsAt(r, at));
  }
  if (config_->cache != nullptr) {
    // Tell the cache what comes after this range, so it downloads ahead
    // (ranges are opened roughly in plan order across the lanes).
    std::vector<ShardRef> upcoming;
    const size_t here = static_cast<size_t>(&r - all_->data());
    for (size_t j = here + 1; j < all_->size() && upcoming.size() < 16; ++j)
      upcoming.push_back(RefOf((*all_)[j]));
    config_->cache->Prefetch(upcoming);
    auto stream = config_->cache->Open(ref);
    if (!stream.ok()) return stream.status();
    ++counters_->cache_opens;
    if ((*stream)->hit()) ++counters_->cache_hits;
    std::shared_ptr<CachedShard> shared(std::move(*stream));
    {
      MutexLock lock(&mu_);
      cached_ = shared;
      if (cancelled_) shared->Cancel();  // Cancel() ran before the lane knew the stream
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(reader_, open(std::make_unique<SharedStream>(std::move(shared))));
  } else if (opened_at) {
    // Opened at the row's byte, by the file's row index.
  } else {
    bool from_start = true;
    if (at > 0 && !r.own_reader()) {
      // The index is checked against the shard (its size now) and against
      // the manifest: an index that agrees with a shard the manifest does
      // not describe would place the samples of another file.
      Source* source = config_->tar.source ? config_->tar.source : DefaultSource().get();
      auto index = ReadSampleIndex(ref.url, source, config_->tar.index_dir);
      Status why = index.status();
      if (why.ok() && (ref.size < 0 || index->shard_size == static_cast<uint64_t>(ref.size))) {
        auto opened = TarReader::OpenAt(ref.url, at, &*index, config_->tar);
        if (opened.ok()) {
          reader_ = std::move(*opened);
          skip = 0;
          from_start = false;
        }
        why = opened.status();
      }
      if (!why.ok() && why.code() != StatusCode::kNotFound &&
          why.code() != StatusCode::kCorrupt)
        return why;
      // No (or a stale) index: read from the start and skip, where the
      // size is checked against the manifest's and a mismatch named.
    }
    if (from_start) SHARDSTREAM_RETURN_IF_ERROR(open_from_start());
  }
  for (int64_t i = 0; i < skip; ++i) {
    SHARDSTREAM_ASSIGN_OR_RETURN(bool more, reader_->Next(&scratch->sample));
    if (!more) break;
  }
  return Status::OK();
}

Result<bool> LaneReader::OpenRowsAt(const LaneRange& r, int64_t at) {
  const ShardRef ref = RefOf(r);
  // Only an uncompressed file can be entered at a byte; a compressed one
  // (or one without an index, or a stale one) is read from its start. (The
  // index is read whole, as TarReader::OpenAt reads a tar shard's.)
  Source& source = config_->tar.source != nullptr ? *config_->tar.source : *DefaultSource();
  auto index = ReadSampleIndex(ref.url, &source, config_->tar.index_dir);
  if (!index.ok() && index.status().code() != StatusCode::kNotFound &&
      index.status().code() != StatusCode::kCorrupt)
    return index.status();
  if (!index.ok() || index->compressed || static_cast<size_t>(at) >= index->samples.size())
    return false;
  StreamOptions so;
  so.offset = index->samples[static_cast<size_t>(at)].offset;
  if (ref.size >= 0) so.expected_size = static_cast<uint64_t>(ref.size);
  SHARDSTREAM_ASSIGN_OR_RETURN(auto stream, source.OpenInputStreamWith(ref.url, so));
  SHARDSTREAM_ASSIGN_OR_RETURN(reader_, OpenJsonlReaderAt(std::move(stream), config_->tar, at, so.offset));
  return true;
}

bool LaneReader::Produce(LaneItem* item) {
  item->status = Status::OK();
  item->bytes = 0;
  const LaneRange& r = (*all_)[mine_[next_range_]];
  // Made only where a message or an open needs it: Produce runs per item.
  auto ref = [&] { return RefOf(r); };
  auto finish_range = [&] {
    Close();
    item->kind = LaneItem::kEnd;
    const bool last = ++next_range_ == mine_.size();
    phase_.store(last ? kDone : kBetween, std::memory_order_relaxed);
    return last;
  };
  auto fail = [&](Status s) {
    Close();
    item->kind = LaneItem::kError;
    item->status = std::move(s);
    return true;
  };
  if (!reader_ && !direct_) {
    at_range_.store(static_cast<int64_t>(mine_[next_range_]), std::memory_order_relaxed);
    at_sample_.store(-1, std::memory_order_relaxed);
    phase_.store(kOpening, std::memory_order_relaxed);
    Status s = OpenRange(r, item);
    phase_.store(kReading, std::memory_order_relaxed);
    if (!s.ok()) {
      if (config_->tar.policy == ErrorPolicy::kSkipShard ||
          config_->tar.policy == ErrorPolicy::kSkipSample) {
        if (s.code() == StatusCode::kCorrupt || s.code() == StatusCode::kChecksum) {
          ++counters_->skipped_shards;
          return finish_range();
        }
      }
      return fail(s.WithContext("opening shard", RedactUrl(ref().url)));
    }
  }
  if (r.end >= 0 && read_ == r.end - r.first) return finish_range();
  if (direct_) {
    // A chunk of the range's records in one item: the consumer takes its
    // documents straight from them (no ring slot, no item per document).
    // The scheduler holds at most ShardLanes::kDirectAhead chunks the
    // consumer has not finished: the one it reads and the next. Each holds
    // at most a quarter of the ring's bytes.
    DirectRange& d = *direct_;
    if (d.next() == d.end()) return finish_range();
    auto chunk = d.Next(config_->ring_bytes / 4, config_->direct_recycler);
    if (chunk.ok() && *chunk != nullptr) {
      read_ = d.next() - r.first;
      at_sample_.store(d.next() - 1, std::memory_order_relaxed);
      at_byte_.store(kUnknownByte, std::memory_order_relaxed);
      item->kind = LaneItem::kDirect;
      item->shard = r.shard;
      item->index_offset = r.index_offset;
      item->direct.shard = std::move(*chunk);
      item->direct.sample = item->direct.shard->first;
      item->bytes = item->direct.shard->memory();
      item->source = sources_[next_range_];
      return false;
    }
    if (chunk.ok()) return finish_range();
    // The rest of the range the usual way, from the sample that ended it.
    const int64_t at = d.next();
    Log().debug("reading {} through read buffers from sample {} on: {}", RedactUrl(ref().url), at,
                chunk.status().ToString());
    direct_.reset();
    Status s = OpenReader(r, at, item);
    if (!s.ok()) return fail(s.WithContext("opening shard", RedactUrl(ref().url)));
    read_ = at - r.first;
    if (r.end >= 0 && read_ == r.end - r.first) return finish_range();
  }
  item->direct.shard.reset();
  auto more = reader_->Next(&item->sample);
  if (!more.ok()) return fail(more.status());
  // An MDS or rows reader passes over a skipped sample (skip_sample) and would go on
  // into the next range: the range ends by sample number.
  if (*more && r.own_reader() && r.end >= 0 && item->sample.index >= r.end) return finish_range();
  if (!*more) {
    if (r.end >= 0 && config_->tar.policy == ErrorPolicy::kRaise) {
      return fail(Status(StatusCode::kCorrupt,
                         "shard " + RedactUrl(ref().url) + " ended after " +
                             std::to_string(r.first + read_) + " samples; the manifest says " +
                             std::to_string(r.end),
                         RedactUrl(ref().url)));
    }
    return finish_range();
  }
  ++read_;
  at_sample_.store(item->sample.index, std::memory_order_relaxed);
  at_byte_.store(item->sample.offset, std::memory_order_relaxed);
  item->kind = LaneItem::kSample;
  item->shard = r.shard;
  item->index_offset = r.index_offset;
  item->bytes = item->sample.bytes();
  unpublished_bytes_ += item->bytes;  // read from the source
  if (config_->prepare) config_->prepare(item);  // may add what it made (decoded images)
  return false;
}

}  // namespace shardstream::internal
