#include "support/loader_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "shardstream/decode.h"
#include "shardstream/shard_writer.h"

namespace shardstream::testing {

std::vector<int32_t> DocTokens(int64_t g, int max_doc_tokens) {
  uint64_t x = static_cast<uint64_t>(g) * 0x9e3779b97f4a7c15ULL + 12345;
  x ^= x >> 29;
  int len = static_cast<int>(x % static_cast<uint64_t>(max_doc_tokens));
  std::vector<int32_t> t(static_cast<size_t>(len));
  for (int i = 0; i < len; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(g * 1000 + i + 1);
  return t;
}

Dataset WriteDataset(const std::string& dir, const DatasetSpec& spec) {
  ShardWriterOptions wo;
  wo.write_index = spec.write_index;
  wo.max_bytes = uint64_t{1} << 40;
  wo.max_samples = static_cast<uint64_t>(spec.samples_per_shard);
  auto w = ShardWriter::Create(dir, wo);
  EXPECT_TRUE(w.ok()) << w.status();
  Dataset d;
  int64_t g = 0;
  std::string pad(spec.pad_bytes, '\0');
  for (int s = 0; s < spec.shards; ++s) {
    const int n = spec.samples_per_shard;
    if (spec.tokens && spec.docs_per_group > 0) {
      for (int i = 0; i < n; i += spec.docs_per_group) {
        std::string values;
        std::vector<int64_t> offsets{0};
        for (int j = i; j < std::min(n, i + spec.docs_per_group); ++j, ++g) {
          auto t = DocTokens(g, spec.max_doc_tokens);
          values.append(reinterpret_cast<const char*>(t.data()), t.size() * 4);
          offsets.push_back(offsets.back() + static_cast<int64_t>(t.size()));
        }
        const std::string tokens = EncodeNpy(DType::kInt32, {offsets.back()}, values);
        const std::string bounds =
            EncodeNpy(DType::kInt64, {static_cast<int64_t>(offsets.size())},
                      std::string_view(reinterpret_cast<const char*>(offsets.data()),
                                       offsets.size() * 8));
        Sample sample;
        sample.key = "s" + std::to_string(s) + "/g" + std::to_string(i);
        sample.fields.resize(2);
        sample.fields[0].name = "tokens.npy";
        sample.fields[0].data = tokens;
        sample.fields[1].name = "doc_offsets.npy";
        sample.fields[1].data = bounds;
        Status st = (*w)->Write(sample);
        EXPECT_TRUE(st.ok()) << st;
      }
      d.samples = g;
      continue;
    }
    for (int i = 0; i < n; ++i, ++g) {
      Sample sample;
      sample.key = "s" + std::to_string(s) + "/k" + std::to_string(i);
      std::vector<std::pair<std::string, std::string>> fields;
      if (spec.tokens) {
        auto t = DocTokens(g, spec.max_doc_tokens);
        fields.emplace_back("tokens.npy",
                            EncodeNpy(DType::kInt32, {static_cast<int64_t>(t.size())},
                                      std::string_view(reinterpret_cast<const char*>(t.data()),
                                                       t.size() * 4)));
      } else {
        int32_t x[4] = {static_cast<int32_t>(g), s, i, -static_cast<int32_t>(g)};
        fields.emplace_back("x.npy", EncodeNpy(DType::kInt32, {4},
                                               std::string_view(reinterpret_cast<char*>(x), 16)));
        fields.emplace_back("cls", std::to_string(g % 10));
        fields.emplace_back("txt", "sample number " + std::to_string(g));
      }
      if (!pad.empty()) fields.emplace_back("pad.bin", pad);
      for (auto& [name, data] : fields) {
        Field f;
        f.name = name;
        f.data = data;
        sample.fields.push_back(f);
      }
      Status st = (*w)->Write(sample);
      EXPECT_TRUE(st.ok()) << st;
    }
    d.samples = g;
  }
  Status st = (*w)->Close();
  EXPECT_TRUE(st.ok()) << st;
  d.manifest = dir + "/manifest.jsonl";
  for (const ShardEntry& e : (*w)->manifest().shards) d.shard_paths.push_back(dir + "/" + e.url);
  return d;
}

LoaderOptions FieldOptions(const std::string& manifest) {
  LoaderOptions o;
  o.manifest = manifest;
  o.batch_size = 8;
  o.fields = {FieldSpec{"x.npy"}, FieldSpec{"cls"}};
  o.shuffle_buffer = 20;
  o.prefetch = 2;
  o.allocator = PageableAllocator();
  o.read_chunk = 64 << 10;
  o.shard_queue = 8;
  return o;
}

Status FirstError(Loader* loader, int64_t max_batches) {
  for (int64_t i = 0; i < max_batches; ++i) {
    auto b = loader->next();
    if (!b.ok()) return b.status();
    if (b->empty()) return Status::OK();
  }
  return Status::OK();
}

std::vector<Batch> HoldEverySlot(Loader* loader, size_t slots) {
  std::vector<Batch> held;
  Status err;
  for (size_t i = 0; i <= slots && err.ok(); ++i) {  // the call after the last slot fails
    auto b = loader->next();
    if (b.ok()) held.push_back(*b); else err = b.status();
  }
  EXPECT_EQ(err.code(), StatusCode::kConfig) << err;  // a usage error: retrying cannot help
  EXPECT_NE(err.message().find("holds every batch slot"), std::string::npos) << err;
  EXPECT_NE(err.message().find("clone()"), std::string::npos) << err;
  EXPECT_EQ(held.size(), slots);
  return held;
}

std::vector<int64_t> DrainIds(Loader* loader, int64_t max_batches) {
  std::vector<int64_t> ids;
  for (int64_t b = 0; max_batches < 0 || b < max_batches; ++b) {
    auto batch = loader->next();
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok() || batch->empty()) break;
    TensorView x = batch->tensor("x.npy");
    for (int64_t r = 0; r < batch->rows(); ++r) {
      const int32_t* row = static_cast<const int32_t*>(x.data) + 4 * r;
      EXPECT_EQ(row[3], -row[0]);
      ids.push_back(row[0]);
    }
  }
  return ids;
}

}  // namespace shardstream::testing
