// ResolveDataset: a shard, a directory, a pattern, a manifest or a list of
// them; sample counts learned from (and kept in) sidecar indexes, so a loader
// without a manifest still splits samples exactly once.
#include "shardstream/dataset_inputs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "shardstream/loader.h"
#include "shardstream/shard_index.h"
#include "shardstream/shard_writer.h"
#include "shardstream/tar_reader.h"
#include "support/fault_source.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::TempDir;

// Shards of `per` samples each ("k<n>" with a "cls"); no manifest, no indexes.
std::vector<std::string> WriteBareShards(const std::string& dir, int shards, int per) {
  ShardWriterOptions wo;
  wo.max_samples = static_cast<uint64_t>(per);
  wo.manifest_name = "";
  auto w = *ShardWriter::Create(dir, wo);
  for (int i = 0; i < shards * per; ++i) {
    Sample s;
    s.key = "k" + std::to_string(100000 + i);
    std::string cls = std::to_string(i);
    s.fields.push_back(Field{"cls", cls});
    EXPECT_TRUE(w->Write(s).ok());
  }
  EXPECT_TRUE(w->Close().ok());
  std::vector<std::string> out;
  for (int i = 0; i < shards; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "/shard-%06d.tar", i);
    out.push_back(dir + name);
  }
  return out;
}

TEST(DatasetInputsTest, KindsByName) {
  EXPECT_TRUE(IsShardUrl("a/b.tar"));
  EXPECT_TRUE(IsShardUrl("s3://b/x.tar.zst"));
  EXPECT_TRUE(IsShardUrl("https://h/x.TAR.GZ?sig=1"));
  EXPECT_TRUE(IsShardUrl("x.tgz"));
  EXPECT_FALSE(IsShardUrl("x.tar.idx"));
  EXPECT_FALSE(IsShardUrl("manifest.jsonl"));
  EXPECT_TRUE(IsManifestUrl("m.jsonl"));
  EXPECT_TRUE(IsManifestUrl("https://h/m.csv?x=1"));
  EXPECT_FALSE(IsManifestUrl("data/"));
}

TEST(DatasetInputsTest, OneShardLearnsItsCountAndKeepsTheIndex) {
  TempDir dir;
  auto shards = WriteBareShards(dir.path(), 2, 7);
  ASSERT_FALSE(std::filesystem::exists(IndexUrlFor(shards[0])));
  auto m = ResolveDataset({shards[0]});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 1u);
  EXPECT_EQ(m->shards[0].nsamples, 7);
  EXPECT_EQ(m->shards[0].size, static_cast<int64_t>(std::filesystem::file_size(shards[0])));
  EXPECT_TRUE(std::filesystem::exists(IndexUrlFor(shards[0])));
  // The next resolve reads the sidecar (same fingerprint, no rebuild).
  const auto written = std::filesystem::last_write_time(IndexUrlFor(shards[0]));
  auto again = ResolveDataset({shards[0]});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->Fingerprint(), m->Fingerprint());
  EXPECT_EQ(std::filesystem::last_write_time(IndexUrlFor(shards[0])), written);
  // Counts left unknown on request.
  ResolveOptions off;
  off.learn_counts = false;
  EXPECT_EQ(ResolveDataset({shards[1]}, off)->shards[0].nsamples, -1);
}

TEST(DatasetInputsTest, DirectoryListsItsShardsInNameOrder) {
  TempDir dir;
  auto shards = WriteBareShards(dir.path(), 3, 5);
  testing::WriteFile(dir.Join("README.txt"), "not a shard");
  std::filesystem::create_directories(dir.Join("sub.tar"));  // a directory, not a shard
  auto m = ResolveDataset({dir.path()});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(m->shards[i].resolved, shards[i]);
    EXPECT_EQ(m->shards[i].nsamples, 5);
  }
  EXPECT_EQ(m->TotalSamples(), 15);
  TempDir empty;
  auto none = ResolveDataset({empty.path()});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no shards"), std::string::npos) << none.status();
  auto missing = ResolveDataset({dir.Join("nope")});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status();
}

