// Token batches with equal_batches: every consumer returns the same number
// of batches over shards of very uneven token counts (the DDP end-of-epoch
// hang), decided from the sample indexes alone, also after a restore of
// each consumer's own state and of a merged state on another topology; and
// batches of padding, for tokens and for samples, from a consumer that
// skipped data under a skip policy.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "shardstream/decode.h"
#include "shardstream/loader.h"
#include "shardstream/shard_writer.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::TempDir;

// Shard s holds documents of very different lengths: 40 short ones, 3 long
// ones, 25 middling ones, ... so an even split of samples gives the
// consumers very different token counts.
// With `group` > 0 a shard's documents are written that many to a document
// group (docs/shards.md): the same documents, numbered alike.
std::string WriteUneven(const std::string& dir, bool index = true, int group = 0) {
  // (documents, tokens each) per shard; one writer per shard.
  const std::vector<std::pair<int, int>> shards = {{40, 7}, {3, 900}, {25, 60}, {6, 400},
                                                   {50, 3}, {2, 1500}, {30, 41}, {9, 222}};
  int64_t g = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    ShardWriterOptions o;
    o.write_index = index;
    o.pattern = "part" + std::to_string(s) + "-%06d.tar";
    o.manifest_name = "m" + std::to_string(s) + ".jsonl";
    auto w = ShardWriter::Create(dir, o);
    EXPECT_TRUE(w.ok()) << w.status();
    std::string values;
    std::vector<int64_t> bounds{0};
    auto write_group = [&](int64_t first) {
      if (bounds.size() == 1) return;
      Sample smp;
      smp.key = "grp" + std::to_string(first);
      const std::string tokens = EncodeNpy(DType::kInt32, {bounds.back()}, values);
      const std::string offsets =
          EncodeNpy(DType::kInt64, {static_cast<int64_t>(bounds.size())},
                    std::string_view(reinterpret_cast<const char*>(bounds.data()), bounds.size() * 8));
      smp.fields.resize(2);
      smp.fields[0].name = "tokens.npy";
      smp.fields[0].data = tokens;
      smp.fields[1].name = "doc_offsets.npy";
      smp.fields[1].data = offsets;
      EXPECT_TRUE((*w)->Write(smp).ok());
      values.clear();
      bounds.assign(1, 0);
    };
    for (int i = 0; i < shards[s].first; ++i, ++g) {
      std::vector<int32_t> t(static_cast<size_t>(shards[s].second + (g % 5)));
      for (size_t k = 0; k < t.size(); ++k) t[k] = static_cast<int32_t>(g * 1000 + static_cast<int64_t>(k));
      if (group > 0) {
        values.append(reinterpret_cast<const char*>(t.data()), t.size() * 4);
        bounds.push_back(bounds.back() + static_cast<int64_t>(t.size()));
        if (static_cast<int>(bounds.size()) > group || i + 1 == shards[s].first)
          write_group(g + 1 - static_cast<int64_t>(bounds.size() - 1));
        continue;
      }
      Sample smp;
      smp.key = "d" + std::to_string(g);
      Field f;
      f.name = "tokens.npy";
      const std::string npy =
          EncodeNpy(DType::kInt32, {static_cast<int64_t>(t.size())},
                    std::string_view(reinterpret_cast<const char*>(t.data()), t.size() * 4));
      f.data = npy;
      smp.fields = {f};
      EXPECT_TRUE((*w)->Write(smp).ok());
    }
    EXPECT_TRUE((*w)->Close().ok());
  }
  // One manifest of all the parts.
  std::string all;
  for (size_t s = 0; s < shards.size(); ++s) all += testing::ReadFile(dir + "/m" + std::to_string(s) + ".jsonl");
  testing::WriteFile(dir + "/manifest.jsonl", all);
  return dir + "/manifest.jsonl";
}

LoaderOptions Tokens(const std::string& manifest, int world, int rank, int workers = 1,
                     int worker = 0) {
  LoaderOptions o;
  o.manifest = manifest;
  o.batch_size = 4;
  o.tokens.field = "tokens.npy";
  o.tokens.seq_len = 64;
  o.tokens.eod_token = 0;
  o.shuffle_buffer = 8;
  o.world_size = world;
  o.rank = rank;
  o.num_workers = workers;
  o.worker = worker;
  o.seed = 3;
  return o;
}

