// The decoded byte stream of a shard: the tar bytes themselves, whatever the
// compression. Compression is detected from the first bytes (gzip 1f 8b,
// zstd 28 b5 2f fd). zstd is decoded by libzstd straight into the caller's
// buffer; gzip by libarchive's filter (raw format, only the gzip filter
// enabled), fed from our InputStream.
#ifndef SHARDSTREAM_TAR_BYTE_STREAM_H_
#define SHARDSTREAM_TAR_BYTE_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "shardstream/result.h"
#include "shardstream/source.h"
#include "shardstream/tar_reader.h"

namespace shardstream::internal {

// An InputStream with its first bytes already read (for sniffing) and given
// back first.
class PrefixedInput {
 public:
  PrefixedInput(std::unique_ptr<InputStream> in, std::string prefix)
      : in_(std::move(in)), prefix_(std::move(prefix)) {}
  // Reads up to n bytes; 0 only at the end.
  Result<size_t> Read(size_t n, char* out);
  const std::string& url() const { return in_->url(); }
  uint64_t position() const { return in_->position() - (prefix_.size() - prefix_pos_); }
  std::optional<uint64_t> size() const { return in_->size(); }

 private:
  std::unique_ptr<InputStream> in_;
  std::string prefix_;
  size_t prefix_pos_ = 0;
};

// Reads the first bytes of `in` and tells the compression.
Result<std::unique_ptr<PrefixedInput>> Sniff(std::unique_ptr<InputStream> in,
                                             ShardCompression* compression);

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Reads up to n bytes of decoded tar; 0 only at the end.
  virtual Result<size_t> Read(size_t n, char* out) = 0;
  // Total decoded size when known without reading (uncompressed shards).
  virtual std::optional<uint64_t> size() const = 0;
  // Called at the end-of-archive marker: reads the rest of the stream.
  // Compressed streams so report a truncated or damaged final frame, and a
  // verifying source (the shard cache checks size and checksum at its last
  // byte) gets to report a mismatch before the shard counts as read.
  virtual Status Finish();
};

// The decoded stream for `in`; `block` is the size of the reads handed to a
// decoder.
Result<std::unique_ptr<ByteStream>> OpenByteStream(std::unique_ptr<PrefixedInput> in,
                                                   ShardCompression compression, size_t block);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_BYTE_STREAM_H_
