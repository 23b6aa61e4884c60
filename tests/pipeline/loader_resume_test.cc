// Exactly-once resume: a state taken after k batches, restored in a fresh
// loader (also with another topology), yields exactly the rest.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "shardstream/loader.h"
#include "shardstream/manifest.h"
#include "shardstream/shard_index.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::DatasetSpec;
using testing::DrainIds;
using testing::FieldOptions;
using testing::TempDir;

TEST(LoaderResumeTest, RandomBatchCountsResumeExactlyTheRemainder) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{5, 40});
  LoaderOptions o = FieldOptions(d.manifest);
  o.shuffle_buffer = 30;
  const auto full = DrainIds(Loader::Create(o)->get());
  ASSERT_EQ(full.size(), 200u);
  std::mt19937 rng(42);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t k = static_cast<int64_t>(rng() % 24) + 1;
    auto a = *Loader::Create(o);
    auto head = DrainIds(a.get(), k);
    auto state = a->state();
    ASSERT_TRUE(state.ok()) << state.status();
    auto parsed = LoaderState::FromJson(state->ToJson());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    a.reset();  // samples still in its queue and shuffle buffer were never delivered
    auto b = *Loader::Create(o);
    ASSERT_TRUE(b->restore(*parsed).ok());
    EXPECT_EQ(b->samples_per_epoch(), 200 - static_cast<int64_t>(head.size()));
    auto rest = DrainIds(b.get());
    std::vector<int64_t> all = head;
    all.insert(all.end(), rest.begin(), rest.end());
    std::sort(all.begin(), all.end());
    std::vector<int64_t> want = full;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(all, want) << "after " << k << " batches";
    // Resuming is itself deterministic.
    auto c = *Loader::Create(o);
    ASSERT_TRUE(c->restore(*parsed).ok());
    EXPECT_EQ(DrainIds(c.get()), rest);
  }
}

// Without a shuffle buffer the delivered samples come in runs per lane,
// which the Loader keeps as runs; with padding, the last rank's share wraps
// around to the first samples of the epoch. Each rank's own state must
// resume to exactly its remainder.
TEST(LoaderResumeTest, InOrderWithPaddingCopiesResumesExactlyTheRemainder) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{5, 41});  // 205 samples, 3 ranks
  std::mt19937 rng(7);
  std::multiset<int64_t> every;
  for (int rank = 0; rank < 3; ++rank) {
    LoaderOptions o = FieldOptions(d.manifest);
    o.shuffle_buffer = 0;
    o.world_size = 3;
    o.rank = rank;
    o.pad_remainder = true;
    o.batch_size = 5;
    const auto full = DrainIds(Loader::Create(o)->get());
    ASSERT_EQ(full.size(), 69u);  // ceil(205 / 3)
    every.insert(full.begin(), full.end());
    for (int trial = 0; trial < 4; ++trial) {
      const int64_t k = static_cast<int64_t>(rng() % 13) + 1;
      auto a = *Loader::Create(o);
      auto head = DrainIds(a.get(), k);
      auto own = a->own_state();
      ASSERT_TRUE(own.ok()) << own.status();
      a.reset();
      LoaderOptions alone = FieldOptions(d.manifest);
      alone.shuffle_buffer = 0;
      alone.batch_size = 5;
      auto b = *Loader::Create(alone);
      ASSERT_TRUE(b->restore(*own).ok());
      auto rest = DrainIds(b.get());
      std::multiset<int64_t> all(head.begin(), head.end());
      all.insert(rest.begin(), rest.end());
      EXPECT_EQ(all, std::multiset<int64_t>(full.begin(), full.end()))
          << "rank " << rank << " after " << k << " batches";
    }
  }
  EXPECT_EQ(every.size(), 207u);  // 3 x 69 places for 205 samples: two padding copies
  EXPECT_EQ(std::set<int64_t>(every.begin(), every.end()).size(), 205u);
}

