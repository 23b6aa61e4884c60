#include "shardstream/shard_writer.h"

#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "shardstream/checksum.h"
#include "shardstream/shard_index.h"
#include "shardstream/url.h"
#include "tar/doc_group.h"
#include "tar/index_field.h"
#include "tar/member_stream.h"
#include "tar/tar_format.h"

namespace shardstream {

Result<std::string> FormatShardName(const std::string& pattern, int64_t n) {
  std::string out;
  int conversions = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool zero = j < pattern.size() && pattern[j] == '0';
    if (zero) ++j;
    int width = 0;
    while (j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9' && width < 100)
      width = width * 10 + (pattern[j++] - '0');
    if (j >= pattern.size() || pattern[j] != 'd' || width > 20)
      return Status::Config("shard name pattern '" + pattern +
                            "': only %d, %Nd and %0Nd conversions are allowed");
    std::string digits = std::to_string(n);
    if (static_cast<int>(digits.size()) < width)
      out.append(static_cast<size_t>(width) - digits.size(), zero ? '0' : ' ');
    out += digits;
    ++conversions;
    i = j;
  }
  if (conversions != 1)
    return Status::Config("shard name pattern '" + pattern +
                          "' must hold exactly one %d conversion for the shard number");
  if (out.find('/') != std::string::npos || out.empty())
    return Status::Config("shard name pattern '" + pattern + "' must give a plain file name");
  return out;
}

ShardWriter::~ShardWriter() = default;

namespace {

using internal::kTarBlock;
using internal::PaddedSize;

constexpr size_t kBufferSize = size_t{4} << 20;
constexpr uint64_t kMaxOctalSize = 077777777777ull;

struct ZstdDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};

class ShardWriterImpl final : public ShardWriter {
 public:
  ShardWriterImpl(std::string out_dir, ShardWriterOptions options, Source* source)
      : out_dir_(std::move(out_dir)), options_(std::move(options)), source_(source) {}

  ~ShardWriterImpl() override {
    if (file_) (void)file_->Abort();
  }

  Status Write(const Sample& sample) override {
    if (!error_.ok()) return error_;
    if (closed_) return Status::Config("ShardWriter::Write after Close");
    SHARDSTREAM_RETURN_IF_ERROR(Validate(sample));
    // A group is checked as a reader will: a writer never makes one that
    // reading refuses.
    const bool group = internal::IsDocGroup(sample);
    if (group) {
      Status st = internal::ParseDocGroup(sample, out_dir_, &group_);
      if (!st.ok()) return Status::Config("ShardWriter: " + st.message());
    }
    std::vector<const Field*> fields;
    for (const Field& f : sample.fields) fields.push_back(&f);
    std::sort(fields.begin(), fields.end(),
              [](const Field* a, const Field* b) { return a->name < b->name; });
    uint64_t bytes = 0;
    for (const Field* f : fields) bytes += EntryBytes(sample.key + "." + f->name, f->data.size());
    bool full = nsamples_ > 0 && (tar_bytes_ + bytes + 2 * kTarBlock > options_.max_bytes ||
                                  (options_.max_samples && nsamples_ >= options_.max_samples));
    if (full) SHARDSTREAM_RETURN_IF_ERROR(Track(FinishShard()));
    if (!file_) SHARDSTREAM_RETURN_IF_ERROR(Track(StartShard()));
    SampleIndexEntry entry;
    entry.offset = tar_bytes_;
    entry.key = sample.key;
    entry.nfields = static_cast<uint32_t>(fields.size());
    entry.first_field = index_.fields.size();
    uint64_t array_offset = 0;
    for (const Field* f : fields) {
      SHARDSTREAM_RETURN_IF_ERROR(Track(WriteMember(sample.key + "." + f->name, f->data)));
      const uint64_t data_offset = tar_bytes_ - PaddedSize(f->data.size());
      if (group) {
        if (f == group_.array) array_offset = data_offset;
        continue;
      }
      index_.fields.emplace_back();
      internal::MakeIndexField(f->name, data_offset, f->data, &index_.fields.back());
    }
    if (group) {
      // The index and the count list the documents, as a reader gives them.
      internal::IndexDocGroup(group_, sample.key, entry.offset, tar_bytes_, array_offset, &index_);
      nsamples_ += group_.docs();
      return Status::OK();
    }
    entry.length = tar_bytes_ - entry.offset;
    index_.samples.push_back(std::move(entry));
    ++nsamples_;
    return Status::OK();
  }