int64_t CountBatches(Loader* l) {
  int64_t n = 0;
  while (true) {
    auto b = l->next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || b->empty()) return n;
    EXPECT_EQ(b->tensor("tokens").shape[1], 64);
    ++n;
  }
}

// Reads a loader of sample batches to its end or its first error: batches,
// samples, batches of padding (no samples).
struct SamplesRead {
  int64_t batches = 0, samples = 0, pads = 0;
  Status error;
};
SamplesRead ReadSamples(Loader* l) {
  SamplesRead d;
  while (true) {
    auto b = l->next();
    if (!b.ok()) {
      d.error = b.status();
      return d;
    }
    if (b->empty()) return d;
    ++d.batches;
    d.samples += b->num_samples();
    d.pads += b->num_samples() == 0;
  }
}

class LoaderEqualBatchesGroupsTest : public ::testing::TestWithParam<int> {};

// Also with the documents in groups of 4 (the compact token layout): the
// counts come from the documents' index records alike.
TEST_P(LoaderEqualBatchesGroupsTest, EveryConsumerReturnsTheSameCountOverUnevenDocuments) {
  TempDir dir;
  const std::string m = WriteUneven(dir.path(), true, GetParam());
  for (auto [ranks, workers] : {std::pair{4, 1}, std::pair{2, 2}, std::pair{3, 2}}) {
    std::vector<int64_t> unequal, equal;
    for (int r = 0; r < ranks; ++r)
      for (int w = 0; w < workers; ++w) {
        LoaderOptions o = Tokens(m, ranks, r, workers, w);
        o.tokens.equal_batches = false;
        o.drop_last = (r + w) % 2 == 1;  // token batches never drop: the same counts
        auto free = Loader::Create(o);
        ASSERT_TRUE(free.ok()) << free.status();
        const int64_t predicted = (*free)->batches_per_epoch();
        unequal.push_back(CountBatches(free->get()));
        EXPECT_EQ(predicted, unequal.back()) << "len() of an uncapped consumer";
        o.tokens.equal_batches = true;
        o.drop_last = false;
        auto l = Loader::Create(o);
        ASSERT_TRUE(l.ok()) << l.status();
        const int64_t said = (*l)->batches_per_epoch();
        equal.push_back(CountBatches(l->get()));
        EXPECT_EQ(said, equal.back());
      }
    // The data is uneven enough that the split is, and the cap is the least.
    EXPECT_NE(*std::min_element(unequal.begin(), unequal.end()),
              *std::max_element(unequal.begin(), unequal.end()))
        << ranks << "x" << workers;
    for (int64_t n : equal) EXPECT_EQ(n, *std::min_element(unequal.begin(), unequal.end()));
    EXPECT_GT(equal[0], 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, LoaderEqualBatchesGroupsTest, ::testing::Values(0, 4),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 0 ? std::string("OneDocumentPerSample")
                                               : std::string("GroupsOf4");
                         });

// Batches, documents and packed positions (tokens and eods) next() returns.
struct Drained {
  int64_t batches = 0, documents = 0, positions = 0;
};

Drained Drain(Loader* l) {
  Drained d;
  while (true) {
    auto b = l->next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || b->empty()) return d;
    ++d.batches;
    d.documents += b->num_samples();
    TensorView doc = b->tensor("doc_ids");
    const auto* ids = static_cast<const int32_t*>(doc.data);
    for (size_t i = 0; i < doc.nbytes / 4; ++i) d.positions += ids[i] >= 0;
  }
}

FieldSpec BytesField(const std::string& name) {
  FieldSpec f;
  f.name = name;
  f.decode = FieldDecode::kBytes;
  return f;
}

