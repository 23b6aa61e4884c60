// JSON Lines file -> rows: lines found by memchr in large reads (tar's
// ChunkReader), each parsed by the member scanner (json_row.h), its values
// handed out as views of the read buffer.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "rows/json_row.h"
#include "rows/rows_internal.h"
#include "shardstream/url.h"
#include "tar/byte_stream.h"
#include "tar/chunk_reader.h"

namespace shardstream {
namespace {

using internal::ByteStream;
using internal::JsonMember;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string LowerName(std::string_view url) {
  std::string name = UrlBasename(std::string(url.substr(0, url.find('?'))));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

// The file's name without its extensions: the keys' prefix.
std::string RowsStem(const std::string& url) {
  std::string base = UrlBasename(url.substr(0, url.find('?')));
  for (const char* ext : {".gz", ".zst", ".zstd"})
    if (EndsWith(base, ext)) base.resize(base.size() - std::strlen(ext));
  for (const char* ext : {".jsonl", ".ndjson", ".json"})
    if (EndsWith(base, ext)) base.resize(base.size() - std::strlen(ext));
  return base;
}

bool IsBlank(std::string_view line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\r') return false;
  return true;
}

class JsonlReader final : public internal::JsonlRows {
 public:
  JsonlReader(std::string url, const TarReaderOptions& options, ShardCompression compression,
              std::optional<uint64_t> file_size)
      : url_(std::move(url)), stem_(RowsStem(url_)), options_(options), compression_(compression) {
    index_.compressed = compression != ShardCompression::kNone;
    if (file_size) index_.shard_size = *file_size;
  }

  // Positions the reader: `skip` rows passed over from the stream's start,
  // which is row `row`, line `line` (0: unknown), byte `byte` of the file.
  Status Start(std::unique_ptr<ByteStream> bytes, int64_t skip, int64_t row, int64_t line,
               uint64_t byte) {
    bytes_ = std::move(bytes);
    chunks_ = std::make_unique<internal::ChunkReader>(bytes_.get(), options_.chunk_size, byte);
    next_row_ = row;
    line_ = line;
    for (int64_t i = 0; i < skip; ++i) {
      std::string_view text;
      std::shared_ptr<const void> owner;
      uint64_t at = 0;
      SHARDSTREAM_ASSIGN_OR_RETURN(bool got, NextRow(&text, &owner, &at));
      if (!got)
        return Status(StatusCode::kCorrupt,
                      "JSON Lines file " + url_ + " has " + std::to_string(next_row_) +
                          " rows, fewer than the " + std::to_string(row + skip) +
                          " its index or manifest says: the file changed after they were written",
                      url_, static_cast<int64_t>(chunks_->offset()));
      ++next_row_;
    }
    return Status::OK();
  }

  Result<bool> Next(Sample* s) override {
    if (!error_.ok()) return error_;
    while (!done_) {
      std::string_view text;
      std::shared_ptr<const void> owner;
      uint64_t at = 0;
      auto got = NextRow(&text, &owner, &at);
      if (!got.ok()) return Fatal(got.status());
      if (!*got) {
        done_ = true;
        Status st = bytes_->Finish();  // a verifying source reports a mismatch here
        if (!st.ok()) return Fatal(st);
        return false;
      }
      const int64_t row = next_row_++;
      Status problem = Split(row, at, text, owner, s);
      if (problem.ok()) {
        if (options_.build_index) {
          SampleIndexEntry e;
          e.offset = at;
          e.length = chunks_->offset() - at;
          e.nfields = static_cast<uint32_t>(s->fields.size());
          index_.samples.push_back(std::move(e));
        }
        ++stats_.samples;
        stats_.fields += s->fields.size();
        stats_.field_bytes += s->bytes();
        return true;
      }
      if (options_.policy == ErrorPolicy::kSkipSample) {
        ++stats_.skipped_samples;
        stats_.last_error = problem;
        internal::Log().warn("skipping a row of {}: {}", url_, problem.ToString());
        continue;
      }
      return Fatal(problem);
    }
    return false;
  }

  const TarStats& stats() const override { return stats_; }
  const SampleIndex& index() const override { return index_; }
  ShardCompression compression() const override { return compression_; }
  const std::string& url() const override { return url_; }
  const std::vector<RowColumn>& last_columns() const override { return columns_; }

 private:
  std::string Where(int64_t row, uint64_t byte) const {
    return "JSON Lines file " + url_ + ", " +
           (line_ > 0 ? "line " + std::to_string(line_) : "row " + std::to_string(row)) +
           " (byte " + std::to_string(byte) + ")";
  }
  Status Corrupt(int64_t row, uint64_t byte, const std::string& what) const {
    return Status(StatusCode::kCorrupt, Where(row, byte) + ": " + what, url_,
                  static_cast<int64_t>(byte));
  }
  Result<bool> Fatal(Status st) {
    done_ = true;
    // Only the file's own defects are skipped: an I/O error or a cancel is
    // not the file's fault, and is always reported (as TarReader does).
    if (options_.policy == ErrorPolicy::kRaise ||
        (st.code() != StatusCode::kCorrupt && st.code() != StatusCode::kChecksum)) {
      error_ = st;
      return st;
    }
    ++stats_.skipped_shards;
    stats_.last_error = st;
    internal::Log().warn("skipping the rest of {} after {} rows: {}", url_, stats_.samples,
                         st.ToString());
    return false;
  }

  // The next non-blank line (without its end), its bytes kept alive by
  // *owner; false at the end of the file.
  Result<bool> NextRow(std::string_view* text, std::shared_ptr<const void>* owner, uint64_t* at) {
    while (true) {
      if (line_ > 0 && counted_) ++line_;
      counted_ = true;
      oversize_ = false;
      SHARDSTREAM_ASSIGN_OR_RETURN(bool got, NextLine(text, owner, at));
      if (!got) {
        counted_ = false;
        return false;
      }
      if (*at == 0 && text->substr(0, 3) == "\xEF\xBB\xBF") {  // a UTF-8 byte order mark
        text->remove_prefix(3);
        *at = 3;
      }
      if (oversize_ || !IsBlank(*text)) return true;
    }
  }

  Result<bool> NextLine(std::string_view* text, std::shared_ptr<const void>* owner, uint64_t* at) {
    const size_t half = options_.chunk_size / 2;
    *at = chunks_->offset();
    size_t scanned = 0;
    while (true) {
      const size_t avail = chunks_->available();
      const char* c = chunks_->cursor();
      const void* nl = avail > scanned ? std::memchr(c + scanned, '\n', avail - scanned) : nullptr;
      if (nl != nullptr) {
        const size_t len = static_cast<size_t>(static_cast<const char*>(nl) - c);
        if (len > options_.limits.max_member_size) oversize_ = true;
        std::string_view data;
        SHARDSTREAM_ASSIGN_OR_RETURN(bool got, chunks_->Take(len + 1, &data, owner));
        (void)got;  // the bytes are there
        *text = data.substr(0, len);
        return true;
      }
      scanned = avail;
      if (avail >= half) return LongLine(text, owner, *at);
      SHARDSTREAM_ASSIGN_OR_RETURN(size_t got,
                                   chunks_->Ensure(std::min(half, std::max<size_t>(avail * 2, 65536))));
      if (got == avail) {  // the end: a last line without its newline, or none
        if (avail == 0) return false;
        std::string_view data;
        SHARDSTREAM_ASSIGN_OR_RETURN(bool taken, chunks_->Take(avail, &data, owner));
        (void)taken;
        *text = data;
        return true;
      }
    }
  }

  // A line longer than half a read buffer, gathered into its own. One
  // longer than max_member_size is passed over to its end (oversize_: the
  // row is bad, the stream stays in step).
  Result<bool> LongLine(std::string_view* text, std::shared_ptr<const void>* owner, uint64_t at) {
    (void)at;
    auto buf = std::make_shared<std::string>();
    const size_t half = options_.chunk_size / 2;
    uint64_t total = 0;
    while (true) {
      SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, chunks_->Ensure(half));
      const char* c = chunks_->cursor();
      const void* nl = got > 0 ? std::memchr(c, '\n', got) : nullptr;
      const size_t n = nl ? static_cast<size_t>(static_cast<const char*>(nl) - c) : got;
      total += n;
      if (total > options_.limits.max_member_size) {
        oversize_ = true;
        buf->clear();
      } else {
        buf->append(c, n);
      }
      chunks_->Advance(nl ? n + 1 : n);
      if (nl || got == 0) break;
    }
    *text = *buf;
    *owner = std::move(buf);
    return true;
  }

  // The row's members as fields; a defect leaves the stream in step.
  Status Split(int64_t row, uint64_t at, std::string_view text,
               const std::shared_ptr<const void>& owner, Sample* s) {
    if (oversize_)
      return Corrupt(row, at, "a line longer than max_member_size (" +
                                  std::to_string(options_.limits.max_member_size) + " bytes)");
    std::string what;
    size_t off = 0;
    if (!internal::ParseJsonRow(text, &members_, &what, &off))
      return Corrupt(row, at + off, "not a JSON object (" + what + " at column " +
                                        std::to_string(off + 1) + ")");
    s->fields.clear();
    s->url = url_;
    s->index = row;
    s->offset = at;
    char num[24];
    std::snprintf(num, sizeof(num), "%09lld", static_cast<long long>(row));
    s->key = stem_ + "/" + num;
    columns_.clear();
    // Escaped values are written out once per row into one buffer, sized
    // first so the views into it stay put.
    size_t escaped = 0;
    for (const JsonMember& m : members_)
      if (m.value_escaped) escaped += m.value.size();
    std::shared_ptr<std::string> unescaped;
    if (escaped > 0) {
      unescaped = std::make_shared<std::string>();
      unescaped->reserve(escaped);
    }
    for (const JsonMember& m : members_) {
      Field f;
      if (m.key_escaped) {
        internal::UnescapeJson(m.key, &f.name);
      } else {
        f.name.assign(m.key);
      }
      f.offset = at + m.value_at;
      if (m.value_escaped) {
        const size_t from = unescaped->size();
        internal::UnescapeJson(m.value, unescaped.get());
        f.data = std::string_view(unescaped->data() + from, unescaped->size() - from);
        f.owner = unescaped;
      } else {
        f.data = m.value;
        f.owner = owner;
      }
      columns_.push_back(RowColumn{f.name, m.kind, {}});
      s->fields.push_back(std::move(f));
    }
    // A key twice: pairs for a few keys, sorted names for many (a hostile
    // line of 100,000 keys stays n log n).
    const std::vector<Field>& fs = s->fields;
    if (fs.size() <= 16) {
      for (size_t a = 1; a < fs.size(); ++a)
        for (size_t b = 0; b < a; ++b)
          if (fs[a].name == fs[b].name)
            return Corrupt(row, fs[a].offset, "the key '" + fs[a].name + "' appears twice");
    } else {
      names_.clear();
      for (const Field& f : fs) names_.push_back(f.name);
      std::sort(names_.begin(), names_.end());
      for (size_t a = 1; a < names_.size(); ++a)
        if (names_[a] == names_[a - 1])
          return Corrupt(row, at, "the key '" + std::string(names_[a]) + "' appears twice");
    }
    return Status::OK();
  }

  std::string url_;
  std::string stem_;
  TarReaderOptions options_;
  ShardCompression compression_;
  std::unique_ptr<ByteStream> bytes_;
  std::unique_ptr<internal::ChunkReader> chunks_;
  std::vector<JsonMember> members_;
  std::vector<RowColumn> columns_;
  std::vector<std::string_view> names_;  // of the row being split, sorted: a key twice is an error
  int64_t next_row_ = 0;
  int64_t line_ = 1;     // of the line last read; 0 when unknown
  bool counted_ = false;  // a line was read, so the next is one further
  bool oversize_ = false;  // the line read is longer than max_member_size
  bool done_ = false;
  Status error_;
  TarStats stats_;
  SampleIndex index_;
};

Result<std::unique_ptr<JsonlReader>> Open(std::unique_ptr<InputStream> in,
                                          const TarReaderOptions& options, bool sniff,
                                          int64_t skip, int64_t row, int64_t line, uint64_t byte) {
  if (options.chunk_size < (size_t{64} << 10))
    return Status::Config("TarReaderOptions.chunk_size must be at least 64 KiB");
  const std::string url = RedactUrl(in->url());
  const std::optional<uint64_t> size = in->size();
  ShardCompression compression = ShardCompression::kNone;
  std::unique_ptr<internal::PrefixedInput> input;
  if (sniff) {
    SHARDSTREAM_ASSIGN_OR_RETURN(input, internal::Sniff(std::move(in), &compression));
  } else {
    input = std::make_unique<internal::PrefixedInput>(std::move(in), "");
  }
  SHARDSTREAM_ASSIGN_OR_RETURN(auto bytes,
                               internal::OpenByteStream(std::move(input), compression, options.chunk_size));
  auto reader = std::make_unique<JsonlReader>(url, options, compression,
                                              sniff ? size : std::nullopt);
  SHARDSTREAM_RETURN_IF_ERROR(reader->Start(std::move(bytes), skip, row, line, byte));
  return reader;
}

}  // namespace

bool IsParquetUrl(std::string_view url) { return EndsWith(LowerName(url), ".parquet"); }

bool IsCompressedRowsUrl(std::string_view url) {
  const std::string name = LowerName(url);
  for (const char* base : {".jsonl", ".ndjson"})
    for (const char* z : {".gz", ".zst", ".zstd"})
      if (EndsWith(name, std::string(base) + z)) return true;
  return false;
}

bool IsRowsFile(std::string_view url, std::string_view first_line) {
  const std::string name = LowerName(url);
  if (name == "manifest.jsonl") return false;
  if (IsCompressedRowsUrl(url)) return true;
  std::vector<JsonMember> members;
  std::string what;
  size_t at = 0;
  if (!internal::ParseJsonRow(first_line, &members, &what, &at)) return true;  // the reader says why
  // A manifest's line has a url (ReadManifest refuses one without) naming a
  // shard, or with the shard's sample count beside it.
  bool has_url = false, shard_url = false, nsamples = false;
  for (const JsonMember& m : members) {
    if (m.key == "nsamples" && m.kind == JsonKind::kInteger) nsamples = true;
    if (m.key == "url" && m.kind == JsonKind::kString) {
      has_url = true;
      std::string u;
      internal::UnescapeJson(m.value, &u);
      shard_url = IsShardUrl(u) || UrlScheme(u) == "pipe" || IsCompressedRowsUrl(u);
    }
  }
  return !(has_url && (shard_url || nsamples));
}

FieldSpec RowFieldSpec(const RowColumn& column) {
  FieldSpec f;
  f.name = column.name;
  f.decode = column.kind == JsonKind::kString    ? FieldDecode::kString
             : column.kind == JsonKind::kInteger ? FieldDecode::kLabel
             : column.kind == JsonKind::kBinary  ? FieldDecode::kBytes
                                                 : FieldDecode::kJson;
  return f;
}

Result<std::unique_ptr<TarReader>> OpenJsonlReader(std::unique_ptr<InputStream> in,
                                                   const TarReaderOptions& options, int64_t first,
                                                   int64_t line) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto r, Open(std::move(in), options, true, first, 0, line, 0));
  return std::unique_ptr<TarReader>(std::move(r));
}

