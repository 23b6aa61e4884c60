// Hostile and broken shards: every defect gives kCorrupt naming the shard,
// the member and the byte offset (or a counted skip under a skip policy);
// nothing crashes or hangs. Both engines are run on every input.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "shardstream/shard_writer.h"
#include "shardstream/tar_reader.h"
#include "support/tar_fixtures.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::ReadBytes;
using testing::ReadOutcome;
using testing::TarBuilder;

TarReaderOptions Engine(TarEngine e) {
  TarReaderOptions o;
  o.engine = e;
  o.chunk_size = 64 << 10;
  return o;
}

// Expects kCorrupt from the fast engine, naming the url and `offset`, with
// `needle` in the message; the libarchive engine must not crash either.
void ExpectCorrupt(const std::string& bytes, int64_t offset, const std::string& needle,
                   const TarReaderOptions& options = Engine(TarEngine::kFast)) {
  ReadOutcome r = ReadBytes(bytes, options, "mem://bad/shard-7.tar");
  ASSERT_EQ(r.status.code(), StatusCode::kCorrupt) << r.status;
  EXPECT_EQ(r.status.url(), "mem://bad/shard-7.tar");
  EXPECT_NE(r.status.message().find("mem://bad/shard-7.tar"), std::string::npos) << r.status;
  if (offset >= 0) {
    EXPECT_EQ(r.status.offset(), offset) << r.status;
    EXPECT_NE(r.status.message().find("offset " + std::to_string(offset)), std::string::npos)
        << r.status;
  }
  EXPECT_NE(r.status.message().find(needle), std::string::npos) << r.status;
  TarReaderOptions lib = options;
  lib.engine = TarEngine::kLibarchive;
  (void)ReadBytes(bytes, lib);
}

TEST(TarHostileTest, AbsolutePathIsCorrupt) {
  TarBuilder b;
  b.File("ok.a", "1").File("/etc/passwd.txt", "x").End();
  ExpectCorrupt(b.bytes(), 1024, "absolute member name");
  ExpectCorrupt(b.bytes(), 1024, "'/etc/passwd.txt'");
  ExpectCorrupt(b.bytes(), 1024, "absolute", Engine(TarEngine::kLibarchive));
}

TEST(TarHostileTest, DotDotIsCorrupt) {
  TarBuilder b;
  b.File("a/../../x.jpg", "x").End();
  ExpectCorrupt(b.bytes(), 0, "'..'");
  ExpectCorrupt(b.bytes(), 0, "'..'", Engine(TarEngine::kLibarchive));
  // Names that merely contain dots are fine.
  ReadOutcome ok = ReadBytes(TarBuilder().File("a..b/..c.x", "1").End().bytes());
  EXPECT_TRUE(ok.status.ok()) << ok.status;
}

TEST(TarHostileTest, NulInNameIsCorrupt) {
  TarBuilder pax;
  pax.Pax({{"path", std::string("evil\0name.jpg", 13)}}).File("plain.jpg", "x").End();
  ExpectCorrupt(pax.bytes(), 0, "NUL byte");
  ExpectCorrupt(pax.bytes(), 0, "'evil\\0name.jpg'");  // escaped in the message
  TarBuilder gnu;
  gnu.GnuLongName(std::string("evil\0rest.jpg", 13)).File("plain.jpg", "x").End();
  ExpectCorrupt(gnu.bytes(), 0, "NUL byte");
}

TEST(TarHostileTest, DeclaredSizePastEndIsCorrupt) {
  TarBuilder b;
  b.File("a.x", "1").File("b.x", "short", 100000).End();
  ExpectCorrupt(b.bytes(), 1024, "extends past the end");
}

TEST(TarHostileTest, HugeDeclaredSizeIsCorruptWithoutAllocating) {
  for (uint64_t size : {uint64_t{1} << 29, uint64_t{1} << 40, uint64_t{1} << 62, ~uint64_t{0} >> 9}) {
    TarBuilder b;
    b.File("huge.bin", "", static_cast<int64_t>(size)).End();
    ExpectCorrupt(b.bytes(), 0, "huge.bin");
    // Both engines check against the shard's size before allocating.
    ExpectCorrupt(b.bytes(), 0, "extends past the end", Engine(TarEngine::kLibarchive));
  }
}

