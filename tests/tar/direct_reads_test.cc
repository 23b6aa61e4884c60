// Token documents read straight into their batches (LoaderOptions::
// direct_reads): the same batches as through read buffers, the same resume,
// and a shard that no longer matches its index fails with its url and the
// byte offset instead of yielding wrong tokens.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pipeline/token_packer.h"
#include "tar/direct_range.h"
#include "tar/direct_reads.h"
#include "shardstream/loader.h"
#include "shardstream/shard_index.h"
#include "shardstream/shard_cache.h"
#include "support/cache_fault_source.h"
#include "support/fault_source.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::DatasetSpec;
using testing::TempDir;

LoaderOptions TokenOptions(const std::string& manifest) {
  LoaderOptions o;
  o.manifest = manifest;
  o.tokens.field = "tokens.npy";
  o.tokens.seq_len = 64;
  o.tokens.eod_token = -1;
  o.batch_size = 4;
  o.shuffle_buffer = 0;
  o.allocator = PageableAllocator();
  o.read_chunk = 64 << 10;
  return o;
}

// Every batch of the rest of the epoch as bytes: each tensor, the samples
// and the continued document; and the loader's direct_samples.
struct Epoch {
  std::vector<std::string> batches;
  uint64_t direct = 0;
  Status error;
};

Epoch Drain(Loader* l, int64_t max_batches = -1) {
  Epoch e;
  for (int64_t n = 0; max_batches < 0 || n < max_batches; ++n) {
    auto b = l->next();
    if (!b.ok()) {
      e.error = b.status();
      break;
    }
    if (b->empty()) break;
    std::string s;
    for (size_t i = 0; i < b->num_tensors(); ++i) {
      TensorView t = b->tensor(i);
      s.append(t.name.data(), t.name.size());
      s.append(static_cast<const char*>(t.data), t.nbytes);
    }
    for (int64_t i = 0; i < b->num_samples(); ++i) {
      s += std::string(b->key(i)) + "@" + std::to_string(b->sample(i).shard) + "/" +
           std::to_string(b->sample(i).index) + ";";
    }
    SampleId id;
    int64_t tokens = 0;
    if (b->continued(&id, &tokens))
      s += "continued " + std::to_string(id.index) + ":" + std::to_string(tokens);
    e.batches.push_back(std::move(s));
  }
  e.direct = l->stats().direct_samples;
  return e;
}

Epoch RunEpoch(LoaderOptions o, bool direct) {
  o.direct_reads = direct;
  auto l = Loader::Create(o);
  EXPECT_TRUE(l.ok()) << l.status();
  return Drain(l->get());
}

// A local shard's range opened for direct reads through `source` (the
// local one by default), or null with the reason in *why.
std::unique_ptr<internal::DirectRange> OpenRange(const std::string& url, const std::string& field,
                                                 DType dtype, int64_t first, int64_t end,
                                                 std::string* why,
                                                 std::shared_ptr<Source> source = LocalSource()) {
  auto index = source->OpenRandomAccess(IndexUrlFor(url));
  if (!index.ok()) {
    *why = index.status().ToString();
    return nullptr;
  }
  auto shard = source->OpenRandomAccess(url);
  if (!shard.ok()) {
    *why = shard.status().ToString();
    return nullptr;
  }
  auto range = internal::DirectRange::Open(url, std::move(*shard), std::move(*index), field, dtype,
                                           first, end);
  if (!range.ok()) {
    *why = range.status().ToString();
    return nullptr;
  }
  why->clear();
  return std::move(*range);
}

// The range's next chunk, or null: at its end, or with the reason in *why.
std::shared_ptr<const internal::DirectShard> NextChunk(
    internal::DirectRange* range, uint64_t max_bytes,
    const std::shared_ptr<internal::DirectRecycler>& recycler, std::string* why) {
  auto c = range->Next(max_bytes, recycler);
  if (!c.ok()) {
    *why = c.status().ToString();
    return nullptr;
  }
  return *c;
}

// A whole direct range as one chunk of at most `max_bytes`, or null with
// the reason in *why.
std::shared_ptr<const internal::DirectShard> OpenDirectShard(
    const std::string& url, const std::string& field, DType dtype, int64_t first, int64_t end,
    uint64_t max_bytes, const std::shared_ptr<internal::DirectRecycler>& recycler,
    std::string* why) {
  auto range = OpenRange(url, field, dtype, first, end, why);
  if (range == nullptr) return nullptr;
  if (range->next() == range->end()) return std::make_shared<internal::DirectShard>();
  auto s = NextChunk(range.get(), max_bytes, recycler, why);
  if (s == nullptr) return nullptr;
  if (range->next() != range->end()) {
    // Why the chunk ended early comes with the next call.
    if (NextChunk(range.get(), max_bytes, recycler, why) != nullptr || why->empty())
      *why = "the range takes more than one chunk";
    return nullptr;
  }
  return s;
}

// max_doc_tokens 300 with seq_len 64: documents span rows and batches.
// `group` > 0: the documents in document groups of that many (docs/shards.md).
testing::Dataset Tokens(const std::string& dir, int shards = 4, int per_shard = 60,
                        int max_doc_tokens = 300, int group = 0) {
  DatasetSpec spec{shards, per_shard};
  spec.tokens = true;
  spec.max_doc_tokens = max_doc_tokens;
  spec.docs_per_group = group;
  return testing::WriteDataset(dir, spec);
}