TEST(LoaderEqualBatchesTest, TheRankCountIsWhatEveryWorkerReturnsTogether) {
  // len() of a DataLoader's main process: its workers each end in their own
  // last batch, so the rank's count is their sum, not one consumer's.
  TempDir dir;
  const std::string m = WriteUneven(dir.path());
  for (bool equal : {true, false}) {
    for (auto [ranks, workers] : {std::pair{1, 2}, std::pair{2, 3}}) {
      for (int r = 0; r < ranks; ++r) {
        int64_t sum = 0;
        for (int w = 0; w < workers; ++w) {
          LoaderOptions o = Tokens(m, ranks, r, workers, w);
          o.tokens.equal_batches = equal;
          auto l = Loader::Create(o);
          ASSERT_TRUE(l.ok()) << l.status();
          sum += CountBatches(l->get());
        }
        LoaderOptions o = Tokens(m, ranks, r, workers, 0);
        o.tokens.equal_batches = equal;
        auto first = Loader::Create(o);
        ASSERT_TRUE(first.ok());
        EXPECT_EQ((*first)->rank_batches_per_epoch(), sum) << equal << " " << ranks << "x" << workers;
        o.num_workers = 1;
        o.worker = 0;
        auto alone = Loader::Create(o);
        ASSERT_TRUE(alone.ok());
        EXPECT_EQ((*alone)->rank_batches_per_epoch(), (*alone)->batches_per_epoch());
        if (equal && r == 0) EXPECT_NE((*alone)->batches_per_epoch(), sum);  // the trap
      }
    }
  }
  // Sample batches too: batch_size 3 splits none of the workers' shares evenly.
  for (bool drop : {false, true}) {
    int64_t sum = 0;
    for (int w = 0; w < 3; ++w) {
      LoaderOptions o = Tokens(m, 2, 1, 3, w);
      o.tokens = TokenOptions();
      o.fields = {BytesField("tokens.npy")};
      o.batch_size = 3;
      o.drop_last = drop;
      auto l = Loader::Create(o);
      ASSERT_TRUE(l.ok()) << l.status();
      int64_t n = 0;
      while (true) {
        auto b = (*l)->next();
        ASSERT_TRUE(b.ok()) << b.status();
        if (b->empty()) break;
        ++n;
      }
      sum += n;
    }
    LoaderOptions o = Tokens(m, 2, 1, 3, 0);
    o.tokens = TokenOptions();
    o.fields = {BytesField("tokens.npy")};
    o.batch_size = 3;
    o.drop_last = drop;
    auto l = Loader::Create(o);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ((*l)->rank_batches_per_epoch(), sum) << "drop_last " << drop;
  }
}

TEST(LoaderEqualBatchesTest, WhatTheCutLeavesOutIsCounted) {
  // The equal-batches cut ends a consumer's epoch at everyone's smallest
  // count: the documents and tokens it never returned are in stats().
  TempDir dir;
  const std::string m = WriteUneven(dir.path());
  int64_t cut_consumers = 0;
  for (int r = 0; r < 2; ++r)
    for (int w = 0; w < 2; ++w) {
      LoaderOptions o = Tokens(m, 2, r, 2, w);
      o.tokens.equal_batches = false;
      auto free = Loader::Create(o);
      ASSERT_TRUE(free.ok());
      const Drained all = Drain(free->get());
      EXPECT_EQ((*free)->stats().cut_samples, 0u);
      o.tokens.equal_batches = true;
      auto l = Loader::Create(o);
      ASSERT_TRUE(l.ok());
      for (int epoch = 0; epoch < 2; ++epoch) {
        const LoaderStats before = (*l)->stats();
        if (epoch > 0) ASSERT_TRUE((*l)->set_epoch(0).ok());
        const Drained got = Drain(l->get());
        const LoaderStats s = (*l)->stats();
        const auto docs = static_cast<int64_t>(s.cut_samples - before.cut_samples);
        const auto tokens = static_cast<int64_t>(s.cut_tokens - before.cut_tokens);
        // Every document of the plan was returned whole or is counted cut
        // (the one the last batch left unfinished among them) ...
        EXPECT_EQ(got.documents + docs, all.documents);
        // ... and every token and eod of the plan was returned or is cut.
        EXPECT_EQ(got.positions + tokens + docs, all.positions);
        if (epoch == 0) cut_consumers += docs > 0;
        if (docs > 0) {
          EXPECT_LT(got.batches, all.batches);
          EXPECT_NE(s.ToString().find("equal batches cut"), std::string::npos) << s.ToString();
        }
      }
    }
  EXPECT_GE(cut_consumers, 2);  // uneven enough that most consumers lose some
}

