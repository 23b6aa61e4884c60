// TarReader: members -> WebDataset samples, the caller's error policy, and
// the sample index built along the way.
#include "shardstream/tar_reader.h"

#include "common/log.h"
#include "shardstream/url.h"
#include "tar/byte_stream.h"
#include "tar/doc_group.h"
#include "tar/index_field.h"
#include "tar/member_stream.h"

namespace shardstream {

bool SplitSampleKey(std::string_view path, std::string_view* key, std::string_view* field) {
  size_t slash = path.rfind('/');
  size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  size_t dot = path.find('.', base);
  // WebDataset: ^((?:.*/|)[^.]+)[.]([^/]*)$ -- a key needs at least one
  // character before the first dot of the basename.
  if (dot == std::string_view::npos || dot == base) return false;
  *key = path.substr(0, dot);
  *field = path.substr(dot + 1);
  return true;
}

TarReader::~TarReader() = default;

namespace {

using internal::Member;
using internal::MemberStream;
using internal::MemberType;

class TarReaderImpl final : public TarReader {
 public:
  TarReaderImpl(std::unique_ptr<MemberStream> members, std::string url,
                const TarReaderOptions& options, ShardCompression compression,
                int64_t first_index, int64_t skip_samples)
      : members_(std::move(members)),
        url_(std::move(url)),
        options_(options),
        compression_(compression),
        next_index_(first_index),
        skip_samples_(skip_samples) {
    index_.compressed = compression != ShardCompression::kNone;
  }

  Result<bool> Next(Sample* sample) override {
    while (true) {
      SHARDSTREAM_ASSIGN_OR_RETURN(bool got, NextDocument(sample));
      if (!got || skip_samples_ == 0) return got;
      --skip_samples_;  // OpenAt on a compressed shard, or in a group: drop what precedes
    }
  }
  const TarStats& stats() const override { return stats_; }
  const SampleIndex& index() const override { return index_; }
  ShardCompression compression() const override { return compression_; }
  const std::string& url() const override { return url_; }

  void set_shard_size(uint64_t n) { index_.shard_size = n; }

 private:
  Result<bool> NextSample(Sample* s) {
    if (!error_.ok()) return error_;
    if (done_) return false;
    s->fields.clear();
    s->key.clear();
    s->url = url_;
    uint64_t end_offset = 0;
    while (true) {
      if (!have_pending_) {
        Status st = members_->Next(&pending_);
        if (!st.ok()) {
          if (!s->fields.empty() || skipping_) CountSkippedSample(st);
          return Fatal(st);
        }
        have_pending_ = true;
      }
      Member& m = pending_;
      if (m.end) {
        done_ = true;
        skipping_ = false;
        if (!s->fields.empty()) return Emit(s, end_offset);
        return false;
      }
      ++stats_.entries;
      if (m.type != MemberType::kFile) {
        CountOther(m.type);
        have_pending_ = false;
        continue;
      }
      std::string_view key, field;
      bool keyed = SplitSampleKey(m.path, &key, &field);
      if (m.problem.ok() && !keyed) {
        ++stats_.unkeyed_members;
        have_pending_ = false;
        continue;
      }
      // A member of another key closes the sample being built (or ends the
      // skipping of a dropped one).
      bool same_key = keyed && key == current_key_;
      if ((!s->fields.empty() || skipping_) && !same_key) {
        if (!skipping_) return Emit(s, end_offset);
        skipping_ = false;
      }
      if (!m.problem.ok()) {  // a member-level defect
        have_pending_ = false;
        if (skipping_ && same_key) continue;  // its sample is already dropped
        Action act = MemberError(m.problem, s);
        if (act == Action::kRaise) return error_;
        if (act == Action::kStop) return false;
        if (keyed) {
          current_key_.assign(key.data(), key.size());
        } else {
          current_key_.assign(1, '\0');  // matches no key
        }
        continue;
      }
      if (skipping_) {  // the rest of a sample already dropped
        have_pending_ = false;
        continue;
      }
      if (s->fields.empty()) {
        current_key_.assign(key.data(), key.size());
        s->offset = m.header_offset;
      }
      for (const Field& f : s->fields) {
        if (f.name == field) {
          Status dup = internal::CorruptAt(url_, m.header_offset, m.path,
                                           "duplicate field '" + std::string(field) +
                                               "' in sample '" + current_key_ + "'");
          have_pending_ = false;
          Action act = MemberError(dup, s);
          if (act == Action::kRaise) return error_;
          if (act == Action::kStop) return false;
          break;
        }
      }
      if (!have_pending_) continue;
      s->fields.emplace_back();
      Field& f = s->fields.back();
      f.name.assign(field.data(), field.size());
      f.data = m.data;
      f.owner = std::move(m.owner);
      f.offset = m.data_offset;
      end_offset = m.end_offset;
      have_pending_ = false;
    }
  }

