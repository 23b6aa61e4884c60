// ShardWriter: round trips through both reader engines and through GNU tar,
// deterministic bytes, rollover, atomic shards and the manifest.
#include "shardstream/shard_writer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "shardstream/checksum.h"
#include "shardstream/dataset_inputs.h"
#include "shardstream/decode.h"
#include "shardstream/manifest.h"
#include "shardstream/shard_index.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"
#include "support/tar_fixtures.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::ReadAll;
using testing::ReadOutcome;
using testing::TempDir;

struct Input {
  std::string key;
  std::vector<std::pair<std::string, std::string>> fields;
};

std::vector<Input> MakeInputs(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Input> out;
  for (int i = 0; i < n; ++i) {
    Input in;
    in.key = "part" + std::to_string(i % 3) + "/s" + std::to_string(i);
    if (i == 4) in.key = "deep/" + std::string(150, 'k') + "/s4";  // pax path
    size_t big = i == 2 ? 300000 : rng() % 5000;
    std::string a(big, '\0');
    for (char& c : a) c = static_cast<char>(rng());
    // Given out of order: the writer sorts by name.
    in.fields = {{"txt", "sample " + std::to_string(i)}, {"bin", a}, {"cls", ""}};
    out.push_back(std::move(in));
  }
  return out;
}

Sample ToSample(const Input& in) {
  Sample s;
  s.key = in.key;
  for (const auto& [name, data] : in.fields) {
    Field f;
    f.name = name;
    f.data = data;
    s.fields.push_back(std::move(f));
  }
  return s;
}

Manifest WriteAll(const std::string& dir, const std::vector<Input>& inputs,
                  ShardWriterOptions options = {}) {
  auto w = ShardWriter::Create(dir, options);
  EXPECT_TRUE(w.ok()) << w.status();
  for (const Input& in : inputs) EXPECT_TRUE((*w)->Write(ToSample(in)).ok());
  EXPECT_TRUE((*w)->Close().ok());
  return (*w)->manifest();
}

TEST(ShardWriterTest, RoundTripsThroughBothEnginesSorted) {
  TempDir dir;
  auto inputs = MakeInputs(20, 1);
  for (ShardCompression c : {ShardCompression::kNone, ShardCompression::kZstd}) {
    ShardWriterOptions o;
    o.compression = c;
    std::string out = dir.Join(c == ShardCompression::kNone ? "plain" : "zstd");
    Manifest m = WriteAll(out, inputs, o);
    ASSERT_EQ(m.shards.size(), 1u);
    for (TarEngine e : {TarEngine::kFast, TarEngine::kLibarchive}) {
      TarReaderOptions ro;
      ro.engine = e;
      ReadOutcome r = ReadAll(out + "/" + m.shards[0].url, ro);
      ASSERT_TRUE(r.status.ok()) << r.status;
      ASSERT_EQ(r.samples.size(), inputs.size());
      for (size_t i = 0; i < inputs.size(); ++i) {
        EXPECT_EQ(r.samples[i].key, inputs[i].key);
        auto want = inputs[i].fields;
        std::sort(want.begin(), want.end());
        EXPECT_EQ(r.samples[i].fields, want) << i;
      }
    }
  }
}

TEST(ShardWriterTest, SameInputGivesSameBytesAndChecksums) {
  TempDir dir;
  auto inputs = MakeInputs(30, 2);
  auto shuffled = inputs;
  for (auto& in : shuffled) std::reverse(in.fields.begin(), in.fields.end());
  for (ShardCompression c : {ShardCompression::kNone, ShardCompression::kZstd}) {
    ShardWriterOptions o;
    o.compression = c;
    o.max_samples = 7;
    std::string tag = std::to_string(static_cast<int>(c));
    Manifest a = WriteAll(dir.Join("a" + tag), inputs, o);
    Manifest b = WriteAll(dir.Join("b" + tag), shuffled, o);
    EXPECT_EQ(FormatManifestJsonl(a), FormatManifestJsonl(b));
    EXPECT_EQ(testing::ReadFile(dir.Join("a" + tag) + "/manifest.jsonl"),
              testing::ReadFile(dir.Join("b" + tag) + "/manifest.jsonl"));
    for (const auto& s : a.shards)
      EXPECT_EQ(testing::ReadFile(dir.Join("a" + tag) + "/" + s.url),
                testing::ReadFile(dir.Join("b" + tag) + "/" + s.url));
  }
}

