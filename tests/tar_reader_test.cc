// TarReader on shards written by the real tools (GNU tar, bsdtar) in every
// format and compression, read field by field with both engines; plus the
// index, OpenAt and sample rules.
#include "shardstream/tar_reader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "support/tar_fixtures.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::FlatSample;
using testing::ReadAll;
using testing::ReadBytes;
using testing::ReadOutcome;
using testing::TarBuilder;
using testing::TempDir;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// A source tree with what real data sets hold and what must not become a
// field: directories, a symlink, a hard link, an unkeyed file.
struct Tree {
  std::vector<std::string> entries;  // in archive order (written to a list file)
  std::vector<FlatSample> expected;  // samples, offsets left 0
};

Tree MakeTree(const std::string& root, bool very_long_names) {
  Tree t;
  auto add_file = [&](const std::string& rel, const std::string& data) {
    std::filesystem::create_directories(std::filesystem::path(root + "/" + rel).parent_path());
    testing::WriteFile(root + "/" + rel, data);
    t.entries.push_back(rel);
  };
  auto add_dir = [&](const std::string& rel) {
    std::filesystem::create_directories(root + "/" + rel);
    t.entries.push_back(rel);
  };
  add_dir("d");
  add_file("d/000.jpg", RandomBytes(70000, 1));  // crosses 64 KiB chunks
  add_file("d/000.cls", "7");
  add_file("d/000.meta.json", "{\"a\": 1}");
  add_file("d/001.jpg", "");  // empty member
  add_file("d/001.txt", "hello");
  std::string mid = "d/" + std::string(90, 'm') + "/long_sample_name_" + std::string(20, 'x');
  add_dir(mid);  // path > 100: needs ustar prefix / pax / GNU long names
  add_file(mid + "/002.tokens.npy", RandomBytes(1000, 2));
  if (very_long_names) {
    std::string deep = "d/" + std::string(150, 'p') + "/" + std::string(150, 'q');
    add_dir(deep);  // > 255: not representable in ustar
    add_file(deep + "/003.bin", RandomBytes(513, 3));
  }
  add_file("d/004.big", RandomBytes(300000, 4));  // larger than the 64 KiB chunk
  add_file("d/NOEXT", "no key");                   // unkeyed member
  ::symlink("000.jpg", (root + "/d/005.lnk").c_str());
  t.entries.push_back("d/005.lnk");
  add_file("d/006.dat", "linked");
  ::link((root + "/d/006.dat").c_str(), (root + "/d/007.dat").c_str());
  t.entries.push_back("d/007.dat");  // becomes a hard-link entry

  std::string key;
  for (const std::string& e : t.entries) {
    struct stat st;
    ::lstat((root + "/" + e).c_str(), &st);
    if (!S_ISREG(st.st_mode) || e == "d/007.dat") continue;
    std::string_view k, f;
    if (!SplitSampleKey(e, &k, &f)) continue;
    if (t.expected.empty() || t.expected.back().key != k) {
      t.expected.emplace_back();
      t.expected.back().key = std::string(k);
    }
    t.expected.back().fields.emplace_back(std::string(f), testing::ReadFile(root + "/" + e));
  }
  return t;
}

std::vector<FlatSample> WithoutOffsets(std::vector<FlatSample> v) {
  for (auto& s : v) s.offset = 0;
  return v;
}

struct ToolCase {
  std::string name;     // test name suffix
  std::string command;  // {list} {src} {out}
  bool very_long_names;
};

void PrintTo(const ToolCase& c, std::ostream* os) { *os << c.name; }

class ToolShardTest : public ::testing::TestWithParam<ToolCase> {};