  // The next sample as stored, or the next document of a group.
  Result<bool> NextDocument(Sample* s) {
    while (true) {
      if (next_doc_ < docs_.size()) {
        swap(*s, docs_[next_doc_]);
        docs_[next_doc_++].fields.clear();  // the caller's old buffers go now, not with the group
        s->index = next_index_++;
        ++stats_.samples;
        ++stats_.fields;
        stats_.field_bytes += s->fields[0].data.size();
        return true;
      }
      SHARDSTREAM_ASSIGN_OR_RETURN(bool got, NextSample(s));
      if (!got) return false;
      if (!options_.document_groups || !internal::IsDocGroup(*s)) {
        Record(s, end_offset_);
        return true;
      }
      Status st = internal::ParseDocGroup(*s, url_, &group_);
      if (!st.ok()) {  // the group's own defect: the policy's, as a member's
        Action act = MemberError(st, s);
        if (act == Action::kRaise) return error_;
        if (act == Action::kStop) return false;
        continue;
      }
      internal::ExplodeDocGroup(group_, *s, &docs_);
      next_doc_ = 0;
      if (options_.build_index)
        internal::IndexDocGroup(group_, s->key, s->offset, end_offset_, group_.array->offset,
                                &index_);
    }
  }

  Result<bool> Emit(Sample* s, uint64_t end_offset) {
    s->key = current_key_;
    end_offset_ = end_offset;
    return true;
  }

  // A sample handed out as it is stored: numbered, counted and indexed.
  void Record(Sample* s, uint64_t end_offset) {
    s->index = next_index_++;
    ++stats_.samples;
    stats_.fields += s->fields.size();
    for (const Field& f : s->fields) stats_.field_bytes += f.data.size();
    if (!options_.build_index) return;
    auto& v = index_.samples;
    if (v.empty() && index_.shard_size > 0 && end_offset > s->offset) {
      // Room for the whole shard, judged by its first sample, so the index
      // is not regrown (and copied) a dozen times on the way.
      uint64_t guess = index_.shard_size / (end_offset - s->offset) + 16;
      v.reserve(static_cast<size_t>(std::min<uint64_t>(guess, uint64_t{1} << 18)));
      index_.fields.reserve(v.capacity() * std::max<size_t>(s->fields.size(), 1));
    }
    v.emplace_back();
    SampleIndexEntry& e = v.back();
    e.offset = s->offset;
    e.length = end_offset - s->offset;
    e.nfields = static_cast<uint32_t>(s->fields.size());
    e.key = s->key;
    e.first_field = index_.fields.size();
    for (const Field& f : s->fields) {
      index_.fields.emplace_back();
      internal::MakeIndexField(f.name, f.offset, f.data, &index_.fields.back());
    }
  }

  // A defect confined to one member: raise, or drop the sample it belongs
  // to (policy kSkipSample), or the shard.
  enum class Action { kRaise, kStop, kContinue };
  Action MemberError(const Status& problem, Sample* s) {
    if (options_.policy == ErrorPolicy::kRaise) {
      error_ = problem;
      done_ = true;
      return Action::kRaise;
    }
    if (options_.policy == ErrorPolicy::kSkipShard) {
      done_ = true;
      SkipShard(problem);
      return Action::kStop;
    }
    CountSkippedSample(problem);
    s->fields.clear();
    skipping_ = true;
    return Action::kContinue;
  }

  // Errors after which the stream is out of step.
  Result<bool> Fatal(const Status& st) {
    done_ = true;
    if (options_.policy == ErrorPolicy::kRaise ||
        (st.code() != StatusCode::kCorrupt && st.code() != StatusCode::kChecksum)) {
      // I/O errors are not the shard's fault: always reported. Bytes other
      // than the shard's (a size or version the manifest or the first answer
      // did not promise) are.
      error_ = st;
      return st;
    }
    SkipShard(st);
    return false;
  }

  void SkipShard(const Status& st) {
    ++stats_.skipped_shards;
    stats_.last_error = st;
    internal::Log().warn("skipping the rest of shard {} after {} samples: {}", url_,
                         stats_.samples, st.ToString());
  }
  void CountSkippedSample(const Status& st) {
    if (options_.policy != ErrorPolicy::kSkipSample) return;
    ++stats_.skipped_samples;
    stats_.last_error = st;
    internal::Log().warn("skipping a sample of shard {}: {}", url_, st.ToString());
  }

  void CountOther(MemberType t) {
    switch (t) {
      case MemberType::kDirectory: ++stats_.directories; break;
      case MemberType::kSymlink: ++stats_.symlinks; break;
      case MemberType::kHardlink: ++stats_.hardlinks; break;
      case MemberType::kDevice: ++stats_.devices; break;
      default: ++stats_.other_entries; break;
    }
  }