TEST(LoaderResumeTest, ResumeWithAnotherTopology) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{6, 40});
  std::set<int64_t> delivered;
  std::vector<LoaderState> states;
  for (int w = 0; w < 3; ++w) {
    LoaderOptions o = FieldOptions(d.manifest);
    o.num_workers = 3;
    o.worker = w;
    auto l = *Loader::Create(o);
    auto ids = DrainIds(l.get(), 2 + w);
    delivered.insert(ids.begin(), ids.end());
    states.push_back(*l->state());
  }
  auto merged = MergeLoaderStates(states);
  ASSERT_TRUE(merged.ok()) << merged.status();
  std::multiset<int64_t> rest;
  for (int r = 0; r < 2; ++r) {
    LoaderOptions o = FieldOptions(d.manifest);
    o.world_size = 2;
    o.rank = r;
    auto l = *Loader::Create(o);
    ASSERT_TRUE(l->restore(*merged).ok());
    auto ids = DrainIds(l.get());
    rest.insert(ids.begin(), ids.end());
  }
  for (int64_t id : rest) EXPECT_EQ(delivered.count(id), 0u) << id << " delivered twice";
  EXPECT_EQ(std::set<int64_t>(rest.begin(), rest.end()).size(), rest.size());
  // Every sample of the epoch is either delivered or in the rest, except the
  // few the new split drops to keep the consumers equal.
  EXPECT_GE(delivered.size() + rest.size(), 240u - 1);
  EXPECT_LE(delivered.size() + rest.size(), 240u);
}

TEST(LoaderResumeTest, OwnStateRestoredAloneOwesExactlyThatConsumersRest) {
  // A DataLoader worker under StatefulDataLoader gets back only its own
  // state: restored on a single-consumer loader, it must yield exactly what
  // that worker had not yet delivered, nothing of the other workers' shares.
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{6, 40});
  std::multiset<int64_t> everything;
  for (int w = 0; w < 3; ++w) {
    LoaderOptions o = FieldOptions(d.manifest);
    o.shuffle_buffer = 16;
    o.num_workers = 3;
    o.worker = w;
    const auto share = DrainIds(Loader::Create(o)->get());
    auto l = *Loader::Create(o);
    auto head = DrainIds(l.get(), 1 + w);
    auto own = l->own_state();
    ASSERT_TRUE(own.ok()) << own.status();
    auto parsed = LoaderState::FromJson(own->ToJson());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    l.reset();
    LoaderOptions alone = FieldOptions(d.manifest);
    alone.shuffle_buffer = 16;
    auto b = *Loader::Create(alone);
    ASSERT_TRUE(b->restore(*parsed).ok());
    auto rest = DrainIds(b.get());
    std::vector<int64_t> got = head;
    got.insert(got.end(), rest.begin(), rest.end());
    std::sort(got.begin(), got.end());
    std::vector<int64_t> want = share;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want) << "worker " << w;
    everything.insert(got.begin(), got.end());
  }
  // The three shares together: the epoch, each sample once.
  EXPECT_EQ(everything.size(), 240u);
  EXPECT_EQ(std::set<int64_t>(everything.begin(), everything.end()).size(), 240u);
}

TEST(LoaderResumeTest, OwnStatesMergedResumeOnAnotherTopology) {
  // Own shares of three workers, joined in C++ (MergeOwnLoaderStates), resume
  // on two ranks with exactly the samples no worker delivered.
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{6, 40});
  std::set<int64_t> delivered;
  std::vector<LoaderState> own;
  for (int w = 0; w < 3; ++w) {
    LoaderOptions o = FieldOptions(d.manifest);
    o.shuffle_buffer = 16;
    o.num_workers = 3;
    o.worker = w;
    auto l = *Loader::Create(o);
    auto ids = DrainIds(l.get(), 2 + w);
    delivered.insert(ids.begin(), ids.end());
    auto s = l->own_state();
    ASSERT_TRUE(s.ok()) << s.status();
    own.push_back(*LoaderState::FromJson(s->ToJson()));
  }
  // Only part of the consumers: their rest, not the others'.
  auto some = MergeOwnLoaderStates({own[0], own[1]});
  ASSERT_TRUE(some.ok()) << some.status();
  auto merged = MergeOwnLoaderStates(own);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->resume.DeliveredCount(), static_cast<int64_t>(delivered.size()));
  EXPECT_GT(some->resume.DeliveredCount(), merged->resume.DeliveredCount());
  std::multiset<int64_t> rest;
  for (int r = 0; r < 2; ++r) {
    LoaderOptions o = FieldOptions(d.manifest);
    o.shuffle_buffer = 16;
    o.world_size = 2;
    o.rank = r;
    auto l = *Loader::Create(o);
    ASSERT_TRUE(l->restore(*merged).ok());
    auto ids = DrainIds(l.get());
    rest.insert(ids.begin(), ids.end());
  }
  for (int64_t id : rest) EXPECT_EQ(delivered.count(id), 0u) << id << " delivered twice";
  EXPECT_EQ(std::set<int64_t>(rest.begin(), rest.end()).size(), rest.size());
  EXPECT_GE(delivered.size() + rest.size(), 240u - 1);
  EXPECT_LE(delivered.size() + rest.size(), 240u);
  // Shares of another data set or seed do not join.
  LoaderState alien = own[0];
  alien.resume.seed += 1;
  EXPECT_EQ(MergeOwnLoaderStates({own[0], alien}).status().code(), StatusCode::kConfig);
}

