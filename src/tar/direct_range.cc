#include "tar/direct_range.h"

#include <algorithm>
#include <cstring>

#include "shardstream/shard_index.h"
#include "shardstream/url.h"
#include "tar/tar_format.h"

namespace shardstream::internal {
namespace {

// The index is read a window of this many bytes at a time (more for a
// record larger than that), at most kMaxWindow.
constexpr size_t kWindow = size_t{256} << 10;
constexpr size_t kMaxWindow = size_t{64} << 20;

// Skips the samples before a range, noting where the group of the first
// one (if it is a document of a group) has its headers.
struct SkipSink {
  const std::string& field;
  DirectRange::Group* group;
  bool Sample(uint64_t, const IndexSampleRecord&) { return true; }
  void Field(uint64_t, uint32_t, const IndexFieldRecord& f) {
    if ((f.flags & kIndexFieldGroupStart) != 0 && f.name == field) group->Start(f);
  }
};

// Fills a chunk with the records of the samples it walks, up to `max_docs`
// of them and `max_keys` bytes of keys. A sample that cannot be read
// directly ends the chunk before it, with the reason in `why`.
class ChunkSink {
 public:
  ChunkSink(DirectShard* s, size_t max_docs, size_t max_keys, DirectRange::Group* group)
      : s_(s), max_docs_(max_docs), max_keys_(max_keys), group_(group) {}
  size_t count = 0;  // records filled
  std::string why;   // set: the sample after them cannot be read directly

  bool Sample(uint64_t i, const IndexSampleRecord& r) {
    if (!why.empty()) return false;
    if (count > 0 && !found_) return Missing(i - 1);
    if (count == max_docs_ || s_->keys.size() + r.key.size() > max_keys_ ||
        r.key.size() > UINT32_MAX) {
      if (count == 0)  // not even one: read the usual way
        why = "sample " + std::to_string(i) + "'s key takes more than " +
              std::to_string(max_keys_) + " bytes";
      return false;
    }
    DirectShard::Doc& d = s_->docs[count++];
    d.offset = r.offset;
    d.length = r.length;
    d.key_at = static_cast<uint32_t>(s_->keys.size());
    d.key_len = static_cast<uint32_t>(r.key.size());
    s_->keys.append(r.key.data(), r.key.size());
    found_ = false;
    return true;
  }

  void Field(uint64_t i, uint32_t, const IndexFieldRecord& f) {
    if (found_ || !why.empty() || f.name != s_->field) return;
    found_ = true;
    DirectShard::Doc& d = s_->docs[count - 1];
    if ((f.flags & kIndexFieldGrouped) != 0) {
      // A document of a group: the headers checked with it are its
      // group's array's, which the group's first document's record places.
      if ((f.flags & kIndexFieldGroupStart) != 0) group_->Start(f);
      if (!group_->known || f.dtype != s_->dtype ||
          group_->head + kTarBlock > kDirectMaxHeaders) {
        Missing(i);
        return;
      }
      d.field = group_->field;
      d.group_head = group_->head;
      d.payload = f.payload;
      d.count = f.count;
      d.header_hash = group_->hash;
      return;
    }
    d.group_head = 0;
    if (f.ndim != 1 || f.dtype != s_->dtype || f.payload - f.offset + kTarBlock > kDirectMaxHeaders ||
        f.offset < d.offset + kTarBlock) {
      Missing(i);
      return;
    }
    d.field = f.offset;
    d.payload = f.payload;
    d.count = f.count;
    d.header_hash = f.header_hash;
  }

  // After the walk stopped: whether the last sample walked had its field.
  void Done() {
    if (why.empty() && count > 0 && !found_) Missing(s_->first + count - 1);
  }