TEST_P(ToolShardTest, ReadsFieldByFieldWithBothEngines) {
  const ToolCase& c = GetParam();
  TempDir dir;
  std::string src = dir.Join("src");
  Tree tree = MakeTree(src, c.very_long_names);
  std::string list;
  for (const auto& e : tree.entries) list += e + "\n";
  testing::WriteFile(dir.Join("list"), list);
  std::string out = dir.Join("shard");
  std::string cmd = c.command;
  auto replace = [&](const std::string& from, const std::string& to) {
    for (size_t p; (p = cmd.find(from)) != std::string::npos;) cmd.replace(p, from.size(), to);
  };
  replace("{list}", dir.Join("list"));
  replace("{src}", src);
  replace("{out}", out);
  std::string output;
  ASSERT_EQ(testing::RunCommand(cmd, &output), 0) << cmd << "\n" << output;

  for (size_t chunk : {size_t{64} << 10, size_t{4} << 20}) {
    TarReaderOptions fast;
    fast.chunk_size = chunk;
    ReadOutcome a = ReadAll(out, fast);
    ASSERT_TRUE(a.status.ok()) << a.status;
    EXPECT_EQ(WithoutOffsets(a.samples), tree.expected);
    EXPECT_EQ(a.stats.directories, c.very_long_names ? 3u : 2u);
    EXPECT_EQ(a.stats.symlinks, 1u);
    EXPECT_EQ(a.stats.hardlinks, 1u);
    EXPECT_EQ(a.stats.unkeyed_members, 1u);
    EXPECT_EQ(a.stats.samples, tree.expected.size());

    TarReaderOptions lib = fast;
    lib.engine = TarEngine::kLibarchive;
    ReadOutcome b = ReadAll(out, lib);
    ASSERT_TRUE(b.status.ok()) << b.status;
    // Same samples, same bytes, same sample offsets.
    EXPECT_EQ(a.samples, b.samples);
    ASSERT_EQ(a.index.samples.size(), b.index.samples.size());
    for (size_t i = 0; i < a.index.samples.size(); ++i) {
      EXPECT_EQ(a.index.samples[i].offset, b.index.samples[i].offset);
      EXPECT_EQ(a.index.samples[i].nfields, b.index.samples[i].nfields);
    }
    // Field offsets point at the bytes in the (uncompressed) tar.
    if (c.command.find(" -z") == std::string::npos && c.command.find("zstd") == std::string::npos) {
      std::string raw = testing::ReadFile(out);
      for (const auto& s : a.samples)
        for (size_t i = 0; i < s.fields.size(); ++i)
          EXPECT_EQ(raw.substr(s.field_offsets[i], s.fields[i].second.size()), s.fields[i].second);
    }
    EXPECT_EQ(a.stats.directories, b.stats.directories);
    EXPECT_EQ(a.stats.symlinks, b.stats.symlinks);
    EXPECT_EQ(a.stats.hardlinks, b.stats.hardlinks);
  }
}

const char kGnu[] = "cd {src} && tar --no-recursion -T {list} -cf {out} ";
const char kBsd[] = "cd {src} && bsdtar -n -T {list} -cf {out} ";

INSTANTIATE_TEST_SUITE_P(
    Tools, ToolShardTest,
    ::testing::Values(
        ToolCase{"GnuGnu", std::string(kGnu) + "--format=gnu", true},
        ToolCase{"GnuPax", std::string(kGnu) + "--format=pax", true},
        ToolCase{"GnuUstar", std::string(kGnu) + "--format=ustar", false},
        ToolCase{"GnuGnuGzip", std::string(kGnu) + "--format=gnu -z", true},
        ToolCase{"GnuPaxZstd", std::string(kGnu) + "--format=pax --zstd", true},
        ToolCase{"GnuUstarZstd", std::string(kGnu) + "--format=ustar --zstd", false},
        ToolCase{"BsdPax", std::string(kBsd) + "--format pax", true},
        ToolCase{"BsdUstar", std::string(kBsd) + "--format ustar", false},
        ToolCase{"BsdGnutar", std::string(kBsd) + "--format gnutar", true},
        ToolCase{"BsdPaxGzip", std::string(kBsd) + "--format pax -z", true},
        ToolCase{"BsdPaxZstd", std::string(kBsd) + "--format pax --zstd", true},
        ToolCase{"BsdGnutarZstd", std::string(kBsd) + "--format gnutar --zstd", true}),
    [](const auto& info) { return info.param.name; });

TEST(TarReaderTest, SplitSampleKeyFollowsWebDataset) {
  std::string_view k, f;
  ASSERT_TRUE(SplitSampleKey("a/b/c.tokens.npy", &k, &f));
  EXPECT_EQ(k, "a/b/c");
  EXPECT_EQ(f, "tokens.npy");
  ASSERT_TRUE(SplitSampleKey("x.y/abc.jpg", &k, &f));  // dots in directories don't count
  EXPECT_EQ(k, "x.y/abc");
  EXPECT_EQ(f, "jpg");
  EXPECT_FALSE(SplitSampleKey("dir/.hidden", &k, &f));
  EXPECT_FALSE(SplitSampleKey("dir/noext", &k, &f));
  EXPECT_FALSE(SplitSampleKey("x.y/noext", &k, &f));
}