// Documents alone in their members, and in groups of 9 (a shard's 60 end in
// a group of 6): the groups' documents are read directly alike.
TEST(DirectReadsTest, SameBatchesAsThroughReadBuffersInEveryLayout) {
  for (int group : {0, 9}) {
  SCOPED_TRACE("documents per group " + std::to_string(group));
  TempDir dir;
  auto d = Tokens(dir.path(), 4, 60, 300, group);
  struct Case {
    const char* name;
    TokenLayout layout;
    bool metadata;
    int64_t shuffle;
    int threads, open;
  };
  const Case cases[] = {
      {"pack", TokenLayout::kPack, true, 0, 2, 4},
      {"pack, tokens only", TokenLayout::kPack, false, 0, 2, 4},
      {"pack, one thread, two lanes", TokenLayout::kPack, true, 0, 1, 2},
      {"pack, shuffled", TokenLayout::kPack, true, 37, 2, 2},
      {"pack, tokens only, shuffled, one thread", TokenLayout::kPack, false, 1000, 1, 4},
      {"pad", TokenLayout::kPad, true, 0, 2, 3},
      {"pad, one lane", TokenLayout::kPad, true, 0, 2, 1},
      {"pad, shuffled", TokenLayout::kPad, true, 100, 2, 3},
  };
  for (const Case& c : cases) {
    LoaderOptions o = TokenOptions(d.manifest);
    o.tokens.layout = c.layout;
    o.tokens.document_metadata = c.metadata;
    o.shuffle_buffer = c.shuffle;
    o.reader_threads = c.threads;
    o.open_shards = c.open;
    o.seed = 7;
    Epoch direct = RunEpoch(o, true), buffered = RunEpoch(o, false);
    ASSERT_TRUE(direct.error.ok()) << c.name << ": " << direct.error;
    ASSERT_TRUE(buffered.error.ok()) << c.name << ": " << buffered.error;
    EXPECT_GT(direct.batches.size(), 20u) << c.name;
    EXPECT_TRUE(direct.batches == buffered.batches) << c.name;
    // Shuffled too: the documents are copied from the mapped shards, in the
    // order the shuffle buffer gives samples read the usual way.
    EXPECT_EQ(direct.direct, static_cast<uint64_t>(d.samples)) << c.name;
    EXPECT_EQ(buffered.direct, 0u) << c.name;
  }
  }
}

// Tokens per document (the fixture's tokens say which document and which
// position they are), over the rest of the epoch.
std::map<int64_t, std::vector<int32_t>> DocsOf(Loader* l, int64_t max_batches, Status* error) {
  std::map<int64_t, std::vector<int32_t>> docs;
  for (int64_t n = 0; max_batches < 0 || n < max_batches; ++n) {
    auto b = l->next();
    if (!b.ok()) {
      *error = b.status();
      break;
    }
    if (b->empty()) break;
    TensorView tok = b->tensor("tokens"), doc = b->tensor("doc_ids");
    for (int64_t i = 0; i < b->rows() * tok.shape[1]; ++i) {
      const int32_t t = static_cast<int32_t*>(tok.data)[i];
      if (static_cast<int32_t*>(doc.data)[i] < 0 || t == -1) continue;
      docs[(t - 1) / 1000].push_back(t);
    }
  }
  return docs;
}

TEST(DirectReadsTest, RestoredLoaderDeliversEveryRemainingTokenOnce) {
  for (int group : {0, 7}) {
  TempDir dir;
  auto d = Tokens(dir.path(), 4, 60, 300, group);
  LoaderOptions o = TokenOptions(d.manifest);
  for (int64_t k : {1, 5, 17, 40}) {
    auto a = *Loader::Create(o);
    Status err;
    auto head = DocsOf(a.get(), k, &err);
    ASSERT_TRUE(err.ok()) << err;
    auto st = a->state();
    ASSERT_TRUE(st.ok()) << st.status();
    auto b = *Loader::Create(o);
    ASSERT_TRUE(b->restore(*LoaderState::FromJson(st->ToJson())).ok());
    auto rest = DocsOf(b.get(), -1, &err);
    ASSERT_TRUE(err.ok()) << err;
    EXPECT_GT(b->stats().direct_samples, 0u);
    for (auto& [g, t] : rest) head[g].insert(head[g].end(), t.begin(), t.end());
    int64_t with_tokens = 0;
    for (int64_t g = 0; g < d.samples; ++g) {
      auto want = testing::DocTokens(g, 300);
      if (want.empty()) continue;
      ++with_tokens;
      EXPECT_EQ(head[g], want) << "document " << g << ", resumed after " << k << " batches";
    }
    EXPECT_EQ(static_cast<int64_t>(head.size()), with_tokens) << k << ", groups of " << group;
  }
  }
}

TEST(DirectReadsTest, ShardsWithoutAVersion2IndexAreReadThroughBuffers) {
  TempDir dir;
  auto d = Tokens(dir.path(), 3, 40);
  // Shard 0: no index at all; shard 1: a version 1 index (no field
  // records); shard 2: a version 2 index.
  ASSERT_EQ(::unlink(IndexUrlFor(d.shard_paths[0]).c_str()), 0);
  auto v2 = ReadSampleIndex(d.shard_paths[1]);
  ASSERT_TRUE(v2.ok()) << v2.status();
  ASSERT_TRUE(v2->has_fields());
  SampleIndex v1 = *v2;
  v1.fields.clear();
  ASSERT_TRUE(WriteSampleIndex(v1, d.shard_paths[1]).ok());
  auto back = ReadSampleIndex(d.shard_paths[1]);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->has_fields());
  // Shuffled too: documents read directly and samples read the usual way
  // share the shuffle buffer, in the order the usual way alone gives.
  for (int64_t shuffle : {0, 2, 50}) {
    SCOPED_TRACE("shuffle buffer " + std::to_string(shuffle));
    LoaderOptions o = TokenOptions(d.manifest);
    o.shuffle_buffer = shuffle;
    o.seed = 11;
    Epoch direct = RunEpoch(o, true), buffered = RunEpoch(o, false);
    ASSERT_TRUE(direct.error.ok()) << direct.error;
    ASSERT_TRUE(buffered.error.ok()) << buffered.error;
    EXPECT_TRUE(direct.batches == buffered.batches);
    EXPECT_EQ(direct.direct, 40u);  // shard 2's samples only
  }
}

// Consumers whose ranges start and end inside shards (three ranks, two
// workers each): every one reads its own samples directly, in the same
// batches as through read buffers.
TEST(DirectReadsTest, SameBatchesForEveryConsumerOfASplitEpoch) {
  TempDir dir;
  auto d = Tokens(dir.path(), 2, 50);
  uint64_t direct_total = 0;
  for (int r = 0; r < 3; ++r) {
    for (int w = 0; w < 2; ++w) {
      LoaderOptions o = TokenOptions(d.manifest);
      o.world_size = 3;
      o.rank = r;
      o.num_workers = 2;
      o.worker = w;
      o.open_shards = 2;
      // Every document of each share, read both ways (not cut to the
      // consumers' common batch count).
      o.tokens.equal_batches = false;
      Epoch direct = RunEpoch(o, true), buffered = RunEpoch(o, false);
      ASSERT_TRUE(direct.error.ok()) << r << "/" << w << ": " << direct.error;
      ASSERT_TRUE(buffered.error.ok()) << r << "/" << w << ": " << buffered.error;
      EXPECT_FALSE(direct.batches.empty());
      EXPECT_TRUE(direct.batches == buffered.batches) << r << "/" << w;
      auto l = *Loader::Create(o);
      EXPECT_EQ(direct.direct, static_cast<uint64_t>(l->samples_per_epoch())) << r << "/" << w;
      direct_total += direct.direct;
    }
  }
  EXPECT_EQ(direct_total, 96u);  // 100 samples, an equal share for each of 6 consumers
}

