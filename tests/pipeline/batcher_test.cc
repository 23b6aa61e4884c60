#include "pipeline/batcher.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>
#include <vector>

namespace shardstream::internal {
namespace {

PoolConfig Pool(size_t slots = 8) {
  PoolConfig p;
  p.slots = slots;
  p.allocator = PageableAllocator();
  p.arena_bytes = 256;  // small: exercises the heap spill
  return p;
}

std::string Int32s(const std::vector<int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(SampleBatcherTest, StacksFixedFieldsAndKeepsBytes) {
  std::vector<Batch> out;
  std::vector<FieldSpec> specs = {FieldSpec{"x.npy"}, FieldSpec{"cls"}, FieldSpec{"txt"}};
  SampleBatcher b(specs, 3, Pool(), [&](Batch&& batch) {
    out.push_back(std::move(batch));
    return Status::OK();
  });
  std::vector<std::string> npys, keys, texts;
  for (int i = 0; i < 7; ++i) {
    npys.push_back(EncodeNpy(DType::kInt32, {2}, Int32s({i, 10 * i})));
    keys.push_back("k" + std::to_string(i));
    texts.push_back(std::string(static_cast<size_t>(40 * i), 'a' + i));
  }
  for (int i = 0; i < 7; ++i) {
    std::string cls = std::to_string(i % 3);
    FieldRef f[3] = {{npys[i], 100, true}, {cls, 200, true}, {texts[i], 300, true}};
    RowInput row{SampleId{1, i}, keys[i], "u", 0, f};
    ASSERT_TRUE(b.Add(row).ok());
  }
  ASSERT_TRUE(b.Flush().ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].rows(), 1);
  int i = 0;
  for (const Batch& batch : out) {
    TensorView x = batch.tensor("x.npy");
    ASSERT_EQ(x.ndim, 2);
    EXPECT_EQ(x.shape[1], 2);
    EXPECT_EQ(x.dtype, DType::kInt32);
    TensorView cls = batch.tensor("cls");
    EXPECT_EQ(cls.dtype, DType::kInt64);
    TensorView txt = batch.tensor(2);
    EXPECT_TRUE(txt.is_bytes && txt.is_string);
    for (int64_t r = 0; r < batch.rows(); ++r, ++i) {
      EXPECT_EQ(static_cast<int32_t*>(x.data)[2 * r + 1], 10 * i);
      EXPECT_EQ(static_cast<int64_t*>(cls.data)[r], i % 3);
      EXPECT_EQ(txt.bytes(r), texts[i]);
      EXPECT_EQ(batch.key(r), keys[i]);
      EXPECT_EQ(batch.sample(r).index, i);
    }
  }
}

TEST(SampleBatcherTest, ShapeChangeIsCorruptWithContext) {
  std::vector<Batch> out;
  SampleBatcher b({FieldSpec{"x.npy"}}, 4, Pool(), [&](Batch&& batch) {
    out.push_back(std::move(batch));
    return Status::OK();
  });
  std::string a = EncodeNpy(DType::kInt32, {2}, Int32s({1, 2}));
  std::string c = EncodeNpy(DType::kInt32, {3}, Int32s({1, 2, 3}));
  FieldRef f1[1] = {{a, 512, true}};
  FieldRef f2[1] = {{c, 4096, true}};
  ASSERT_TRUE(b.Add(RowInput{{0, 0}, "a", "s.tar", 0, f1}).ok());
  Status s = b.Add(RowInput{{0, 1}, "b", "s.tar", 0, f2});
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.offset(), 4096);
  EXPECT_NE(s.message().find("'b'"), std::string::npos) << s;
  FieldRef none[1] = {{{}, 0, false}};
  EXPECT_EQ(b.Add(RowInput{{0, 2}, "c", "s.tar", 0, none}).code(), StatusCode::kCorrupt);
}

// Rebuilds each document's tokens from packed batches via doc_ids/positions.
struct Doc {
  std::vector<int32_t> tokens;
};

std::vector<std::vector<int32_t>> Docs(int n, uint64_t seed) {
  std::vector<std::vector<int32_t>> docs;
  uint64_t x = seed;
  for (int d = 0; d < n; ++d) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    int len = static_cast<int>((x >> 33) % 40);  // 0..39, seq_len 16: many split
    std::vector<int32_t> t(static_cast<size_t>(len));
    for (int i = 0; i < len; ++i) t[static_cast<size_t>(i)] = d * 1000 + i + 1;
    docs.push_back(t);
  }
  return docs;
}