TEST(TarReaderTest, ConsecutiveMembersOfOneKeyFormOneSample) {
  std::string bytes = TarBuilder()
                          .File("a.jpg", "1")
                          .File("a.cls", "2")
                          .File("b.jpg", "3")
                          .File("a.txt", "4")  // not consecutive: a new sample "a"
                          .End()
                          .bytes();
  ReadOutcome r = ReadBytes(bytes);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.samples.size(), 3u);
  EXPECT_EQ(r.samples[0].key, "a");
  EXPECT_EQ(r.samples[0].fields.size(), 2u);
  EXPECT_EQ(r.samples[1].key, "b");
  EXPECT_EQ(r.samples[2].key, "a");
  EXPECT_EQ(r.samples[2].fields[0].first, "txt");
}

TEST(TarReaderTest, SampleCarriesKeyUrlAndIndex) {
  std::string bytes = TarBuilder().File("k1.a", "x").File("k2.a", "y").End().bytes();
  auto mem = NewMemorySource();
  ASSERT_TRUE(WriteFileAtomic(*mem, "mem://user:secret@host/s.tar", bytes).ok());
  TarReaderOptions o;
  o.source = mem.get();
  auto reader = TarReader::Open("mem://user:secret@host/s.tar", o);
  ASSERT_TRUE(reader.ok()) << reader.status();
  Sample s;
  ASSERT_TRUE(*(*reader)->Next(&s));
  EXPECT_EQ(s.key, "k1");
  EXPECT_EQ(s.index, 0);
  EXPECT_EQ(s.url.find("secret"), std::string::npos) << s.url;
  ASSERT_TRUE(*(*reader)->Next(&s));
  EXPECT_EQ(s.index, 1);
  EXPECT_EQ(s.offset, 1024u);
  EXPECT_FALSE(*(*reader)->Next(&s));
  EXPECT_FALSE(*(*reader)->Next(&s));  // stays at the end
}

TEST(TarReaderTest, FieldsOutliveTheReader) {
  std::string big = RandomBytes(200000, 9);
  std::string bytes = TarBuilder().File("a.x", "small").File("b.y", big).End().bytes();
  std::vector<Sample> kept;
  {
    auto mem = NewMemorySource();
    ASSERT_TRUE(WriteFileAtomic(*mem, "mem://s.tar", bytes).ok());
    TarReaderOptions o;
    o.source = mem.get();
    o.chunk_size = 64 << 10;
    auto reader = TarReader::Open("mem://s.tar", o);
    ASSERT_TRUE(reader.ok());
    Sample s;
    while (*(*reader)->Next(&s)) kept.push_back(s);
  }
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].fields[0].data, "small");
  EXPECT_EQ(kept[1].fields[0].data, big);
}

TEST(TarReaderTest, OpenAtSeeksWithBuiltAndSidecarIndex) {
  TempDir dir;
  TarBuilder b;
  for (int i = 0; i < 50; ++i) {
    char key[16];
    std::snprintf(key, sizeof(key), "s%03d", i);
    b.File(std::string(key) + ".a", RandomBytes(100 + 37 * i, i));
    b.File(std::string(key) + ".b", std::to_string(i));
  }
  std::string shard = dir.Join("s.tar");
  testing::WriteFile(shard, b.End().bytes());
  ReadOutcome all = ReadAll(shard);
  ASSERT_TRUE(all.status.ok());
  ASSERT_EQ(all.index.samples.size(), 50u);
  EXPECT_EQ(all.index.shard_size, b.bytes().size());

  // No sidecar yet: NotFound.
  auto missing = TarReader::OpenAt(shard, 3);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  ASSERT_TRUE(WriteSampleIndex(all.index, shard).ok());
  for (int64_t k : {0, 1, 17, 49, 50}) {
    auto r = TarReader::OpenAt(shard, k);
    ASSERT_TRUE(r.ok()) << r.status();
    Sample s;
    std::vector<FlatSample> got;
    while (*(*r)->Next(&s)) {
      EXPECT_EQ(s.index, k + static_cast<int64_t>(got.size()));
      FlatSample f;
      f.key = s.key;
      f.offset = s.offset;
      for (auto& fl : s.fields) f.fields.emplace_back(fl.name, std::string(fl.data));
      got.push_back(f);
    }
    std::vector<FlatSample> want(all.samples.begin() + k, all.samples.end());
    EXPECT_EQ(got, want) << "k=" << k;
  }
  auto out_of_range = TarReader::OpenAt(shard, 51);
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_EQ(out_of_range.status().code(), StatusCode::kConfig);

  // A stale sidecar (the shard changed size) is refused.
  testing::WriteFile(shard, b.bytes() + std::string(512, '\0'));
  auto stale = TarReader::OpenAt(shard, 3);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kCorrupt);
}