TEST(DatasetInputsTest, AFolderWhoseManifestNamesShardsInSubfoldersIsReadByIt) {
  // shardstream.ray.ShardSink's layout: part-NNNNN/shard-*.tar, the manifest at the top.
  TempDir dir;
  auto a = WriteBareShards(dir.Join("part-00000"), 2, 5);
  auto b = WriteBareShards(dir.Join("part-00001"), 1, 3);
  testing::WriteFile(dir.Join("manifest.jsonl"),
                     "{\"url\":\"part-00001/shard-000000.tar\",\"nsamples\":3}\n"
                     "{\"url\":\"part-00000/shard-000000.tar\",\"nsamples\":5}\n"
                     "{\"url\":\"part-00000/shard-000001.tar\",\"nsamples\":5}\n");
  auto m = ResolveDataset({dir.path()});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 3u);  // in the manifest's order, its counts
  EXPECT_EQ(m->shards[0].resolved, b[0]);
  EXPECT_EQ(m->shards[1].resolved, a[0]);
  EXPECT_EQ(m->shards[2].resolved, a[1]);
  EXPECT_EQ(m->TotalSamples(), 13);
  // Without the manifest the subfolders are not searched.
  std::filesystem::remove(dir.Join("manifest.jsonl"));
  auto none = ResolveDataset({dir.path()});
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound) << none.status();
}

TEST(DatasetInputsTest, ALocalGlobIsExpandedAndARemoteOneExplained) {
  TempDir dir;
  WriteBareShards(dir.path(), 3, 4);
  auto m = ResolveDataset({dir.Join("*-00000[02].tar")});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 2u);
  EXPECT_NE(m->shards[0].url.find("000000"), std::string::npos);
  EXPECT_NE(m->shards[1].url.find("000002"), std::string::npos);
  auto none = ResolveDataset({dir.Join("nothing-*.tar")});
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("braces"), std::string::npos) << none.status();
  auto remote = ResolveDataset({"s3://bucket/data/shard-*.tar"});
  EXPECT_EQ(remote.status().code(), StatusCode::kConfig);
  EXPECT_NE(remote.status().message().find("local paths only"), std::string::npos) << remote.status();
}

TEST(DatasetInputsTest, ListsMixKindsInOrderAndRefuseDuplicates) {
  TempDir dir;
  auto shards = WriteBareShards(dir.path(), 4, 3);
  const std::string pattern = dir.path() + "/shard-{000002..000003}.tar";
  auto m = ResolveDataset({shards[1], pattern, shards[0]});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 4u);
  EXPECT_EQ(m->shards[0].resolved, shards[1]);
  EXPECT_EQ(m->shards[1].resolved, shards[2]);
  EXPECT_EQ(m->shards[2].resolved, shards[3]);
  EXPECT_EQ(m->shards[3].resolved, shards[0]);
  EXPECT_EQ(m->TotalSamples(), 12);
  auto twice = ResolveDataset({shards[2], pattern});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().code(), StatusCode::kConfig);
  EXPECT_NE(twice.status().message().find("named twice"), std::string::npos);
  EXPECT_EQ(ResolveDataset({}).status().code(), StatusCode::kConfig);
  EXPECT_EQ(ResolveDataset({""}).status().code(), StatusCode::kConfig);
}

TEST(DatasetInputsTest, DamagedShardWithoutIndexNamesTheShard) {
  TempDir dir;
  auto shards = WriteBareShards(dir.path(), 2, 4);
  std::string bytes = testing::ReadFile(shards[1]);
  bytes.resize(700);  // cut inside the second member
  testing::WriteFile(shards[1], bytes);
  auto m = ResolveDataset({dir.path()});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().ToString().find("shard-000001.tar"), std::string::npos) << m.status();
  // The way past it is named: skip policies apply only once reading starts.
  EXPECT_NE(m.status().ToString().find("learn_sample_counts=False"), std::string::npos) << m.status();
  EXPECT_NE(m.status().ToString().find("shardstream manifest"), std::string::npos) << m.status();
}