 private:
  // Sample i cannot be read directly: the chunk ends before it.
  bool Missing(uint64_t i, const std::string& what = "") {
    why = "sample " + std::to_string(i) +
          (what.empty() ? " has no 1-D " + std::string(DTypeName(s_->dtype)) + " field '" +
                              s_->field + "' with headers of at most 4 KiB by its index"
                        : " " + what);
    count = static_cast<size_t>(static_cast<int64_t>(i) - s_->first);
    s_->keys.resize(count == 0 ? 0 : s_->docs[count - 1].key_at + s_->docs[count - 1].key_len);
    return false;
  }
  DirectShard* s_;
  size_t max_docs_, max_keys_;
  DirectRange::Group* group_;
  bool found_ = false;  // the current sample's field
};

}  // namespace

Result<std::unique_ptr<DirectRange>> DirectRange::Open(const std::string& url,
                                                      std::shared_ptr<RandomAccessFile> shard,
                                                      std::unique_ptr<RandomAccessFile> index,
                                                      const std::string& field, DType dtype,
                                                      int64_t first, int64_t end) {
  auto r = std::unique_ptr<DirectRange>(new DirectRange());
  r->url_ = RedactUrl(url);
  r->index_url_ = RedactUrl(IndexUrlFor(url));
  IndexHeader h;
  uint64_t records_begin = 0, records_end = 0;
  SHARDSTREAM_RETURN_IF_ERROR(
      CheckIndexFile(*index, r->index_url_, &h, &records_begin, &records_end));
  const uint64_t last = end < 0 ? h.samples : static_cast<uint64_t>(end);
  if (h.compressed) return Status::Config("shard " + r->url_ + " is compressed");
  if (h.version < 2)
    return Status::Config("the index of " + r->url_ +
                          " is version 1 (`shardstream index` rebuilds it)");
  if (first < 0 || static_cast<uint64_t>(first) > last || last > h.samples)
    return Status::Config("the index of " + r->url_ + " lists " + std::to_string(h.samples) +
                          " samples, fewer than the plan");
  SHARDSTREAM_ASSIGN_OR_RETURN(const uint64_t size, shard->Size());
  if (size != h.shard_size)
    return Status::Config("the index of " + r->url_ + " is stale (made from a shard of " +
                          std::to_string(h.shard_size) + " bytes; it has " + std::to_string(size) +
                          ")");
  r->index_ = std::move(index);
  r->window_bytes_ = kWindow;
  r->records_end_ = records_end;
  r->walk_.OpenWindowed(h, records_begin, records_end, r->index_url_);
  SkipSink skip{field, &r->group_};
  SHARDSTREAM_RETURN_IF_ERROR(r->WalkTo(&skip, static_cast<uint64_t>(first)));
  r->shard_ = std::move(shard);
  r->field_ = field;
  r->dtype_ = dtype;
  r->next_ = first;
  r->end_ = static_cast<int64_t>(last);
  return r;
}

template <class Sink>
Status DirectRange::WalkTo(Sink* sink, uint64_t until) {
  while (true) {
    SHARDSTREAM_RETURN_IF_ERROR(walk_.Walk(sink, until));
    if (!walk_.needs_window()) return Status::OK();
    SHARDSTREAM_RETURN_IF_ERROR(ReadWindow());
  }
}

Status DirectRange::ReadWindow() {
  const uint64_t at = walk_.position();
  // No record done since the last window began: one record is larger
  // than a window.
  if (at == window_at_ && !window_.empty()) {
    if (window_bytes_ >= kMaxWindow)
      return IndexRecordError(index_url_,
                              "a sample's record takes more than " +
                                  std::to_string(kMaxWindow >> 20) + " MiB",
                              at);
    window_bytes_ = std::min(window_bytes_ * 2, kMaxWindow);
  }
  // Past the records lie 8 bytes of checksum: the window stops before them.
  const size_t want = static_cast<size_t>(std::min<uint64_t>(window_bytes_, records_end_ - at));
  window_.resize(want);
  SHARDSTREAM_ASSIGN_OR_RETURN(const size_t got, index_->ReadAt(at, want, window_.data()));
  if (got < want)
    return IndexRecordError(index_url_, "ends at byte " + std::to_string(at + got) +
                                            " (cut short after it was checked?)",
                            at + got);
  window_at_ = at;
  walk_.SetWindow(std::string_view(window_.data(), got));
  return Status::OK();
}

Result<std::shared_ptr<const DirectShard>> DirectRange::Next(
    uint64_t max_bytes, const std::shared_ptr<DirectRecycler>& recycler) {
  if (!why_.ok()) return why_;
  if (next() == end_) return std::shared_ptr<const DirectShard>();
  auto s = std::make_shared<DirectShard>();
  if (recycler != nullptr) recycler->Take(s.get());
  s->file = shard_;
  s->view = view_;
  s->url = url_;
  s->field = field_;
  s->dtype = dtype_;
  s->first = next();
  // Records and keys share the bound, half each; sized once (built one by
  // one, each Doc cleared with a rep stos took half of the walk).
  const size_t max_docs = std::max<size_t>(1, max_bytes / 2 / sizeof(DirectShard::Doc));
  s->docs.resize(max_docs);
  s->keys.clear();
  ChunkSink sink(s.get(), max_docs, static_cast<size_t>(max_bytes / 2), &group_);
  SHARDSTREAM_RETURN_IF_ERROR(WalkTo(&sink, static_cast<uint64_t>(end_)));
  sink.Done();
  s->docs.resize(sink.count);
  if (!sink.why.empty()) why_ = Status::Config(url_ + ": " + sink.why);
  next_ = s->first + static_cast<int64_t>(sink.count);
  if (sink.count == 0) return why_.ok() ? Result<std::shared_ptr<const DirectShard>>(nullptr) : why_;
  return std::shared_ptr<const DirectShard>(std::move(s));
}

}  // namespace shardstream::internal
