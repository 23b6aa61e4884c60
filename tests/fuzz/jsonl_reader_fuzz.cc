// libFuzzer target for the JSON Lines reader: arbitrary bytes read as rows
// under every error policy, from the start and from a row further on, with
// the manifest-or-rows test on the first line. Seeded with rows that use
// every JSON construct (scripts/fuzz.sh). Any crash, sanitizer report, hang
// or out-of-memory is a bug.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "bytes_stream.h"
#include "shardstream/rows.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardstream;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static_cast<void>(IsRowsFile("fuzz.jsonl", text.substr(0, text.find('\n'))));
  for (int mode = 0; mode < 4; ++mode) {
    TarReaderOptions o;
    o.chunk_size = 64 << 10;
    o.limits.max_member_size = 1 << 20;
    o.policy = mode == 1 ? ErrorPolicy::kSkipSample
               : mode == 2 ? ErrorPolicy::kSkipShard
                           : ErrorPolicy::kRaise;
    o.build_index = mode == 0;
    auto stream = std::make_unique<fuzz::BytesStream>(data, size, "fuzz://rows.jsonl");
    stream->hide_size = mode == 2;
    auto reader = OpenJsonlReader(std::move(stream), o, mode == 3 ? 2 : 0);
    if (!reader.ok()) continue;
    Sample s;
    uint64_t sum = 0;
    for (int n = 0; n < 100000; ++n) {
      auto more = (*reader)->Next(&s);
      if (!more.ok() || !*more) break;
      for (const Field& f : s.fields) {
        sum += f.name.size() + f.data.size();
        if (!f.data.empty()) sum += static_cast<uint8_t>(f.data.back());
      }
    }
    if (sum == 0xdeadbeef) std::abort();  // keeps the reads
  }
  return 0;
}