TEST(TarReaderTest, IndexIsExactWhateverTheSampleSizesAndCanBeTurnedOff) {
  // The index is reserved from the first sample's size: a small first sample
  // followed by larger ones (and the reverse) must still give every entry.
  TempDir dir;
  TarBuilder b;
  for (int i = 0; i < 300; ++i) {
    char key[16];
    std::snprintf(key, sizeof(key), "k%04d", i);
    size_t n = i < 150 ? 10 + i : 5000 - 3 * i;
    b.File(std::string(key) + ".bin", RandomBytes(n, i));
  }
  std::string shard = dir.Join("s.tar");
  testing::WriteFile(shard, b.End().bytes());
  ReadOutcome all = ReadAll(shard);
  ASSERT_TRUE(all.status.ok()) << all.status;
  ASSERT_EQ(all.index.samples.size(), 300u);
  for (size_t i = 1; i < all.index.samples.size(); ++i) {
    const auto& p = all.index.samples[i - 1];
    EXPECT_EQ(p.offset + p.length, all.index.samples[i].offset) << i;
  }
  EXPECT_EQ(all.index.samples[299].key, "k0299");

  TarReaderOptions o;
  o.build_index = false;
  auto r = TarReader::Open(shard, o);
  ASSERT_TRUE(r.ok()) << r.status();
  Sample s;
  int n = 0;
  while (true) {
    auto got = (*r)->Next(&s);
    ASSERT_TRUE(got.ok()) << got.status();
    if (!*got) break;
    ++n;
  }
  EXPECT_EQ(n, 300);
  EXPECT_TRUE((*r)->index().samples.empty());
}

TEST(TarReaderTest, OpenAtOnCompressedShardSkipsAhead) {
  TempDir dir;
  TarBuilder b;
  for (int i = 0; i < 10; ++i) b.File("k" + std::to_string(i) + ".x", std::to_string(i));
  testing::WriteFile(dir.Join("s.tar"), b.End().bytes());
  ASSERT_EQ(testing::RunCommand("zstd -q " + dir.Join("s.tar") + " -o " + dir.Join("s.tar.zst")), 0);
  auto index = BuildSampleIndex(dir.Join("s.tar.zst"));
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_TRUE(index->compressed);
  auto r = TarReader::OpenAt(dir.Join("s.tar.zst"), 7, &*index);
  ASSERT_TRUE(r.ok()) << r.status();
  Sample s;
  ASSERT_TRUE(*(*r)->Next(&s));
  EXPECT_EQ(s.key, "k7");
  EXPECT_EQ(s.index, 7);
  EXPECT_EQ((*r)->compression(), ShardCompression::kZstd);
}

TEST(TarReaderTest, SampleIndexRoundTripsAndRejectsDamage) {
  SampleIndex idx;
  idx.shard_size = 10000;
  idx.samples.push_back({0, 1536, 2, "a"});
  idx.samples.push_back({1536, 1024, 1, "dir/b"});
  std::string bytes = SerializeSampleIndex(idx);
  auto back = ParseSampleIndex(bytes, "x.idx");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->samples.size(), 2u);
  EXPECT_EQ(back->samples[1].key, "dir/b");
  EXPECT_EQ(back->samples[1].offset, 1536u);
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string bad = bytes;
    bad[i] ^= 0x20;
    auto r = ParseSampleIndex(bad, "x.idx");
    ASSERT_FALSE(r.ok()) << "flip at " << i;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  }
  for (size_t n = 0; n < bytes.size(); n += 5)
    EXPECT_FALSE(ParseSampleIndex(bytes.substr(0, n), "x.idx").ok());
}

TEST(TarReaderTest, ChunkSizeBelowMinimumIsConfigError) {
  TarReaderOptions o;
  o.chunk_size = 1024;
  ReadOutcome r = ReadBytes(TarBuilder().File("a.b", "x").End().bytes(), o);
  EXPECT_EQ(r.status.code(), StatusCode::kConfig);
}

TEST(TarReaderTest, MissingShardIsNotFound) {
  ReadOutcome r = ReadAll("/nonexistent/dir/shard.tar");
  EXPECT_EQ(r.status.code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardstream
