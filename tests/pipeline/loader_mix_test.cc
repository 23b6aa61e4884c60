// Mixing data sets (LoaderOptions::streams): each epoch takes every
// stream's share by weight, repeat or choose, deterministically for a seed,
// every slot once, with per-stream counts; resume on another topology; token
// packing with equal batches; bad stream options.
#include <gtest/gtest.h>

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

// `n` samples "<prefix>NNN" in shards of `per` samples, a label and tokens.
std::string WriteStream(const std::string& dir, const std::string& prefix, int n, int per) {
  ShardWriterOptions o;
  o.max_samples = per;
  o.write_index = true;
  auto w = ShardWriter::Create(dir, o);
  EXPECT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.key = prefix + std::to_string(1000 + i).substr(1);
    const std::string label = std::to_string(i);
    std::vector<int32_t> t(static_cast<size_t>(5 + (i * 37) % 90), i + 1);
    const std::string npy = EncodeNpy(DType::kInt32, {static_cast<int64_t>(t.size())},
                                      std::string_view(reinterpret_cast<const char*>(t.data()), t.size() * 4));
    Field c{"cls", label}, k{"tokens.npy", npy};
    s.fields = {c, k};
    EXPECT_TRUE((*w)->Write(s).ok());
  }
  EXPECT_TRUE((*w)->Close().ok());
  return dir + "/manifest.jsonl";
}

struct Sets {
  std::string a, b;
};
Sets WriteSets(const TempDir& dir) {
  return {WriteStream(dir.path() + "/a", "a", 100, 25), WriteStream(dir.path() + "/b", "b", 40, 20)};
}

LoaderOptions Mix(const Sets& s, double wa, double wb) {
  LoaderOptions o;
  o.streams = {MixStream{{s.a}, "a", wa}, MixStream{{s.b}, "b", wb}};
  o.batch_size = 8;
  o.shuffle_buffer = 16;
  o.seed = 5;
  o.fields = {FieldSpec{"cls"}};
  return o;
}

// Every consumer of an epoch: its keys and the shard urls it read.
struct Read {
  std::vector<std::string> keys;
  std::set<std::string> urls;
};
Read ReadAll(Loader* l, int64_t max_batches = -1) {
  Read out;
  for (int64_t n = 0; max_batches < 0 || n < max_batches; ++n) {
    auto b = l->next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || b->empty()) break;
    for (int64_t r = 0; r < b->num_samples(); ++r) {
      out.keys.emplace_back(b->key(r));
      out.urls.insert(b->url(r));
    }
  }
  return out;
}

std::vector<std::string> Keys(Loader* l, int64_t max_batches = -1) {
  return ReadAll(l, max_batches).keys;
}

std::map<std::string, int> Count(const std::vector<std::string>& keys) {
  std::map<std::string, int> c;
  for (const std::string& k : keys) ++c[k];
  return c;
}

TEST(LoaderMixTest, WeightsGiveTheirSharesEverySlotOnce) {
  TempDir dir;
  Sets s = WriteSets(dir);
  LoaderOptions o = Mix(s, 3, 1);
  o.epoch_size = 200;  // a: 150 (a pass and 50 more), b: 50 (a pass and 10 more)
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ((*l)->samples_per_epoch(), 200);
  const auto keys = Keys(l->get());
  ASSERT_EQ(keys.size(), 200u);
  int a = 0, b = 0, a_twice = 0, b_twice = 0;
  for (const auto& [k, n] : Count(keys)) {
    EXPECT_LE(n, 2) << k;
    (k[0] == 'a' ? a : b) += n;
    if (n == 2) ++(k[0] == 'a' ? a_twice : b_twice);
  }
  EXPECT_EQ(a, 150);
  EXPECT_EQ(b, 50);
  EXPECT_EQ(a_twice, 50);
  EXPECT_EQ(b_twice, 10);
  EXPECT_EQ(Count(keys).size(), 140u);  // every sample of both at least once
  const LoaderStats st = (*l)->stats();
  EXPECT_EQ(st.stream_samples.at("a"), 150u);
  EXPECT_EQ(st.stream_samples.at("b"), 50u);
  // The streams are mixed, not one after the other.
  int switches = 0;
  for (size_t i = 1; i < keys.size(); ++i) switches += keys[i][0] != keys[i - 1][0];
  EXPECT_GT(switches, 30);
}

