#include "shardstream/manifest.h"

#include <gtest/gtest.h>

#include "support/test_util.h"

namespace shardstream {
namespace {

const char kSum[] = "xxh3_128:00112233445566778899aabbccddeeff";

TEST(ManifestTest, JsonLinesRoundTrip) {
  std::string text = std::string("{\"url\": \"a.tar\", \"size\": 10, \"nsamples\": 3, \"checksum\": \"") +
                     kSum + "\", \"split\": \"train\"}\n\n{\"nsamples\": 0, \"url\": \"b.tar\"}\r\n";
  auto m = ParseManifest(text, "/data/ds/manifest.jsonl");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 2u);
  EXPECT_EQ(m->shards[0].resolved, "/data/ds/a.tar");
  EXPECT_EQ(m->shards[0].size, 10);
  EXPECT_EQ(m->shards[0].checksum, kSum);
  EXPECT_EQ(m->shards[0].extra.at("split"), "\"train\"");
  EXPECT_EQ(m->shards[1].size, -1);
  EXPECT_EQ(m->TotalSamples(), 3);
  EXPECT_TRUE(m->SampleCountsKnown());
  auto again = ParseManifest(FormatManifestJsonl(*m), "/data/ds/manifest.jsonl");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(FormatManifestJsonl(*again), FormatManifestJsonl(*m));
  EXPECT_EQ(again->Fingerprint(), m->Fingerprint());
}

TEST(ManifestTest, CsvWithExtraColumnsAndQuotes) {
  std::string text = std::string("url,size,nsamples,checksum,note\n") + "a.tar,10,3," + kSum +
                     ",\"hello, \"\"world\"\"\"\n" + "\"b,1.tar\",,4,,\"two\nlines\"\n" +
                     "c.tar,7,5,,plain\n";
  auto m = ParseManifest(text, "s3://bucket/ds/index.csv");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 3u);
  EXPECT_EQ(m->shards[0].extra.at("note"), "\"hello, \\\"world\\\"\"");
  EXPECT_EQ(m->shards[1].url, "b,1.tar");
  EXPECT_EQ(m->shards[1].size, -1);
  EXPECT_EQ(m->shards[1].extra.at("note"), "\"two\\nlines\"");
  EXPECT_EQ(m->shards[2].resolved, "s3://bucket/ds/c.tar");
  // Extras survive a conversion to JSON Lines.
  auto jsonl = ParseManifest(FormatManifestJsonl(*m), "s3://bucket/ds/m.jsonl");
  ASSERT_TRUE(jsonl.ok()) << jsonl.status();
  EXPECT_EQ(jsonl->shards[0].extra.at("note"), m->shards[0].extra.at("note"));
}