TEST(LoaderResumeTest, MergedOwnStatesKeepTheMostProgressOfAPartialDocument) {
  // A consumer that restored a partial document it does not own still
  // carries the older count: the merge keeps the larger, in any order.
  LoaderState a, b;
  a.resume.fingerprint = b.resume.fingerprint = "fp";
  a.resume.segment_length = b.resume.segment_length = 10;
  a.partial = {LoaderState::Partial{1, 2, 300}};
  b.partial = {LoaderState::Partial{1, 2, 100}, LoaderState::Partial{0, 5, 7}};
  for (const auto& order : {std::vector<LoaderState>{a, b}, std::vector<LoaderState>{b, a}}) {
    auto m = MergeOwnLoaderStates(order);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_EQ(m->partial.size(), 2u);
    for (const auto& p : m->partial)
      EXPECT_EQ(p.tokens, p.shard == 1 ? 300 : 7);
  }
}

TEST(LoaderResumeTest, RestoreRejectsAnotherSeed) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{2, 10});
  LoaderOptions o = FieldOptions(d.manifest);
  auto a = *Loader::Create(o);
  DrainIds(a.get(), 1);
  auto s = *a->state();
  o.seed = 99;
  auto b = *Loader::Create(o);
  EXPECT_EQ(b->restore(s).code(), StatusCode::kConfig);
  EXPECT_EQ(LoaderState::FromJson("{\"format\":\"x\"}").status().code(), StatusCode::kCorrupt);
}

// A resume opens a shard part way, at its sidecar index's offset. A shard
// that changed since (its index stale) is read from the start and skipped
// along, and its size is checked against the manifest there too: a changed
// shard is an error naming it, not its new bytes read as the old.
TEST(LoaderResumeTest, AResumeIntoAShardChangedSinceItWasIndexedFailsNamingIt) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{2, 40});
  LoaderOptions o = FieldOptions(d.manifest);
  o.shuffle_buffer = 1;  // each shard's first samples delivered: its rest starts part way
  auto a = *Loader::Create(o);
  ASSERT_EQ(DrainIds(a.get(), 2).size(), 16u);
  auto state = a->state();
  ASSERT_TRUE(state.ok()) << state.status();
  a.reset();
  // Unchanged, the resume reads the rest.
  auto same = *Loader::Create(o);
  ASSERT_TRUE(same->restore(*state).ok());
  EXPECT_EQ(DrainIds(same.get()).size(), 80u - 16u);
  // Grown by a block past its end: a tar that still reads to the end.
  std::string bytes = testing::ReadFile(d.shard_paths[0]);
  const uint64_t indexed = bytes.size();
  bytes.append(512, '\0');
  testing::WriteFile(d.shard_paths[0], bytes);
  auto resumed_fails = [&](const char* what) {
    auto b = *Loader::Create(o);
    ASSERT_TRUE(b->restore(*state).ok());
    const Status st = testing::FirstError(b.get());
    EXPECT_EQ(st.code(), StatusCode::kChecksum) << what << ": " << st;
    EXPECT_NE(st.message().find(d.shard_paths[0] + " has " + std::to_string(indexed + 512) +
                                " bytes, its manifest entry says " + std::to_string(indexed)),
              std::string::npos)
        << what << ": " << st;
  };
  resumed_fails("the index stale");
  // Indexed again, the manifest not rebuilt: the index agrees with the
  // shard, not with the manifest.
  const std::string idx = d.shard_paths[0] + ".idx";
  auto index = ParseSampleIndex(testing::ReadFile(idx), idx);
  ASSERT_TRUE(index.ok()) << index.status();
  index->shard_size = indexed + 512;
  ASSERT_TRUE(WriteSampleIndex(*index, d.shard_paths[0]).ok());
  ASSERT_TRUE(ReadSampleIndex(d.shard_paths[0]).ok()) << "the index is fresh";
  resumed_fails("the manifest stale");
  // No index at all.
  std::filesystem::remove(idx);
  resumed_fails("no index");
}