TEST(TarHostileTest, HugeSizeOnStreamOfUnknownLengthHitsMemberLimit) {
  // A compressed shard: the total is unknown, the limit stops it first.
  TarBuilder b;
  b.File("huge.bin", "", int64_t{1} << 40).End();
  testing::TempDir dir;
  testing::WriteFile(dir.Join("s.tar"), b.bytes());
  ASSERT_EQ(testing::RunCommand("zstd -q " + dir.Join("s.tar")), 0);
  ReadOutcome r = testing::ReadAll(dir.Join("s.tar.zst"));
  EXPECT_EQ(r.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status.message().find("max_member_size"), std::string::npos) << r.status;
}

TEST(TarHostileTest, PaxSizeDisagreeingWithUstarSizeIsCorrupt) {
  TarBuilder b;
  b.Pax({{"size", "3"}}).File("a.x", "12345").End();
  ExpectCorrupt(b.bytes(), 1024, "disagrees with ustar size");
  // A pax size with a zero ustar size (how writers store big sizes) is fine.
  TarBuilder ok;
  ok.Pax({{"size", "5"}}).File("a.x", "12345", 0).End();
  ReadOutcome r = ReadBytes(ok.bytes());
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].fields[0].second, "12345");
}

TEST(TarHostileTest, MalformedPaxRecordIsCorrupt) {
  std::string bytes = TarBuilder::Header("PaxHeader", 'x', 10) + "99 path=x\n" +
                      std::string(502, '\0') + TarBuilder().File("a.x", "1").End().bytes();
  ExpectCorrupt(bytes, 0, "pax record");
}

TEST(TarHostileTest, LimitsAreEnforced) {
  TarReaderOptions o = Engine(TarEngine::kFast);
  o.limits.max_member_size = 10;
  ExpectCorrupt(TarBuilder().File("a.x", std::string(11, 'x')).End().bytes(), 0,
                "max_member_size", o);

  o = Engine(TarEngine::kFast);
  o.limits.max_path_length = 20;
  ExpectCorrupt(TarBuilder().File(std::string(30, 'n') + ".x", "1").End().bytes(), 0,
                "max_path_length", o);

  o = Engine(TarEngine::kFast);
  o.limits.max_header_size = 100;
  std::string long_name = std::string(200, 'l') + ".x";
  ExpectCorrupt(TarBuilder().Pax({{"path", long_name}}).File("a.x", "1").End().bytes(), 0,
                "max_header_size", o);

  o = Engine(TarEngine::kFast);
  o.limits.max_entries = 3;
  TarBuilder many;
  for (int i = 0; i < 5; ++i) many.File("k" + std::to_string(i) + ".x", "1");
  ExpectCorrupt(many.End().bytes(), 3072, "max_entries", o);
  o.engine = TarEngine::kLibarchive;
  ExpectCorrupt(many.bytes(), 3072, "max_entries", o);
}

TEST(TarHostileTest, NonTarAndEmptyFilesAreCorrupt) {
  std::mt19937 rng(5);
  std::string noise(5000, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  ExpectCorrupt(noise, 0, "not a tar shard");
  ExpectCorrupt("hello, this is a text file\n", 0, "");
  ExpectCorrupt("", 0, "empty file");
  ExpectCorrupt("", 0, "empty file", Engine(TarEngine::kLibarchive));
  ReadOutcome lib = ReadBytes(noise, Engine(TarEngine::kLibarchive));
  EXPECT_EQ(lib.status.code(), StatusCode::kCorrupt) << lib.status;
}

TEST(TarHostileTest, MissingEndMarkerIsCorrupt) {
  TarBuilder b;
  b.File("a.x", "1");
  ExpectCorrupt(b.bytes(), 1024, "end-of-archive");
}

TEST(TarHostileTest, DuplicateFieldIsCorrupt) {
  TarBuilder b;
  b.File("a.x", "1").File("a.x", "2").End();
  ExpectCorrupt(b.bytes(), 1024, "duplicate field 'x'");
}

// A shard as ShardWriter makes it, also zstd-compressed.
std::string WriterShard(ShardCompression c) {
  auto mem = NewMemorySource();
  ShardWriterOptions o;
  o.source = mem.get();
  o.compression = c;
  o.manifest_name = "";
  auto w = ShardWriter::Create("mem://out", o);
  std::mt19937 rng(3);
  for (int i = 0; i < 12; ++i) {
    Sample s;
    s.key = "sample" + std::to_string(i);
    std::string data(static_cast<size_t>(rng() % 3000), 'd');
    Field f;
    f.name = "bin";
    f.data = data;
    s.fields.push_back(f);
    if (i == 5) {  // a pax header for a long name
      s.key = "dir/" + std::string(120, 'L') + std::to_string(i);
    }
    EXPECT_TRUE((*w)->Write(s).ok());
  }
  EXPECT_TRUE((*w)->Close().ok());
  return *ReadFileToString(*mem, "mem://out/" + (*w)->manifest().shards[0].url);
}

TEST(TarHostileTest, TruncationAtAnyOffsetIsCorrupt) {
  for (ShardCompression c : {ShardCompression::kNone, ShardCompression::kZstd}) {
    std::string full = WriterShard(c);
    ASSERT_TRUE(ReadBytes(full).status.ok());
    // The last 1024 bytes of an uncompressed shard are the end marker; a
    // single zero block is accepted as the end (as GNU tar does).
    size_t limit = c == ShardCompression::kNone ? full.size() - 512 : full.size();
    for (size_t cut = 1; cut < limit; cut += (cut < 2048 ? 1 : 61)) {
      for (TarEngine e : {TarEngine::kFast, TarEngine::kLibarchive}) {
        ReadOutcome r = ReadBytes(full.substr(0, cut), Engine(e), "mem://t/shard.tar");
        if (e == TarEngine::kLibarchive) continue;  // must only not crash
        ASSERT_EQ(r.status.code(), StatusCode::kCorrupt) << "cut at " << cut << ": " << r.status;
        EXPECT_EQ(r.status.url(), "mem://t/shard.tar");
        EXPECT_GE(r.status.offset(), 0);
        if (c == ShardCompression::kNone)
          EXPECT_LE(r.status.offset(), static_cast<int64_t>(cut)) << r.status;
      }
    }
  }
}

TEST(TarHostileTest, DamagedZstdFrameIsCorrupt) {
  std::string full = WriterShard(ShardCompression::kZstd);
  int detected = 0;
  for (size_t at = 20; at < full.size(); at += full.size() / 17) {
    std::string bad = full;
    bad[at] ^= 0x55;
    ReadOutcome r = ReadBytes(bad);
    // ShardWriter sets the frame checksum, so any damage is caught.
    ASSERT_EQ(r.status.code(), StatusCode::kCorrupt) << "flip at " << at << ": " << r.status;
    EXPECT_GE(r.status.offset(), 0);
    ++detected;
  }
  EXPECT_GT(detected, 10);
}

TEST(TarHostileTest, FlippedHeaderBytesAreDetected) {
  std::string full = WriterShard(ShardCompression::kNone);
  ReadOutcome good = ReadBytes(full);
  ASSERT_TRUE(good.status.ok());
  // Flip every byte of the first header and of a header in the middle.
  size_t second = static_cast<size_t>(good.samples[1].offset);
  for (size_t base : {size_t{0}, second}) {
    for (size_t i = 0; i < 512; ++i) {
      std::string bad = full;
      bad[base + i] = static_cast<char>(bad[base + i] ^ 0x41);
      for (TarEngine e : {TarEngine::kFast, TarEngine::kLibarchive}) {
        ReadOutcome r = ReadBytes(bad, Engine(e));
        if (e == TarEngine::kLibarchive) continue;
        bool in_checksum = i >= 148 && i < 156;
        if (!in_checksum) {
          ASSERT_EQ(r.status.code(), StatusCode::kCorrupt) << "byte " << base + i;
          EXPECT_EQ(r.status.offset(), static_cast<int64_t>(base)) << r.status;
        } else {
          EXPECT_TRUE(r.status.ok() || r.status.code() == StatusCode::kCorrupt);
        }
      }
    }
  }
}

TEST(TarHostileTest, SkipSamplePolicyDropsOnlyTheBadSample) {
  TarBuilder b;
  b.File("a.x", "1").File("a.y", "2");
  b.File("b.x", "3").File("/abs/b.y", "4");  // bad member: the sample being built goes
  b.File("c.x", "5").File("c.x", "6");       // duplicate field: sample c goes
  b.File("d.x", "7").End();
  TarReaderOptions o = Engine(TarEngine::kFast);
  o.policy = ErrorPolicy::kSkipSample;
  for (TarEngine e : {TarEngine::kFast, TarEngine::kLibarchive}) {
    o.engine = e;
    ReadOutcome r = ReadBytes(b.bytes(), o);
    ASSERT_TRUE(r.status.ok()) << r.status;
    std::vector<std::string> keys;
    for (auto& s : r.samples) keys.push_back(s.key);
    EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "d"}));
    EXPECT_EQ(r.stats.skipped_samples, 2u);
    EXPECT_EQ(r.stats.last_error.code(), StatusCode::kCorrupt);
    EXPECT_NE(r.stats.last_error.message().find("duplicate"), std::string::npos);
  }
}