// A direct shard keeps its range's records only, and needs the token field
// only there; the walk of the index stops after the range.
TEST(DirectReadsTest, ADirectShardKeepsOnlyItsRange) {
  TempDir dir;
  auto d = Tokens(dir.path(), 1, 60);
  auto index = ReadSampleIndex(d.shard_paths[0]);
  ASSERT_TRUE(index.ok()) << index.status();
  std::string why;
  auto s = OpenDirectShard(d.shard_paths[0], "tokens.npy", DType::kInt32, 7, 23,
                                     uint64_t{1} << 20, nullptr, &why);
  ASSERT_NE(s, nullptr) << why;
  ASSERT_EQ(s->docs.size(), 16u);
  for (int64_t i = 7; i < 23; ++i) {
    const SampleIndexEntry& e = index->samples[static_cast<size_t>(i)];
    const SampleIndexField* f = nullptr;
    for (uint64_t j = e.first_field; j < e.first_field + e.nfields; ++j)
      if (index->fields[j].name == "tokens.npy") f = &index->fields[j];
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(s->key(i), e.key);
    EXPECT_EQ(s->doc(i).offset, e.offset);
    EXPECT_EQ(s->doc(i).length, e.length);
    EXPECT_EQ(s->doc(i).field, f->offset);
    EXPECT_EQ(s->doc(i).payload, f->payload);
    EXPECT_EQ(s->doc(i).count, f->count);
    EXPECT_EQ(s->doc(i).header_hash, f->header_hash);
  }
  // Sample 30 loses its token field record (the index is rewritten, so
  // its checksum holds).
  SampleIndex changed = *index;
  SampleIndexEntry& e30 = changed.samples[30];
  for (uint64_t j = e30.first_field; j < e30.first_field + e30.nfields; ++j)
    if (changed.fields[j].name == "tokens.npy") changed.fields[j].name = "other.npy";
  ASSERT_TRUE(WriteSampleIndex(changed, d.shard_paths[0]).ok());
  for (auto [first, end, ok] : {std::tuple{0, 30, true}, std::tuple{31, -1, true},
                                std::tuple{25, 40, false}, std::tuple{30, 31, false},
                                std::tuple{0, -1, false}}) {
    why.clear();
    s = OpenDirectShard(d.shard_paths[0], "tokens.npy", DType::kInt32, first, end,
                                  uint64_t{1} << 20, nullptr, &why);
    EXPECT_EQ(s != nullptr, ok) << first << ".." << end << ": " << why;
    if (!ok) EXPECT_NE(why.find("sample 30 has no 1-D int32 field 'tokens.npy'"), std::string::npos) << why;
  }
  // More samples than the index lists, and an int64 field that is int32.
  s = OpenDirectShard(d.shard_paths[0], "tokens.npy", DType::kInt32, 0, 61,
                                uint64_t{1} << 20, nullptr, &why);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(why.find("fewer than the plan"), std::string::npos) << why;
  s = OpenDirectShard(d.shard_paths[0], "tokens.npy", DType::kInt64, 0, 10,
                                uint64_t{1} << 20, nullptr, &why);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(why.find("sample 0 has no 1-D int64 field"), std::string::npos) << why;
}

// Index records' memory goes back to the recycler with the chunk and comes
// out again for the next one; beyond its cap it is freed.
TEST(DirectReadsTest, TheRecyclerReusesRecordMemoryUpToItsCap) {
  TempDir dir;
  auto d = Tokens(dir.path(), 2, 60);
  auto recycler = std::make_shared<internal::DirectRecycler>(uint64_t{1} << 20);
  std::string why;
  auto a = OpenDirectShard(d.shard_paths[0], "tokens.npy", DType::kInt32, 0, -1,
                                     uint64_t{1} << 19, recycler, &why);
  ASSERT_NE(a, nullptr) << why;
  const std::vector<internal::DirectShard::Doc> want = a->docs;
  const uint64_t held = a->memory();
  EXPECT_EQ(recycler->idle_bytes(), 0u);
  a.reset();
  EXPECT_EQ(recycler->idle_bytes(), held);
  auto b = OpenDirectShard(d.shard_paths[1], "tokens.npy", DType::kInt32, 0, -1,
                                     uint64_t{1} << 19, recycler, &why);
  ASSERT_NE(b, nullptr) << why;
  EXPECT_EQ(recycler->idle_bytes(), 0u);  // taken again
  ASSERT_EQ(b->docs.size(), 60u);
  EXPECT_EQ(b->key(0), ReadSampleIndex(d.shard_paths[1])->samples[0].key);
  b.reset();
  a = OpenDirectShard(d.shard_paths[0], "tokens.npy", DType::kInt32, 0, -1,
                                uint64_t{1} << 19, recycler, &why);
  ASSERT_NE(a, nullptr) << why;
  ASSERT_EQ(a->docs.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(a->docs[i].offset, want[i].offset);
    EXPECT_EQ(a->docs[i].header_hash, want[i].header_hash);
  }
  // A recycler with too little room keeps nothing.
  auto small = std::make_shared<internal::DirectRecycler>(held - 1);
  a = OpenDirectShard(d.shard_paths[0], "tokens.npy", DType::kInt32, 0, -1,
                                uint64_t{1} << 19, small, &why);
  ASSERT_NE(a, nullptr) << why;
  a.reset();
  EXPECT_EQ(small->idle_bytes(), 0u);
}