// 8 shards of 10 documents of 63 tokens: with the eod token, a document is
// a row of 64, and every consumer of 4 plans the same 5 batches.
std::string WriteRows(const std::string& dir) {
  ShardWriterOptions o;
  o.write_index = true;
  o.max_samples = 10;
  auto w = ShardWriter::Create(dir, o);
  EXPECT_TRUE(w.ok()) << w.status();
  for (int g = 0; g < 80; ++g) {
    std::vector<int32_t> t(63, g + 1);
    Sample smp;
    smp.key = "d" + std::to_string(g);
    Field f;
    f.name = "tokens.npy";
    const std::string npy = EncodeNpy(DType::kInt32, {63},
        std::string_view(reinterpret_cast<const char*>(t.data()), t.size() * 4));
    f.data = npy;
    smp.fields = {f};
    EXPECT_TRUE((*w)->Write(smp).ok());
  }
  EXPECT_TRUE((*w)->Close().ok());
  return dir + "/manifest.jsonl";
}

TEST(LoaderEqualBatchesTest, AShardSkippedUnderThePolicyIsPaddedSoEveryConsumerEndsTogether) {
  // The count every consumer returns comes from the indexes, before a byte
  // is read; a consumer whose shard turns out corrupt under kSkipShard has
  // fewer documents than planned. Ending early would leave the other DDP
  // ranks in their next all-reduce forever: it returns batches of padding
  // instead (no documents, doc_ids -1), and says so.
  TempDir dir;
  const std::string m = WriteRows(dir.path());
  std::vector<int64_t> clean;
  for (int r = 0; r < 4; ++r) {
    auto l = Loader::Create(Tokens(m, 4, r));
    ASSERT_TRUE(l.ok()) << l.status();
    clean.push_back(CountBatches(l->get()));
  }
  EXPECT_EQ(clean, std::vector<int64_t>(4, 5));
  // The header of a shard's 2nd document: a bad checksum (the rest of the
  // shard, 9 documents, is skipped).
  const std::string shard = dir.path() + "/shard-000003.tar";
  std::string bytes = testing::ReadFile(shard);
  const size_t at = bytes.find("d31.tokens.npy");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at + 148, 8, "XXXXXXXX");
  testing::WriteFile(shard, bytes);
  int64_t padding = 0, skipped = 0;
  for (int r = 0; r < 4; ++r) {
    LoaderOptions o = Tokens(m, 4, r);
    o.error_policy = ErrorPolicy::kSkipShard;
    auto l = Loader::Create(o);
    ASSERT_TRUE(l.ok()) << l.status();
    int64_t n = 0, docs = 0;
    bool padded = false;
    while (true) {
      auto b = l->get()->next();
      ASSERT_TRUE(b.ok()) << b.status();
      if (b->empty()) break;
      ++n;
      docs += b->num_samples();
      TensorView doc = b->tensor("doc_ids");
      const auto* ids = static_cast<const int32_t*>(doc.data);
      const bool all_pad = std::all_of(ids, ids + doc.nbytes / 4, [](int32_t i) { return i == -1; });
      if (padded) EXPECT_TRUE(all_pad) << "padding comes last";
      if (all_pad) {
        EXPECT_EQ(b->num_samples(), 0);
        EXPECT_EQ(b->rows(), 4);
        padded = true;
        ++padding;
      }
    }
    EXPECT_EQ(n, 5) << "consumer " << r;
    const LoaderStats s = (*l)->stats();
    skipped += static_cast<int64_t>(s.skipped_shards);
    EXPECT_EQ(padded, s.skipped_shards > 0) << "consumer " << r;
    // (d30 goes too: a sample ends where the next header is read.)
    EXPECT_EQ(docs, s.skipped_shards > 0 ? 10 : 20) << "consumer " << r;
    EXPECT_EQ(s.cut_samples, 0u) << "skipped, not cut";
  }
  EXPECT_EQ(skipped, 1);
  EXPECT_EQ(padding, 2);  // 10 documents fill 3 of the 5 batches
  // Every layout pads alike: rows of pad_token with no documents, and zeros for the
  // positions, the mask and the lengths where there are such columns.
  for (int layout = 0; layout < 3; ++layout) {
    int64_t pads = 0;
    for (int r = 0; r < 4; ++r) {
      LoaderOptions o = Tokens(m, 4, r);
      o.error_policy = ErrorPolicy::kSkipShard;
      o.tokens.pad_token = 7;
      if (layout == 1) o.tokens.layout = TokenLayout::kPad;
      if (layout == 2) o.tokens.document_metadata = false;
      auto l = Loader::Create(o);
      ASSERT_TRUE(l.ok()) << l.status();
      int64_t n = 0;
      while (true) {
        auto b = l->get()->next();
        ASSERT_TRUE(b.ok()) << b.status();
        if (b->empty()) break;
        ++n;
        if (b->num_samples() > 0) continue;
        ++pads;
        TensorView tok = b->tensor("tokens");
        const auto* t = static_cast<const int32_t*>(tok.data);
        EXPECT_TRUE(std::all_of(t, t + tok.nbytes / 4, [](int32_t v) { return v == 7; }));
        EXPECT_EQ(b->tensor("doc_ids").data != nullptr, layout == 0);
        for (const char* zero : {"positions", "mask", "lengths"}) {
          TensorView z = b->tensor(zero);
          if (z.data == nullptr) continue;
          const auto* bytes = static_cast<const uint8_t*>(z.data);
          EXPECT_TRUE(std::all_of(bytes, bytes + z.nbytes, [](uint8_t v) { return v == 0; }))
              << zero << " in layout " << layout;
        }
      }
      // kPad: a document a row, so 10 documents fill 3 batches of 4 there too.
      EXPECT_EQ(n, 5) << "consumer " << r << " layout " << layout;
    }
    EXPECT_EQ(pads, 2) << "layout " << layout;
  }
  // The control: the same consumers under kRaise, one fails on that shard
  // (reading through the tar headers: direct reads take the values where
  // the index says, and this header's checksum is all that is wrong).
  int failed = 0;
  for (int r = 0; r < 4; ++r) {
    LoaderOptions o = Tokens(m, 4, r);
    o.direct_reads = false;
    auto l = Loader::Create(o);
    ASSERT_TRUE(l.ok());
    while (true) {
      auto b = l->get()->next();
      if (!b.ok()) {
        EXPECT_NE(b.status().ToString().find("shard-000003.tar"), std::string::npos) << b.status();
        ++failed;
        break;
      }
      if (b->empty()) break;
    }
  }
  EXPECT_EQ(failed, 1);
}