  Status Close() override {
    if (closed_) return error_;
    closed_ = true;
    if (!error_.ok()) return error_;
    if (file_) SHARDSTREAM_RETURN_IF_ERROR(Track(FinishShard()));
    SHARDSTREAM_RETURN_IF_ERROR(Track(source_->SyncDir(out_dir_)));
    if (!options_.manifest_name.empty())
      SHARDSTREAM_RETURN_IF_ERROR(
          Track(WriteManifest(manifest_, JoinUrl(out_dir_, options_.manifest_name), source_)));
    return Status::OK();
  }

  const Manifest& manifest() const override { return manifest_; }

 private:
  Status Track(Status st) {
    if (!st.ok() && error_.ok()) error_ = st;
    return st;
  }

  static Status Validate(const Sample& s) {
    auto bad = [&](const std::string& why) {
      return Status::Config("ShardWriter: sample '" + s.key + "': " + why);
    };
    if (s.fields.empty()) return bad("no fields");
    ReaderLimits limits;
    Status path_ok = internal::CheckMemberPath(s.key + ".x", "", 0, limits);
    if (!path_ok.ok()) return bad("key is not a valid member name");
    size_t slash = s.key.rfind('/');
    std::string_view base = std::string_view(s.key).substr(slash == std::string::npos ? 0 : slash + 1);
    if (base.empty() || base.find('.') != std::string_view::npos)
      return bad("the key's last component must be non-empty and hold no '.'");
    for (size_t i = 0; i < s.fields.size(); ++i) {
      const std::string& n = s.fields[i].name;
      if (n.empty() || n.find('/') != std::string::npos || n.find('\0') != std::string::npos)
        return bad("field name '" + n + "' must be non-empty without '/' or NUL");
      for (size_t j = 0; j < i; ++j)
        if (s.fields[j].name == n) return bad("duplicate field '" + n + "'");
    }
    return Status::OK();
  }

  static std::string PaxFor(const std::string& path, uint64_t size) {
    std::string pax;
    if (path.size() > internal::Ustar::kNameLen) pax += internal::PaxRecord("path", path);
    if (size > kMaxOctalSize) pax += internal::PaxRecord("size", std::to_string(size));
    return pax;
  }
  static uint64_t EntryBytes(const std::string& path, uint64_t size) {
    std::string pax = PaxFor(path, size);
    uint64_t n = kTarBlock + PaddedSize(size);
    if (!pax.empty()) n += kTarBlock + PaddedSize(pax.size());
    return n;
  }

  Status StartShard() {
    SHARDSTREAM_ASSIGN_OR_RETURN(name_, FormatShardName(options_.pattern, shard_number_));
    // An object store shows a shard only once its upload completes: written in place.
    std::string tmp = WritesWholeObjects(out_dir_) ? JoinUrl(out_dir_, name_)
                                                   : JoinUrl(out_dir_, "." + name_ + ".tmp");
    SHARDSTREAM_ASSIGN_OR_RETURN(file_, source_->NewWritableFile(tmp));
    tmp_url_ = tmp;
    SHARDSTREAM_ASSIGN_OR_RETURN(hasher_, Hasher::Create("xxh3_128"));
    if (options_.compression == ShardCompression::kZstd) {
      zstd_.reset(ZSTD_createCCtx());
      if (!zstd_) return Status::Io("ZSTD_createCCtx failed");
      ZSTD_CCtx_setParameter(zstd_.get(), ZSTD_c_compressionLevel, options_.zstd_level);
      ZSTD_CCtx_setParameter(zstd_.get(), ZSTD_c_checksumFlag, 1);
    }
    tar_bytes_ = 0;
    file_bytes_ = 0;
    nsamples_ = 0;
    index_ = SampleIndex();
    return Status::OK();
  }

  Status WriteMember(const std::string& path, std::string_view data) {
    char block[kTarBlock];
    std::string pax = PaxFor(path, data.size());
    if (!pax.empty()) {
      internal::FormatHeader(block, "PaxHeader", pax.size(), 'x', options_.mtime);
      SHARDSTREAM_RETURN_IF_ERROR(Emit(std::string_view(block, kTarBlock)));
      SHARDSTREAM_RETURN_IF_ERROR(Emit(pax));
      SHARDSTREAM_RETURN_IF_ERROR(Pad(pax.size()));
    }
    uint64_t ustar_size = data.size() > kMaxOctalSize ? 0 : data.size();
    internal::FormatHeader(block, std::string_view(path).substr(0, internal::Ustar::kNameLen),
                           ustar_size, '0', options_.mtime);
    SHARDSTREAM_RETURN_IF_ERROR(Emit(std::string_view(block, kTarBlock)));
    SHARDSTREAM_RETURN_IF_ERROR(Emit(data));
    return Pad(data.size());
  }

