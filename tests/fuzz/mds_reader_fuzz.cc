// libFuzzer target for the MDS shard reader: arbitrary shard bytes under a
// layout picked by the first byte (every column encoding appears in one),
// with every error policy, and the layout parser on the same bytes. Seeded
// from MDSWriter's shards (scripts/fuzz.sh). Any crash, sanitizer report,
// hang or out-of-memory is a bug.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "bytes_stream.h"
#include "shardstream/mds.h"

namespace {

shardstream::MdsLayout Layout(int which) {
  using shardstream::MdsColumn;
  shardstream::MdsLayout l;
  switch (which % 4) {
    case 0:
      l.columns = {{"tokens", "ndarray:int32", -1}};
      break;
    case 1:
      l.columns = {{"data", "bytes", -1}, {"label", "int", 8}};
      break;
    case 2:
      l.columns = {{"any", "ndarray", -1}, {"f", "float32", 4}, {"fixed", "ndarray:uint16:2,3", 12},
                   {"img", "jpeg", -1}, {"meta", "json", -1}, {"text", "str", -1}};
      break;
    default:
      l.columns = {{"n", "str_int", -1}, {"obj", "pkl", -1}, {"pix", "pil", -1},
                   {"small", "uint8", 1}};
      break;
  }
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardstream;
  if (size == 0) return 0;
  const int which = data[0];
  ++data;
  --size;
  auto parsed = ParseMdsLayout(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (parsed.ok()) {
    for (const MdsColumn& c : parsed->columns) static_cast<void>(MdsFieldSpec(c, "fuzz"));
  }
  for (int mode = 0; mode < 3; ++mode) {
    TarReaderOptions o;
    o.chunk_size = 64 << 10;
    o.limits.max_member_size = 8 << 20;
    o.limits.max_entries = 100000;
    o.policy = mode == 1 ? ErrorPolicy::kSkipSample
               : mode == 2 ? ErrorPolicy::kSkipShard
                           : ErrorPolicy::kRaise;
    auto reader = OpenMdsReader(std::make_unique<fuzz::BytesStream>(data, size, "fuzz://shard.00000.mds"),
                                Layout(which), o,
                                (which >> 2) % 3);
    if (!reader.ok()) continue;
    Sample s;
    uint64_t sum = 0;
    for (int n = 0; n < 100000; ++n) {
      auto more = (*reader)->Next(&s);
      if (!more.ok() || !*more) break;
      for (const Field& f : s.fields)
        if (!f.data.empty()) sum += static_cast<uint8_t>(f.data[0]) + f.data.size();
    }
    if (sum == 0xdeadbeef) std::abort();  // keeps the reads
  }
  return 0;
}
