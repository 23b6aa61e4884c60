// ShardTable (the loader's columnar form of a data set's shards) and
// ReadManifestTable (a manifest read into it a chunk at a time): what comes
// back is what ParseManifest gives, entry for entry and error for error.
#include "manifest/shard_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan/resolve_shards.h"
#include "support/test_util.h"

namespace shardstream::internal {
namespace {

void ExpectSameEntry(const ShardEntry& got, const ShardEntry& want, size_t i) {
  EXPECT_EQ(got.url, want.url) << i;
  EXPECT_EQ(got.resolved, want.resolved) << i;
  EXPECT_EQ(got.size, want.size) << i;
  EXPECT_EQ(got.nsamples, want.nsamples) << i;
  EXPECT_EQ(got.checksum, want.checksum) << i;
  EXPECT_EQ(got.extra, want.extra) << i;
}

void ExpectSameAs(const ShardTable& t, const Manifest& m) {
  ASSERT_EQ(t.size(), m.shards.size());
  for (size_t i = 0; i < t.size(); ++i) {
    ExpectSameEntry(t[i], m.shards[i], i);
    EXPECT_EQ(t.nsamples(i), m.shards[i].nsamples) << i;
    EXPECT_EQ(t.bytes(i), m.shards[i].size) << i;
    EXPECT_EQ(t.resolved(i), m.shards[i].resolved) << i;
  }
  EXPECT_EQ(t.Fingerprint(), m.Fingerprint());
  EXPECT_EQ(t.LegacyFingerprint(), m.LegacyFingerprint());
  EXPECT_EQ(t.TotalSamples(), m.TotalSamples());
}

// Lines of every shape a manifest meets: the writer's own, and ones the
// fast path hands to the JSON parser (escapes, extras, other checksums,
// spacing, key order, non-ASCII), across more than one read chunk.
std::string VariedManifest(size_t n) {
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    const std::string num = std::to_string(1000000 + i).substr(1);
    const std::string sum = "xxh3_128:" + std::string(32, "0123456789abcdef"[i % 16]);
    switch (i % 11) {
      case 0:
        text += "{\"url\": \"shards/train-" + num + ".tar\", \"size\": " + std::to_string(i * 4096) +
                ", \"nsamples\": " + std::to_string(i % 97) + ", \"checksum\": \"" + sum + "\"}\n";
        break;
      case 1:  // no size, no checksum, other spacing and order
        text += "{\"nsamples\":" + std::to_string(i) + ",\"url\":\"shards/train-" + num + ".tar\"}\r\n";
        break;
      case 2:  // an escaped character in the name
        text += "{\"url\": \"shards/tr\\u0061in-" + num + ".tar\", \"nsamples\": 3}\n";
        break;
      case 3:  // an extra field, kept verbatim
        text += "{\"url\": \"shards/train-" + num + ".tar\", \"nsamples\": 3, \"lang\": [\"en\", 2]}\n";
        break;
      case 4:  // an escape in the checksum, and another algorithm
        text += "{\"url\": \"shards/train-" + num + ".tar\", \"nsamples\": 1, \"checksum\": \"xxh3_128:\\u0030" +
                std::string(31, 'c') + "\"}\n";
        break;
      case 5:
        text += "{\"url\": \"shards/train-" + num + ".tar\", \"nsamples\": 1, \"checksum\": \"xxh3_64:" +
                std::string(16, 'b') + "\"}\n";
        break;
      case 6:  // absolute urls of other stores
        text += "{\"url\": \"s3://bucket/other/x-" + num + ".tar\", \"size\": 5000000000, \"nsamples\": 7}\n";
        break;
      case 7:  // not ASCII
        text += "{\"url\": \"shards/\xc3\xa9t\xc3\xa9-" + num + ".tar\", \"nsamples\": 2}\n\n";
        break;
      case 8:  // a blank line first, and trailing blanks
        text += "\n{ \"url\" : \"/abs/path/s-" + num + ".tar\" , \"nsamples\" : 0 }  \t\n";
        break;
      case 9:  // a count that needs 64 bits
        text += "{\"url\": \"shards/big-" + num + ".tar\", \"nsamples\": 123456789012}\n";
        break;
      default:
        text += "{\"url\": \"https://h.example/d/" + num + ".tar?x=1\", \"size\": 0, \"nsamples\": 5}\n";
    }
  }
  return text;
}

TEST(ShardTableTest, EntriesComeBackAsAppended) {
  auto m = ParseManifest(VariedManifest(200), "/data/ds/manifest.jsonl");
  ASSERT_TRUE(m.ok()) << m.status();
  // Entries resolved elsewhere keep their own resolution.
  ShardEntry odd;
  odd.url = "name.tar";
  odd.resolved = "s3://b/elsewhere/name.tar";
  odd.nsamples = 4;
  m->shards.push_back(odd);
  odd.url = "other.tar";
  odd.resolved = "/not/a/join/of/it";
  m->shards.push_back(odd);
  const ShardTable t = ShardTable::FromManifest(*m);
  ExpectSameAs(t, *m);
  const Manifest back = t.ToManifest();
  ASSERT_EQ(back.shards.size(), m->shards.size());
  for (size_t i = 0; i < back.shards.size(); ++i) ExpectSameEntry(back.shards[i], m->shards[i], i);
  size_t k = 0;
  t.ForEachUrl([&](size_t i, std::string_view u) {
    EXPECT_EQ(i, k++);
    EXPECT_EQ(u, m->shards[i].url);
  });
  EXPECT_EQ(k, t.size());
}

TEST(ShardTableTest, AMillionShardsFitInTensOfBytesEach) {
  // The writer's lines (size, count, xxh3_128): about 33 bytes a shard, where
  // a ShardEntry costs hundreds.
  ShardTable t;
  const std::string sum = "xxh3_128:00112233445566778899aabbccddeeff";
  for (size_t i = 0; i < 100000; ++i) {
    const std::string num = std::to_string(10000000 + i).substr(1);
    t.Append("shards/train-" + num + ".tar", "s3://bucket/data", 500 << 20, 4096, sum);
  }
  t.ShrinkToFit();
  EXPECT_LT(t.MemoryBytes(), size_t{40} * t.size());
  EXPECT_EQ(t[99999].resolved, "s3://bucket/data/shards/train-0099999.tar");
  EXPECT_EQ(t[99999].checksum, sum);
  // A value past 32 bits widens the column; what was there stays.
  t.set_bytes(5, int64_t{1} << 40);
  EXPECT_EQ(t.bytes(5), int64_t{1} << 40);
  EXPECT_EQ(t.bytes(4), 500 << 20);
  EXPECT_FALSE(t.FirstDuplicate().has_value());
}

TEST(ReadManifestTableTest, ReadsWhatParseManifestReads) {
  testing::TempDir dir;
  // About 1.3 MB: lines cross the reader's 1 MiB chunk.
  const std::string text = VariedManifest(15000);
  ASSERT_GT(text.size(), size_t{1} << 20);
  const std::string path = dir.Join("manifest.jsonl");
  testing::WriteFile(path, text);
  auto want = ParseManifest(text, path);
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = ReadManifestTable(path, nullptr);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameAs(*got, *want);
  EXPECT_EQ(got->source_url(), path);
  // And through ResolveShards, as the loader takes it.
  auto resolved = ResolveShards({path}, ResolveOptions{});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ExpectSameAs(*resolved, *want);
  // The other formats go through ParseManifest whole.
  testing::WriteFile(dir.Join("m.csv"), "url,size,nsamples\na.tar,10,2\nb.tar,,3\n");
  auto csv = ReadManifestTable(dir.Join("m.csv"), nullptr);
  ASSERT_TRUE(csv.ok()) << csv.status();
  ExpectSameAs(*csv, *LoadManifest(dir.Join("m.csv")));
  // A name that does not say the format, and a first line beyond the first
  // chunk: decided on the whole text, as ParseManifest does.
  const std::string late = std::string((size_t{1} << 20) + 10, '\n') + "url,nsamples\na.tar,2\n";
  testing::WriteFile(dir.Join("listing"), late);
  auto by_content = ReadManifestTable(dir.Join("listing"), nullptr);
  ASSERT_TRUE(by_content.ok()) << by_content.status();
  ExpectSameAs(*by_content, *ParseManifest(late, dir.Join("listing")));
  testing::WriteFile(dir.Join("lines"), text);
  auto unnamed = ReadManifestTable(dir.Join("lines"), nullptr);
  ASSERT_TRUE(unnamed.ok()) << unnamed.status();
  ExpectSameAs(*unnamed, *ParseManifest(text, dir.Join("lines")));
}

TEST(ReadManifestTableTest, BadLinesFailAsParseManifestDoes) {
  testing::TempDir dir;
  const std::string ok = "{\"url\": \"a.tar\", \"nsamples\": 1}\n";
  std::string filler;
  for (int i = 0; i < 14000; ++i)
    filler += "{\"url\": \"f-" + std::to_string(i) + ".tar\", \"size\": 100, \"nsamples\": 1}\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"missing url", ok + "{\"nsamples\": 1}\n"},
      {"empty url", ok + "{\"url\": \"\", \"nsamples\": 1}\n"},
      {"missing nsamples", ok + "\n{\"url\": \"b.tar\"}\n"},
      {"negative size", ok + "{\"url\": \"b.tar\", \"nsamples\": 1, \"size\": -4}\n"},
      {"leading zero", ok + "{\"url\": \"b.tar\", \"nsamples\": 01}\n"},
      {"fraction", "{\"url\": \"b.tar\", \"nsamples\": 1.5}\n"},
      {"string count", "{\"url\": \"b.tar\", \"nsamples\": \"3\"}\n"},
      {"duplicate", ok + ok},
      {"duplicate after resolving", ok + "{\"url\": \"" + dir.Join("a.tar") + "\", \"nsamples\": 1}\n"},
      {"duplicate past the first chunk", ok + filler + ok},
      {"bad line past the first chunk", ok + filler + "{\"url\": \n"},
      {"checksum syntax", ok + "{\"url\": \"b.tar\", \"nsamples\": 1, \"checksum\": \"abc\"}"},
      {"unknown algorithm", ok + "{\"url\": \"b.tar\", \"nsamples\": 1, \"checksum\": \"md5:00\"}"},
      {"short digest", ok + "{\"url\": \"b.tar\", \"nsamples\": 1, \"checksum\": \"xxh3_128:0011\"}"},
      {"empty", "\n\n"},
      {"trailing text", ok + "{\"url\": \"b.tar\", \"nsamples\": 1} x\n"},
      {"control character", ok + "{\"url\": \"b\x01.tar\", \"nsamples\": 1}\n"},
      {"bad utf-8", ok + "{\"url\": \"\xfe.tar\", \"nsamples\": 1}\n"},
  };
  for (const auto& [name, text] : cases) {
    const std::string path = dir.Join("bad.jsonl");
    testing::WriteFile(path, text);
    auto want = ParseManifest(text, path);
    auto got = ReadManifestTable(path, nullptr);
    ASSERT_FALSE(want.ok()) << name;
    ASSERT_FALSE(got.ok()) << name;
    EXPECT_EQ(got.status().code(), StatusCode::kConfig) << name;
    EXPECT_EQ(got.status().message(), want.status().message()) << name;
  }
  // The line numbers past the first chunk are the file's.
  testing::WriteFile(dir.Join("dup.jsonl"), ok + filler + ok);
  auto dup = ReadManifestTable(dir.Join("dup.jsonl"), nullptr);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("line 14002: duplicate url a.tar (first on line 1)"),
            std::string::npos)
      << dup.status();
  EXPECT_EQ(ReadManifestTable(dir.Join("missing.jsonl"), nullptr).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardstream::internal