TEST(ShardWriterTest, RollsOverBySamplesAndBytesAndWritesManifest) {
  TempDir dir;
  auto inputs = MakeInputs(25, 3);
  ShardWriterOptions o;
  o.max_samples = 10;
  Manifest m = WriteAll(dir.Join("n"), inputs, o);
  ASSERT_EQ(m.shards.size(), 3u);
  EXPECT_EQ(m.shards[0].url, "shard-000000.tar");
  EXPECT_EQ(m.shards[2].url, "shard-000002.tar");
  EXPECT_EQ(m.shards[0].nsamples, 10);
  EXPECT_EQ(m.shards[2].nsamples, 5);

  auto read = ReadManifest(dir.Join("n") + "/manifest.jsonl");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->shards.size(), 3u);
  int64_t total = 0;
  for (const auto& s : read->shards) {
    std::string bytes = testing::ReadFile(s.resolved);
    EXPECT_EQ(s.size, static_cast<int64_t>(bytes.size()));
    EXPECT_EQ(s.checksum, ChecksumOf(bytes));
    EXPECT_EQ(s.checksum.rfind("xxh3_128:", 0), 0u);
    ReadOutcome r = ReadAll(s.resolved);
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(static_cast<int64_t>(r.samples.size()), s.nsamples);
    total += s.nsamples;
  }
  EXPECT_EQ(total, 25);

  ShardWriterOptions bytes_opt;
  bytes_opt.max_bytes = 64 << 10;
  bytes_opt.pattern = "data-%04d.tar";
  Manifest mb = WriteAll(dir.Join("b"), inputs, bytes_opt);
  ASSERT_GT(mb.shards.size(), 1u);
  EXPECT_EQ(mb.shards[1].url, "data-0001.tar");
  for (const auto& s : mb.shards) {
    // Only a shard holding a single oversized sample may exceed the limit.
    if (s.nsamples > 1) EXPECT_LE(s.size, 64 << 10) << s.url;
  }
}

TEST(ShardWriterTest, GnuTarExtractsTheSameFiles) {
  TempDir dir;
  auto inputs = MakeInputs(6, 4);
  Manifest m = WriteAll(dir.Join("out"), inputs);
  std::string x = dir.Join("x");
  std::string output;
  ASSERT_EQ(testing::RunCommand("mkdir -p " + x + " && tar -xf " + dir.Join("out") + "/" +
                                    m.shards[0].url + " -C " + x,
                                &output),
            0)
      << output;
  for (const auto& in : inputs)
    for (const auto& [name, data] : in.fields)
      EXPECT_EQ(testing::ReadFile(x + "/" + in.key + "." + name), data);
  // bsdtar agrees on the listing.
  ASSERT_EQ(testing::RunCommand("bsdtar -tf " + dir.Join("out") + "/" + m.shards[0].url, &output), 0);
  EXPECT_NE(output.find(inputs[4].key + ".bin"), std::string::npos);
}