TEST(ManifestTest, JsonDocumentAndBareArray) {
  auto m = ParseManifest("{\"version\": 1, \"shards\": [\n {\"url\": \"a.tar\", \"nsamples\": 2},\n"
                         " {\"url\": \"http://h/b.tar\", \"nsamples\": 3}\n]}",
                         "http://h:8080/ds/manifest.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shards[0].resolved, "http://h:8080/ds/a.tar");
  EXPECT_EQ(m->shards[1].resolved, "http://h/b.tar");
  auto arr = ParseManifest("[{\"url\": \"a.tar\", \"nsamples\": 2}]", "m");
  ASSERT_TRUE(arr.ok()) << arr.status();
  EXPECT_EQ(arr->shards[0].resolved, "a.tar");
}

TEST(ManifestTest, UrlKindsResolve) {
  auto m = ParseManifest(
      "{\"url\": \"sub/a.tar\", \"nsamples\": 1}\n"
      "{\"url\": \"/abs/b.tar\", \"nsamples\": 1}\n"
      "{\"url\": \"file:///abs/c.tar\", \"nsamples\": 1}\n"
      "{\"url\": \"https://h/d.tar\", \"nsamples\": 1}\n"
      "{\"url\": \"s3://bucket/e.tar\", \"nsamples\": 1}\n"
      "{\"url\": \"pipe:curl -s http://h/f.tar\", \"nsamples\": 1}\n",
      "file:///data/ds/m.jsonl");
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<std::string> want = {"file:///data/ds/sub/a.tar", "/abs/b.tar", "file:///abs/c.tar",
                                   "https://h/d.tar", "s3://bucket/e.tar",
                                   "pipe:curl -s http://h/f.tar"};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(m->shards[i].resolved, want[i]);
}

struct BadCase {
  const char* name;
  const char* url;
  std::string text;
  const char* want;  // substring of the message, line number included
};

TEST(ManifestTest, BadManifestsNameTheLine) {
  std::string ok = std::string("{\"url\": \"a.tar\", \"nsamples\": 1}\n");
  std::vector<BadCase> cases = {
      {"missing url", "m.jsonl", ok + "{\"nsamples\": 1}\n", "line 2: missing 'url'"},
      {"missing nsamples", "m.jsonl", ok + "\n{\"url\": \"b.tar\"}\n", "line 3: missing 'nsamples'"},
      {"negative size", "m.jsonl", ok + "{\"url\": \"b.tar\", \"nsamples\": 1, \"size\": -4}\n",
       "line 2: 'size' must be a non-negative integer"},
      {"fractional count", "m.jsonl", "{\"url\": \"b.tar\", \"nsamples\": 1.5}\n",
       "line 1: 'nsamples' must be a non-negative integer"},
      {"duplicate", "m.jsonl", ok + ok, "line 2: duplicate url a.tar (first on line 1)"},
      {"duplicate after resolving", "/d/m.jsonl", ok + "{\"url\": \"/d/a.tar\", \"nsamples\": 1}",
       "line 2: duplicate url"},
      {"the first duplicate", "m.csv", "url,nsamples\na.tar,1\nb.tar,1\nc.tar,1\nb.tar,1\na.tar,1\n",
       "line 5: duplicate url b.tar (first on line 3)"},
      {"checksum syntax", "m.jsonl", ok + "{\"url\": \"b.tar\", \"nsamples\": 1, \"checksum\": \"abc\"}",
       "line 2: checksum 'abc' has no algorithm prefix"},
      {"checksum digits", "m.jsonl", ok + "{\"url\": \"b.tar\", \"nsamples\": 1, \"checksum\": \"xxh3_64:12\"}",
       "line 2: checksum 'xxh3_64:12' should have 16 hex digits"},
      {"unknown algorithm", "m.jsonl",
       ok + "{\"url\": \"b.tar\", \"nsamples\": 1, \"checksum\": \"md5:00\"}",
       "line 2: unknown checksum algorithm 'md5'"},
      {"empty", "m.jsonl", "\n\n", "lists no shards"},
      {"not json", "m.jsonl", ok + "{\"url\": \n", "line 2: not valid JSON"},
      {"csv negative", "m.csv", "url,nsamples\na.tar,3\nb.tar,-1\n",
       "line 3: 'nsamples' must be a non-negative integer, got '-1'"},
      {"csv missing count", "m.csv", "url,size,nsamples\na.tar,3,\n", "line 2: missing 'nsamples'"},
      {"csv missing column", "m.csv", "url,size\na.tar,3\n", "line 1: CSV header lacks the 'nsamples'"},
      {"csv field count", "m.csv", "url,nsamples\n\na.tar,1\nb.tar,2,3\n", "line 4: expected 2 CSV fields, got 3"},
      {"csv unterminated", "m.csv", "url,nsamples\n\"a.tar,1\n", "line 2: unterminated quoted"},
      {"csv empty", "m.csv", "url,nsamples\n", "lists no shards"},
      {"json doc entry", "m.json",
       "{\"shards\": [\n  {\"url\": \"a.tar\", \"nsamples\": 1},\n  {\"url\": \"b.tar\",\n"
       "   \"nsamples\": -2}\n]}",
       "line 3: 'nsamples' must be a non-negative integer"},
      {"json doc syntax", "m.json", "{\"shards\": [\n {\"url\": \"a.tar\",, }\n]}", "line 2: not valid JSON"},
      {"json doc no shards key", "m.json", "{\"files\": []}", "no \"shards\" key"},
      // Found by tests/fuzz/manifest_fuzz.cc: these used to throw.
      {"csv bad utf-8", "m.csv", "url,nsamples\n\xfe.tar,1\n", "line 2: CSV field 'url' is not valid UTF-8"},
      {"json doc huge number", "m.json", "{\"shards\": [{\"url\": \"a\", \"nsamples\": 222e31333}]}",
       "line 1: not valid JSON"},
  };
  for (const BadCase& c : cases) {
    auto m = ParseManifest(c.text, c.url);
    ASSERT_FALSE(m.ok()) << c.name;
    EXPECT_EQ(m.status().code(), StatusCode::kConfig) << c.name;
    EXPECT_NE(m.status().message().find(c.want), std::string::npos)
        << c.name << ": " << m.status().message();
    EXPECT_NE(m.status().message().find(c.url), std::string::npos) << c.name;
  }
}

TEST(ManifestTest, CredentialsInUrlsAreRedactedInErrors) {
  auto m = ParseManifest("{\"url\": \"a.tar\"}", "https://user:secret@h/m.jsonl");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message().find("secret"), std::string::npos) << m.status();
}