// An index of any size is read a chunk of records at a time (a quarter of
// the lane's read buffers, 128 KiB here: about 1,100 samples), and the
// batches are those read through buffers.
TEST(DirectReadsTest, ALargeIndexIsWalkedInChunks) {
  TempDir dir;
  auto d = Tokens(dir.path(), 1, 7000, 8);
  std::string idx = testing::ReadFile(IndexUrlFor(d.shard_paths[0]));
  LoaderOptions o = TokenOptions(d.manifest);
  o.read_chunk = 64 << 10;
  ASSERT_GT(idx.size(), size_t{4} * o.read_chunk);
  Epoch direct = RunEpoch(o, true), buffered = RunEpoch(o, false);
  ASSERT_TRUE(direct.error.ok()) << direct.error;
  ASSERT_TRUE(buffered.error.ok()) << buffered.error;
  EXPECT_EQ(direct.direct, 7000u);
  EXPECT_TRUE(direct.batches == buffered.batches);
  // What one chunk holds, and that a range over several comes in order.
  std::string why;
  auto range = OpenRange(d.shard_paths[0], "tokens.npy", DType::kInt32, 100, 6900, &why);
  ASSERT_NE(range, nullptr) << why;
  auto index = ReadSampleIndex(d.shard_paths[0]);
  ASSERT_TRUE(index.ok());
  int64_t next = 100, chunks = 0;
  while (auto c = NextChunk(range.get(), 128 << 10, nullptr, &why)) {
    ++chunks;
    EXPECT_EQ(c->first, next);
    EXPECT_LE(c->docs.size() * sizeof(internal::DirectShard::Doc), size_t{64} << 10);
    for (int64_t i = c->first; i < c->first + static_cast<int64_t>(c->docs.size()); ++i) {
      EXPECT_EQ(c->doc(i).offset, index->samples[static_cast<size_t>(i)].offset) << i;
      EXPECT_EQ(c->key(i), index->samples[static_cast<size_t>(i)].key) << i;
    }
    next += static_cast<int64_t>(c->docs.size());
  }
  EXPECT_TRUE(why.empty()) << why;
  EXPECT_EQ(next, 6900);
  EXPECT_GT(chunks, 4);
}

// A sample in the middle of a range that its index says cannot be read
// directly (here: its token field record renamed): the samples before it
// are read directly, it and the rest the usual way; the batches are the same.
TEST(DirectReadsTest, ARangeGoesOnThroughBuffersFromASampleThatCannotBeReadDirectly) {
  TempDir dir;
  auto d = Tokens(dir.path(), 1, 60);
  auto index = ReadSampleIndex(d.shard_paths[0]);
  ASSERT_TRUE(index.ok()) << index.status();
  SampleIndex changed = *index;
  SampleIndexEntry& e30 = changed.samples[30];
  for (uint64_t j = e30.first_field; j < e30.first_field + e30.nfields; ++j)
    if (changed.fields[j].name == "tokens.npy") changed.fields[j].name = "other.npy";
  ASSERT_TRUE(WriteSampleIndex(changed, d.shard_paths[0]).ok());
  for (int64_t shuffle : {0, 40}) {
    SCOPED_TRACE("shuffle buffer " + std::to_string(shuffle));
    LoaderOptions o = TokenOptions(d.manifest);
    o.shuffle_buffer = shuffle;
    o.seed = 5;
    Epoch direct = RunEpoch(o, true), buffered = RunEpoch(o, false);
    ASSERT_TRUE(direct.error.ok()) << direct.error;
    ASSERT_TRUE(buffered.error.ok()) << buffered.error;
    EXPECT_EQ(direct.direct, 30u);
    EXPECT_TRUE(direct.batches == buffered.batches);
  }
}

// Another member after each document: the gap before the next document
// (over a tar block here; the tar padding alone, in the other tests, goes
// with its headers) is read into a scratch buffer, and one over 16 KiB ends
// the read (the next document is another preadv).
TEST(DirectReadsTest, MembersBetweenDocumentsAreReadAroundOrSkipped) {
  for (size_t pad : {size_t{300}, size_t{3000}, size_t{40000}}) {
    TempDir dir;
    DatasetSpec spec{2, 40};
    spec.tokens = true;
    spec.max_doc_tokens = 300;
    spec.pad_bytes = pad;
    auto d = testing::WriteDataset(dir.path(), spec);
    LoaderOptions o = TokenOptions(d.manifest);
    Epoch direct = RunEpoch(o, true), buffered = RunEpoch(o, false);
    ASSERT_TRUE(direct.error.ok()) << pad << ": " << direct.error;
    ASSERT_TRUE(buffered.error.ok()) << pad << ": " << buffered.error;
    EXPECT_EQ(direct.direct, 80u) << pad;
    EXPECT_FALSE(direct.batches.empty()) << pad;
    EXPECT_TRUE(direct.batches == buffered.batches) << pad;
  }
}

// The packer on its own, with no workers to complete batches (no notify):
// it reads a full batch's documents itself before emitting it.
TEST(DirectReadsTest, PackerWithoutWorkersReadsEachBatchBeforeEmittingIt) {
  TempDir dir;
  auto d = Tokens(dir.path(), 1, 60);
  std::string why;
  auto shard = OpenDirectShard(d.shard_paths[0], "tokens.npy", DType::kInt32, 0, -1,
                                         uint64_t{1} << 20, nullptr, &why);
  ASSERT_NE(shard, nullptr) << why;
  shardstream::TokenOptions t;
  t.field = "tokens.npy";
  t.seq_len = 64;
  t.eod_token = -1;
  internal::PoolConfig pool;
  pool.slots = 64;
  pool.allocator = PageableAllocator();
  std::vector<Batch> direct, copied;
  internal::TokenPacker a(t, 4, pool, [&](Batch&& b) {
    direct.push_back(std::move(b));
    return Status::OK();
  });
  internal::TokenPacker b(t, 4, pool, [&](Batch&& x) {
    copied.push_back(std::move(x));
    return Status::OK();
  });
  a.set_direct(true);
  // In an order of their own, as a shuffle buffer would give them: the
  // reads of a batch are then sorted before they run.
  std::vector<int64_t> order(60);
  for (int64_t i = 0; i < 60; ++i) order[static_cast<size_t>(i)] = (i * 37) % 60;
  for (int64_t i : order) {
    const std::vector<int32_t> want = testing::DocTokens(i, 300);
    const std::string key(shard->key(i));
    internal::RowInput row{SampleId{0, i}, key, shard->url, shard->doc(i).offset, nullptr};
    DecodedField f;
    f.is_tensor = true;
    f.dtype = DType::kInt32;
    f.ndim = 1;
    f.shape[0] = static_cast<int64_t>(shard->doc(i).count);
    ASSERT_EQ(f.shape[0], static_cast<int64_t>(want.size())) << i;
    internal::DirectDoc doc{shard, i};
    ASSERT_TRUE(a.Add(row, f, 0, &doc).ok());
    f.data = std::string_view(reinterpret_cast<const char*>(want.data()), want.size() * 4);
    ASSERT_TRUE(b.Add(row, f, 0).ok());
  }
  ASSERT_TRUE(a.Flush().ok());
  ASSERT_TRUE(b.Flush().ok());
  ASSERT_EQ(direct.size(), copied.size());
  ASSERT_GT(direct.size(), 10u);
  for (size_t i = 0; i < direct.size(); ++i) {
    for (const char* name : {"tokens", "doc_ids", "positions"}) {
      TensorView x = direct[i].tensor(name), y = copied[i].tensor(name);
      ASSERT_EQ(x.nbytes, y.nbytes) << name;
      EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << "batch " << i << " " << name;
    }
  }
}