TEST(ShardWriterTest, ShardsAppearOnlyWhenCompleteAndAbortLeavesNothing) {
  auto mem = NewMemorySource();
  ShardWriterOptions o;
  o.source = mem.get();
  {
    auto w = ShardWriter::Create("mem://ds", o);
    ASSERT_TRUE(w.ok());
    for (const auto& in : MakeInputs(3, 5)) ASSERT_TRUE((*w)->Write(ToSample(in)).ok());
    EXPECT_EQ(mem->Stat("mem://ds/shard-000000.tar").status().code(), StatusCode::kNotFound);
    // Destroyed without Close: nothing is published.
  }
  EXPECT_EQ(mem->Stat("mem://ds/shard-000000.tar").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(mem->Stat("mem://ds/manifest.jsonl").status().code(), StatusCode::kNotFound);
  auto listing = mem->List("mem://ds");
  if (listing.ok()) {
    for (const auto& f : *listing) ADD_FAILURE() << "left behind: " << f.url;
  }
}

// An object store (s3://) cannot rename, and shows an object only once its upload
// completes: shards, indexes and the manifest are written to their final names.
class NoRenameSource final : public SourceWrapper {
 public:
  using SourceWrapper::SourceWrapper;
  Status Rename(const std::string& from, const std::string& to) override {
    ++renames;
    return Status::Config("Rename is not supported (" + from + " -> " + to + ")");
  }
  int renames = 0;
};

TEST(ShardWriterTest, WritesInPlaceWhereObjectsAreWrittenWhole) {
  EXPECT_TRUE(WritesWholeObjects("s3://bucket/set"));
  EXPECT_TRUE(WritesWholeObjects("https://host/set"));
  EXPECT_FALSE(WritesWholeObjects("/data/set"));
  EXPECT_FALSE(WritesWholeObjects("file:///data/set"));
  auto mem = NewMemorySource();
  NoRenameSource src(mem);
  ShardWriterOptions o;
  o.source = &src;
  o.max_samples = 2;
  o.write_index = true;
  auto w = ShardWriter::Create("s3://bucket/set", o);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const auto& in : MakeInputs(5, 7)) ASSERT_TRUE((*w)->Write(ToSample(in)).ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ(src.renames, 0);
  for (const char* name : {"shard-000000.tar", "shard-000001.tar", "shard-000002.tar",
                           "shard-000002.tar.idx", "manifest.jsonl"})
    EXPECT_TRUE(mem->Stat(std::string("s3://bucket/set/") + name).ok()) << name;
  auto listing = mem->List("s3://bucket/set");
  ASSERT_TRUE(listing.ok());
  for (const auto& f : *listing) EXPECT_EQ(f.url.find(".tmp"), std::string::npos) << f.url;
  auto m = ReadManifest("s3://bucket/set/manifest.jsonl", mem.get());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->TotalSamples(), 5);
}

TEST(ShardWriterTest, WritesSidecarIndexForOpenAt) {
  TempDir dir;
  auto inputs = MakeInputs(12, 6);
  ShardWriterOptions o;
  o.write_index = true;
  Manifest m = WriteAll(dir.Join("o"), inputs, o);
  std::string shard = dir.Join("o") + "/" + m.shards[0].url;
  auto idx = ReadSampleIndex(shard);
  ASSERT_TRUE(idx.ok()) << idx.status();
  ReadOutcome all = ReadAll(shard);
  ASSERT_EQ(idx->samples.size(), all.index.samples.size());
  for (size_t i = 0; i < idx->samples.size(); ++i) {
    EXPECT_EQ(idx->samples[i].offset, all.index.samples[i].offset);
    EXPECT_EQ(idx->samples[i].length, all.index.samples[i].length);
    EXPECT_EQ(idx->samples[i].key, all.index.samples[i].key);
  }
  auto r = TarReader::OpenAt(shard, 9);
  ASSERT_TRUE(r.ok()) << r.status();
  Sample s;
  ASSERT_TRUE(*(*r)->Next(&s));
  EXPECT_EQ(s.key, inputs[9].key);
}

TEST(ShardWriterTest, RejectsSamplesAReaderWouldSplitDifferently) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.Join("o"));
  ASSERT_TRUE(w.ok());
  auto bad = [&](const std::string& key, const std::string& field) {
    Sample s;
    s.key = key;
    Field f;
    f.name = field;
    f.data = "x";
    s.fields.push_back(f);
    Status st = (*w)->Write(s);
    EXPECT_EQ(st.code(), StatusCode::kConfig) << key << " / " << field;
  };
  bad("a.b", "jpg");
  bad("", "jpg");
  bad("/abs", "jpg");
  bad("x/../y", "jpg");
  bad("ok", "");
  bad("ok", "a/b");
  Sample dup;
  dup.key = "k";
  dup.fields.resize(2);
  dup.fields[0].name = dup.fields[1].name = "x";
  EXPECT_EQ((*w)->Write(dup).code(), StatusCode::kConfig);
  EXPECT_TRUE((*w)->Close().ok());
}

