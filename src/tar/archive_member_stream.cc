// The libarchive engine: libarchive's tar reader (tar formats, gzip and zstd
// filters only) over ArchiveInput's large blocks. Member data is copied out
// of libarchive's buffers into reference-counted chunks of our own.
#include <archive.h>
#include <archive_entry.h>

#include <cstring>

#include "tar/archive_input.h"
#include "tar/member_stream.h"
#include "tar/tar_format.h"

namespace shardstream::internal {
namespace {

class ArchiveMemberStream final : public MemberStream {
 public:
  ArchiveMemberStream(ArchivePtr a, std::unique_ptr<ArchiveInput> input, const std::string& url,
                      const TarReaderOptions& options, std::optional<uint64_t> total)
      : a_(std::move(a)), input_(std::move(input)), url_(url), options_(options), total_(total) {}

  Status Next(Member* m) override {
    struct archive_entry* e = nullptr;
    int r = archive_read_next_header(a_.get(), &e);
    int64_t pos = archive_read_header_position(a_.get());
    if (r == ARCHIVE_EOF) {
      if (input_->bytes_read() == 0)
        return CorruptAt(url_, 0, "", "empty file: not a tar shard");
      m->end = true;
      return Status::OK();
    }
    if (r < ARCHIVE_WARN) return input_->Error(a_.get(), "reading a tar header", pos < 0 ? 0 : pos);
    if (++entries_ > options_.limits.max_entries)
      return CorruptAt(url_, static_cast<uint64_t>(pos), "",
                       "more than " + std::to_string(options_.limits.max_entries) +
                           " entries (limit max_entries)");
    m->end = false;
    m->problem = Status::OK();
    const char* p = archive_entry_pathname(e);
    m->path = p ? p : "";
    m->header_offset = static_cast<uint64_t>(pos);
    m->size = archive_entry_size_is_set(e) ? static_cast<uint64_t>(archive_entry_size(e)) : 0;
    m->data = {};
    m->owner.reset();
    switch (archive_entry_filetype(e)) {
      case AE_IFREG: m->type = MemberType::kFile; break;
      case AE_IFDIR: m->type = MemberType::kDirectory; break;
      case AE_IFLNK: m->type = MemberType::kSymlink; break;
      case AE_IFCHR: case AE_IFBLK: case AE_IFIFO: m->type = MemberType::kDevice; break;
      default: m->type = MemberType::kOther; break;
    }
    if (archive_entry_hardlink(e) != nullptr && m->size == 0) m->type = MemberType::kHardlink;
    if (m->type != MemberType::kFile) {
      m->size = 0;
      return Status::OK();
    }
    m->problem = CheckMemberPath(m->path, url_, m->header_offset, options_.limits);
    if (m->problem.ok() && m->size > options_.limits.max_member_size)
      m->problem = CorruptAt(url_, m->header_offset, m->path,
                             "member of " + std::to_string(m->size) +
                                 " bytes exceeds the limit max_member_size");
    if (total_ && (m->size > *total_ || m->header_offset > *total_ - m->size))
      return CorruptAt(url_, m->header_offset, m->path,
                       "declared size " + std::to_string(m->size) +
                           " extends past the end of the shard (" + std::to_string(*total_) +
                           " bytes)");
    if (!m->problem.ok()) {
      if (archive_read_data_skip(a_.get()) < ARCHIVE_WARN)
        return input_->Error(a_.get(), "skipping member '" + m->path + "'", pos);
      return Status::OK();
    }
    char* dst = Allocate(m->size, &m->owner);
    uint64_t done = 0;
    while (done < m->size) {
      la_ssize_t n = archive_read_data(a_.get(), dst + done, static_cast<size_t>(m->size - done));
      if (n < 0) return input_->Error(a_.get(), "reading member '" + m->path + "'", pos);
      if (n == 0)
        return CorruptAt(url_, static_cast<uint64_t>(pos), m->path,
                         "truncated inside the member's data");
      done += static_cast<uint64_t>(n);
    }
    m->data = std::string_view(dst, static_cast<size_t>(m->size));
    // libarchive does not tell where the data starts (after how many
    // extension headers): offsets inside a sample are the fast engine's.
    m->data_offset = 0;
    m->end_offset = m->header_offset + kTarBlock + PaddedSize(m->size);
    return Status::OK();
  }

 private:
  // Packs member bytes into shared chunks, as the fast engine's views do.
  char* Allocate(uint64_t n, std::shared_ptr<const void>* owner) {
    size_t chunk = options_.chunk_size;
    if (n > chunk / 2) {
      std::shared_ptr<char> own(new char[n ? n : 1], std::default_delete<char[]>());
      *owner = own;
      return own.get();
    }
    if (!chunk_ || used_ + n > chunk) {
      chunk_ = std::shared_ptr<char>(new char[chunk], std::default_delete<char[]>());
      used_ = 0;
    }
    char* p = chunk_.get() + used_;
    used_ += n;
    *owner = chunk_;
    return p;
  }

  ArchivePtr a_;
  std::unique_ptr<ArchiveInput> input_;
  std::string url_;
  TarReaderOptions options_;
  std::shared_ptr<char> chunk_;
  size_t used_ = 0;
  uint64_t entries_ = 0;
  std::optional<uint64_t> total_;
};

}  // namespace

Result<std::unique_ptr<MemberStream>> NewArchiveMemberStream(std::unique_ptr<PrefixedInput> in,
                                                             const std::string& url,
                                                             const TarReaderOptions& options,
                                                             std::optional<uint64_t> total_size) {
  ArchivePtr a(archive_read_new());
  if (!a) return Status::Io("archive_read_new failed");
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_zstd(a.get());
  auto input = std::make_unique<ArchiveInput>(std::move(in), options.chunk_size);
  if (input->Open(a.get()) != ARCHIVE_OK) {
    if (input->bytes_read() == 0 && input->read_error().ok())
      return CorruptAt(url, 0, "", "empty file: not a tar shard");
    return input->Error(a.get(), "opening", 0);
  }
  return std::unique_ptr<MemberStream>(
      new ArchiveMemberStream(std::move(a), std::move(input), url, options, total_size));
}

}  // namespace shardstream::internal
