// The fast engine: our own ustar/pax/GNU header parser over ChunkReader.
// It checks more than libarchive does (a pax size that disagrees with the
// ustar size, a declared size past the end, a missing end-of-archive marker)
// because a shard is untrusted input.
#include <cstdio>
#include <cstring>

#include "tar/chunk_reader.h"
#include "tar/member_stream.h"
#include "tar/tar_format.h"

namespace shardstream::internal {
namespace {

// Largest value an 11-digit octal size field holds; writers put it (or 0)
// there when the real size lives in a pax record.
constexpr uint64_t kMaxOctalSize = 077777777777ull;

class FastMemberStream final : public MemberStream {
 public:
  FastMemberStream(std::unique_ptr<ByteStream> in, const std::string& url,
                   const TarReaderOptions& options, uint64_t base)
      : in_(std::move(in)),
        url_(url),
        limits_(options.limits),
        reader_(in_.get(), options.chunk_size, base),
        total_(in_->size()) {}

  Status Next(Member* m) override {
    if (pending_skip_ > 0) {
      // The data of the previous member, which was not handed out.
      uint64_t n = pending_skip_;
      pending_skip_ = 0;
      SHARDSTREAM_ASSIGN_OR_RETURN(bool ok, reader_.Skip(n));
      if (!ok) return Corrupt(reader_.offset(), "", "truncated inside a member's data");
    }
    PaxAttributes pax;
    std::optional<std::string> long_name;
    bool have_pax = false;
    bool long_name_has_nul = false;
    int64_t entry_start = -1;
    while (true) {
      SHARDSTREAM_ASSIGN_OR_RETURN(size_t avail, reader_.Ensure(kTarBlock));
      uint64_t off = reader_.offset();
      if (avail == 0) {
        if (off == 0) return Corrupt(off, "", "empty file: not a tar shard");
        return Corrupt(off, "", "truncated: the shard ends without an end-of-archive marker");
      }
      if (avail < kTarBlock) return Corrupt(off, "", "truncated inside a tar header");
      const char* block = reader_.cursor();
      if (IsZeroBlock(block)) {
        if (entry_start >= 0)
          return Corrupt(off, long_name.value_or(""), "extension header without an entry");
        m->end = true;
        m->header_offset = m->end_offset = off;
        return in_->Finish();
      }
      if (!ChecksumMatches(block)) {
        if (off == 0 && !seen_header_) return Corrupt(off, "", "not a tar shard (no valid tar header at offset 0)");
        return Corrupt(off, HeaderPath(block), "bad header checksum");
      }
      seen_header_ = true;
      if (++entries_ > limits_.max_entries)
        return Corrupt(off, "", "more than " + std::to_string(limits_.max_entries) +
                                    " entries (limit max_entries)");
      if (entry_start < 0) entry_start = static_cast<int64_t>(off);
      char type = block[Ustar::kTypeflag];
      auto size_field = ParseNumber(block + Ustar::kSize, Ustar::kSizeLen);
      if (!size_field) return Corrupt(off, HeaderPath(block), "unreadable size field");
      uint64_t ustar_size = *size_field;

      if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
        if (ustar_size > limits_.max_header_size)
          return Corrupt(off, HeaderPath(block),
                         "extension header of " + std::to_string(ustar_size) +
                             " bytes exceeds the limit max_header_size");
        std::string_view data;
        std::shared_ptr<const void> owner;
        reader_.Advance(kTarBlock);
        SHARDSTREAM_RETURN_IF_ERROR(CheckFits(off, HeaderPath(block), ustar_size));
        SHARDSTREAM_ASSIGN_OR_RETURN(bool ok, reader_.Take(ustar_size, &data, &owner));
        if (!ok) return Corrupt(off, "", "truncated inside an extension header");
        if (type == 'x' || type == 'g') {
          std::string why;
          PaxAttributes attrs;
          if (!ParsePax(data, &attrs, &why)) return Corrupt(off, "", why);
          if (type == 'x') {  // global ('g') records are read for validity only
            have_pax = true;
            if (attrs.path) pax.path = attrs.path;
            if (attrs.linkpath) pax.linkpath = attrs.linkpath;
            if (attrs.size) pax.size = attrs.size;
          } else {
            entry_start = -1;
          }
        } else if (type == 'L') {
          size_t nul = data.find('\0');
          std::string_view name = data.substr(0, nul);
          if (nul != std::string_view::npos &&
              data.find_first_not_of('\0', nul) != std::string_view::npos)
            long_name_has_nul = true;
          long_name = std::string(name);
          if (long_name_has_nul)
            long_name = std::string(data.substr(0, data.find_last_not_of('\0') + 1));
        }
        SHARDSTREAM_ASSIGN_OR_RETURN(bool skipped, reader_.Skip(PaddedSize(ustar_size) - ustar_size));
        if (!skipped) return Corrupt(reader_.offset(), "", "truncated inside an extension header");
        continue;
      }

      // A real entry.
      m->end = false;
      m->problem = Status::OK();
      if (pax.path) {
        m->path = *pax.path;
      } else if (long_name) {
        m->path = *long_name;
      } else {
        HeaderPath(block, &m->path);
      }
      m->header_offset = static_cast<uint64_t>(entry_start);
      uint64_t size = ustar_size;
      if (pax.size) {
        if (ustar_size != 0 && ustar_size != *pax.size && ustar_size != kMaxOctalSize)
          return Corrupt(off, m->path,
                         "pax size " + std::to_string(*pax.size) + " disagrees with ustar size " +
                             std::to_string(ustar_size));
        size = *pax.size;
      }
      switch (type) {
        case '0': case '\0': case '7': m->type = MemberType::kFile; break;
        case '1': m->type = MemberType::kHardlink; break;
        case '2': m->type = MemberType::kSymlink; break;
        case '3': case '4': case '6': m->type = MemberType::kDevice; break;
        case '5': m->type = MemberType::kDirectory; break;
        default: m->type = MemberType::kOther; break;
      }
      // Links and devices carry no data, whatever the size field says
      // (traditional readers ignore it), except pax hard links with a body.
      if (m->type == MemberType::kSymlink || m->type == MemberType::kDevice ||
          (m->type == MemberType::kHardlink && !have_pax))
        size = 0;
      m->size = size;
      reader_.Advance(kTarBlock);
      m->data_offset = reader_.offset();
      SHARDSTREAM_RETURN_IF_ERROR(CheckFits(off, m->path, size));
      m->data = {};
      m->owner.reset();
      m->end_offset = m->data_offset + PaddedSize(size);
      if (m->type == MemberType::kFile) {
        m->problem = CheckMemberPath(m->path, url_, m->header_offset, limits_);
        if (m->problem.ok() && long_name_has_nul)
          m->problem = CorruptAt(url_, m->header_offset, m->path, "NUL byte in the member name");
        if (m->problem.ok() && size > limits_.max_member_size)
          m->problem = CorruptAt(url_, m->header_offset, m->path,
                                 "member of " + std::to_string(size) +
                                     " bytes exceeds the limit max_member_size");
      }
      if (m->type != MemberType::kFile || !m->problem.ok()) {
        // Skipped on the next call, so a caller that stops at the problem
        // does not wait for (or trip over) data it will never use.
        pending_skip_ = PaddedSize(size);
        return Status::OK();
      }
      bool ok;
      SHARDSTREAM_ASSIGN_OR_RETURN(ok, reader_.Take(size, &m->data, &m->owner));
      if (!ok) return Corrupt(m->data_offset, m->path, "truncated inside the member's data");
      SHARDSTREAM_ASSIGN_OR_RETURN(ok, reader_.Skip(PaddedSize(size) - size));
      if (!ok) return Corrupt(reader_.offset(), m->path, "truncated inside the member's padding");
      m->end_offset = reader_.offset();
      return Status::OK();
    }
  }