TEST(LoaderMixTest, TheSameSeedAndEpochGiveTheSameEpochAndAnotherEpochAnotherSubset) {
  TempDir dir;
  Sets s = WriteSets(dir);
  LoaderOptions o = Mix(s, 1, 1);  // 70 each: a takes 70 of its 100, b 40 + 30
  auto one = Loader::Create(o), two = Loader::Create(o);
  const auto k1 = Keys(one->get()), k2 = Keys(two->get());
  EXPECT_EQ(k1, k2);
  ASSERT_TRUE((*one)->set_epoch(1).ok());
  const auto e1 = Keys(one->get());
  std::set<std::string> a0, a1;
  for (const auto& k : k1) if (k[0] == 'a') a0.insert(k);
  for (const auto& k : e1) if (k[0] == 'a') a1.insert(k);
  EXPECT_EQ(a0.size(), 70u);
  EXPECT_EQ(a1.size(), 70u);
  EXPECT_NE(a0, a1);
}

TEST(LoaderMixTest, RepeatAndChoose) {
  TempDir dir;
  Sets s = WriteSets(dir);
  LoaderOptions o = Mix(s, -1, -1);
  o.streams[0].repeat = 0.5;  // 50 of a's 100
  o.streams[1].choose = 70;   // b's 40, then 30 again
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status();
  int a = 0, b = 0;
  for (const auto& [k, n] : Count(Keys(l->get()))) {
    (k[0] == 'a' ? a : b) += n;
    if (k[0] == 'a') EXPECT_EQ(n, 1);
  }
  EXPECT_EQ(a, 50);
  EXPECT_EQ(b, 70);
}

TEST(LoaderMixTest, AMergedStateResumesOnAnotherTopologyWithTheRest) {
  TempDir dir;
  Sets s = WriteSets(dir);
  LoaderOptions base = Mix(s, 3, 1);
  base.epoch_size = 210;  // divides by 2 and 3 consumers
  const auto full = Count(Keys(Loader::Create(base)->get()));
  std::vector<LoaderState> states;
  std::vector<std::string> seen;
  for (int r = 0; r < 2; ++r) {
    LoaderOptions o = base;
    o.world_size = 2;
    o.rank = r;
    auto l = Loader::Create(o);
    auto k = Keys(l->get(), 3);
    seen.insert(seen.end(), k.begin(), k.end());
    states.push_back(*(*l)->state());
  }
  auto merged = MergeLoaderStates(states);
  ASSERT_TRUE(merged.ok()) << merged.status();
  std::vector<std::string> rest;
  for (int r = 0; r < 3; ++r) {
    LoaderOptions o = base;
    o.world_size = 3;
    o.rank = r;
    auto l = Loader::Create(o);
    ASSERT_TRUE((*l)->restore(*merged).ok());
    auto k = Keys(l->get());
    rest.insert(rest.end(), k.begin(), k.end());
  }
  auto all = seen;
  all.insert(all.end(), rest.begin(), rest.end());
  EXPECT_EQ(all.size(), 210u);
  const auto got = Count(all);
  int total_full = 0;
  for (const auto& [k, n] : full) total_full += n;
  EXPECT_EQ(total_full, 210);
  for (const auto& [k, n] : full)
    EXPECT_EQ(got.count(k) ? got.at(k) : 0, n) << k;
  for (const auto& [k, n] : got)
    EXPECT_TRUE(full.count(k)) << k << " is not in the epoch";
}

TEST(LoaderMixTest, PackedTokensFromMixedStreamsEqualOnEveryConsumer) {
  TempDir dir;
  Sets s = WriteSets(dir);
  std::set<int64_t> counts;
  for (int r = 0; r < 3; ++r) {
    LoaderOptions o = Mix(s, 2, 1);
    o.fields.clear();
    o.tokens.field = "tokens.npy";
    o.tokens.seq_len = 32;
    o.tokens.eod_token = 0;
    o.batch_size = 2;
    o.world_size = 3;
    o.rank = r;
    auto l = Loader::Create(o);
    ASSERT_TRUE(l.ok()) << l.status();
    const int64_t said = (*l)->batches_per_epoch();
    int64_t n = 0;
    while (true) {
      auto b = (*l)->next();
      ASSERT_TRUE(b.ok()) << b.status();
      if (b->empty()) break;
      ++n;
    }
    EXPECT_EQ(n, said);
    counts.insert(n);
  }
  EXPECT_EQ(counts.size(), 1u);
  EXPECT_GT(*counts.begin(), 0);
}


