#include "pipeline/loader_run.h"

#include <chrono>

#include "common/log.h"
#include "format/decode_error.h"
#include "pipeline/wait_histogram.h"
#include "plan/entry_format.h"
#include "shardstream/image.h"
#include "shardstream/mds.h"
#include "shardstream/rows.h"
#include "shardstream/url.h"

namespace shardstream::internal {
namespace {

// Stream ids keep the interleave and shuffle draws independent of the
// plan's own draws and of each other.
constexpr uint64_t kInterleaveStream = 0x696e746c;  // "intl"
constexpr uint64_t kShuffleStream = 0x73687566;     // "shuf"

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t s = a * 0x9e3779b97f4a7c15ULL ^ b;
  return SplitMix64(&s);
}

// The token field of a sample item, decoded into the item (by the worker that read it).
void DecodeTokens(const FieldSpec& spec, const TokenOptions& tokens, LaneItem* item) {
  Sample& s = item->sample;
  const Field* f = s.FindAny(spec.name);
  if (f == nullptr) {
    item->decode_status = Status(StatusCode::kCorrupt,
                                 "sample '" + s.key + "' in " + s.url + " at offset " +
                                     std::to_string(s.offset) + " has no token field '" +
                                     spec.name + "'",
                                 s.url, static_cast<int64_t>(s.offset));
    return;
  }
  item->decoded_field = static_cast<size_t>(f - s.fields.data());
  if (tokens.tokenize) {
    // Text in, token ids out: the field becomes the ids (int32, raw).
    Field& text = s.fields[item->decoded_field];
    auto ids = std::make_shared<std::vector<int32_t>>();
    Status st = tokens.tokenize(text.data, ids.get());
    if (!st.ok()) {
      // A damaged text (kCorrupt) is skipped as any damaged sample; a
      // tokenizer that fails is no defect of the data (kConfig, raised).
      const StatusCode code = st.code() == StatusCode::kCancelled || st.code() == StatusCode::kCorrupt
                                  ? st.code()
                                  : StatusCode::kConfig;
      item->decode_status = Status(code,
                                   "tokenizing field '" + text.name + "' of sample '" + s.key +
                                       "' in " + s.url + ": " + st.message(),
                                   s.url, static_cast<int64_t>(s.offset));
      return;
    }
    text.data = std::string_view(reinterpret_cast<const char*>(ids->data()), ids->size() * sizeof(int32_t));
    text.owner = std::move(ids);
    f = &text;
  }
  auto decoded = DecodeField(f->data, spec, FieldContext{s.key, spec.name, s.url, f->offset});
  if (decoded.ok()) {
    item->decoded = *decoded;
    item->decode_status = Status::OK();
  } else {
    item->decode_status = decoded.status();
  }
}

// The fixed-size image fields of a sample item, decoded (cropped, resized)
// by the worker that read it, so decoding runs on every reader thread and
// the assembler only copies pixels. Geometry depends on the sample key, not
// on the order, so decoding before the shuffle changes nothing.
void DecodeImages(const std::vector<FieldSpec>& fields, const std::vector<size_t>& which,
                  uint64_t seed, int64_t epoch, LaneItem* item) {
  const Sample& s = item->sample;
  item->pixels.resize(which.size());
  item->images.resize(which.size());
  item->image_present.assign(which.size(), false);
  item->decode_status = Status::OK();
  for (size_t k = 0; k < which.size(); ++k) {
    const FieldSpec& spec = fields[which[k]];
    const Field* f = s.FindAny(spec.name);
    if (f == nullptr) continue;  // the batcher reports it, or fills it (optional)
    auto img = DecodeImage(f->data, spec.image, ImageDraw{seed, epoch, s.key}, &item->pixels[k],
                           FieldContext{s.key, spec.name, s.url, f->offset});
    if (!img.ok()) {
      item->decode_status = img.status();
      return;
    }
    item->images[k] = *img;
    item->image_present[k] = true;
    item->bytes += item->pixels[k].size();
  }
}

}  // namespace