TEST(TarHostileTest, SkipSamplePolicyDropsAllMembersOfTheBadKey) {
  TarBuilder b;
  b.File("a.x", "1").File("b.x", std::string(20, 'x')).File("b.y", "2").File("c.x", "3").End();
  TarReaderOptions o = Engine(TarEngine::kFast);
  o.policy = ErrorPolicy::kSkipSample;
  o.limits.max_member_size = 10;
  ReadOutcome r = ReadBytes(b.bytes(), o);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.samples.size(), 2u);
  EXPECT_EQ(r.samples[0].key, "a");
  EXPECT_EQ(r.samples[1].key, "c");
  EXPECT_EQ(r.stats.skipped_samples, 1u);
}

TEST(TarHostileTest, SkipShardPolicyKeepsEarlierSamplesAndCounts) {
  TarBuilder b;
  b.File("a.x", "1").File("b.x", "2").File("../c.x", "3").File("d.x", "4").End();
  TarReaderOptions o = Engine(TarEngine::kFast);
  o.policy = ErrorPolicy::kSkipShard;
  ReadOutcome r = ReadBytes(b.bytes(), o);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.samples.size(), 2u);
  EXPECT_EQ(r.stats.skipped_shards, 1u);
  EXPECT_EQ(r.stats.last_error.offset(), 2048);
  // A structural error (truncation) also skips the shard under kSkipSample.
  o.policy = ErrorPolicy::kSkipSample;
  std::string cut = TarBuilder().File("a.x", "1").File("b.x", "2").bytes();
  ReadOutcome t = ReadBytes(cut.substr(0, cut.size() - 100), o);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(t.samples.size(), 0u);  // a's sample was still open when b broke
  EXPECT_EQ(t.stats.skipped_shards, 1u);
}

TEST(TarHostileTest, RaisePolicyIsSticky) {
  TarBuilder b;
  b.File("a.x", "1").File("/b.x", "2").File("c.x", "3").End();
  auto mem = NewMemorySource();
  ASSERT_TRUE(WriteFileAtomic(*mem, "mem://s.tar", b.bytes()).ok());
  TarReaderOptions o;
  o.source = mem.get();
  auto reader = TarReader::Open("mem://s.tar", o);
  ASSERT_TRUE(reader.ok());
  Sample s;
  auto first = (*reader)->Next(&s);
  ASSERT_TRUE(first.ok() && *first);  // "a" completes before the bad member
  for (int i = 0; i < 3; ++i) {
    auto r = (*reader)->Next(&s);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  }
}

// The golden bad inputs in tests/data/bad_shards, with the offset and error
// listed in EXPECTED.
TEST(TarHostileTest, GoldenBadShards) {
  std::string dir = std::string(SHARDSTREAM_TEST_DATA_DIR) + "/bad_shards";
  std::ifstream expected(dir + "/EXPECTED");
  ASSERT_TRUE(expected) << dir;
  int checked = 0;
  for (std::string line; std::getline(expected, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string file, offset, fragment;
    std::getline(fields, file, '\t');
    std::getline(fields, offset, '\t');
    std::getline(fields, fragment);
    std::string path = dir + "/" + file;
    ReadOutcome r = testing::ReadAll(path);
    EXPECT_EQ(r.status.code(), StatusCode::kCorrupt) << file << ": " << r.status;
    EXPECT_EQ(r.status.offset(), std::stoll(offset)) << file << ": " << r.status;
    EXPECT_NE(r.status.message().find(fragment), std::string::npos) << file << ": " << r.status;
    EXPECT_NE(r.status.message().find(path), std::string::npos) << file << ": " << r.status;
    EXPECT_EQ(r.status.url(), path);
    TarReaderOptions lib;
    lib.engine = TarEngine::kLibarchive;
    (void)testing::ReadAll(path, lib);  // must not crash or hang
    ++checked;
  }
  EXPECT_EQ(checked, 14);
}

}  // namespace
}  // namespace shardstream