TEST(ShardWriterTest, PatternAndOptionValidation) {
  EXPECT_EQ(*FormatShardName("shard-%06d.tar", 42), "shard-000042.tar");
  EXPECT_EQ(*FormatShardName("%d.tar", 7), "7.tar");
  EXPECT_EQ(*FormatShardName("100%%-%03d.tar", 7), "100%-007.tar");
  EXPECT_FALSE(FormatShardName("shard.tar", 1).ok());
  EXPECT_FALSE(FormatShardName("%d-%d.tar", 1).ok());
  EXPECT_FALSE(FormatShardName("%s.tar", 1).ok());
  EXPECT_FALSE(FormatShardName("a/%d.tar", 1).ok());
  TempDir dir;
  ShardWriterOptions o;
  o.compression = ShardCompression::kGzip;
  EXPECT_EQ(ShardWriter::Create(dir.Join("g"), o).status().code(), StatusCode::kConfig);
  o = {};
  o.pattern = "no-number.tar";
  EXPECT_EQ(ShardWriter::Create(dir.Join("g"), o).status().code(), StatusCode::kConfig);
}

// The version 2 index: where each field's bytes and an .npy field's values
// lie, the same whether the writer or a reader made it, and round trips.
TEST(ShardWriterTest, IndexRecordsWhereEveryFieldAndNpyValueLies) {
  TempDir dir;
  std::vector<Input> inputs;
  for (int i = 0; i < 12; ++i) {
    Input in;
    in.key = i == 5 ? "deep/" + std::string(120, 'k') + "/s5" : "s" + std::to_string(i);
    std::vector<int32_t> tok(static_cast<size_t>(i * 37));
    for (size_t j = 0; j < tok.size(); ++j) tok[j] = static_cast<int32_t>(i * 1000 + j);
    std::string tok_bytes(reinterpret_cast<const char*>(tok.data()), tok.size() * 4);
    std::string grid(2 * 3 * 8, static_cast<char>(i));
    const int64_t n = static_cast<int64_t>(tok.size());
    in.fields = {{"tokens.npy", EncodeNpy(DType::kInt32, {n}, tok_bytes)},
                 {"grid.npy", EncodeNpy(DType::kFloat64, {2, 3}, grid)},
                 {"txt", "text " + std::to_string(i)},
                 {"bad.npy", "not an array"}};
    inputs.push_back(std::move(in));
  }
  ShardWriterOptions o;
  o.write_index = true;
  Manifest m = WriteAll(dir.path(), inputs, o);
  const std::string shard = dir.Join(m.shards[0].url);
  auto written = ReadSampleIndex(shard);
  ASSERT_TRUE(written.ok()) << written.status();
  auto built = BuildSampleIndex(shard);
  ASSERT_TRUE(built.ok()) << built.status();
  const std::string bytes = testing::ReadFile(shard);
  ASSERT_EQ(written->samples.size(), inputs.size());
  ASSERT_EQ(written->fields.size(), 4 * inputs.size());
  ASSERT_EQ(built->fields.size(), written->fields.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SampleIndexEntry& e = written->samples[i];
    EXPECT_EQ(e.first_field, 4 * i);
    EXPECT_EQ(e.first_field, built->samples[i].first_field);
    for (uint64_t j = e.first_field; j < e.first_field + e.nfields; ++j) {
      const SampleIndexField& w = written->fields[j];
      const SampleIndexField& b = built->fields[j];
      // The reader and the writer agree.
      EXPECT_EQ(w.name, b.name);
      EXPECT_EQ(w.offset, b.offset);
      EXPECT_EQ(w.size, b.size);
      EXPECT_EQ(w.ndim, b.ndim);
      EXPECT_EQ(w.payload, b.payload);
      EXPECT_EQ(w.count, b.count);
      EXPECT_EQ(w.header_hash, b.header_hash);
      // And the bytes there are the field's.
      std::string want;
      for (const auto& [name, data] : inputs[i].fields)
        if (name == w.name) want = data;
      EXPECT_EQ(bytes.substr(w.offset, w.size), want) << inputs[i].key << "." << w.name;
      if (w.name == "tokens.npy") {
        EXPECT_EQ(w.ndim, 1);
        EXPECT_EQ(w.dtype, DType::kInt32);
        EXPECT_EQ(w.count, i * 37);
        int32_t first = -1;
        if (w.count > 0) std::memcpy(&first, bytes.data() + w.payload, 4);
        if (w.count > 0) EXPECT_EQ(first, static_cast<int32_t>(i * 1000));
        EXPECT_EQ(w.payload + 4 * w.count, w.offset + w.size);
      } else if (w.name == "grid.npy") {
        EXPECT_EQ(w.ndim, 2);
        EXPECT_EQ(w.dtype, DType::kFloat64);
        EXPECT_EQ(w.count, 6u);
      } else {
        EXPECT_EQ(w.ndim, -1) << w.name;  // text, and an .npy that does not parse
      }
    }
  }
  // Round trip, and damage anywhere in the field records is caught.
  const std::string ser = SerializeSampleIndex(*written);
  auto back = ParseSampleIndex(ser, "x.idx");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(SerializeSampleIndex(*back), ser);
  for (size_t i = 0; i < ser.size(); i += 13) {
    std::string bad = ser;
    bad[i] ^= 0x10;
    EXPECT_EQ(ParseSampleIndex(bad, "x.idx").status().code(), StatusCode::kCorrupt) << i;
  }
  // A record that points outside its sample, with a valid checksum.
  SampleIndex outside = *written;
  outside.fields[5].offset = outside.samples[3].offset + outside.samples[3].length;
  auto r = ParseSampleIndex(SerializeSampleIndex(outside), "x.idx");
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("outside the sample"), std::string::npos) << r.status();
  // Values that do not fill the field.
  SampleIndex short_values = *written;
  ASSERT_EQ(short_values.fields[6].name, "tokens.npy");
  short_values.fields[6].count += 1;
  EXPECT_EQ(ParseSampleIndex(SerializeSampleIndex(short_values), "x.idx").status().code(),
            StatusCode::kCorrupt);
}