// Each document's tokens live in a buffer freed right after Add (ASan sees
// a packer that reads them later).
void RunPacker(TokenLayout layout, std::vector<Batch>* out,
               const std::vector<std::vector<int32_t>>& docs, bool metadata = true) {
  TokenOptions o;
  o.document_metadata = metadata;
  o.field = "tokens.npy";
  o.seq_len = 16;
  o.layout = layout;
  o.eod_token = layout == TokenLayout::kPack ? 0 : -1;
  o.pad_token = -7;
  TokenPacker p(o, 4, Pool(64), [&](Batch&& b) {
    out->push_back(std::move(b));
    return Status::OK();
  });
  std::vector<std::string> keys;
  for (size_t d = 0; d < docs.size(); ++d) keys.push_back("doc" + std::to_string(d));
  for (size_t d = 0; d < docs.size(); ++d) {
    auto own = std::make_shared<std::vector<int32_t>>(docs[d]);
    DecodedField f;
    f.is_tensor = true;
    f.dtype = DType::kInt32;
    f.ndim = 1;
    f.shape[0] = static_cast<int64_t>(own->size());
    f.data = std::string_view(reinterpret_cast<const char*>(own->data()), own->size() * 4);
    RowInput row{SampleId{0, static_cast<int64_t>(d)}, keys[d], "u", 0, nullptr};
    ASSERT_TRUE(p.Add(row, f, 0).ok());
  }
  ASSERT_TRUE(p.Flush().ok());
}

TEST(TokenPackerTest, PackedBatchesHoldEveryTokenOnceWithDocIdsAndPositions) {
  auto docs = Docs(60, 1);
  std::vector<Batch> out;
  RunPacker(TokenLayout::kPack, &out, docs);
  std::vector<std::vector<int32_t>> rebuilt;
  size_t next_doc = 0;
  int64_t samples_listed = 0;
  std::vector<int32_t> current;
  for (size_t bi = 0; bi < out.size(); ++bi) {
    const Batch& b = out[bi];
    if (bi + 1 < out.size()) EXPECT_EQ(b.rows(), 4);
    samples_listed += b.num_samples();
    TensorView tok = b.tensor("tokens"), doc = b.tensor("doc_ids"), pos = b.tensor("positions");
    ASSERT_EQ(tok.shape[1], 16);
    for (int64_t r = 0; r < b.rows(); ++r) {
      int32_t last_doc = -1;
      for (int64_t c = 0; c < 16; ++c) {
        int64_t i = r * 16 + c;
        int32_t t = static_cast<int32_t*>(tok.data)[i];
        int32_t d = static_cast<int32_t*>(doc.data)[i];
        int32_t p = static_cast<int32_t*>(pos.data)[i];
        if (d < 0) {  // padding only at the very end
          EXPECT_EQ(bi + 1, out.size());
          EXPECT_EQ(t, -7);
          continue;
        }
        EXPECT_GE(d, last_doc);
        last_doc = d;
        EXPECT_EQ(p, static_cast<int32_t>(current.size()));
        if (t == 0) {  // eod
          rebuilt.push_back(current);
          current.clear();
          ++next_doc;
        } else {
          current.push_back(t);
        }
      }
    }
    SampleId id;
    int64_t done;
    if (b.continued(&id, &done)) {
      EXPECT_EQ(static_cast<size_t>(id.index), next_doc);
      EXPECT_EQ(done, static_cast<int64_t>(current.size()));
    }
  }
  EXPECT_EQ(rebuilt, docs);
  EXPECT_EQ(samples_listed, 60);
}

TEST(TokenPackerTest, PaddedRowsSplitLongDocumentsAndMask) {
  auto docs = Docs(30, 2);
  std::vector<Batch> out;
  RunPacker(TokenLayout::kPad, &out, docs);
  std::vector<std::vector<int32_t>> rebuilt;
  std::vector<int32_t> current;
  for (const Batch& b : out) {
    TensorView tok = b.tensor("tokens"), mask = b.tensor("mask"), len = b.tensor("lengths");
    TensorView pos = b.tensor("positions");
    for (int64_t r = 0; r < b.rows(); ++r) {
      int32_t n = static_cast<int32_t*>(len.data)[r];
      int32_t p0 = static_cast<int32_t*>(pos.data)[r * 16];
      if (p0 == 0 && !(current.empty() && n == 0)) {
        rebuilt.push_back(current);
        current.clear();
      }
      for (int c = 0; c < 16; ++c) {
        bool real = static_cast<uint8_t*>(mask.data)[r * 16 + c] != 0;
        EXPECT_EQ(real, c < n);
        int32_t t = static_cast<int32_t*>(tok.data)[r * 16 + c];
        if (real) current.push_back(t); else EXPECT_EQ(t, -7);
      }
    }
  }
  rebuilt.push_back(current);
  std::vector<std::vector<int32_t>> nonempty;
  for (auto& d : docs)
    if (!d.empty()) nonempty.push_back(d);
  std::vector<std::vector<int32_t>> got;
  for (auto& d : rebuilt)
    if (!d.empty()) got.push_back(d);
  EXPECT_EQ(got, nonempty);
}

TEST(TokenPackerTest, TokensOnlyWithoutDocumentMetadata) {
  auto docs = Docs(40, 3);
  std::vector<Batch> with, without;
  RunPacker(TokenLayout::kPack, &with, docs, true);
  RunPacker(TokenLayout::kPack, &without, docs, false);
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) {
    ASSERT_EQ(without[i].num_tensors(), 1u);
    TensorView a = with[i].tensor("tokens"), b = without[i].tensor("tokens");
    ASSERT_EQ(a.nbytes, b.nbytes);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0);
    EXPECT_EQ(with[i].num_samples(), without[i].num_samples());
  }
}

}  // namespace
}  // namespace shardstream::internal
