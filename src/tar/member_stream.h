// MemberStream: the entries of a tar, one at a time, from either engine (our
// fast parser or libarchive). TarReader turns members into samples.
#ifndef SHARDSTREAM_TAR_MEMBER_STREAM_H_
#define SHARDSTREAM_TAR_MEMBER_STREAM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "shardstream/status.h"
#include "shardstream/tar_reader.h"
#include "tar/byte_stream.h"

namespace shardstream::internal {

enum class MemberType { kFile, kDirectory, kSymlink, kHardlink, kDevice, kOther };

struct Member {
  bool end = false;         // no more members; the rest is ignored
  MemberType type = MemberType::kFile;
  std::string path;
  uint64_t size = 0;
  uint64_t header_offset = 0;  // first block of the entry, extension headers included
  uint64_t data_offset = 0;
  uint64_t end_offset = 0;     // after the padded data
  std::string_view data;       // kFile only, and only when `problem` is OK
  std::shared_ptr<const void> owner;
  // A member-level defect (bad name, too large): the stream is still in step,
  // so a skip-sample policy can go on.
  Status problem;
};

class MemberStream {
 public:
  virtual ~MemberStream() = default;
  // The next member. A non-OK return is fatal for the shard: the stream is
  // no longer in step. Not called again after an error or the end.
  virtual Status Next(Member* m) = 0;
};

// Our parser. `base_offset`: where `in` starts in the tar (OpenAt);
// `total_size`: the tar's size when known, to reject declared sizes past the
// end before reading them.
std::unique_ptr<MemberStream> NewFastMemberStream(std::unique_ptr<ByteStream> in,
                                                  const std::string& url,
                                                  const TarReaderOptions& options,
                                                  uint64_t base_offset);
// libarchive's tar reader over `in` (compressed or not). `total_size`: the
// tar's size when known (uncompressed), to reject declared sizes past the end
// before allocating for them.
Result<std::unique_ptr<MemberStream>> NewArchiveMemberStream(std::unique_ptr<PrefixedInput> in,
                                                             const std::string& url,
                                                             const TarReaderOptions& options,
                                                             std::optional<uint64_t> total_size);

// The checks every engine applies to a member path: empty, absolute, "..",
// NUL, too long. Returns OK or the kCorrupt problem.
Status CheckMemberPath(const std::string& path, const std::string& url, uint64_t offset,
                       const ReaderLimits& limits);

// "shard <url>: member '<path>' at offset N: <what>" as kCorrupt.
Status CorruptAt(const std::string& url, uint64_t offset, const std::string& member,
                 const std::string& what);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_MEMBER_STREAM_H_