  Status Pad(uint64_t n) {
    static const char kZero[kTarBlock] = {};
    size_t pad = static_cast<size_t>(PaddedSize(n) - n);
    return pad ? Emit(std::string_view(kZero, pad)) : Status::OK();
  }

  // Tar bytes in: buffered, compressed if asked, hashed and appended.
  Status Emit(std::string_view data) {
    tar_bytes_ += data.size();
    if (zstd_) {
      ZSTD_inBuffer in{data.data(), data.size(), 0};
      while (in.pos < in.size) SHARDSTREAM_RETURN_IF_ERROR(Compress(&in, ZSTD_e_continue));
      return Status::OK();
    }
    if (data.size() >= kBufferSize / 4) {  // large fields skip the buffer
      SHARDSTREAM_RETURN_IF_ERROR(FlushBuffer());
      return Append(data);
    }
    buffer_.append(data.data(), data.size());
    return buffer_.size() >= kBufferSize ? FlushBuffer() : Status::OK();
  }

  Status Compress(ZSTD_inBuffer* in, ZSTD_EndDirective mode) {
    if (out_.size() < ZSTD_CStreamOutSize()) out_.resize(ZSTD_CStreamOutSize());
    ZSTD_outBuffer out{out_.data(), out_.size(), 0};
    size_t left = ZSTD_compressStream2(zstd_.get(), &out, in, mode);
    if (ZSTD_isError(left))
      return Status::Io(std::string("zstd compression failed: ") + ZSTD_getErrorName(left));
    SHARDSTREAM_RETURN_IF_ERROR(Append(std::string_view(out_.data(), out.pos)));
    return left == 0 || mode != ZSTD_e_end ? Status::OK() : Compress(in, mode);
  }

  Status FlushBuffer() {
    if (buffer_.empty()) return Status::OK();
    Status st = Append(buffer_);
    buffer_.clear();
    return st;
  }

  Status Append(std::string_view data) {
    if (data.empty()) return Status::OK();
    hasher_->Update(data);
    file_bytes_ += data.size();
    return file_->Append(data);
  }

  Status FinishShard() {
    static const char kEnd[2 * kTarBlock] = {};
    SHARDSTREAM_RETURN_IF_ERROR(Emit(std::string_view(kEnd, sizeof(kEnd))));
    if (zstd_) {
      ZSTD_inBuffer in{nullptr, 0, 0};
      SHARDSTREAM_RETURN_IF_ERROR(Compress(&in, ZSTD_e_end));
      zstd_.reset();
    }
    SHARDSTREAM_RETURN_IF_ERROR(FlushBuffer());
    SHARDSTREAM_RETURN_IF_ERROR(file_->Sync());
    SHARDSTREAM_RETURN_IF_ERROR(file_->Close());
    std::string final_url = JoinUrl(out_dir_, name_);
    if (tmp_url_ != final_url) SHARDSTREAM_RETURN_IF_ERROR(source_->Rename(tmp_url_, final_url));
    file_.reset();
    ShardEntry e;
    e.url = name_;
    e.resolved = final_url;
    e.size = static_cast<int64_t>(file_bytes_);
    e.nsamples = static_cast<int64_t>(nsamples_);
    e.checksum = hasher_->Finish();
    manifest_.shards.push_back(std::move(e));
    if (options_.write_index && options_.compression == ShardCompression::kNone) {
      index_.shard_size = file_bytes_;
      SHARDSTREAM_RETURN_IF_ERROR(WriteSampleIndex(index_, final_url, source_));
    }
    ++shard_number_;
    return Status::OK();
  }

  std::string out_dir_;
  ShardWriterOptions options_;
  Source* source_;
  Manifest manifest_;
  std::unique_ptr<WritableFile> file_;
  std::unique_ptr<Hasher> hasher_;
  std::unique_ptr<ZSTD_CCtx, ZstdDeleter> zstd_;
  std::string name_, tmp_url_;
  std::string buffer_, out_;
  uint64_t tar_bytes_ = 0, file_bytes_ = 0, nsamples_ = 0;
  int64_t shard_number_ = 0;
  SampleIndex index_;
  internal::DocGroup group_;
  Status error_;
  bool closed_ = false;
};

}  // namespace