// Overwrites bytes of a file in place (its size, and so its index, unchanged).
void Smash(const std::string& path, uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Renames the member whose ustar header is at `offset` ("k25" to "k2X"),
// with a checksum to match: an intact header of another member.
void Renamed(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  char h[512];
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(h, sizeof(h));
  std::string name(h, strnlen(h, 100));
  const size_t at = name.find("k25");
  ASSERT_NE(at, std::string::npos) << name;
  h[at + 2] = 'X';
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h + 148, 8, "%06o", sum);
  h[155] = ' ';
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(h, sizeof(h));
}

// The error a damaged shard gives: kCorrupt naming the shard, what differs
// and the byte offset.
void ExpectMismatch(const Status& err, const std::string& shard, const std::string& says,
                    uint64_t offset, const std::string& what) {
  EXPECT_EQ(err.code(), StatusCode::kCorrupt) << what << ": " << err;
  EXPECT_NE(err.message().find(shard), std::string::npos) << err;
  EXPECT_NE(err.message().find(says), std::string::npos) << what << ": " << err;
  EXPECT_EQ(err.offset(), static_cast<int64_t>(offset)) << what << ": " << err;
}

TEST(DirectReadsTest, AShardChangedSinceIndexingFailsNamingItAndTheOffset) {
  TempDir dir;
  auto d = Tokens(dir.path(), 2, 40);
  auto index = ReadSampleIndex(d.shard_paths[1]);
  ASSERT_TRUE(index.ok()) << index.status();
  const SampleIndexEntry& e = index->samples[25];
  const SampleIndexField& f = index->fields[e.first_field];
  ASSERT_EQ(f.name, "tokens.npy");
  struct Damage {
    const char* what;
    uint64_t offset;
    std::string bytes;
    uint64_t reported;  // the offset the error names
    const char* says;
  };
  const Damage damage[] = {
      // The member's name in its tar header.
      {"name", f.offset - 512, "Z", f.offset - 512, "bad checksum"},
      // Its size field.
      {"size", f.offset - 512 + 124 + 10, "7", f.offset - 512, "bad checksum"},
      // Another member's header there, intact: the name and the checksum
      // changed together.
      {"another member", f.offset - 512, "", f.offset - 512, "the member there is not s1/k25"},
      // The .npy header: the error names the bad byte.
      {"npy shape", f.offset + 60, "9", f.offset + 60, ".npy"},
  };
  for (const Damage& dmg : damage) {
    TempDir copy;
    auto c = Tokens(copy.path(), 2, 40);
    if (dmg.bytes.empty()) {
      Renamed(c.shard_paths[1], dmg.offset);
    } else {
      Smash(c.shard_paths[1], dmg.offset, dmg.bytes);
    }
    LoaderOptions o = TokenOptions(c.manifest);
    o.open_shards = 2;
    auto l = *Loader::Create(o);
    Epoch got = Drain(l.get());
    ASSERT_FALSE(got.error.ok()) << dmg.what;
    ExpectMismatch(got.error, c.shard_paths[1], dmg.says, dmg.reported, dmg.what);
    // Every batch before the error is whole: the same as an undamaged run's.
    Epoch clean = RunEpoch(TokenOptions(d.manifest), true);
    ASSERT_LE(got.batches.size(), clean.batches.size());
    for (size_t i = 0; i < got.batches.size(); ++i)
      EXPECT_TRUE(got.batches[i] == clean.batches[i]) << dmg.what << ", batch " << i;
  }
}

// A document group's headers are checked once per batch for its documents:
// its array member's tar header and .npy header, as indexed.
TEST(DirectReadsTest, AGroupChangedSinceIndexingFailsNamingItAndTheOffset) {
  TempDir dir;
  auto d = Tokens(dir.path(), 2, 40, 300, 8);
  auto index = ReadSampleIndex(d.shard_paths[1]);
  ASSERT_TRUE(index.ok()) << index.status();
  // Documents 24..31 of the shard are its fourth group; 24 starts it.
  const SampleIndexField& f = index->fields[index->samples[24].first_field];
  ASSERT_EQ(f.flags, kIndexFieldGrouped | kIndexFieldGroupStart);
  const uint64_t header = f.offset - 512;  // the array member's tar header
  struct Damage {
    const char* what;
    uint64_t offset;
    std::string bytes;
    uint64_t reported;
    const char* says;
  };
  const Damage damage[] = {
      {"name", header, "Z", header, "bad checksum"},
      {"size", header + 124 + 10, "7", header, "bad checksum"},
      {"npy shape", f.offset + 60, "9", f.offset, "group's .npy header differs"},
  };
  for (const Damage& dmg : damage) {
    for (int64_t shuffle : {0, 50}) {  // read, or copied from the mapped shard
      TempDir copy;
      auto c = Tokens(copy.path(), 2, 40, 300, 8);
      Smash(c.shard_paths[1], dmg.offset, dmg.bytes);
      LoaderOptions o = TokenOptions(c.manifest);
      o.open_shards = 2;
      o.shuffle_buffer = shuffle;
      auto l = *Loader::Create(o);
      Epoch got = Drain(l.get());
      ASSERT_FALSE(got.error.ok()) << dmg.what;
      ExpectMismatch(got.error, c.shard_paths[1], dmg.says, dmg.reported, dmg.what);
      // Found by the direct reads' check, not by a read through buffers.
      EXPECT_NE(got.error.message().find("does not match its sample index"), std::string::npos)
          << dmg.what << ": " << got.error;
    }
  }
}

// Read, or (shuffled) copied from the mapped shard: a mapping must never
// touch the bytes a truncation removed (that would be SIGBUS).
TEST(DirectReadsTest, AShardCutShortAfterOpeningFailsNamingIt) {
  for (int64_t shuffle : {0, 50}) {
    TempDir dir;
    auto d = Tokens(dir.path(), 1, 200);
    LoaderOptions o = TokenOptions(d.manifest);
    o.open_shards = 1;
    o.reader_threads = 1;
    o.shuffle_buffer = shuffle;
    auto l = *Loader::Create(o);
    for (int i = 0; i < 40; ++i) {  // the shard is open, its index read, 64 documents placed
      auto b = l->next();
      ASSERT_TRUE(b.ok()) << b.status();
    }
    EXPECT_GT(l->stats().direct_samples, 0u) << shuffle;
    ASSERT_EQ(::truncate(d.shard_paths[0].c_str(), 20000), 0);
    Epoch rest = Drain(l.get());
    ASSERT_FALSE(rest.error.ok()) << shuffle;
    EXPECT_EQ(rest.error.code(), StatusCode::kCorrupt) << rest.error;
    EXPECT_NE(rest.error.message().find(d.shard_paths[0]), std::string::npos) << rest.error;
    EXPECT_NE(rest.error.message().find("ends at byte 20000"), std::string::npos) << rest.error;
    EXPECT_EQ(rest.error.offset(), 20000);
  }
}

// A source whose files cannot be mapped (here a fault-injecting one): with
// a shuffle its ranges are read through buffers, and the batches are those
// of mapped shards.
TEST(DirectReadsTest, ShuffledDocumentsOfAFileThatCannotBeMappedAreReadThroughBuffers) {
  TempDir dir;
  auto d = Tokens(dir.path(), 3, 60);
  auto faults = std::make_shared<testing::FaultSource>(LocalSource());
  LoaderOptions o = TokenOptions(d.manifest);
  o.shuffle_buffer = 64;
  o.seed = 3;
  Epoch mapped = RunEpoch(o, true);
  o.source = faults.get();
  Epoch through = RunEpoch(o, true);
  ASSERT_TRUE(mapped.error.ok()) << mapped.error;
  ASSERT_TRUE(through.error.ok()) << through.error;
  EXPECT_EQ(mapped.direct, 180u);
  EXPECT_EQ(through.direct, 0u);
  EXPECT_TRUE(through.batches == mapped.batches);
  // The shards were read through that source: a fault of it reaches the run.
  faults->FailNth(testing::FaultSource::Op::kOpen, 1, Status::Io("injected"), true, ".tar");
  Epoch failed = RunEpoch(o, true);
  EXPECT_NE(failed.error.message().find("injected"), std::string::npos) << failed.error;
}


// Every byte of a direct read goes through the loader's source: a
// fault-injecting one sees the reads, and its faults reach the fast path.
TEST(DirectReadsTest, ReadsGoThroughTheLoadersSource) {
  TempDir dir;
  auto d = Tokens(dir.path(), 2, 60);
  auto faults = std::make_shared<testing::FaultSource>(LocalSource());
  LoaderOptions o = TokenOptions(d.manifest);
  o.source = faults.get();
  Epoch through = RunEpoch(o, true), plain = RunEpoch(TokenOptions(d.manifest), true);
  ASSERT_TRUE(through.error.ok()) << through.error;
  EXPECT_EQ(through.direct, 120u);
  EXPECT_TRUE(through.batches == plain.batches);
  EXPECT_GT(faults->reads(), 2);  // the indexes' and the shards' reads
}

// A fault in the middle of a range, once the shard is open and its index
// read: the loader fails naming the shard and the byte offset, and every
// batch before is whole.
TEST(DirectReadsTest, FaultsOfTheSourceMidRangeFailNamingTheShard) {
  enum Fault { kEio, kCut, kCorrupt };
  for (Fault fault : {kEio, kCut, kCorrupt}) {
    TempDir dir;
    auto d = Tokens(dir.path(), 1, 200);
    auto index = ReadSampleIndex(d.shard_paths[0]);
    ASSERT_TRUE(index.ok()) << index.status();
    const SampleIndexEntry& e = index->samples[150];
    const uint64_t header = index->fields[e.first_field].offset - 512;  // sample 150's
    auto faults = std::make_shared<testing::FaultSource>(LocalSource());
    LoaderOptions o = TokenOptions(d.manifest);
    o.source = faults.get();
    o.open_shards = 1;
    o.reader_threads = 1;
    auto l = *Loader::Create(o);
    auto first = l->next();  // the shard is open, its index read
    ASSERT_TRUE(first.ok()) << first.status();
    const int64_t before = faults->reads();
    if (fault == kEio) faults->FailNthErrno(testing::FaultSource::Op::kRead, 1, EIO, true);
    if (fault == kCut) faults->TruncateReads(20000, ".tar");
    if (fault == kCorrupt) faults->CorruptReadByte(static_cast<int64_t>(header), ".tar");
    Epoch rest = Drain(l.get());
    ASSERT_FALSE(rest.error.ok()) << fault;
    EXPECT_GT(faults->reads(), before) << fault;
    EXPECT_NE(rest.error.message().find(d.shard_paths[0]), std::string::npos) << rest.error;
    if (fault == kEio) {
      EXPECT_EQ(rest.error.code(), StatusCode::kIo) << rest.error;
      EXPECT_NE(rest.error.message().find("reading shard"), std::string::npos) << rest.error;
      EXPECT_GT(rest.error.offset(), 0) << rest.error;
    } else if (fault == kCut) {
      EXPECT_EQ(rest.error.code(), StatusCode::kCorrupt) << rest.error;
      EXPECT_NE(rest.error.message().find("ends at byte 20000"), std::string::npos) << rest.error;
      EXPECT_EQ(rest.error.offset(), 20000);
    } else {
      EXPECT_EQ(rest.error.code(), StatusCode::kCorrupt) << rest.error;
      EXPECT_NE(rest.error.message().find("bad checksum"), std::string::npos) << rest.error;
      EXPECT_EQ(rest.error.offset(), static_cast<int64_t>(header)) << rest.error;
    }
    // The batches before the fault are those of a clean run.
    TempDir copy;
    auto c = Tokens(copy.path(), 1, 200);
    Epoch clean = RunEpoch(TokenOptions(c.manifest), true);
    ASSERT_LE(rest.batches.size() + 1, clean.batches.size());
    for (size_t i = 0; i < rest.batches.size(); ++i)
      EXPECT_TRUE(rest.batches[i] == clean.batches[i + 1]) << fault << ", batch " << i + 1;
  }
}