// The same shards given as a manifest, a folder or a brace pattern (or
// copied elsewhere) are the same data set to a resume state; another data
// set is refused saying what differs.
TEST(LoaderResumeTest, AStateResumesOverTheSameShardsInAnyInputForm) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{5, 40});
  ASSERT_EQ(d.shard_paths.size(), 5u);
  const std::string pattern = dir.path() + "/shard-{000000..000004}.tar";
  ASSERT_EQ(d.shard_paths[4], dir.path() + "/shard-000004.tar");
  const std::vector<std::string> forms = {d.manifest, dir.path(), pattern};
  auto options = [&](const std::string& input) {
    LoaderOptions o = FieldOptions(d.manifest);
    o.manifest = input;
    o.shuffle_buffer = 20;
    return o;
  };
  for (const std::string& saved_form : forms) {
    auto a = *Loader::Create(options(saved_form));
    auto head = DrainIds(a.get(), 3);
    const LoaderState state = *a->state();
    for (const std::string& form : forms) {
      auto b = *Loader::Create(options(form));
      Status st = b->restore(state);
      ASSERT_TRUE(st.ok()) << "saved over " << saved_form << ", resumed over " << form << ": " << st;
      auto rest = DrainIds(b.get());
      std::set<int64_t> all(head.begin(), head.end());
      all.insert(rest.begin(), rest.end());
      EXPECT_EQ(all.size(), 200u);
      EXPECT_EQ(head.size() + rest.size(), 200u);
    }
  }
  auto a = *Loader::Create(options(d.manifest));
  DrainIds(a.get(), 1);
  const LoaderState state = *a->state();
  // One shard fewer: the counts say so.
  auto fewer = *Loader::Create(options(dir.path() + "/shard-{000000..000003}.tar"));
  Status st = fewer->restore(state);
  EXPECT_EQ(st.code(), StatusCode::kConfig);
  EXPECT_NE(st.message().find("the state's data set has 5 shards and 200 samples, this one 4 "
                              "shards and 160 samples"),
            std::string::npos)
      << st;
  // The same counts in another order.
  LoaderOptions swapped = options(d.shard_paths[1]);
  swapped.inputs = {d.shard_paths[0], d.shard_paths[2], d.shard_paths[3], d.shard_paths[4]};
  st = (*Loader::Create(swapped))->restore(state);
  EXPECT_EQ(st.code(), StatusCode::kConfig);
  EXPECT_NE(st.message().find("both have 5 shards and 200 samples, but the shards' names, their "
                              "sample counts or their order differ"),
            std::string::npos)
      << st;
  // Eval mode lays the epoch out otherwise.
  LoaderOptions eval = options(d.manifest);
  eval.mode = LoaderMode::kEval;
  st = (*Loader::Create(eval))->restore(state);
  EXPECT_NE(st.message().find("saved reading one data set, and this loader reads one data set "
                              "in eval mode"),
            std::string::npos)
      << st;
}