TEST(BraceTest, ExpandsRangesListsAndPadding) {
  auto v = ExpandBraces("data-{000..003}.tar");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<std::string>{"data-000.tar", "data-001.tar", "data-002.tar",
                                          "data-003.tar"}));
  v = ExpandBraces("{a,b}/p-{8..10}.tar");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<std::string>{"a/p-8.tar", "a/p-9.tar", "a/p-10.tar", "b/p-8.tar",
                                          "b/p-9.tar", "b/p-10.tar"}));
  v = ExpandBraces("x{2..0}{x}");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<std::string>{"x2{x}", "x1{x}", "x0{x}"}));
  v = ExpandBraces("s-{0..9}-{00..99}.tar");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->size(), 1000u);
  EXPECT_EQ(v->back(), "s-9-99.tar");
  EXPECT_TRUE(IsBracePattern("data-{000000..000999}.tar"));
  EXPECT_TRUE(IsBracePattern("{a,b}.tar"));
  EXPECT_FALSE(IsBracePattern("data-{x}.tar"));
  EXPECT_FALSE(IsBracePattern("/data/manifest.jsonl"));
  for (const char* bad : {"a-{0..3.tar", "a-}.tar", "a-{{0..1}}.tar", "a-{x..3}.tar",
                          "{0..99999}{0..999}", "{a,a}"}) {
    auto r = ExpandBraces(bad);
    if (std::string(bad) == "{a,a}") r = ManifestFromPattern(bad).status();
    EXPECT_EQ(r.status().code(), StatusCode::kConfig) << bad;
  }
}

TEST(BraceTest, PatternManifestHasUnknownCounts) {
  auto m = LoadManifest("https://h/ds/data-{000000..000999}.tar");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shards.size(), 1000u);
  EXPECT_EQ(m->shards[999].resolved, "https://h/ds/data-000999.tar");
  EXPECT_FALSE(m->SampleCountsKnown());
  EXPECT_EQ(m->TotalSamples(), -1);
}

TEST(ManifestTest, ReadFromFileResolvesAgainstItsDirectory) {
  testing::TempDir dir;
  testing::WriteFile(dir.Join("m.csv"), "url,nsamples\nshard-0.tar,5\n");
  auto m = LoadManifest(dir.Join("m.csv"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shards[0].resolved, dir.Join("shard-0.tar"));
  ASSERT_TRUE(WriteManifest(*m, dir.Join("out.jsonl")).ok());
  auto back = ReadManifest(dir.Join("out.jsonl"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Fingerprint(), m->Fingerprint());
  EXPECT_EQ(ReadManifest(dir.Join("missing.jsonl")).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardstream
