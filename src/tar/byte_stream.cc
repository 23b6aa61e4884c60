#include "tar/byte_stream.h"

#include <archive.h>
#include <zstd.h>

#include <cstring>
#include <vector>

#include "shardstream/url.h"
#include "tar/archive_input.h"

namespace shardstream::internal {

Status ByteStream::Finish() {
  std::vector<char> sink(size_t{64} << 10);
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t n, Read(sink.size(), sink.data()));
    if (n == 0) return Status::OK();
  }
}

Result<size_t> PrefixedInput::Read(size_t n, char* out) {
  if (prefix_pos_ < prefix_.size()) {
    size_t k = std::min(n, prefix_.size() - prefix_pos_);
    std::memcpy(out, prefix_.data() + prefix_pos_, k);
    prefix_pos_ += k;
    return k;
  }
  return in_->Read(n, out);
}

Result<std::unique_ptr<PrefixedInput>> Sniff(std::unique_ptr<InputStream> in,
                                             ShardCompression* compression) {
  std::string prefix(4, '\0');
  size_t got = 0;
  while (got < prefix.size()) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t n, in->Read(prefix.size() - got, prefix.data() + got));
    if (n == 0) break;
    got += n;
  }
  prefix.resize(got);
  *compression = ShardCompression::kNone;
  if (got >= 2 && static_cast<unsigned char>(prefix[0]) == 0x1f &&
      static_cast<unsigned char>(prefix[1]) == 0x8b) {
    *compression = ShardCompression::kGzip;
  } else if (got >= 4 && std::memcmp(prefix.data(), "\x28\xb5\x2f\xfd", 4) == 0) {
    *compression = ShardCompression::kZstd;
  }
  return std::make_unique<PrefixedInput>(std::move(in), std::move(prefix));
}

namespace {

class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(std::unique_ptr<PrefixedInput> in) : in_(std::move(in)) {}
  Result<size_t> Read(size_t n, char* out) override { return in_->Read(n, out); }
  // The object's total size: offsets in the reader are absolute too.
  std::optional<uint64_t> size() const override { return in_->size(); }

 private:
  std::unique_ptr<PrefixedInput> in_;
};

// Decompression through libarchive's "raw" format: one pseudo-entry whose
// data is the decoded stream.
class DecodedStream final : public ByteStream {
 public:
  DecodedStream(ArchivePtr a, std::unique_ptr<ArchiveInput> input)
      : a_(std::move(a)), input_(std::move(input)) {}
  Result<size_t> Read(size_t n, char* out) override {
    if (eof_) return size_t{0};
    la_ssize_t r = archive_read_data(a_.get(), out, n);
    if (r < 0) return input_->Error(a_.get(), "decompressing", static_cast<int64_t>(decoded_));
    if (r == 0) eof_ = true;
    decoded_ += static_cast<uint64_t>(r);
    return static_cast<size_t>(r);
  }
  std::optional<uint64_t> size() const override { return std::nullopt; }
 private:
  ArchivePtr a_;
  std::unique_ptr<ArchiveInput> input_;
  uint64_t decoded_ = 0;
  bool eof_ = false;
};

// zstd through libzstd directly: it decodes straight into the reader's
// chunk, where libarchive's filter would decode into its own buffer and copy.
class ZstdStream final : public ByteStream {
 public:
  ZstdStream(std::unique_ptr<PrefixedInput> in, size_t block)
      : in_(std::move(in)), dctx_(ZSTD_createDStream()), buf_(block) {}
  ~ZstdStream() override { ZSTD_freeDStream(dctx_); }

  Result<size_t> Read(size_t n, char* out) override {
    if (dctx_ == nullptr) return Status::Io("ZSTD_createDStream failed");
    ZSTD_outBuffer ob{out, n, 0};
    while (ob.pos == 0) {
      if (in_pos_ == in_size_) {
        if (in_eof_) {
          if (last_ != 0)
            return Status(StatusCode::kCorrupt,
                          "shard " + in_->url() + ": truncated zstd stream at compressed offset " +
                              std::to_string(consumed_),
                          in_->url(), static_cast<int64_t>(decoded_));
          return size_t{0};
        }
        SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, in_->Read(buf_.size(), buf_.data()));
        in_pos_ = 0;
        in_size_ = got;
        if (got == 0) {
          in_eof_ = true;
          continue;
        }
      }
      ZSTD_inBuffer ib{buf_.data(), in_size_, in_pos_};
      size_t r = ZSTD_decompressStream(dctx_, &ob, &ib);
      consumed_ += ib.pos - in_pos_;
      in_pos_ = ib.pos;
      if (ZSTD_isError(r))
        return Status(StatusCode::kCorrupt,
                      "shard " + in_->url() + ": bad zstd data at compressed offset " +
                          std::to_string(consumed_) + ": " + ZSTD_getErrorName(r),
                      in_->url(), static_cast<int64_t>(decoded_ + ob.pos));
      last_ = r;
    }
    decoded_ += ob.pos;
    return ob.pos;
  }
  std::optional<uint64_t> size() const override { return std::nullopt; }
 private:
  std::unique_ptr<PrefixedInput> in_;
  ZSTD_DStream* dctx_;
  std::vector<char> buf_;
  size_t in_pos_ = 0, in_size_ = 0;
  bool in_eof_ = false;
  size_t last_ = 0;  // ZSTD_decompressStream's last hint: 0 at a frame's end
  uint64_t consumed_ = 0, decoded_ = 0;
};

}  // namespace

Result<std::unique_ptr<ByteStream>> OpenByteStream(std::unique_ptr<PrefixedInput> in,
                                                   ShardCompression compression, size_t block) {
  if (compression == ShardCompression::kNone)
    return std::unique_ptr<ByteStream>(new PlainStream(std::move(in)));
  if (compression == ShardCompression::kZstd)
    return std::unique_ptr<ByteStream>(new ZstdStream(std::move(in), block));
  ArchivePtr a(archive_read_new());
  if (!a) return Status::Io("archive_read_new failed");
  if (compression == ShardCompression::kGzip) {
    archive_read_support_filter_gzip(a.get());
  } else {
    archive_read_support_filter_zstd(a.get());
  }
  archive_read_support_format_raw(a.get());
  std::string url = in->url();
  auto input = std::make_unique<ArchiveInput>(std::move(in), block);
  if (input->Open(a.get()) != ARCHIVE_OK) return input->Error(a.get(), "opening", 0);
  struct archive_entry* entry = nullptr;
  int r = archive_read_next_header(a.get(), &entry);
  if (r == ARCHIVE_EOF) return Status(StatusCode::kCorrupt, "empty compressed stream in " + url, url, 0);
  if (r < ARCHIVE_WARN) return input->Error(a.get(), "decompressing", 0);
  return std::unique_ptr<ByteStream>(new DecodedStream(std::move(a), std::move(input)));
}

int ArchiveInput::Open(struct archive* a) {
  return archive_read_open(a, this, nullptr, &ArchiveInput::ReadCb, nullptr);
}

la_ssize_t ArchiveInput::ReadCb(struct archive* a, void* p, const void** buf) {
  auto* self = static_cast<ArchiveInput*>(p);
  *buf = self->buf_.data();
  size_t got = 0;
  // Fill the whole block: libarchive's cost is per call, so big blocks pay.
  while (got < self->buf_.size()) {
    auto r = self->in_->Read(self->buf_.size() - got, self->buf_.data() + got);
    if (!r.ok()) {
      self->read_error_ = r.status();
      archive_set_error(a, EIO, "%s", r.status().ToString().c_str());
      return -1;
    }
    if (*r == 0) break;
    got += *r;
  }
  self->bytes_read_ += got;
  return static_cast<la_ssize_t>(got);
}

Status ArchiveInput::Error(struct archive* a, const std::string& what, int64_t offset) const {
  const std::string& u = in_->url();
  if (!read_error_.ok()) return read_error_.WithContext(what + " " + u, u, offset);
  const char* msg = archive_error_string(a);
  return Status(StatusCode::kCorrupt,
                "shard " + u + ": " + what + " at offset " + std::to_string(offset) + ": " +
                    (msg ? msg : "libarchive error"),
                u, offset);
}

}  // namespace shardstream::internal
