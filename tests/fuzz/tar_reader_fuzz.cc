// libFuzzer target for the tar reader: arbitrary bytes through both engines
// and every error policy. Seeded from our own shards (scripts/fuzz.sh).
// Any crash, sanitizer report, hang or out-of-memory is a bug.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "bytes_stream.h"
#include "shardstream/shard_index.h"
#include "shardstream/tar_reader.h"

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
    auto stream = std::make_unique<fuzz::BytesStream>(data, size, "fuzz://input.tar");
    stream->hide_size = mode == 2;
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