LoaderRun::LoaderRun(RunConfig config, RunCounters* counters)
    : config_(std::move(config)),
      opt_(*config_.options),
      counters_(counters),
      queue_(static_cast<size_t>(std::max<int64_t>(opt_.prefetch, 1))) {
  std::vector<LaneRange> ranges;
  ranges.reserve(config_.plan.ranges.size());
  for (const ShardRange& r : config_.plan.ranges) {
    LaneRange lr;
    const int64_t off = config_.offsets ? (*config_.offsets)[static_cast<size_t>(r.shard)] : 0;
    lr.shard = r.shard;
    lr.first = r.first + off;
    lr.end = r.end >= 0 ? r.end + off : r.end;
    lr.index_offset = off;
    const size_t at = static_cast<size_t>(r.shard);
    const std::map<std::string, std::string>* extra =
        config_.table != nullptr ? config_.table->extra(at) : &(*config_.shards)[at].extra;
    if (extra != nullptr) {
      lr.format = FormatOf(*extra);
      if (lr.format == EntryFormat::kMds) lr.mds_layout = extra->at(kMdsLayoutKey);
    }
    ranges.push_back(std::move(lr));
  }
  LaneConfig lc;
  lc.ref_of = [table = config_.table, shards = config_.shards](int64_t shard) {
    const size_t at = static_cast<size_t>(shard);
    return ShardRef::FromEntry(table != nullptr ? (*table)[at] : (*shards)[at]);
  };
  lc.tar.policy = opt_.error_policy;
  lc.tar.engine = opt_.engine;
  lc.tar.chunk_size = opt_.read_chunk;
  lc.tar.build_index = false;  // the plan already knows where samples are
  lc.tar.source = opt_.source;
  lc.tar.index_dir = opt_.index_dir;
  lc.parquet = &opt_.parquet;
  lc.cache = opt_.cache.get();
  lc.ring = static_cast<size_t>(std::max<int64_t>(opt_.shard_queue, 1));
  lc.ring_bytes = RingBytes(opt_);
  lc.lanes = std::max(opt_.open_shards, opt_.reader_threads);
  lc.threads = opt_.reader_threads;
  lc.cpus = opt_.reader_cpus;
  lc.nice = opt_.reader_nice;
  if (!opt_.tokens.field.empty()) {
    FieldSpec spec;
    spec.name = opt_.tokens.field;
    const FieldDecode how =
        config_.token_decode != FieldDecode::kAuto ? config_.token_decode : DecodeForName(spec.name);
    if (opt_.tokens.tokenize) {
      spec.decode = FieldDecode::kRaw;  // the tokenizer's ids
      spec.dtype = DType::kInt32;
      spec.shape = {-1};
    } else if (how != FieldDecode::kNpy) {
      spec.decode = FieldDecode::kRaw;
      spec.dtype = opt_.tokens.input_dtype;
      spec.shape = {-1};
    } else {
      spec.decode = FieldDecode::kNpy;  // decided once, not per sample
    }
    // Decoding the token field (parsing its .npy header) costs as much as
    // placing the tokens: the readers do it, ahead of the assembler.
    // Process() relies on it: every sample item reaches it decoded.
    lc.prepare = [spec, this](LaneItem* item) { DecodeTokens(spec, opt_.tokens, item); };
    // With a sample shuffle a batch's documents lie apart in their shards:
    // a read each costs more than the second copy it saves (1024-token
    // documents, shuffle_buffer 1000: 0.19 of the plain read against 0.24),
    // so they are copied from the shard mapped in memory, or, where it
    // cannot be mapped, read the usual way. (The lanes also leave direct
    // reads off for remote shards and cache entries still downloading.)
    lc.direct = opt_.direct_reads && spec.decode == FieldDecode::kNpy &&
                opt_.error_policy == ErrorPolicy::kRaise;
    lc.direct_mapped = opt_.shuffle_buffer > 1;
    lc.direct_field = spec.name;
    lc.direct_dtype = opt_.tokens.dtype;
    lc.direct_recycler = config_.recycler;
    lc.missing_indexes = config_.missing_indexes;
    lc.kept_mappings = config_.kept_mappings;
  } else {
    for (size_t i = 0; i < opt_.fields.size(); ++i) {
      const FieldSpec& f = opt_.fields[i];
      if (f.decode == FieldDecode::kImage && f.image.height > 0) {
        image_slot_.resize(opt_.fields.size(), -1);
        image_slot_[i] = static_cast<int>(image_fields_.size());
        image_fields_.push_back(i);
      }
    }
    if (!image_fields_.empty()) {
      lc.prepare = [this](LaneItem* item) {
        DecodeImages(opt_.fields, image_fields_, opt_.seed, config_.epoch, item);
      };
    }
  }
  const bool direct = lc.direct;
  lc.consume = [this] { return Assemble(); };
  // A batch's doc_ids and positions are written by an idle worker while
  // the assembler packs the next batch (the assembler is one worker at a
  // time; these stores are twice the tokens' bytes).
  lc.side = [this] { return packer_ != nullptr && packer_->RunPending(); };
  lanes_ = std::make_unique<ShardLanes>(std::move(ranges), lc, counters_);

  PoolConfig pool;
  // Queue depth + the batch being assembled + the one the caller holds.
  pool.slots = static_cast<size_t>(std::max<int64_t>(opt_.prefetch, 1)) + 2;
  pool.allocator = opt_.allocator;
  pool.arena_bytes = opt_.variable_bytes;
  pool.wait_ns = &counters_->caller_wait_ns;
  pool.keep = config_.pool;
  auto emit = [this](Batch&& b) { return Emit(std::move(b)); };
  if (!opt_.tokens.field.empty()) {
    packer_ = std::make_unique<TokenPacker>(opt_.tokens, opt_.batch_size, pool, emit);
    packer_->set_notify([this] { lanes_->PostSide(); });
    packer_->set_direct(direct);
    packer_->slots().set_epoch(config_.epoch, config_.urls);
  } else {
    batcher_ = std::make_unique<SampleBatcher>(opt_.fields, opt_.batch_size, pool, emit);
    batcher_->slots().set_epoch(config_.epoch, config_.urls);
    batcher_->set_draw(opt_.seed, config_.epoch);
    refs_.resize(opt_.fields.size());
  }
}