Result<std::vector<RowColumn>> ReadJsonlColumns(std::unique_ptr<InputStream> in,
                                                const TarReaderOptions& options) {
  TarReaderOptions t = options;
  t.policy = ErrorPolicy::kRaise;
  t.build_index = false;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto r, Open(std::move(in), t, true, 0, 0, 1, 0));
  Sample s;
  SHARDSTREAM_ASSIGN_OR_RETURN(bool got, r->Next(&s));
  if (!got) return std::vector<RowColumn>{};
  return r->last_columns();
}

Result<SampleIndex> BuildJsonlIndex(const std::string& url, const TarReaderOptions& options) {
  Source& source = options.source ? *options.source : *DefaultSource();
  SHARDSTREAM_ASSIGN_OR_RETURN(auto in, source.OpenInputStream(url));
  TarReaderOptions t = options;
  t.policy = ErrorPolicy::kRaise;
  t.build_index = true;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto r, Open(std::move(in), t, true, 0, 0, 1, 0));
  Sample s;
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(bool got, r->Next(&s));
    if (!got) break;
  }
  return r->index();
}

namespace internal {

Result<std::unique_ptr<TarReader>> OpenJsonlReaderAt(std::unique_ptr<InputStream> in,
                                                     const TarReaderOptions& options, int64_t row,
                                                     uint64_t byte) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto r, Open(std::move(in), options, false, 0, row, 0, byte));
  return std::unique_ptr<TarReader>(std::move(r));
}

}  // namespace internal
}  // namespace shardstream