namespace {

// Whether `name` is one the pattern makes ("shard-%06d.tar": shard-000123.tar):
// the literal text around the one conversion, digits in between.
bool MadeByPattern(const std::string& pattern, const std::string& name) {
  std::string prefix, suffix;
  bool in_suffix = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    std::string& out = in_suffix ? suffix : prefix;
    if (pattern[i] != '%') {
      out += pattern[i];
    } else if (i + 1 < pattern.size() && pattern[i + 1] == '%') {
      out += '%';
      ++i;
    } else {
      while (i < pattern.size() && pattern[i] != 'd') ++i;  // flags and width
      in_suffix = true;
    }
  }
  if (name.size() <= prefix.size() + suffix.size()) return false;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  for (size_t i = prefix.size(); i < name.size() - suffix.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

// Shards of this writer's pattern, their sample indexes and its manifest
// already in out_dir: a read of the folder would take old shards beside the
// new ones (duplicated data), so they are refused, or removed with
// `overwrite`. Shards of other patterns (other writers of the same folder)
// are left alone.
Status ClearOldData(Source* source, const std::string& out_dir, const ShardWriterOptions& o) {
  auto listed = source->List(out_dir);
  if (!listed.ok()) {
    // Sources that cannot list (plain http) cannot be checked.
    return listed.status().code() == StatusCode::kConfig ? Status::OK() : listed.status();
  }
  std::vector<std::string> old;
  for (const FileInfo& f : *listed) {
    if (f.is_dir) continue;
    std::string name = UrlBasename(f.url);
    const bool index = name.size() > 4 && name.compare(name.size() - 4, 4, ".idx") == 0;
    if (MadeByPattern(o.pattern, index ? name.substr(0, name.size() - 4) : name) ||
        (!o.manifest_name.empty() && name == o.manifest_name))
      old.push_back(f.url);
  }
  if (old.empty()) return Status::OK();
  if (!o.overwrite) {
    std::string names;
    for (size_t i = 0; i < old.size() && i < 3; ++i)
      names += (i ? ", " : "") + UrlBasename(old[i]);
    if (old.size() > 3) names += ", ...";
    return Status(StatusCode::kConfig,
                  "shard writer: " + RedactUrl(out_dir) + " already holds " +
                      std::to_string(old.size()) + " shard, index or manifest file(s) of this "
                      "writer's names (" + names +
                      "), which a read of the folder would take beside the new shards; write to "
                      "an empty directory, or pass overwrite to remove them first "
                      "(ShardWriterOptions::overwrite, ShardWriter(..., overwrite=True), "
                      "pack --overwrite)",
                  RedactUrl(out_dir));
  }
  // The manifest first: a folder never shows a manifest naming shards gone.
  std::stable_partition(old.begin(), old.end(), [&](const std::string& u) {
    return UrlBasename(u) == o.manifest_name;
  });
  for (const std::string& u : old) {
    Status s = source->Remove(u);
    if (!s.ok() && s.code() != StatusCode::kNotFound)
      return s.WithContext("shard writer: removing " + RedactUrl(u) + " (overwrite)");
  }
  Status sync = source->SyncDir(out_dir);  // object stores: kConfig, nothing to do
  return sync.code() == StatusCode::kConfig ? Status::OK() : sync;
}

}  // namespace

Result<std::unique_ptr<ShardWriter>> ShardWriter::Create(const std::string& out_dir,
                                                         const ShardWriterOptions& options) {
  ShardWriterOptions opts = options;
  if (opts.compression == ShardCompression::kGzip)
    return Status::Config("ShardWriter writes uncompressed or zstd shards, not gzip");
  if (opts.pattern.empty())
    opts.pattern = opts.compression == ShardCompression::kZstd ? "shard-%06d.tar.zst"
                                                               : "shard-%06d.tar";
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string probe, FormatShardName(opts.pattern, 0));
  (void)probe;
  if (opts.max_bytes == 0) return Status::Config("ShardWriterOptions.max_bytes must be > 0");
  Source* source = opts.source ? opts.source : DefaultSource().get();
  SHARDSTREAM_RETURN_IF_ERROR(source->CreateDir(out_dir));
  SHARDSTREAM_RETURN_IF_ERROR(ClearOldData(source, out_dir, opts));
  return std::unique_ptr<ShardWriter>(new ShardWriterImpl(out_dir, std::move(opts), source));
}

}  // namespace shardstream