TEST(LoaderResumeTest, AStateOfAnEarlierReleaseResumesOverTheSameManifest) {
  // Earlier releases fingerprinted url, size, count and checksum per shard.
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{3, 20});
  LoaderOptions o = FieldOptions(d.manifest);
  auto a = *Loader::Create(o);
  auto head = DrainIds(a.get(), 2);
  LoaderState state = *a->state();
  auto manifest = ReadManifest(d.manifest);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_NE(state.resume.fingerprint, manifest->LegacyFingerprint());
  state.resume.fingerprint = manifest->LegacyFingerprint();
  auto b = *Loader::Create(o);
  ASSERT_TRUE(b->restore(state).ok());
  EXPECT_EQ(DrainIds(b.get()).size() + head.size(), 60u);
  // Over a folder (no checksums, so the old fingerprint differs): refused, saying why.
  LoaderOptions folder = o;
  folder.manifest = dir.path();
  Status st = (*Loader::Create(folder))->restore(state);
  EXPECT_EQ(st.code(), StatusCode::kConfig);
  EXPECT_NE(st.message().find("saved by an earlier release"), std::string::npos) << st;
}

// Token batches: rebuilds every document from the packed rows.
std::map<int64_t, std::vector<int32_t>> Rebuild(Loader* l, int64_t max_batches,
                                                 std::vector<int32_t>* tail_tokens) {
  std::map<int64_t, std::vector<int32_t>> docs;
  for (int64_t b = 0; max_batches < 0 || b < max_batches; ++b) {
    auto batch = l->next();
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok() || batch->empty()) break;
    TensorView tok = batch->tensor("tokens"), pos = batch->tensor("positions");
    TensorView doc = batch->tensor("doc_ids");
    const int64_t L = tok.shape[1];
    for (int64_t i = 0; i < batch->rows() * L; ++i) {
      int32_t t = static_cast<int32_t*>(tok.data)[i];
      if (static_cast<int32_t*>(doc.data)[i] < 0) continue;
      if (t == -1) continue;  // end of document
      int64_t g = (t - 1) / 1000;
      EXPECT_EQ(static_cast<int32_t*>(pos.data)[i], (t - 1) % 1000) << "token " << t;
      docs[g].push_back(t);
      if (tail_tokens) tail_tokens->push_back(t);
    }
  }
  return docs;
}

class LoaderResumeGroupsTest : public ::testing::TestWithParam<int> {};

// Also with the documents in groups of 7 (the compact token layout; a
// shard's 30 end in a group of 2): a resume opens a shard inside a group.
TEST_P(LoaderResumeGroupsTest, PackedTokensEveryDocumentOnceAndResumeMidDocument) {
  TempDir dir;
  DatasetSpec spec{4, 30};
  spec.tokens = true;
  spec.docs_per_group = GetParam();
  spec.max_doc_tokens = 300;  // seq_len 64: most documents span rows and batches
  auto d = testing::WriteDataset(dir.path(), spec);
  LoaderOptions o;
  o.manifest = d.manifest;
  o.tokens.field = "tokens.npy";
  o.tokens.seq_len = 64;
  o.tokens.eod_token = -1;
  o.tokens.pad_token = -2;
  o.batch_size = 4;
  o.shuffle_buffer = 10;
  o.allocator = PageableAllocator();
  o.read_chunk = 64 << 10;
  auto full = Rebuild(Loader::Create(o)->get(), -1, nullptr);
  int64_t docs_with_tokens = 0;
  for (int64_t g = 0; g < d.samples; ++g) {
    auto want = testing::DocTokens(g, spec.max_doc_tokens);
    if (want.empty()) continue;
    ++docs_with_tokens;
    EXPECT_EQ(full[g], want) << "document " << g;
  }
  EXPECT_EQ(static_cast<int64_t>(full.size()), docs_with_tokens);

  for (int64_t k : {1, 3, 7, 12}) {
    auto a = *Loader::Create(o);
    auto head = Rebuild(a.get(), k, nullptr);
    auto st = a->state();
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_FALSE(st->partial.empty() && k == 1) << "a 300-token document should straddle";
    auto b = *Loader::Create(o);
    ASSERT_TRUE(b->restore(*LoaderState::FromJson(st->ToJson())).ok());
    auto rest = Rebuild(b.get(), -1, nullptr);
    for (auto& [g, t] : rest) head[g].insert(head[g].end(), t.begin(), t.end());
    EXPECT_EQ(head, full) << "resume after " << k << " batches";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, LoaderResumeGroupsTest, ::testing::Values(0, 7),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 0 ? std::string("OneDocumentPerSample")
                                               : std::string("GroupsOf7");
                         });

}  // namespace
}  // namespace shardstream