TEST(ShardWriterTest, AFolderWithShardsIsRefusedOrOverwrittenNeverMixed) {
  TempDir dir;
  ShardWriterOptions o;
  o.max_samples = 4;
  o.write_index = true;
  WriteAll(dir.path(), MakeInputs(20, 1), o);  // 5 shards and their indexes
  // A second write into the same folder is refused, naming what is there.
  auto again = ShardWriter::Create(dir.path(), o);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kConfig);
  EXPECT_NE(again.status().message().find("11 shard, index or manifest file(s)"), std::string::npos)
      << again.status();
  EXPECT_NE(again.status().message().find("overwrite"), std::string::npos) << again.status();
  // With overwrite the old shards, indexes and manifest go; the folder read
  // then gives exactly the new samples.
  o.overwrite = true;
  o.max_samples = 0;
  Manifest m = WriteAll(dir.path(), MakeInputs(6, 2), o);
  ASSERT_EQ(m.shards.size(), 1u);
  auto read = ResolveDataset({dir.path()});
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->shards.size(), 1u);
  EXPECT_EQ(read->shards[0].nsamples, 6);
  EXPECT_FALSE(std::filesystem::exists(dir.Join("shard-000001.tar")));
  EXPECT_FALSE(std::filesystem::exists(dir.Join("shard-000001.tar.idx")));
}

TEST(ShardWriterTest, AFolderReadRefusesShardsItsManifestDoesNotList) {
  TempDir dir;
  ShardWriterOptions o;
  o.max_samples = 4;
  WriteAll(dir.Join("old"), MakeInputs(8, 1), o);
  WriteAll(dir.path(), MakeInputs(8, 2), o);  // shard-000000.tar, shard-000001.tar
  // A stray shard from elsewhere lands beside them.
  testing::WriteFile(dir.Join("stray-000009.tar"), testing::ReadFile(dir.Join("old/shard-000000.tar")));
  auto read = ResolveDataset({dir.path()});
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kConfig);
  EXPECT_NE(read.status().message().find("stray-000009.tar"), std::string::npos) << read.status();
  EXPECT_NE(read.status().message().find("manifest.jsonl"), std::string::npos) << read.status();
  // The manifest itself reads only what it lists; without the stray, the folder reads.
  auto by_manifest = ResolveDataset({dir.Join("manifest.jsonl")});
  ASSERT_TRUE(by_manifest.ok()) << by_manifest.status();
  EXPECT_EQ(by_manifest->shards.size(), 2u);
  std::remove(dir.Join("stray-000009.tar").c_str());
  auto folder = ResolveDataset({dir.path()});
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(folder->shards.size(), 2u);
}

}  // namespace
}  // namespace shardstream