TEST(DatasetInputsTest, AnIndexReadErrorFailsInsteadOfLeavingCountsUnknown) {
  // Ranks must agree on the counts: a transient error on one rank's read of a
  // sidecar is an error, not "unknown" (which would plan by shards there).
  TempDir dir;
  auto shards = WriteBareShards(dir.path(), 2, 4);
  ASSERT_TRUE(ResolveDataset({dir.path()}).ok());  // indexes written
  auto fault = std::make_shared<testing::FaultSource>(LocalSource());
  fault->FailNth(testing::FaultSource::Op::kOpen, 1, Status::Unavailable("injected 503"),
                 /*sticky=*/true, ".idx");
  ResolveOptions o;
  o.source = fault.get();
  auto m = ResolveDataset({dir.path()}, o);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnavailable) << m.status();
}

TEST(DatasetInputsTest, PipeInputsAreShardsWhoseCountsAreNotLearned) {
  TempDir dir;
  auto shards = WriteBareShards(dir.path(), 1, 3);
  auto m = ResolveDataset({"pipe:cat " + shards[0]});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 1u);
  EXPECT_EQ(m->shards[0].nsamples, -1);  // the command is not run again for an index
  EXPECT_FALSE(std::filesystem::exists(shards[0] + ".idx"));
}

TEST(DatasetInputsTest, FingerprintDoesNotDependOnWhereTheDataIsMounted) {
  TempDir a, b;
  WriteBareShards(a.path(), 2, 5);
  WriteBareShards(b.path(), 2, 5);
  auto ma = ResolveDataset({a.path()});
  auto mb = ResolveDataset({b.path()});
  ASSERT_TRUE(ma.ok() && mb.ok());
  EXPECT_EQ(ma->Fingerprint(), mb->Fingerprint());
}