// A damaged or unreadable index (read through the source) leaves the range
// to the usual way: the same batches, none read directly.
TEST(DirectReadsTest, AnIndexTheSourceCannotReadLeavesTheRangeToReadBuffers) {
  TempDir dir;
  auto d = Tokens(dir.path(), 1, 60);
  for (bool cut : {false, true}) {
    auto faults = std::make_shared<testing::FaultSource>(LocalSource());
    if (cut) {
      faults->TruncateReads(100, ".idx");
    } else {
      faults->CorruptReadByte(40, ".idx");
    }
    LoaderOptions o = TokenOptions(d.manifest);
    o.source = faults.get();
    Epoch got = RunEpoch(o, true), buffered = RunEpoch(TokenOptions(d.manifest), false);
    ASSERT_TRUE(got.error.ok()) << got.error;
    EXPECT_EQ(got.direct, 0u) << cut;
    EXPECT_TRUE(got.batches == buffered.batches) << cut;
  }
}

// Whether the process maps the file at `path` now: its inode in
// /proc/self/maps (by inode, not name: TMPDIR may be spelt otherwise there).
bool MappedNow(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  std::ifstream maps("/proc/self/maps");
  std::string range, perms, offset, dev;
  uint64_t inode = 0;
  std::string rest;
  while (maps >> range >> perms >> offset >> dev >> inode) {
    std::getline(maps, rest);
    if (inode == static_cast<uint64_t>(st.st_ino) && inode != 0) return true;
  }
  return false;
}

// Every epoch's batches, from one loader over `epochs` epochs.
std::vector<Epoch> Epochs(const LoaderOptions& o, int epochs) {
  std::vector<Epoch> out;
  auto l = Loader::Create(o);
  EXPECT_TRUE(l.ok()) << l.status();
  if (!l.ok()) return out;
  for (int e = 0; e < epochs; ++e) {
    EXPECT_TRUE((*l)->set_epoch(e).ok());
    out.push_back(Drain(l->get()));
  }
  return out;
}

// Shards kept mapped from one epoch to the next (mapped_keep_bytes, on by
// default) change nothing in the batches, nor does a budget that keeps
// only some of them.
TEST(DirectReadsTest, ShardsKeptMappedAcrossEpochsGiveTheSameBatches) {
  TempDir dir;
  auto d = Tokens(dir.path(), 3, 60);
  LoaderOptions o = TokenOptions(d.manifest);
  o.shuffle_buffer = 64;
  o.seed = 5;
  ASSERT_GT(o.mapped_keep_bytes, 0u);  // the default keeps them
  std::vector<Epoch> kept = Epochs(o, 3);
  const uint64_t some_bytes = testing::ReadFile(d.shard_paths[0]).size();  // one shard's worth
  uint64_t all = 0;
  for (const std::string& shard : d.shard_paths) all += testing::ReadFile(shard).size();
  o.mapped_keep_bytes = some_bytes;
  std::vector<Epoch> some = Epochs(o, 3);
  o.mapped_keep_bytes = 0;
  std::vector<Epoch> fresh = Epochs(o, 3);
  ASSERT_EQ(kept.size(), 3u);
  for (size_t e = 0; e < kept.size(); ++e) {
    ASSERT_TRUE(kept[e].error.ok()) << kept[e].error;
    EXPECT_EQ(kept[e].direct, 180u * (e + 1));  // every document copied from a mapping
    EXPECT_EQ(kept[e].batches, fresh[e].batches) << "epoch " << e;
    EXPECT_EQ(some[e].batches, fresh[e].batches) << "epoch " << e;
  }
  EXPECT_NE(kept[0].batches, kept[1].batches);  // the epochs are shuffled apart
  // After an epoch, with its ranges closed: the kept shards are still mapped.
  for (uint64_t budget : {uint64_t{4} << 30, some_bytes, uint64_t{0}}) {
    o.mapped_keep_bytes = budget;
    auto l = *Loader::Create(o);
    ASSERT_TRUE(Drain(l.get()).error.ok());
    int mapped = 0;
    for (const std::string& shard : d.shard_paths) mapped += MappedNow(shard) ? 1 : 0;
    EXPECT_EQ(mapped, budget == 0 ? 0 : budget == some_bytes ? 1 : 3) << budget;
    // With room for one shard, the one kept is whichever a lane opened first.
    const uint64_t kept_bytes = l->stats().mapped_kept_bytes;
    if (budget == some_bytes) {
      EXPECT_GT(kept_bytes, 0u);
      EXPECT_LE(kept_bytes, some_bytes);
    } else {
      EXPECT_EQ(kept_bytes, budget == 0 ? 0 : all) << budget;
    }
  }
}

// With a memory_budget, shards are kept mapped only in what the budget
// leaves over the rest of the loader's estimate: kept pages stay resident.
TEST(DirectReadsTest, AMemoryBudgetBoundsTheShardsKeptMapped) {
  TempDir dir;
  auto d = Tokens(dir.path(), 3, 60);
  LoaderOptions o = TokenOptions(d.manifest);
  o.shuffle_buffer = 64;
  // The least budget Loader::Create takes for these options.
  uint64_t lo = 1, hi = uint64_t{1} << 34;
  while (lo < hi) {
    o.memory_budget = (lo + hi) / 2;
    if (Loader::Create(o).ok()) hi = o.memory_budget; else lo = o.memory_budget + 1;
  }
  const uint64_t least = lo, shard = testing::ReadFile(d.shard_paths[0]).size();
  for (uint64_t budget : {least, least + shard + 4096}) {
    o.memory_budget = budget;
    auto l = *Loader::Create(o);
    Epoch e = Drain(l.get());
    ASSERT_TRUE(e.error.ok()) << e.error;
    EXPECT_EQ(e.direct, 180u);
    if (budget == least) {
      EXPECT_EQ(l->stats().mapped_kept_bytes, 0u);
    } else {
      EXPECT_GT(l->stats().mapped_kept_bytes, 0u);
      EXPECT_LE(l->stats().mapped_kept_bytes, shard + 4096);
    }
  }
}

