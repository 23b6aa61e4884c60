// libFuzzer target for the tar reader: arbitrary bytes through both engines
// and every error policy. Seeded from our own shards (scripts/fuzz.sh).
// Any crash, sanitizer report, hang or out-of-memory is a bug.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "shardstream/shard_index.h"
#include "shardstream/tar_reader.h"

namespace {

class BytesStream final : public shardstream::InputStream {
 public:
  BytesStream(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const std::string& url() const override { return url_; }
  shardstream::Result<size_t> Read(size_t n, void* out) override {
    // Short reads of varying length exercise the refill paths.
    size_t k = std::min({n, size_ - pos_, size_t{1} + (pos_ * 7919) % 70000});
    if (k) std::memcpy(out, data_ + pos_, k);
    pos_ += k;
    return k;
  }
  uint64_t position() const override { return pos_; }
  std::optional<uint64_t> size() const override {
    if (hide_size_) return std::nullopt;
    return size_;
  }
  bool hide_size_ = false;

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string url_ = "fuzz://input.tar";
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardstream;
  for (int mode = 0; mode < 4; ++mode) {
    TarReaderOptions o;
    o.chunk_size = 64 << 10;
    o.limits.max_member_size = 8 << 20;  // keeps allocations small
    o.limits.max_entries = 100000;
    o.engine = mode == 3 ? TarEngine::kLibarchive : TarEngine::kFast;
    o.policy = mode == 1 ? ErrorPolicy::kSkipSample
               : mode == 2 ? ErrorPolicy::kSkipShard
                           : ErrorPolicy::kRaise;
    auto stream = std::make_unique<BytesStream>(data, size);
    stream->hide_size_ = mode == 2;
    auto reader = TarReader::Open(std::move(stream), o);
    if (!reader.ok()) continue;
    Sample s;
    uint64_t sum = 0;
    for (int n = 0; n < 100000; ++n) {
      auto got = (*reader)->Next(&s);
      if (!got.ok() || !*got) break;
      for (const Field& f : s.fields)
        for (char c : f.data) sum += static_cast<unsigned char>(c);  // touch every byte
    }
    if (sum == 1) return 0;  // keeps the loop from being optimised away
  }
  // The sidecar index parser sees the same bytes.
  (void)ParseSampleIndex(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.idx");
  return 0;
}
