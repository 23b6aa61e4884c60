// libFuzzer target for the manifest parsers and brace expansion: any input
// must give a Manifest or a kConfig error, never a crash. The first byte
// picks the format. JSON Lines is also read as the loader reads it
// (ReadManifestTable, a chunk at a time, through reads that come back short):
// the same entries, or the same error. Seeds: tests/data/fuzz/manifest/.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bytes_stream.h"
#include "manifest/shard_table.h"
#include "shardstream/manifest.h"

namespace {

// The fuzzer's bytes as the one file of a Source.
class BytesSource final : public shardstream::Source {
 public:
  BytesSource(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  shardstream::Result<std::unique_ptr<shardstream::RandomAccessFile>> OpenRandomAccess(
      const std::string& url) override {
    return shardstream::Status::NotFound(url);
  }
  shardstream::Result<std::unique_ptr<shardstream::InputStream>> OpenInputStream(
      const std::string& url, uint64_t offset) override {
    if (offset != 0) return shardstream::Status::NotFound(url);
    return std::unique_ptr<shardstream::InputStream>(
        new shardstream::fuzz::BytesStream(data_, size_, url));
  }
  shardstream::Result<shardstream::FileInfo> Stat(const std::string& url) override {
    return shardstream::Status::NotFound(url);
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

bool SameEntry(const shardstream::ShardEntry& a, const shardstream::ShardEntry& b) {
  return a.url == b.url && a.resolved == b.resolved && a.size == b.size &&
         a.nsamples == b.nsamples && a.checksum == b.checksum && a.extra == b.extra;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const char* kNames[] = {"m.jsonl", "m.csv", "m.json", "dir/manifest"};
  auto m = shardstream::ParseManifest(text, kNames[data[0] % 4]);
  if (m.ok()) {
    // What we parse, we can write and parse again.
    auto again = shardstream::ParseManifest(shardstream::FormatManifestJsonl(*m), "m.jsonl");
    if (!again.ok() || again->shards.size() != m->shards.size()) __builtin_trap();
  } else if (m.status().code() != shardstream::StatusCode::kConfig) {
    __builtin_trap();
  }
  if (data[0] % 4 == 0) {
    BytesSource source(data + 1, size - 1);
    auto t = shardstream::internal::ReadManifestTable("m.jsonl", &source);
    if (t.ok() != m.ok()) __builtin_trap();
    if (!m.ok() && t.status().message() != m.status().message()) __builtin_trap();
    if (m.ok()) {
      if (t->size() != m->shards.size()) __builtin_trap();
      for (size_t i = 0; i < t->size(); ++i)
        if (!SameEntry((*t)[i], m->shards[i])) __builtin_trap();
      if (t->Fingerprint() != m->Fingerprint()) __builtin_trap();
    }
  }
  if (size < 64 && shardstream::IsBracePattern(text)) (void)shardstream::ExpandBraces(text);
  return 0;
}
