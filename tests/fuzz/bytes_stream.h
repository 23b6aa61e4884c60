// The fuzz targets' input: the fuzzer's bytes as an InputStream whose reads
// come back short, of varying length, to exercise the readers' refill paths.
#ifndef SHARDSTREAM_TESTS_FUZZ_BYTES_STREAM_H_
#define SHARDSTREAM_TESTS_FUZZ_BYTES_STREAM_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "shardstream/source.h"

namespace shardstream::fuzz {

class BytesStream final : public InputStream {
 public:
  BytesStream(const uint8_t* data, size_t size, std::string url)
      : data_(data), size_(size), url_(std::move(url)) {}
  const std::string& url() const override { return url_; }
  Result<size_t> Read(size_t n, void* out) override {
    size_t k = std::min({n, size_ - pos_, size_t{1} + (pos_ * 7919) % 70000});
    if (k) std::memcpy(out, data_ + pos_, k);
    pos_ += k;
    return k;
  }
  uint64_t position() const override { return pos_; }
  std::optional<uint64_t> size() const override {
    if (hide_size) return std::nullopt;
    return size_;
  }
  // As a stream of unknown length (http without Content-Length, pipe:).
  bool hide_size = false;

 private:
  const uint8_t* data_;
  size_t size_;
  std::string url_;
  size_t pos_ = 0;
};

}  // namespace shardstream::fuzz

#endif  // SHARDSTREAM_TESTS_FUZZ_BYTES_STREAM_H_
