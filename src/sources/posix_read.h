// Vectored positional reads of a local file descriptor, shared by the local
// source's files and the shard cache's entries.
#ifndef SHARDSTREAM_SOURCES_POSIX_READ_H_
#define SHARDSTREAM_SOURCES_POSIX_READ_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream::internal {

// RandomAccessFile::ReadVAt for `fd`: preadv until every piece is full or
// the file ends (at most IOV_MAX pieces a call; EINTR retried). On failure
// returns the errno's kind naming `url` and the byte offset.
Result<size_t> PReadVAll(int fd, uint64_t offset, const ReadPiece* pieces, size_t n,
                         const std::string& url);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SOURCES_POSIX_READ_H_