  std::unique_ptr<MemberStream> members_;
  std::string url_;
  TarReaderOptions options_;
  ShardCompression compression_;
  int64_t next_index_;
  int64_t skip_samples_;
  Member pending_;
  bool have_pending_ = false;
  bool skipping_ = false;
  bool done_ = false;
  std::string current_key_;
  uint64_t end_offset_ = 0;  // of the sample NextSample returned last
  internal::DocGroup group_;
  std::vector<Sample> docs_;  // the group being handed out
  size_t next_doc_ = 0;
  Status error_;
  TarStats stats_;
  SampleIndex index_;
};

Result<std::unique_ptr<TarReader>> OpenStream(std::unique_ptr<InputStream> stream,
                                              const TarReaderOptions& options, uint64_t base,
                                              int64_t first_index, int64_t skip) {
  if (options.chunk_size < (size_t{64} << 10))
    return Status::Config("TarReaderOptions.chunk_size must be at least 64 KiB");
  std::string url = RedactUrl(stream->url());
  std::optional<uint64_t> size = stream->size();
  ShardCompression compression;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto in, internal::Sniff(std::move(stream), &compression));
  std::unique_ptr<MemberStream> members;
  if (options.engine == TarEngine::kLibarchive && base == 0) {
    SHARDSTREAM_ASSIGN_OR_RETURN(members,
                                 internal::NewArchiveMemberStream(
                                     std::move(in), url, options,
                                     compression == ShardCompression::kNone ? size : std::nullopt));
  } else {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto bytes,
                                 internal::OpenByteStream(std::move(in), compression,
                                                          options.chunk_size));
    members = internal::NewFastMemberStream(std::move(bytes), url, options, base);
  }
  auto reader = std::make_unique<TarReaderImpl>(std::move(members), url, options, compression,
                                                first_index, skip);
  if (size) reader->set_shard_size(*size);
  return std::unique_ptr<TarReader>(std::move(reader));
}

Source* SourceOf(const TarReaderOptions& options) {
  return options.source ? options.source : DefaultSource().get();
}

}  // namespace

Result<std::unique_ptr<TarReader>> TarReader::Open(const std::string& url,
                                                   const TarReaderOptions& options) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto stream, SourceOf(options)->OpenInputStream(url, 0));
  return OpenStream(std::move(stream), options, 0, 0, 0);
}

Result<std::unique_ptr<TarReader>> TarReader::Open(std::unique_ptr<InputStream> stream,
                                                   const TarReaderOptions& options) {
  return OpenStream(std::move(stream), options, 0, 0, 0);
}

Result<std::unique_ptr<TarReader>> TarReader::OpenAt(const std::string& url, int64_t first,
                                                     const SampleIndex* index,
                                                     const TarReaderOptions& options) {
  Source* source = SourceOf(options);
  SampleIndex loaded;
  if (index == nullptr) {
    SHARDSTREAM_ASSIGN_OR_RETURN(loaded, ReadSampleIndex(url, source, options.index_dir));
    index = &loaded;
  }
  int64_t n = static_cast<int64_t>(index->samples.size());
  if (first < 0 || first > n)
    return Status(StatusCode::kConfig,
                  "sample " + std::to_string(first) + " out of range: shard " + RedactUrl(url) +
                      " has " + std::to_string(n) + " samples",
                  RedactUrl(url));
  if (index->compressed || first == 0) {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto stream, source->OpenInputStream(url, 0));
    return OpenStream(std::move(stream), options, 0, 0, first);
  }
  if (first == n) {
    // Past the last sample: a reader that is already at its end. Open at
    // the last sample's end, where the end-of-archive marker is.
    const auto& last = index->samples.back();
    uint64_t at = last.offset + last.length;
    SHARDSTREAM_ASSIGN_OR_RETURN(auto stream, source->OpenInputStream(url, at));
    return OpenStream(std::move(stream), options, at, first, 0);
  }
  // A document of a group other than its first: from the group's start,
  // skipping the documents before it.
  int64_t start = first;
  auto inside_group = [&](int64_t k) {
    const SampleIndexEntry& e = index->samples[static_cast<size_t>(k)];
    if (e.nfields == 0 || e.first_field >= index->fields.size()) return false;
    const uint16_t flags = index->fields[e.first_field].flags;
    return (flags & kIndexFieldGrouped) != 0 && (flags & kIndexFieldGroupStart) == 0;
  };
  while (start > 0 && inside_group(start)) --start;
  uint64_t at = index->samples[static_cast<size_t>(start)].offset;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto stream, source->OpenInputStream(url, at));
  return OpenStream(std::move(stream), options, at, start, first - start);
}

Result<SampleIndex> BuildSampleIndex(const std::string& url, const TarReaderOptions& options) {
  TarReaderOptions o = options;
  o.engine = TarEngine::kFast;  // it knows exact member extents
  SHARDSTREAM_ASSIGN_OR_RETURN(auto reader, TarReader::Open(url, o));
  Sample s;
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(bool got, reader->Next(&s));
    if (!got) break;
  }
  if (reader->stats().skipped_shards > 0) return reader->stats().last_error;
  return reader->index();
}

}  // namespace shardstream