TEST(LoaderEqualBatchesTest, PadLayoutCountsRowsPerDocument) {
  TempDir dir;
  const std::string m = WriteUneven(dir.path());
  std::vector<int64_t> counts, free_counts;
  for (int r = 0; r < 3; ++r) {
    LoaderOptions o = Tokens(m, 3, r);
    o.tokens.layout = TokenLayout::kPad;
    o.tokens.equal_batches = false;
    auto free = Loader::Create(o);
    ASSERT_TRUE(free.ok());
    const int64_t predicted = (*free)->batches_per_epoch();
    free_counts.push_back(CountBatches(free->get()));
    EXPECT_EQ(predicted, free_counts.back());
    o.tokens.equal_batches = true;
    auto l = Loader::Create(o);
    counts.push_back(CountBatches(l->get()));
  }
  // The control: left alone, the consumers' counts differ.
  EXPECT_NE(*std::min_element(free_counts.begin(), free_counts.end()),
            *std::max_element(free_counts.begin(), free_counts.end()));
  // Equal batches: every consumer returns the smallest of them, and that is not none.
  EXPECT_GT(counts[0], 0);
  EXPECT_EQ(counts[0], *std::min_element(free_counts.begin(), free_counts.end()));
  EXPECT_EQ(counts[0], counts[1]);
  EXPECT_EQ(counts[1], counts[2]);
}

