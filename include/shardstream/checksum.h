// Checksums with a self-describing algorithm prefix, as manifests and cache
// entries store them: "xxh3_128:<32 hex digits>" (also "xxh3_64:<16 hex>").
// Thread-safety: a Hasher is used by one thread; the functions are pure.
#ifndef SHARDSTREAM_CHECKSUM_H_
#define SHARDSTREAM_CHECKSUM_H_

#include <memory>
#include <string>
#include <string_view>

#include "shardstream/export.h"
#include "shardstream/result.h"

namespace shardstream {

// Incremental hashing of a byte stream.
class SHARDSTREAM_EXPORT Hasher {
 public:
  // algorithm: "xxh3_128" (default for new data) or "xxh3_64".
  // On failure returns kConfig for an unknown algorithm.
  static Result<std::unique_ptr<Hasher>> Create(std::string_view algorithm = "xxh3_128");
  virtual ~Hasher();
  virtual void Update(const void* data, size_t n) = 0;
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  // "algorithm:hex". Call once.
  virtual std::string Finish() = 0;
};

// The checksum of a whole buffer, formatted as above.
SHARDSTREAM_EXPORT std::string ChecksumOf(std::string_view data,
                                          std::string_view algorithm = "xxh3_128");

// Validates "algorithm:hex" syntax and algorithm. On failure returns kConfig
// naming what is wrong. Returns the algorithm name on success.
SHARDSTREAM_EXPORT Result<std::string> ParseChecksum(std::string_view checksum);

}  // namespace shardstream

#endif  // SHARDSTREAM_CHECKSUM_H_
