// Glue between libarchive and our byte sources: archive_read_open callbacks
// that hand libarchive large blocks (>= 4 MiB by default) read from a
// PrefixedInput, and keep the source's own error so it is not flattened into
// a libarchive message.
#ifndef SHARDSTREAM_TAR_ARCHIVE_INPUT_H_
#define SHARDSTREAM_TAR_ARCHIVE_INPUT_H_

#include <archive.h>

#include <memory>
#include <string>
#include <vector>

#include "shardstream/status.h"
#include "tar/byte_stream.h"

namespace shardstream::internal {

struct ArchiveDeleter {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<struct archive, ArchiveDeleter>;

class ArchiveInput {
 public:
  ArchiveInput(std::unique_ptr<PrefixedInput> in, size_t block)
      : in_(std::move(in)), buf_(block) {}
  // Calls archive_read_open on `a` with this object's callbacks.
  int Open(struct archive* a);
  // The source's error if a read failed, else OK.
  const Status& read_error() const { return read_error_; }
  uint64_t bytes_read() const { return bytes_read_; }
  const std::string& url() const { return in_->url(); }
  // A Status for a libarchive failure: the source's error if there was one,
  // else kCorrupt with libarchive's message.
  Status Error(struct archive* a, const std::string& what, int64_t offset) const;

 private:
  static la_ssize_t ReadCb(struct archive*, void* self, const void** buf);
  std::unique_ptr<PrefixedInput> in_;
  std::vector<char> buf_;
  Status read_error_;
  uint64_t bytes_read_ = 0;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_ARCHIVE_INPUT_H_