// A shard replaced between epochs (another file renamed over it, as a
// careful writer does) is read anew, not from the mapping kept of the old
// file: the next epoch's batches are a fresh loader's.
TEST(DirectReadsTest, AShardReplacedBetweenEpochsIsNotReadFromItsKeptMapping) {
  TempDir dir;
  auto d = Tokens(dir.path(), 2, 60);
  LoaderOptions o = TokenOptions(d.manifest);
  o.shuffle_buffer = 64;
  o.seed = 5;
  auto l = *Loader::Create(o);
  Epoch first = Drain(l.get());
  ASSERT_TRUE(first.error.ok()) << first.error;
  ASSERT_EQ(first.direct, 120u);
  ASSERT_GT(l->stats().mapped_kept_bytes, 0u);  // the old file is kept
  const std::vector<Epoch> old = Epochs(o, 2);
  // The same shard but one token: the last value of its sample 7.
  auto index = ReadSampleIndex(d.shard_paths[1]);
  ASSERT_TRUE(index.ok()) << index.status();
  const SampleIndexField& f = index->fields[index->samples[7].first_field];
  const std::string next = d.shard_paths[1] + ".next";
  testing::WriteFile(next, testing::ReadFile(d.shard_paths[1]));
  Smash(next, f.offset + f.size - 4, std::string("\x11\x22\x33\x44", 4));
  // A later mtime, as the write makes it (set here: a coarse clock could
  // give both files the same tick within one test).
  struct timespec times[2] = {{0, UTIME_OMIT}, {std::time(nullptr) + 5, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, next.c_str(), times, 0), 0);
  ASSERT_EQ(std::rename(next.c_str(), d.shard_paths[1].c_str()), 0);
  ASSERT_TRUE(l->set_epoch(1).ok());
  Epoch second = Drain(l.get());
  ASSERT_TRUE(second.error.ok()) << second.error;
  o.mapped_keep_bytes = 0;
  const std::vector<Epoch> now = Epochs(o, 2);
  EXPECT_NE(now[1].batches, old[1].batches);  // the change shows in the batches
  EXPECT_EQ(second.batches, now[1].batches);
}

}  // namespace
}  // namespace shardstream

namespace shardstream {
namespace {

// Shards read through the shard cache: the first epoch streams them in (no
// direct reads while a shard downloads); from the second on a complete
// entry is read directly, its index fetched into the cache beside it once;
// from the third the source is not asked for anything. The batches are
// those of a loader without a cache.
// Read, or (shuffled) copied from the mapped entries.
void ExpectCacheEntriesReadDirectly(int64_t shuffle) {
  TempDir data, cache_dir, tmp;
  auto d = Tokens(data.path(), 3, 60);
  auto knobs = std::make_shared<testing::CacheFaultKnobs>();
  knobs->fetch_log = tmp.Join("fetches");
  ShardCacheOptions co;
  co.dir = cache_dir.path();
  co.limit_bytes = uint64_t{1} << 30;
  co.sync_entries = false;
  co.source = std::make_shared<testing::CacheFaultSource>(LocalSource(), knobs);
  LoaderOptions o = TokenOptions(d.manifest);
  o.shuffle_buffer = shuffle;
  const Epoch plain = RunEpoch(o, true);
  o.cache = std::shared_ptr<ShardCache>(std::move(*ShardCache::Create(co)));
  auto l = *Loader::Create(o);
  Epoch first = Drain(l.get());
  ASSERT_TRUE(first.error.ok()) << first.error;
  EXPECT_TRUE(first.batches == plain.batches);
  o.cache->WaitIdle();
  uint64_t direct_before = first.direct;
  size_t fetched = 0;
  for (int epoch = 1; epoch <= 2; ++epoch) {
    ASSERT_TRUE(l->set_epoch(0).ok());
    Epoch again = Drain(l.get());
    ASSERT_TRUE(again.error.ok()) << again.error;
    EXPECT_TRUE(again.batches == plain.batches) << epoch;
    EXPECT_EQ(again.direct - direct_before, 180u) << epoch;  // every document directly
    direct_before = again.direct;
    auto fetches = testing::CountFetches(knobs->fetch_log);
    for (const std::string& shard : d.shard_paths) {
      EXPECT_EQ(fetches[shard], 1) << shard;  // downloaded once, in the first epoch
      EXPECT_EQ(fetches[IndexUrlFor(shard)], 1) << shard;  // once, in the second
    }
    size_t total = 0;
    for (const auto& [url, n] : fetches) total += static_cast<size_t>(n);
    if (epoch == 2) EXPECT_EQ(total, fetched);  // nothing asked of the source
    fetched = total;
  }
  LoaderStats s = l->stats();
  EXPECT_GT(s.read_bytes["cache"], 0u);
  EXPECT_EQ(s.read_bytes.count("file"), 0u);
  // The entries' own statistics count what was copied from their mappings.
  EXPECT_GT(o.cache->stats().bytes_from_cache, uint64_t{3} * 60 * 100) << shuffle;
}

TEST(DirectReadsCacheTest, CompleteCacheEntriesAreReadDirectly) {
  ExpectCacheEntriesReadDirectly(0);
}

TEST(DirectReadsCacheTest, ShuffledDocumentsAreCopiedFromMappedCacheEntries) {
  ExpectCacheEntriesReadDirectly(40);
}

// A source without sample indexes: the cached shards are read the usual
// way, and the missing index is asked for once, not every epoch.
TEST(DirectReadsCacheTest, AMissingIndexIsAskedForOnce) {
  TempDir data, cache_dir, tmp;
  auto d = Tokens(data.path(), 2, 40);
  for (const std::string& shard : d.shard_paths) ASSERT_EQ(std::remove(IndexUrlFor(shard).c_str()), 0);
  auto knobs = std::make_shared<testing::CacheFaultKnobs>();
  knobs->fetch_log = tmp.Join("fetches");
  ShardCacheOptions co;
  co.dir = cache_dir.path();
  co.limit_bytes = uint64_t{1} << 30;
  co.sync_entries = false;
  co.source = std::make_shared<testing::CacheFaultSource>(LocalSource(), knobs);
  LoaderOptions o = TokenOptions(d.manifest);
  const Epoch plain = RunEpoch(o, true);
  o.cache = std::shared_ptr<ShardCache>(std::move(*ShardCache::Create(co)));
  auto l = *Loader::Create(o);
  for (int epoch = 0; epoch < 3; ++epoch) {
    if (epoch > 0) ASSERT_TRUE(l->set_epoch(0).ok());
    Epoch e = Drain(l.get());
    ASSERT_TRUE(e.error.ok()) << e.error;
    EXPECT_TRUE(e.batches == plain.batches) << epoch;
    EXPECT_EQ(e.direct, 0u) << epoch;
    o.cache->WaitIdle();
  }
  auto fetches = testing::CountFetches(knobs->fetch_log);
  for (const std::string& shard : d.shard_paths) {
    EXPECT_EQ(fetches[shard], 1) << shard;
    EXPECT_LE(fetches[IndexUrlFor(shard)], 1) << shard;
  }
}

}  // namespace
}  // namespace shardstream
