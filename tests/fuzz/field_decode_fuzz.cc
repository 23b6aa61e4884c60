// libFuzzer target for the field decoders a sample's bytes go through (.npy,
// raw elements, labels, UTF-8 text, JSON) and the .idx sidecar parser: any
// input must decode or give an error, never a crash, a sanitizer report or a
// read outside the input. The first byte picks the decoder and its spec; the
// rest is the field's bytes. Seeds: scripts/fuzz.sh writes a few of each.
#include <cstddef>
#include <cstdint>
#include <string>

#include "shardstream/decode.h"
#include "shardstream/shard_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const shardstream::FieldContext ctx{"k", "f", "fuzz.tar", 512};
  if (pick % 8 == 7) {
    auto index = shardstream::ParseSampleIndex(bytes, "fuzz.tar.idx");
    if (index.ok()) {
      // Entries the parser accepted must be usable as they are.
      for (const auto& s : index->samples) (void)s;
    }
    return 0;
  }
  shardstream::FieldSpec spec;
  spec.name = "f";
  switch (pick % 8) {
    case 0:
      spec.decode = shardstream::FieldDecode::kNpy;
      break;
    case 1:
      spec.decode = shardstream::FieldDecode::kNpy;
      spec.shape = {-1, 3};
      break;
    case 2:
      spec.decode = shardstream::FieldDecode::kRaw;
      spec.dtype = static_cast<shardstream::DType>(pick / 8 % 13);
      spec.shape = {-1};
      break;
    case 3:
      spec.decode = shardstream::FieldDecode::kRaw;
      spec.dtype = shardstream::DType::kFloat32;
      spec.shape = {-1, 4};
      break;
    case 4:
      spec.decode = shardstream::FieldDecode::kLabel;
      break;
    case 5:
      spec.decode = shardstream::FieldDecode::kString;
      break;
    case 6:
      spec.decode = shardstream::FieldDecode::kJson;
      break;
  }
  auto f = shardstream::DecodeField(bytes, spec, ctx);
  if (f.ok() && !f->is_label) {
    // What the batcher copies lies within the input.
    const std::string_view out = f->data;
    if (!out.empty() &&
        (out.data() < bytes.data() || out.data() + out.size() > bytes.data() + bytes.size()))
      __builtin_trap();
    if (f->is_tensor &&
        static_cast<uint64_t>(f->elements()) * shardstream::DTypeSize(f->dtype) > out.size())
      __builtin_trap();
  }
  return 0;
}
