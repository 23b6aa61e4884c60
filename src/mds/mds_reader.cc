// MDS shard -> samples: the offsets table read once, then each sample taken
// whole from large reads (tar's ChunkReader) and split into its columns as
// views. Arrays whose dtype or shape the MDS header carries, and PIL images,
// become .npy bytes (a copy of that column), so every consumer of fields
// reads them as it reads .npy members of tar shards.
#include <cstring>

#include "common/log.h"
#include "mds/mds_internal.h"
#include "shardstream/mds.h"
#include "shardstream/url.h"
#include "tar/byte_stream.h"
#include "tar/chunk_reader.h"

namespace shardstream {
namespace {

using internal::ByteStream;
using internal::MdsEncoding;

uint32_t LoadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian, as Streaming writes them
  return v;
}

// The shard's name without its extension: its path relative to index.json
// (a merged index names shards in subfolders), or the url's last component.
std::string ShardStem(const std::string& name) {
  std::string base = name.find("://") == std::string::npos && name.find('?') == std::string::npos &&
                             name[0] != '/'
                         ? name
                         : UrlBasename(name.substr(0, name.find('?')));
  for (const char* ext : {".mds.zstd", ".mds.zst", ".mds"}) {
    const size_t n = std::strlen(ext);
    if (base.size() > n && base.compare(base.size() - n, n, ext) == 0)
      return base.substr(0, base.size() - n);
  }
  return base;
}

class MdsReader final : public TarReader {
 public:
  MdsReader(std::string url, const TarReaderOptions& options, ShardCompression compression,
            std::vector<MdsColumn> columns, std::vector<MdsEncoding> encodings,
            const std::string& name)
      : url_(std::move(url)),
        stem_(ShardStem(name.empty() ? url_ : name)),
        options_(options),
        compression_(compression),
        columns_(std::move(columns)),
        encodings_(std::move(encodings)) {
    index_.compressed = compression != ShardCompression::kNone;
  }

  // Reads the header; positions the reader at sample `first`.
  Status Start(std::unique_ptr<ByteStream> bytes, std::optional<uint64_t> size,
               const MdsLayout& layout, int64_t first) {
    bytes_ = std::move(bytes);
    chunks_ = std::make_unique<internal::ChunkReader>(bytes_.get(), options_.chunk_size, 0);
    std::string_view head;
    std::shared_ptr<const void> owner;
    SHARDSTREAM_ASSIGN_OR_RETURN(bool got, chunks_->Take(4, &head, &owner));
    if (!got) return Corrupt(0, "shorter than its 4-byte header");
    const uint64_t n = LoadU32(head.data());
    if (layout.samples >= 0 && n != static_cast<uint64_t>(layout.samples))
      return Corrupt(0, "holds " + std::to_string(n) + " samples, its index.json says " +
                            std::to_string(layout.samples));
    if (n > options_.limits.max_entries)
      return Corrupt(0, std::to_string(n) + " samples, more than the limit of " +
                            std::to_string(options_.limits.max_entries));
    const uint64_t table = 4 * (n + 1);
    if (size && compression_ == ShardCompression::kNone && *size < 4 + table)
      return Corrupt(4, "shorter (" + std::to_string(*size) + " bytes) than its offsets table of " +
                            std::to_string(n) + " samples");
    std::string_view offs;
    SHARDSTREAM_ASSIGN_OR_RETURN(got, chunks_->Take(table, &offs, &owner));
    if (!got) return Corrupt(4, "ends inside its offsets table of " + std::to_string(n) + " samples");
    offsets_.resize(n + 1);
    for (uint64_t i = 0; i <= n; ++i) offsets_[i] = LoadU32(offs.data() + 4 * i);
    // Between the table and the first sample MDSWriter puts the shard's
    // column config as JSON text (index.json has the same); passed over.
    if (offsets_[0] < 4 + table)
      return Corrupt(4, "its first sample starts at byte " + std::to_string(offsets_[0]) +
                            ", inside its offsets table (which ends at byte " +
                            std::to_string(4 + table) + ")");
    for (uint64_t i = 0; i < n; ++i) {
      if (offsets_[i + 1] < offsets_[i])
        return Corrupt(8 + 4 * i, "offsets out of order: sample " + std::to_string(i) + " ends at byte " +
                                      std::to_string(offsets_[i + 1]) + " before it starts at " +
                                      std::to_string(offsets_[i]));
      if (offsets_[i + 1] - offsets_[i] > options_.limits.max_member_size)
        return Corrupt(offsets_[i], "sample " + std::to_string(i) + " is " +
                                        std::to_string(offsets_[i + 1] - offsets_[i]) +
                                        " bytes, more than max_member_size");
    }
    const uint64_t end = offsets_[n];
    if (layout.raw_bytes >= 0 && end != static_cast<uint64_t>(layout.raw_bytes))
      return Corrupt(4 + 4 * n, "its offsets end at byte " + std::to_string(end) +
                                    ", its index.json says the shard has " +
                                    std::to_string(layout.raw_bytes) + " bytes");
    if (size && compression_ == ShardCompression::kNone && *size < end)
      return Corrupt(*size, "shorter (" + std::to_string(*size) +
                                " bytes) than its index says (" + std::to_string(end) + ")");
    if (first < 0 || static_cast<uint64_t>(first) > n)
      return Status(StatusCode::kConfig,
                    "sample " + std::to_string(first) + " out of range: shard " + url_ + " has " +
                        std::to_string(n) + " samples",
                    url_);
    next_ = static_cast<uint64_t>(first);
    SHARDSTREAM_ASSIGN_OR_RETURN(got, chunks_->Skip(offsets_[next_] - chunks_->offset()));
    if (!got)
      return Corrupt(chunks_->offset(), "the shard ends before sample " + std::to_string(next_) +
                                            " (byte " + std::to_string(offsets_[next_]) +
                                            "): shorter than its index says");
    index_.shard_size = end;
    return Status::OK();
  }