TEST(DatasetInputsTest, IndexesBuiltForALoaderGoToItsIndexDirAndLeaveTheDataAlone) {
  TempDir data, indexes;
  auto shards = WriteBareShards(data.path(), 3, 6);
  namespace fs = std::filesystem;
  const std::string dir = indexes.path() + "/idx";  // made when first needed
  LoaderOptions o;
  o.manifest = data.path();
  o.fields = {FieldSpec{"cls"}};
  o.batch_size = 4;
  o.world_size = 2;
  o.index_dir = dir;
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ((*l)->samples_per_epoch(), 9);  // counts learned: samples split, not shards
  for (const std::string& s : shards) {
    EXPECT_FALSE(fs::exists(IndexUrlFor(s)));
    EXPECT_TRUE(fs::exists(IndexCacheUrl(dir, s))) << IndexCacheUrl(dir, s);
    auto index = ReadSampleIndex(s, nullptr, dir);
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(index->samples.size(), 6u);
  }
  // Read, not built again, by the next loader; OpenAt finds it to start mid-shard.
  const auto written = fs::last_write_time(IndexCacheUrl(dir, shards[1]));
  o.rank = 1;
  auto again = Loader::Create(o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(fs::last_write_time(IndexCacheUrl(dir, shards[1])), written);
  std::set<std::string> keys;
  for (auto* loader : {l->get(), again->get()}) {
    while (true) {
      auto b = loader->next();
      ASSERT_TRUE(b.ok()) << b.status();
      if (b->empty()) break;
      for (int64_t i = 0; i < b->num_samples(); ++i) keys.insert(std::string(b->key(i)));
    }
  }
  EXPECT_EQ(keys.size(), 18u);
  TarReaderOptions t;
  t.index_dir = dir;
  auto mid = TarReader::OpenAt(shards[2], 4, nullptr, t);
  ASSERT_TRUE(mid.ok()) << mid.status();
  Sample sample;
  auto more = (*mid)->Next(&sample);
  ASSERT_TRUE(more.ok() && *more);
  EXPECT_EQ(sample.key, "k" + std::to_string(100000 + 2 * 6 + 4));
  // Nothing was written beside the shards.
  for (const auto& e : fs::directory_iterator(data.path()))
    EXPECT_EQ(e.path().extension(), ".tar") << e.path();
  // Another shard with the same name elsewhere has its own entry.
  EXPECT_NE(IndexCacheUrl(dir, shards[0]), IndexCacheUrl(dir, "/elsewhere/shard-000000.tar"));
}

// The folder of indexes is read and written through the caller's Source, as
// the shards are: a fault the source injects there is the caller's error.
TEST(DatasetInputsTest, TheIndexDirGoesThroughTheSource) {
  TempDir data, indexes;
  auto shards = WriteBareShards(data.path(), 1, 5);
  auto index = BuildSampleIndex(shards[0]);
  ASSERT_TRUE(index.ok()) << index.status();
  testing::FaultSource fault(LocalSource());
  const std::string dir = indexes.path() + "/a/b";
  fault.FailNth(testing::FaultSource::Op::kCreateDir, 1, Status::Io("injected mkdir failure"));
  Status st = WriteSampleIndex(*index, shards[0], &fault, dir);
  EXPECT_EQ(st.code(), StatusCode::kIo) << st;
  EXPECT_NE(st.ToString().find("index_dir " + dir), std::string::npos) << st;
  EXPECT_NE(st.ToString().find("injected mkdir failure"), std::string::npos) << st;
  ASSERT_TRUE(WriteSampleIndex(*index, shards[0], &fault, dir).ok());
  EXPECT_TRUE(std::filesystem::exists(IndexCacheUrl(dir, shards[0])));
  auto read = ReadSampleIndex(shards[0], &fault, dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->samples.size(), 5u);
  fault.FailNth(testing::FaultSource::Op::kOpen, 1, Status::Io("injected read failure"), true,
                indexes.path());
  auto failed = ReadSampleIndex(shards[0], &fault, dir);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().ToString().find("injected read failure"), std::string::npos)
      << failed.status();
}

TEST(DatasetInputsTest, LoaderOverADirectorySplitsSamplesExactlyOnce) {
  TempDir dir;
  WriteBareShards(dir.path(), 5, 9);  // 45 samples, uneven over 4 consumers
  std::multiset<std::string> keys;
  int64_t per = -1;
  for (int c = 0; c < 4; ++c) {
    LoaderOptions o;
    o.manifest = dir.path();
    o.fields = {FieldSpec{"cls"}};
    o.batch_size = 4;
    o.world_size = 2;
    o.rank = c / 2;
    o.num_workers = 2;
    o.worker = c % 2;
    o.pad_remainder = true;
    auto l = Loader::Create(o);
    ASSERT_TRUE(l.ok()) << l.status();
    const int64_t n = (*l)->samples_per_epoch();
    ASSERT_GT(n, 0);  // counts known: samples, not shards, are split
    if (per >= 0) EXPECT_EQ(n, per);
    per = n;
    int64_t got = 0;
    while (true) {
      auto b = (*l)->next();
      ASSERT_TRUE(b.ok()) << b.status();
      if (b->empty()) break;
      for (int64_t i = 0; i < b->num_samples(); ++i) keys.insert(std::string(b->key(i)));
      got += b->rows();
    }
    EXPECT_EQ(got, n);
  }
  std::set<std::string> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), 45u);          // every sample
  EXPECT_EQ(keys.size(), 48u);              // plus 3 padding copies for equal shares
  EXPECT_EQ(per, 12);
}

}  // namespace
}  // namespace shardstream