 private:
  Status Corrupt(uint64_t off, const std::string& member, const std::string& what) {
    return CorruptAt(url_, off, member, what);
  }
  // Rejects a declared size that runs past the end of a shard of known size
  // before anything is allocated or read for it.
  Status CheckFits(uint64_t header_off, const std::string& member, uint64_t size) {
    if (!total_) return Status::OK();
    uint64_t at = reader_.offset();
    if (size > *total_ || at > *total_ - size)
      return Corrupt(header_off, member,
                     "declared size " + std::to_string(size) + " extends past the end of the shard (" +
                         std::to_string(*total_) + " bytes)");
    return Status::OK();
  }

  std::unique_ptr<ByteStream> in_;
  std::string url_;
  ReaderLimits limits_;
  ChunkReader reader_;
  std::optional<uint64_t> total_;
  uint64_t entries_ = 0;
  uint64_t pending_skip_ = 0;
  bool seen_header_ = false;
};

}  // namespace

std::unique_ptr<MemberStream> NewFastMemberStream(std::unique_ptr<ByteStream> in,
                                                  const std::string& url,
                                                  const TarReaderOptions& options,
                                                  uint64_t base_offset) {
  return std::make_unique<FastMemberStream>(std::move(in), url, options, base_offset);
}

namespace {
// Member names are untrusted: control bytes are shown escaped, and very long
// names shortened, so a message stays one readable line.
std::string PrintableName(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size() && out.size() < 300; ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c == 0) {
      out += "\\0";
    } else if (c < 0x20 || c == 0x7f || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (out.size() >= 300) out += "...";
  return out;
}
}  // namespace

Status CorruptAt(const std::string& url, uint64_t offset, const std::string& member,
                 const std::string& what) {
  std::string msg = "shard " + url;
  if (!member.empty()) msg += ": member '" + PrintableName(member) + "'";
  msg += " at offset " + std::to_string(offset) + ": " + what;
  return Status(StatusCode::kCorrupt, std::move(msg), url, static_cast<int64_t>(offset));
}

Status CheckMemberPath(const std::string& path, const std::string& url, uint64_t offset,
                       const ReaderLimits& limits) {
  auto bad = [&](const char* why) { return CorruptAt(url, offset, path, why); };
  if (path.empty()) return bad("empty member name");
  if (path.size() > limits.max_path_length)
    return CorruptAt(url, offset, path, "member name longer than the limit max_path_length");
  if (path.find('\0') != std::string::npos) return bad("NUL byte in the member name");
  if (path[0] == '/') return bad("absolute member name");
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash - start == 2 && path.compare(start, 2, "..") == 0)
      return bad("'..' in the member name");
    start = slash + 1;
  }
  return Status::OK();
}

}  // namespace shardstream::internal