TEST(LoaderEqualBatchesTest, OwnStatesRestoreTheSameCountLeftOnEveryConsumer) {
  TempDir dir;
  const std::string m = WriteUneven(dir.path());
  std::vector<LoaderState> owns;
  int64_t total = -1;
  constexpr int kTaken = 3;
  auto Tokens = [](const std::string& m, int world, int rank) {
    LoaderOptions o = ::shardstream::Tokens(m, world, rank);
    o.batch_size = 2;
    return o;
  };
  for (int r = 0; r < 4; ++r) {
    auto l = Loader::Create(Tokens(m, 4, r));
    ASSERT_TRUE(l.ok());
    total = (*l)->batches_per_epoch();
    ASSERT_GT(total, kTaken);
    for (int i = 0; i < kTaken; ++i) ASSERT_TRUE((*l)->next().ok());
    auto own = (*l)->own_state();
    ASSERT_TRUE(own.ok()) << own.status();
    EXPECT_EQ(own->batches_left, total - kTaken);
    // Through JSON, as a checkpoint keeps it.
    auto again = LoaderState::FromJson(own->ToJson());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->batches_left, total - kTaken);
    owns.push_back(*again);
  }
  // Each own state restored alone (a DataLoader worker's, a rank's): the
  // same count left everywhere, whatever each one's tokens.
  for (const LoaderState& s : owns) {
    LoaderOptions o = Tokens(m, 1, 0);
    auto l = Loader::Create(o);
    ASSERT_TRUE((*l)->restore(s).ok());
    EXPECT_EQ((*l)->batches_per_epoch(), total - kTaken);
    EXPECT_EQ(CountBatches(l->get()), total - kTaken);
  }
  // Merged, on another world size: decided again, equal on every new rank.
  auto merged = MergeOwnLoaderStates(owns);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->batches_left, -1);
  std::set<int64_t> left;
  for (int r = 0; r < 3; ++r) {
    auto l = Loader::Create(Tokens(m, 3, r));
    ASSERT_TRUE((*l)->restore(*merged).ok());
    const int64_t said = (*l)->batches_per_epoch();
    const int64_t got = CountBatches(l->get());
    EXPECT_EQ(said, got);
    left.insert(got);
  }
  EXPECT_EQ(left.size(), 1u);
  EXPECT_GT(*left.begin(), 0);
}

TEST(LoaderEqualBatchesTest, LocalShardsWithoutIndexesGetThemBuilt) {
  TempDir dir;
  const std::string m = WriteUneven(dir.path(), /*index=*/false);
  std::vector<int64_t> counts;
  for (int r = 0; r < 2; ++r) {
    auto l = Loader::Create(Tokens(m, 2, r));
    ASSERT_TRUE(l.ok()) << l.status();
    counts.push_back(CountBatches(l->get()));
  }
  EXPECT_EQ(counts[0], counts[1]);
  EXPECT_FALSE(testing::ReadFile(dir.path() + "/part0-000000.tar.idx").empty());
  // The control (after: this reads the indexes built above): left alone the
  // two ranks' counts differ, and the equal count is the smaller, not none.
  std::vector<int64_t> free_counts;
  for (int r = 0; r < 2; ++r) {
    LoaderOptions o = Tokens(m, 2, r);
    o.tokens.equal_batches = false;
    auto l = Loader::Create(o);
    ASSERT_TRUE(l.ok()) << l.status();
    free_counts.push_back(CountBatches(l->get()));
  }
  EXPECT_NE(free_counts[0], free_counts[1]);
  EXPECT_GT(counts[0], 0);
  EXPECT_EQ(counts[0], std::min(free_counts[0], free_counts[1]));
}