  Result<bool> Next(Sample* s) override {
    if (!error_.ok()) return error_;
    while (true) {
      if (done_) return false;
      if (next_ + 1 >= offsets_.size()) {
        done_ = true;
        Status st = bytes_->Finish();  // a verifying source reports a mismatch here
        if (!st.ok()) return Fatal(st);
        return false;
      }
      const uint64_t i = next_++;
      const uint64_t begin = offsets_[i], end = offsets_[i + 1];
      std::string_view data;
      std::shared_ptr<const void> owner;
      auto got = chunks_->Take(end - begin, &data, &owner);
      if (!got.ok()) return Fatal(got.status());
      if (!*got) return Fatal(Truncated(i));
      Status problem = Split(i, begin, data, owner, s);
      if (problem.ok()) {
        ++stats_.samples;
        stats_.fields += s->fields.size();
        stats_.field_bytes += s->bytes();
        return true;
      }
      if (options_.policy == ErrorPolicy::kSkipSample) {
        ++stats_.skipped_samples;
        stats_.last_error = problem;
        internal::Log().warn("skipping a sample of shard {}: {}", url_, problem.ToString());
        continue;
      }
      return Fatal(problem);
    }
  }

  const TarStats& stats() const override { return stats_; }
  const SampleIndex& index() const override { return index_; }
  ShardCompression compression() const override { return compression_; }
  const std::string& url() const override { return url_; }

 private:
  Status Corrupt(uint64_t offset, const std::string& what) const {
    return Status(StatusCode::kCorrupt, "MDS shard " + url_ + " at byte " + std::to_string(offset) +
                                            ": " + what,
                  url_, static_cast<int64_t>(offset));
  }
  Status Truncated(uint64_t i) const {
    return Corrupt(chunks_->offset(), "the shard ends inside sample " + std::to_string(i) +
                                          ", which its offsets table says ends at byte " +
                                          std::to_string(offsets_[i + 1]) +
                                          ": shorter than its index says");
  }
  Result<bool> Fatal(Status st) {
    done_ = true;
    // Only the shard's own defects are skipped: an I/O error or a cancel is
    // not the shard's fault, and is always reported (as TarReader does).
    if (options_.policy == ErrorPolicy::kRaise ||
        (st.code() != StatusCode::kCorrupt && st.code() != StatusCode::kChecksum)) {
      error_ = st;
      return st;
    }
    ++stats_.skipped_shards;
    stats_.last_error = st;
    internal::Log().warn("skipping the rest of shard {} after {} samples: {}", url_,
                         stats_.samples, st.ToString());
    return false;
  }

  // The sample's columns as fields; a defect leaves the stream in step.
  Status Split(uint64_t i, uint64_t begin, std::string_view data,
               const std::shared_ptr<const void>& owner, Sample* s) {
    s->fields.clear();
    s->url = url_;
    s->index = static_cast<int64_t>(i);
    s->offset = begin;
    char num[16];
    std::snprintf(num, sizeof(num), "%09llu", static_cast<unsigned long long>(i));
    s->key = stem_ + "/" + num;
    sizes_.clear();
    size_t at = 0;
    for (const MdsColumn& c : columns_) {
      if (c.size >= 0) {
        sizes_.push_back(static_cast<uint64_t>(c.size));
        continue;
      }
      if (at + 4 > data.size())
        return Corrupt(begin + at, "sample " + std::to_string(i) + " (" + std::to_string(data.size()) +
                                       " bytes) ends inside its column sizes");
      sizes_.push_back(LoadU32(data.data() + at));
      at += 4;
    }
    for (size_t k = 0; k < columns_.size(); ++k) {
      const uint64_t len = sizes_[k];
      if (at + len > data.size())
        return Corrupt(begin + at, "sample " + std::to_string(i) + ", column '" + columns_[k].name +
                                       "': " + std::to_string(len) + " bytes overrun the sample's end at byte " +
                                       std::to_string(begin + data.size()));
      Field f;
      f.name = columns_[k].name;
      f.data = data.substr(at, len);
      f.owner = owner;
      f.offset = begin + at;
      const MdsEncoding& e = encodings_[k];
      if ((e.kind == MdsEncoding::kArray && !(e.fixed_dtype && e.fixed_shape)) ||
          e.kind == MdsEncoding::kPil) {
        Status st = e.kind == MdsEncoding::kPil ? PilToNpy(i, &f) : ArrayToNpy(i, e, &f);
        if (!st.ok()) return st;
      }
      s->fields.push_back(std::move(f));
      at += len;
    }
    if (at != data.size())
      return Corrupt(begin + at, "sample " + std::to_string(i) + ": its columns take " + std::to_string(at) +
                                     " bytes, its offsets give it " + std::to_string(data.size()));
    return Status::OK();
  }

  Status ArrayToNpy(uint64_t i, const MdsEncoding& e, Field* f) {
    std::string_view b = f->data;
    auto bad = [&](size_t off, const std::string& what) {
      return Corrupt(f->offset + off, "sample " + std::to_string(i) + ", column '" + f->name +
                                          "' (ndarray): " + what);
    };
    size_t at = 0;
    DType dtype = e.dtype;
    if (!e.fixed_dtype) {
      if (b.empty()) return bad(0, "empty");
      const int code = static_cast<uint8_t>(b[0]);
      if (!internal::MdsArrayDType(code, &dtype)) return bad(0, "unknown dtype code " + std::to_string(code));
      at = 1;
    }
    std::vector<int64_t> shape = e.shape;
    if (!e.fixed_shape) {
      if (at >= b.size()) return bad(at, "ends before its shape");
      const uint8_t byte = static_cast<uint8_t>(b[at++]);
      const size_t ndim = byte >> 2, width = size_t{1} << (byte & 3);
      if (ndim == 0 || ndim > static_cast<size_t>(kMaxDims))
        return bad(at - 1, std::to_string(ndim) + " dimensions");
      if (at + ndim * width > b.size()) return bad(at, "ends inside its shape");
      shape.clear();
      for (size_t d = 0; d < ndim; ++d) {
        uint64_t v = 0;
        std::memcpy(&v, b.data() + at, width);  // little-endian
        at += width;
        if (v == 0 || v > (uint64_t{1} << 40)) return bad(at - width, "dimension " + std::to_string(v));
        shape.push_back(static_cast<int64_t>(v));
      }
    }
    uint64_t want = DTypeSize(dtype);
    for (int64_t d : shape)
      if (__builtin_mul_overflow(want, static_cast<uint64_t>(d), &want)) want = UINT64_MAX;
    if (want != b.size() - at)
      return bad(at, std::to_string(b.size() - at) + " value bytes, its dtype and shape need " +
                         std::to_string(want));
    auto npy = std::make_shared<std::string>(EncodeNpy(dtype, shape, b.substr(at)));
    f->data = *npy;
    f->owner = std::move(npy);
    return Status::OK();
  }

  Status PilToNpy(uint64_t i, Field* f) {
    std::string_view b = f->data;
    auto bad = [&](size_t off, const std::string& what) {
      return Corrupt(f->offset + off, "sample " + std::to_string(i) + ", column '" + f->name +
                                          "' (pil): " + what);
    };
    if (b.size() < 12) return bad(0, "shorter than its 12-byte header");
    const uint64_t w = LoadU32(b.data()), h = LoadU32(b.data() + 4), ml = LoadU32(b.data() + 8);
    if (12 + ml > b.size()) return bad(8, "mode runs past the value");
    const std::string mode(b.substr(12, ml));
    const uint64_t c = mode == "L" ? 1 : mode == "RGB" ? 3 : mode == "RGBA" ? 4 : 0;
    if (c == 0) return bad(12, "PIL mode '" + mode + "' (read are L, RGB and RGBA)");
    const std::string_view raw = b.substr(12 + ml);
    uint64_t pixels = 0;
    if (__builtin_mul_overflow(w, h, &pixels) || __builtin_mul_overflow(pixels, c, &pixels) ||
        pixels != raw.size())
      return bad(12 + ml, std::to_string(raw.size()) + " pixel bytes for " + std::to_string(w) + "x" +
                              std::to_string(h) + " " + mode);
    std::vector<int64_t> shape{static_cast<int64_t>(h), static_cast<int64_t>(w)};
    if (c > 1) shape.push_back(static_cast<int64_t>(c));
    auto npy = std::make_shared<std::string>(EncodeNpy(DType::kUint8, shape, raw));
    f->data = *npy;
    f->owner = std::move(npy);
    return Status::OK();
  }

  std::string url_;
  std::string stem_;
  TarReaderOptions options_;
  ShardCompression compression_;
  std::vector<MdsColumn> columns_;
  std::vector<MdsEncoding> encodings_;
  std::unique_ptr<ByteStream> bytes_;
  std::unique_ptr<internal::ChunkReader> chunks_;
  std::vector<uint32_t> offsets_;
  std::vector<uint64_t> sizes_;
  uint64_t next_ = 0;
  bool done_ = false;
  Status error_;
  TarStats stats_;
  SampleIndex index_;
};

}  // namespace

Result<std::unique_ptr<TarReader>> OpenMdsReader(std::unique_ptr<InputStream> in,
                                                 const MdsLayout& layout,
                                                 const TarReaderOptions& options, int64_t first) {
  if (options.chunk_size < (size_t{64} << 10))
    return Status::Config("TarReaderOptions.chunk_size must be at least 64 KiB");
  const std::string url = RedactUrl(in->url());
  std::vector<MdsEncoding> encodings;
  for (const MdsColumn& c : layout.columns) {
    auto e = internal::ParseMdsEncoding(c.encoding);
    if (!e.ok()) return e.status().WithContext("MDS shard " + url + ", column '" + c.name + "'");
    encodings.push_back(*e);
  }
  const std::optional<uint64_t> size = in->size();
  ShardCompression compression;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto sniffed, internal::Sniff(std::move(in), &compression));
  if (compression == ShardCompression::kGzip)
    return Status(StatusCode::kCorrupt, "MDS shard " + url + " is gzip-compressed; MDS shards are "
                                        "read uncompressed or zstd-compressed", url, 0);
  SHARDSTREAM_ASSIGN_OR_RETURN(auto bytes, internal::OpenByteStream(std::move(sniffed), compression,
                                                                    options.chunk_size));
  auto reader = std::make_unique<MdsReader>(url, options, compression, layout.columns,
                                            std::move(encodings), layout.name);
  SHARDSTREAM_RETURN_IF_ERROR(reader->Start(std::move(bytes), size, layout, first));
  return std::unique_ptr<TarReader>(std::move(reader));
}

}  // namespace shardstream