TEST(LoaderMixTest, NodeLocalKeepsEachStreamsShardsOnTheirNodesEveryEpoch) {
  TempDir dir;
  Sets s{WriteStream(dir.path() + "/a", "a", 200, 25), WriteStream(dir.path() + "/b", "b", 80, 20)};
  LoaderOptions base = Mix(s, 3, 1);
  base.epoch_size = 240;  // a: 180 of its 200, b: 60 of its 80
  base.world_size = 4;
  base.node_local = true;
  base.local_world_size = 2;  // ranks 0-1 are node 0, ranks 2-3 node 1
  std::set<std::string> node_urls[2];
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::string> all;
    int64_t per_rank = -1;
    for (int r = 0; r < 4; ++r) {
      LoaderOptions o = base;
      o.rank = r;
      o.epoch = epoch;
      auto l = Loader::Create(o);
      ASSERT_TRUE(l.ok()) << l.status();
      Read got = ReadAll(l->get());
      if (per_rank < 0) per_rank = static_cast<int64_t>(got.keys.size());
      EXPECT_EQ(static_cast<int64_t>(got.keys.size()), per_rank) << "rank " << r;
      EXPECT_EQ((*l)->samples_per_epoch(), per_rank);
      all.insert(all.end(), got.keys.begin(), got.keys.end());
      node_urls[r / 2].insert(got.urls.begin(), got.urls.end());
    }
    // Within each stream's share: every sample at most once (the shares are
    // below one pass), nearly all of the share (the remainder that does not
    // divide between the nodes' ranks is dropped).
    int a = 0, b = 0;
    for (const auto& [k, n] : Count(all)) {
      EXPECT_EQ(n, 1) << k << " in epoch " << epoch;
      (k[0] == 'a' ? a : b) += n;
    }
    EXPECT_GE(a, 180 - 8) << "epoch " << epoch;
    EXPECT_LE(a, 180);
    EXPECT_GE(b, 60 - 8) << "epoch " << epoch;
    EXPECT_LE(b, 60);
  }
  // A shard belongs to one node in every epoch, and each node reads both streams.
  for (const std::string& u : node_urls[0]) EXPECT_EQ(node_urls[1].count(u), 0u) << u;
  for (const auto& urls : node_urls) {
    bool has_a = false, has_b = false;
    for (const std::string& u : urls) (u.find("/a/") != std::string::npos ? has_a : has_b) = true;
    EXPECT_TRUE(has_a && has_b);
  }
  EXPECT_EQ(node_urls[0].size() + node_urls[1].size(), 8u + 4u);
}

TEST(LoaderMixTest, NodeLocalMixResumesExactlyOnAnotherWorldSize) {
  TempDir dir;
  Sets s{WriteStream(dir.path() + "/a", "a", 200, 25), WriteStream(dir.path() + "/b", "b", 80, 20)};
  LoaderOptions base = Mix(s, 3, 1);
  base.epoch_size = 240;
  base.node_local = true;
  base.local_world_size = 2;
  base.world_size = 4;
  std::vector<std::string> full;
  for (int r = 0; r < 4; ++r) {
    LoaderOptions o = base;
    o.rank = r;
    auto k = ReadAll(Loader::Create(o)->get()).keys;
    full.insert(full.end(), k.begin(), k.end());
  }
  std::vector<LoaderState> states;
  std::vector<std::string> seen;
  for (int r = 0; r < 4; ++r) {
    LoaderOptions o = base;
    o.rank = r;
    auto l = Loader::Create(o);
    auto k = ReadAll(l->get(), 2).keys;
    seen.insert(seen.end(), k.begin(), k.end());
    states.push_back(*(*l)->state());
  }
  auto merged = MergeLoaderStates(states);
  ASSERT_TRUE(merged.ok()) << merged.status();
  // One node of two ranks now.
  std::vector<std::string> rest;
  for (int r = 0; r < 2; ++r) {
    LoaderOptions o = base;
    o.world_size = 2;
    o.rank = r;
    auto l = Loader::Create(o);
    ASSERT_TRUE(l.ok()) << l.status();
    ASSERT_TRUE((*l)->restore(*merged).ok());
    auto k = ReadAll(l->get()).keys;
    rest.insert(rest.end(), k.begin(), k.end());
  }
  auto all = seen;
  all.insert(all.end(), rest.begin(), rest.end());
  EXPECT_EQ(Count(all), Count(full));
}

TEST(LoaderMixTest, BadStreamOptionsAreConfigErrors) {
  TempDir dir;
  Sets s = WriteSets(dir);
  auto fails = [](LoaderOptions o, const std::string& says) {
    auto l = Loader::Create(std::move(o));
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.status().code(), StatusCode::kConfig);
    EXPECT_NE(l.status().message().find(says), std::string::npos) << l.status();
  };
  LoaderOptions o = Mix(s, 1, -1);
  fails(o, "every stream or for none");
  o = Mix(s, 1, 1);
  o.streams[1].repeat = 2;
  fails(o, "one of weight, repeat and choose");
  o = Mix(s, 1, 1);
  o.manifest = s.a;
  fails(o, "not both");
  o = Mix(s, 1, 1);
  o.node_local = true;
  o.world_size = 4;
  o.local_world_size = 3;
  fails(o, "local_world_size");
  o = Mix(s, -1, -1);
  o.epoch_size = 10;
  fails(o, "epoch_size");
}

}  // namespace
}  // namespace shardstream
