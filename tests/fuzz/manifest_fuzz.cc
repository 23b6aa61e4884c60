// libFuzzer target for the manifest parsers and brace expansion: any input
// must give a Manifest or a kConfig error, never a crash. The first byte
// picks the format. Seeds: tests/data/fuzz/manifest/.
#include <cstddef>
#include <cstdint>
#include <string>

#include "shardstream/manifest.h"

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
  if (size < 64 && shardstream::IsBracePattern(text)) (void)shardstream::ExpandBraces(text);
  return 0;
}