TEST(LoaderEqualBatchesTest, SampleBatchesOfAConsumerThatSkippedAreLikewisePadded) {
  // Sample batches: every consumer of 4 reads 20 of the 80 samples, so
  // returns 5 batches of 4, unless it skips some under the policy. It then
  // pads up to 5 (rows of zeros, no samples), or the other DDP ranks would
  // wait in their next all-reduce for ever.
  TempDir dir;
  const std::string m = WriteRows(dir.path());
  const std::string shard = dir.path() + "/shard-000003.tar";
  std::string bytes = testing::ReadFile(shard);
  const size_t at = bytes.find("d31.tokens.npy");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at + 148, 8, "XXXXXXXX");  // the checksum: the rest of the shard is skipped
  testing::WriteFile(shard, bytes);
  auto options = [&](int r, ErrorPolicy policy, bool drop) {
    LoaderOptions o = Tokens(m, 4, r);
    o.tokens = TokenOptions();
    FieldSpec tokens{"tokens.npy", "", FieldDecode::kNpy};
    FieldSpec absent{"none", "", FieldDecode::kLabel};
    absent.optional = true;
    o.fields = {tokens, absent};
    o.error_policy = policy;
    o.drop_last = drop;
    return o;
  };
  for (bool drop : {false, true}) {
    int64_t padding = 0, skipped = 0, cut_short = 0;
    int skipper = -1;
    for (int r = 0; r < 4; ++r) {
      auto l = Loader::Create(options(r, ErrorPolicy::kSkipShard, drop));
      ASSERT_TRUE(l.ok()) << l.status();
      int64_t n = 0, samples = 0, pads = 0;
      while (true) {
        auto b = (*l)->next();
        ASSERT_TRUE(b.ok()) << b.status();
        if (b->empty()) break;
        ++n;
        samples += b->num_samples();
        TensorView t = b->tensor("tokens.npy");
        ASSERT_EQ(t.shape[1], 63);
        const auto* v = static_cast<const int32_t*>(t.data);
        if (b->num_samples() == 0) {
          ++pads;
          EXPECT_EQ(b->rows(), 4) << "a batch of padding is full";
          EXPECT_EQ(t.shape[0], 4);
          EXPECT_TRUE(std::all_of(v, v + 4 * 63, [](int32_t x) { return x == 0; }));
          TensorView present = b->tensor("none.present");
          const auto* p = static_cast<const uint8_t*>(present.data);
          EXPECT_TRUE(std::all_of(p, p + 4, [](uint8_t x) { return x == 0; }));
        } else {
          EXPECT_EQ(pads, 0) << "padding comes last";
          EXPECT_GT(v[0], 0) << "a real sample's tokens";
          if (b->num_samples() < 4) cut_short += 1;
        }
      }
      EXPECT_EQ(n, 5) << "consumer " << r << (drop ? ", drop_last" : "");
      const LoaderStats s = (*l)->stats();
      skipped += static_cast<int64_t>(s.skipped_shards);
      EXPECT_EQ(pads > 0, s.skipped_shards > 0) << "consumer " << r;
      if (s.skipped_shards > 0) skipper = r;
      // (The 2 of the 10 left in a short batch go with drop_last.)
      EXPECT_EQ(samples, s.skipped_shards > 0 ? (drop ? 8 : 10) : 20) << "consumer " << r;
      padding += pads;
    }
    EXPECT_EQ(skipped, 1);
    EXPECT_EQ(padding, drop ? 3 : 2);  // 10 samples: 4, 4, 2 (dropped with drop_last)
    // The consumer that skipped, saved after 2 batches and resumed alone
    // from its own state (a DataLoader worker under StatefulDataLoader):
    // the same 3 batches more, padding included.
    ASSERT_GE(skipper, 0);
    auto first = Loader::Create(options(skipper, ErrorPolicy::kSkipShard, drop));
    ASSERT_TRUE(first.ok());
    for (int i = 0; i < 2; ++i) ASSERT_TRUE((*first)->next().ok());
    auto state = (*first)->own_state();
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->batches_left, 3);
    auto json = LoaderState::FromJson(state->ToJson());
    ASSERT_TRUE(json.ok()) << json.status();
    LoaderOptions solo = options(0, ErrorPolicy::kSkipShard, drop);
    solo.world_size = 1;
    auto second = Loader::Create(solo);
    ASSERT_TRUE(second.ok());
    ASSERT_TRUE((*second)->restore(*json).ok());
    const SamplesRead rest = ReadSamples(second->get());
    ASSERT_TRUE(rest.error.ok()) << rest.error;
    EXPECT_EQ(rest.batches, 3);
    EXPECT_EQ(rest.pads, drop ? 3 : 2);
    EXPECT_EQ(cut_short, drop ? 0 : 1);
  }
  // Under "raise" the skip is an error, as before; alone (one consumer) a
  // skipped shard shortens the epoch, with no one to keep in step.
  {
    Status st;
    for (int r = 0; r < 4; ++r) {
      auto c = Loader::Create(options(r, ErrorPolicy::kRaise, false));
      ASSERT_TRUE(c.ok());
      const SamplesRead d = ReadSamples(c->get());
      if (!d.error.ok()) st = d.error;
    }
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st;
  }
  // A consumer whose whole share was skipped has batched no sample, so has
  // no shapes to pad with where a spec leaves them to the data (npy): an
  // error that names the field (its rank fails), not an early end (the
  // others would wait for ever). 8 consumers of 10 samples: one reads only
  // the damaged shard.
  {
    std::vector<std::string> errors;
    int64_t ended = 0;
    for (int r = 0; r < 8; ++r) {
      LoaderOptions o = options(r, ErrorPolicy::kSkipShard, false);
      o.world_size = 8;
      auto c = Loader::Create(o);
      ASSERT_TRUE(c.ok());
      const SamplesRead d = ReadSamples(c->get());
      if (!d.error.ok()) {
        errors.push_back(d.error.ToString());
      } else {
        EXPECT_EQ(d.batches, 3) << "consumer " << r;
        ++ended;
      }
    }
    EXPECT_EQ(ended, 7);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_NE(errors[0].find("no sample of this consumer's share was batched"), std::string::npos)
        << errors[0];
    EXPECT_NE(errors[0].find("3 batch(es) of padding"), std::string::npos) << errors[0];
    EXPECT_NE(errors[0].find("the spec of field 'tokens.npy' does not fix its type"),
              std::string::npos)
        << errors[0];
  }
  // Where every spec fixes its field's type (the .npy member taken raw, its
  // whole size), that consumer pads from the specs: 3 batches of zeros like
  // the others' 3, with every column as the others' batches have it.
  {
    const size_t member = EncodeNpy(DType::kInt32, {63}, std::string(63 * 4, '\0')).size();
    // A column as a batch's consumer sees it: all but the batch dimension.
    auto columns = [](const Batch& b) {
      std::vector<std::string> out;
      for (size_t i = 0; i < b.num_tensors(); ++i) {
        const TensorView t = b.tensor(i);
        std::string c = std::string(t.name) + " " + std::string(DTypeName(t.dtype)) +
                        (t.is_bytes ? " bytes" : "") + " ndim " + std::to_string(t.ndim);
        for (int k = 1; k < t.ndim; ++k) c += " " + std::to_string(t.shape[k]);
        out.push_back(c);
      }
      return out;
    };
    std::vector<std::string> with_samples, of_padding;
    int64_t padded = 0;
    for (int r = 0; r < 8; ++r) {
      LoaderOptions o = options(r, ErrorPolicy::kSkipShard, false);
      o.world_size = 8;
      FieldSpec raw{"tokens.npy", "", FieldDecode::kRaw};
      raw.dtype = DType::kUint8;
      raw.shape = {static_cast<int64_t>(member)};
      o.fields[0] = raw;
      auto c = Loader::Create(o);
      ASSERT_TRUE(c.ok());
      int64_t n = 0, samples = 0;
      std::vector<std::string> padding;
      while (true) {
        auto b = (*c)->next();
        ASSERT_TRUE(b.ok()) << "consumer " << r << ": " << b.status();
        if (b->empty()) break;
        ++n;
        samples += b->num_samples();
        const TensorView t = b->tensor("tokens.npy");
        ASSERT_EQ(t.ndim, 2);
        EXPECT_EQ(t.shape[0], b->rows());
        EXPECT_EQ(t.shape[1], static_cast<int64_t>(member));
        if (b->num_samples() == 0) {
          EXPECT_EQ(b->rows(), 4) << "a batch of padding is full";
          const auto* p = static_cast<const uint8_t*>(t.data);
          EXPECT_TRUE(std::all_of(p, p + 4 * member, [](uint8_t x) { return x == 0; }));
          const TensorView present = b->tensor("none.present");
          const auto* q = static_cast<const uint8_t*>(present.data);
          EXPECT_TRUE(std::all_of(q, q + 4, [](uint8_t x) { return x == 0; }));
          if (padding.empty()) padding = columns(*b);
        } else if (with_samples.empty()) {
          with_samples = columns(*b);
        }
      }
      EXPECT_EQ(n, 3) << "consumer " << r;
      if (samples == 0) {  // padded from its specs alone
        ++padded;
        of_padding = padding;
      }
    }
    EXPECT_EQ(padded, 1);
    ASSERT_FALSE(with_samples.empty());
    EXPECT_EQ(of_padding, with_samples);
  }
  LoaderOptions alone = options(0, ErrorPolicy::kSkipShard, false);
  alone.world_size = 1;
  alone.rank = 0;
  auto l = Loader::Create(alone);
  ASSERT_TRUE(l.ok());
  const SamplesRead d = ReadSamples(l->get());
  ASSERT_TRUE(d.error.ok()) << d.error;
  EXPECT_EQ(d.samples, 70);
  EXPECT_EQ(d.batches, 18);  // 70 / 4, no padding
  EXPECT_EQ(d.pads, 0);
}

}  // namespace
}  // namespace shardstream