LoaderRun::~LoaderRun() { Stop(); }

bool LoaderRun::StarvedOfSlots() const {
  const SlotSource& src = batcher_ ? batcher_->slots() : packer_->slots();
  BufferPool* pool = src.pool();
  return pool != nullptr && pool->stats().waiting > 0 && queue_.size() == 0;
}

void LoaderRun::Start() { lanes_->Start(); }

void LoaderRun::Stop() {
  Cancel();
  lanes_->Stop();
}

void LoaderRun::Cancel() {
  stop_.store(true);
  queue_.Cancel();
  if (batcher_) batcher_->slots().Cancel();
  if (packer_) packer_->slots().Cancel();
  lanes_->Cancel();
}

Status LoaderRun::Emit(Batch&& b) {
  SlotSource& src = batcher_ ? batcher_->slots() : packer_->slots();
  if (src.pool() != nullptr) {
    counters_->slot_bytes = src.pool()->slot_bytes();
    counters_->memory_kind = static_cast<int>(src.pool()->kind());
    counters_->heap_spills = src.writer().overflows();
    counters_->copy_waits = src.pool()->stats().fence_waits;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status s = queue_.Push(std::move(b));  // blocks while the queue is full
  if (s.ok()) emitted_.fetch_add(1);
  AddWaitSince(&counters_->caller_wait_ns, t0);
  counters_->queue_depth = static_cast<int64_t>(queue_.size());
  return s;
}

Status LoaderRun::PadToTarget() {
  const int64_t short_by = config_.batch_target - emitted_.load();
  if (config_.batch_target < 0 || short_by <= 0) return Status::OK();
  padded_ = short_by;
  Log().warn("loader: consumer {}'s epoch {} ran out {} batch(es) short of the count every consumer "
             "returns (data skipped under error_policy; stats: skipped_shards, skipped_samples): "
             "{} batch(es) of padding ({}, no samples) keep the ranks in step",
             config_.plan.consumer, config_.epoch, short_by, short_by,
             packer_ ? "pad_token rows" : "rows of zeros");
  if (batcher_) return batcher_->Pad(short_by);
  SHARDSTREAM_RETURN_IF_ERROR(packer_->Pad(short_by));
  return packer_->FinishPending();
}

int LoaderRun::Assemble() {
  int want = -1;
  Status s = Advance(&want);
  for (DirectCursor& c : direct_) FlushDirect(&c);
  if (s.ok() && want >= 0) return want;
  if (stop_.load()) return -1;
  if (packer_ != nullptr) {
    // The batch handed over goes before the end or the error.
    Status p = packer_->FinishPending();
    if (s.ok()) s = p;
  }
  if (s.ok() && (packer_ != nullptr || batcher_ != nullptr)) s = PadToTarget();
  if (stop_.load()) return -1;
  if (s.ok()) {
    (void)queue_.PushEnd();
  } else if (s.code() != StatusCode::kCancelled || !stop_.load()) {
    (void)queue_.PushError(std::move(s));
  }
  return -1;
}

// The sample's bytes are in the batch now: its views go, so the read chunk
// (or the sample's own buffer) is back in the reader's pool, or freed, once
// its last sample is placed. The ring slot would otherwise keep them until a
// worker fills it again, and rings bounded by bytes (larger samples) leave
// most slots unfilled for long: memory the estimate does not count, and
// chunks kept out of the pool while they are still in cache.
void LoaderRun::ReleaseChunks(LaneItem* item) {
  for (Field& f : item->sample.fields) {
    f.data = {};
    f.owner.reset();
  }
  item->decoded.data = {};
}

Status LoaderRun::CheckFirstSampleFields(const Sample& s) const {
  for (const FieldSpec& spec : opt_.fields) {
    if (spec.optional || s.FindAny(spec.name) != nullptr) continue;
    std::string present;
    for (const Field& f : s.fields) present += (present.empty() ? "'" : ", '") + f.name + "'";
    return Status(StatusCode::kConfig, "loader: field '" + spec.name + "' is not in the first sample ('" +
                              s.key + "' in " + s.url + " at offset " + std::to_string(s.offset) +
                              "); its fields are " +
                              (present.empty() ? std::string("none") : present) +
                              ". Name a field as it is in the shards (extension included), or "
                              "mark it optional" + internal::ImageAlternativesHint(spec.name),
                          s.url, s.offset);
  }
  return Status::OK();
}

Status LoaderRun::CheckFirstSampleImages(const Sample& s) const {
  for (const FieldSpec& spec : opt_.fields) {
    if (spec.decode != FieldDecode::kImage) continue;
    const Field* f = s.FindAny(spec.name);
    if (f == nullptr || f->data.empty() || SniffImageFormat(f->data) != ImageFormat::kUnknown) continue;
    return Status(StatusCode::kConfig,
                  "loader: field '" + spec.name + "' of the first sample ('" + s.key + "' in " +
                      s.url + " at offset " + std::to_string(f->offset) +
                      ") is not a JPEG, PNG or WebP image, but the field is decoded as one; "
                      "name the image field (e.g. \"jpg\") or decode this one otherwise",
                  s.url, static_cast<int64_t>(f->offset));
  }
  return Status::OK();
}

Status LoaderRun::Process(LaneItem* item) {
  const Sample& s = item->sample;
  RowInput row;
  const int64_t index = s.index - item->index_offset;  // in the epoch's shard
  row.id = SampleId{static_cast<int32_t>(item->shard), index};
  row.key = s.key;
  row.url = s.url;
  row.offset = s.offset;
  Status st;
  bool missing_field = false;
  if (packer_) {
    if (item->decode_status.ok()) {
      int64_t skip = 0;
      if (!config_.skip_tokens.empty()) {
        auto it = config_.skip_tokens.find({item->shard, index});
        if (it != config_.skip_tokens.end()) skip = it->second;
      }
      st = packer_->Add(row, item->decoded, skip, nullptr);
    } else {
      st = item->decode_status;
    }
  } else {
    for (size_t i = 0; i < opt_.fields.size(); ++i) {
      const Field* f = s.FindAny(opt_.fields[i].name);
      refs_[i] = f ? FieldRef{f->data, f->offset, true} : FieldRef{};
      if (f != nullptr && !image_slot_.empty() && image_slot_[i] >= 0) {
        const size_t k = static_cast<size_t>(image_slot_[i]);
        if (k < item->image_present.size() && item->image_present[k]) refs_[i].decoded = &item->images[k];
      }
    }
    row.fields = refs_.data();
    if (!first_checked_ && opt_.error_policy == ErrorPolicy::kRaise) {
      // A required field the very first sample lacks is most likely a name
      // misspelt, not damaged data: say so, with the names there are. (Under
      // a skip policy such a sample is skipped, as the caller asked.)
      first_checked_ = true;
      st = CheckFirstSampleFields(s);
    }
    if (st.ok() && !image_checked_) {
      // An image field whose samples hold no image at all is a field named
      // wrongly, not damaged images: a config error, at the first sample
      // under kRaise, and under a skip policy when the run's first
      // kNonImagesForConfig samples all hold none (one stray GIF is skipped,
      // a misnamed field does not skip the whole epoch).
      Status c = CheckFirstSampleImages(s);
      if (c.ok()) {
        image_checked_ = true;
      } else if (opt_.error_policy == ErrorPolicy::kRaise || ++non_images_ == kNonImagesForConfig) {
        image_checked_ = true;
        st = c;
      }
    }
    if (st.ok() && !image_fields_.empty()) st = item->decode_status;  // an image that would not decode
    if (st.ok()) {
      st = batcher_->Add(row);
      // A sample without a field that is not optional (kConfig: the data is
      // not corrupt) is skipped under the skip policies too.
      missing_field = st.code() == StatusCode::kConfig;
    }
  }
  ReleaseChunks(item);
  // A bad sample under a skip policy is dropped and counted; the batch in
  // progress is untouched (decoding and checks come before any write).
  if (!st.ok() && (st.code() == StatusCode::kCorrupt || missing_field) &&
      opt_.error_policy != ErrorPolicy::kRaise) {
    if (counters_->decode_skips.fetch_add(1) < 10) Log().warn("skipping sample: {}", st.ToString());
    return Status::OK();
  }
  return st;
}

Status LoaderRun::TakeDirect(DirectCursor* c) {
  Status st = PlaceDirect(c);
  ++c->doc.sample;
  if (--c->left == 0) {
    FlushDirect(c);
    c->doc.shard.reset();
    lanes_->DirectDone(c->lane);  // the lane may make its next chunk
  }
  return st;
}

Status LoaderRun::ShuffleDirect(DirectCursor* c) {
  // One document as an item of its own: the shuffle buffer mixes it with
  // the others exactly as it would the same sample read the usual way.
  // The lane walks its shard in order; the buffer lets a document out
  // within about a buffer's worth of the lane's documents. Pages of the
  // mapping well behind the lane leave the resident set. A rare straggler
  // faults its page back in from the page cache (the kernel maps a few
  // neighbours along), so the last few steps are released again each time:
  // a shard's mapping holds about 2 x kResidentStep of RSS plus a little,
  // however large the shard. (Not a shard kept mapped across epochs
  // (KeptMappings): its ReleaseView does nothing, and it holds what was read.)
  constexpr uint64_t kResidentStep = uint64_t{4} << 20;
  const DirectShard& shard = *c->doc.shard;
  if (shard.view.data != nullptr) {
    const uint64_t at = shard.doc(c->doc.sample).offset;
    if (at < c->released) c->released = 0;  // another range, or another shard
    if (at >= c->released + 2 * kResidentStep) {
      const uint64_t from = c->released - std::min(c->released, 4 * kResidentStep);
      shard.file->ReleaseView(from, at - kResidentStep - from);
      c->released = at - kResidentStep;
    }
  }
  Shuffled& d = in_;
  d.shard = c->shard;
  d.index_offset = c->offset;
  d.source = c->source;
  d.direct.sample = c->doc.sample;
  ++c->doc.sample;
  if (--c->left == 0) {
    d.direct.shard = std::move(c->doc.shard);
    lanes_->DirectDone(c->lane);  // its documents wait in the buffer
  } else {
    d.direct.shard = c->doc.shard;
  }
  if (buffer_->Put(&d, &out_)) return LetOut(&out_);
  return Status::OK();
}

Status LoaderRun::ShuffleItem(LaneItem* item) {
  // Slots run out only with more than capacity + 1 items held, which the
  // buffer never holds (one more: the item let out, while processed).
  const uint32_t slot = free_held_.back();
  free_held_.pop_back();
  using std::swap;
  swap(held_[slot], *item);  // the ring slot gets the held storage back
  in_.direct = DirectDoc{};
  in_.held = slot;
  if (buffer_->Put(&in_, &out_)) return LetOut(&out_);
  return Status::OK();
}

Status LoaderRun::LetOut(Shuffled* e) {
  if (e->direct.valid()) return TakeShuffled(e);
  const uint32_t slot = e->held;
  Status st = Process(&held_[slot]);
  free_held_.push_back(slot);
  return st;
}

Status LoaderRun::TakeShuffled(Shuffled* e) {
  DirectCursor& c = shuffled_;
  if (c.taken > 0 && c.source != e->source) FlushDirect(&c);
  c.source = e->source;
  c.shard = e->shard;
  c.offset = e->index_offset;
  c.doc.sample = e->direct.sample;
  // Moved: a reference count taken and given back per document is a cache
  // line the workers pass around.
  if (c.doc.shard != e->direct.shard) c.doc.shard = std::move(e->direct.shard);
  return PlaceDirect(&c);
}

Status LoaderRun::PlaceDirect(DirectCursor* c) {
  const DirectShard& d = *c->doc.shard;
  const int64_t i = c->doc.sample;
  const DirectShard::Doc& doc = d.doc(i);
  RowInput row;
  row.id = SampleId{static_cast<int32_t>(c->shard), i - c->offset};
  row.key = d.key(i);
  row.url = d.url;
  row.offset = doc.offset;
  int64_t skip = 0;
  if (!config_.skip_tokens.empty()) {
    auto it = config_.skip_tokens.find({c->shard, i - c->offset});
    if (it != config_.skip_tokens.end()) skip = it->second;
  }
  c->tokens.shape[0] = static_cast<int64_t>(doc.count);
  Status st = packer_->Add(row, c->tokens, skip, &c->doc);
  // Counted as taken (they are read with their batch), a few at a time:
  // an atomic add per document is a line bouncing between the workers.
  c->bytes += doc.length;
  if (++c->taken == 64) FlushDirect(c);
  return st;
}

void LoaderRun::FlushDirect(DirectCursor* c) {
  if (c->taken == 0) return;
  counters_->AddBytes(c->source, c->bytes);
  counters_->direct_samples += c->taken;
  c->bytes = 0;
  c->taken = 0;
}

Status LoaderRun::Advance(int* want) {
  const int nl = lanes_->lanes();
  if (weight_.empty()) {
    known_ = config_.plan.num_samples >= 0;
    // Lane weights: samples left (known counts) or 1 while a lane has ranges.
    weight_.assign(static_cast<size_t>(nl), 0);
    ends_seen_.assign(static_cast<size_t>(nl), 0);
    for (int l = 0; l < nl; ++l) {
      for (size_t ri : lanes_->lane_ranges(l)) {
        const LaneRange& r = lanes_->range(ri);
        weight_[static_cast<size_t>(l)] += known_ ? r.end - r.first : 1;
      }
      if (!known_) weight_[static_cast<size_t>(l)] = lanes_->lane_ranges(l).empty() ? 0 : 1;
    }
    direct_.resize(static_cast<size_t>(nl));
    for (int l = 0; l <= nl; ++l) {  // each lane's, and the shuffled documents'
      DirectCursor& c = l < nl ? direct_[static_cast<size_t>(l)] : shuffled_;
      c.lane = l;
      c.tokens.is_tensor = true;
      c.tokens.ndim = 1;
      c.tokens.dtype = opt_.tokens.dtype;
    }
    const uint64_t consumer = static_cast<uint64_t>(config_.plan.consumer);
    const uint64_t seed = Mix(Mix(opt_.seed, static_cast<uint64_t>(config_.epoch)), consumer);
    pick_.Seed(seed, kInterleaveStream);
    shuffle_ = opt_.shuffle_buffer > 1;
    const size_t capacity = shuffle_ ? static_cast<size_t>(opt_.shuffle_buffer) : 1;
    buffer_ = std::make_unique<ShuffleBuffer<Shuffled>>(
        capacity,
        static_cast<size_t>(opt_.shuffle_initial < 0 ? opt_.shuffle_buffer : opt_.shuffle_initial),
        seed, kShuffleStream);
    if (shuffle_) {
      held_.resize(capacity + 1);
      free_held_.resize(capacity + 1);
      for (size_t i = 0; i <= capacity; ++i) free_held_[i] = static_cast<uint32_t>(capacity - i);
    }
  }
  const bool in_order = opt_.mode == LoaderMode::kEval;
  while (!stop_.load() && !draining_) {
    if (picked_ < 0 && in_order) {
      // Manifest order: the lane of the next range (range j is on lane
      // j % lanes, and each lane yields its ranges in order).
      if (next_range_ >= lanes_->num_ranges()) {
        draining_ = true;
        break;
      }
      picked_ = static_cast<int>(next_range_ % static_cast<size_t>(nl));
    }
    if (picked_ < 0) {
      int64_t total = 0;
      for (int64_t w : weight_) total += w;
      if (total == 0) {
        draining_ = true;
        break;
      }
      uint64_t r = pick_.Below(static_cast<uint64_t>(total));
      int l = 0;
      while (r >= static_cast<uint64_t>(weight_[static_cast<size_t>(l)])) {
        r -= static_cast<uint64_t>(weight_[static_cast<size_t>(l)]);
        ++l;
      }
      picked_ = l;
    }
    // Take from the drawn lane until it yields a sample (range ends pass by).
    const size_t lu = static_cast<size_t>(picked_);
    DirectCursor& cur = direct_[lu];
    if (cur.left > 0) {  // a direct range in progress: its next document
      if (known_) --weight_[lu];
      if (!in_order) picked_ = -1;
      SHARDSTREAM_RETURN_IF_ERROR(shuffle_ ? ShuffleDirect(&cur) : TakeDirect(&cur));
      continue;
    }
    LaneItem* item = lanes_->TryPop(picked_);
    if (item == nullptr) {
      *want = picked_;
      return Status::OK();
    }
    if (item->kind == LaneItem::kError) return item->status;
    if (item->kind == LaneItem::kEnd) {
      if (in_order) {
        ++next_range_;
        picked_ = -1;
      }
      if (++ends_seen_[lu] == lanes_->lane_ranges(static_cast<int>(lu)).size()) {
        weight_[lu] = 0;
        picked_ = -1;
      }
      continue;
    }
    if (known_) --weight_[lu];
    if (!in_order) picked_ = -1;
    if (item->kind == LaneItem::kDirect) {
      // A chunk of documents, taken one per draw of this lane as samples
      // read the usual way would be (into the shuffle buffer, if any).
      // Moved out: a ring slot is refilled only a ring of items later, and
      // until then would keep the index (with its recycled memory) alive.
      cur.doc.shard = std::move(item->direct.shard);
      cur.doc.sample = item->direct.sample;
      cur.left = static_cast<int64_t>(cur.doc.shard->docs.size());
      cur.shard = item->shard;
      cur.offset = item->index_offset;
      cur.source = item->source;
      SHARDSTREAM_RETURN_IF_ERROR(shuffle_ ? ShuffleDirect(&cur) : TakeDirect(&cur));
    } else if (!shuffle_) {
      SHARDSTREAM_RETURN_IF_ERROR(Process(item));  // in place: no swaps
    } else {
      SHARDSTREAM_RETURN_IF_ERROR(ShuffleItem(item));
    }
    // Relaxed: a seq_cst store is a full fence that waits for every store
    // the batcher just made.
    counters_->shuffle_fill.store(static_cast<int64_t>(buffer_->size()), std::memory_order_relaxed);
  }
  while (!stop_.load() && buffer_->Drain(&out_)) {
    SHARDSTREAM_RETURN_IF_ERROR(LetOut(&out_));
    counters_->shuffle_fill.store(static_cast<int64_t>(buffer_->size()), std::memory_order_relaxed);
  }
  FlushDirect(&shuffled_);
  if (stop_.load()) return Status::Cancelled("loader stopped");
  *want = -1;
  return batcher_ ? batcher_->Flush(opt_.drop_last) : packer_->Flush();
}

}  // namespace shardstream::internal
