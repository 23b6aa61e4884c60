// JSON Lines files read as rows by the C++ Loader: plain, gzip and zstd
// files; the plan's exact split by each file's row index (also opened at a
// row's byte); escapes, long lines and the kinds that type a column; a
// tokenizer feeding the packer; and the bad inputs, each naming file, line
// and byte.
#include "shardstream/rows.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "shardstream/dataset_inputs.h"
#include "shardstream/loader.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::TempDir;
using testing::WriteFile;

std::string Row(int i) {
  return "{\"id\": " + std::to_string(i) + ", \"text\": \"row " + std::to_string(i) +
         " says \\\"hi\\\"\", \"meta\": {\"k\": [1, 2.5, null]}}\n";
}

// Rows 0..N-1 over three files: a.jsonl (plain, a blank line in it),
// b.jsonl.gz, c.jsonl.zst.
std::string WriteSet(const TempDir& dir, int per_file = 7) {
  std::string a, b, c;
  for (int i = 0; i < per_file; ++i) a += Row(i) + (i == 2 ? "\n  \n" : "");
  for (int i = per_file; i < 2 * per_file; ++i) b += Row(i);
  for (int i = 2 * per_file; i < 3 * per_file; ++i) c += Row(i);
  WriteFile(dir.Join("a.jsonl"), a);
  WriteFile(dir.Join("b.jsonl"), b);
  WriteFile(dir.Join("c.jsonl"), c);
  EXPECT_EQ(testing::RunCommand("gzip -q " + dir.Join("b.jsonl")), 0);
  EXPECT_EQ(testing::RunCommand("zstd -q --rm " + dir.Join("c.jsonl")), 0);
  return dir.path();
}

LoaderOptions Options(const std::string& input) {
  LoaderOptions o;
  o.inputs = {input};
  o.batch_size = 4;
  o.shuffle_buffer = 0;
  FieldSpec id, text;
  id.name = "id";
  text.name = "text";
  o.fields = {id, text};
  return o;
}

// id -> text of every row read.
std::map<int64_t, std::string> ReadAll(LoaderOptions o) {
  std::map<int64_t, std::string> out;
  auto loader = Loader::Create(o);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  if (!loader.ok()) return out;
  while (true) {
    auto b = (*loader)->next();
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok() || b->empty()) break;
    TensorView id = b->tensor("id"), text = b->tensor("text");
    EXPECT_TRUE(text.is_string);
    for (int64_t r = 0; r < b->rows(); ++r) {
      const int64_t v = static_cast<const int64_t*>(id.data)[r];
      EXPECT_TRUE(out.emplace(v, std::string(text.bytes(r))).second) << "row " << v << " twice";
    }
  }
  return out;
}

TEST(RowsTest, PlainGzipAndZstdFilesFromTheFolder) {
  TempDir dir;
  auto got = ReadAll(Options(WriteSet(dir)));
  ASSERT_EQ(got.size(), 21u);
  for (const auto& [id, text] : got) EXPECT_EQ(text, "row " + std::to_string(id) + " says \"hi\"");
  // The counts were learned, and kept beside the files.
  auto m = ResolveDataset({dir.path()});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->shards.size(), 3u);
  for (const ShardEntry& e : m->shards) {
    EXPECT_EQ(e.nsamples, 7);
    EXPECT_EQ(e.extra.at(kRowsFormatKey), kRowsJsonl);
  }
  EXPECT_TRUE(std::filesystem::exists(dir.Join("a.jsonl.idx")));
  // A compressed file's index holds offsets past its (compressed) size, and is valid.
  auto index = ReadSampleIndex(dir.Join("c.jsonl.zst"));
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_TRUE(index->compressed);
  EXPECT_EQ(index->samples.size(), 7u);
}

TEST(RowsTest, RanksAndWorkersSplitRowsExactlyOnce) {
  TempDir dir;
  WriteSet(dir, 50);
  std::set<int64_t> all;
  size_t total = 0;
  for (int rank = 0; rank < 3; ++rank) {
    for (int worker = 0; worker < 2; ++worker) {
      LoaderOptions o = Options(dir.path());
      o.rank = rank;
      o.world_size = 3;
      o.worker = worker;
      o.num_workers = 2;
      o.shuffle_buffer = 16;  // shuffled: ranges start mid-file, opened at a row's byte
      o.drop_last = false;
      for (const auto& [id, text] : ReadAll(o)) {
        all.insert(id);
        ++total;
        EXPECT_EQ(text, "row " + std::to_string(id) + " says \"hi\"");
      }
    }
  }
  EXPECT_EQ(total, 150u);
  EXPECT_EQ(all.size(), 150u);
}

TEST(RowsTest, DefaultFieldsAreTypedByTheFirstRow) {
  TempDir dir;
  WriteFile(dir.Join("d.jsonl"),
            "{\"n\": -3, \"s\": \"\\u00e9\\ud83d\\ude00\", \"f\": 0.5, \"o\": {\"a\": [true]}}\n");
  LoaderOptions o;
  o.inputs = {dir.Join("d.jsonl")};
  o.batch_size = 1;
  auto loader = Loader::Create(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto b = (*loader)->next();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(static_cast<const int64_t*>(b->tensor("n").data)[0], -3);
  EXPECT_EQ(b->tensor("s").bytes(0), "\xc3\xa9\xf0\x9f\x98\x80");  // é and U+1F600
  EXPECT_EQ(b->tensor("f").bytes(0), "0.5");                         // JSON text (Python: a float)
  EXPECT_EQ(b->tensor("o").bytes(0), "{\"a\": [true]}");
}

TEST(RowsTest, ManifestOrRowsByTheFirstLine) {
  EXPECT_FALSE(IsRowsFile("m.jsonl", R"({"url": "shard-000000.tar", "nsamples": 3})"));
  EXPECT_FALSE(IsRowsFile("m.jsonl", R"({"url": "s3://b/x.tar.zst"})"));
  EXPECT_TRUE(IsRowsFile("m.jsonl", R"({"url": "x", "size": 10})"));  // no shard, no count
  EXPECT_FALSE(IsRowsFile("manifest.jsonl", R"({"text": "a"})"));
  EXPECT_TRUE(IsRowsFile("laion.jsonl", R"({"url": "http://a/b.jpg", "caption": "a cat"})"));
  EXPECT_TRUE(IsRowsFile("t.jsonl", R"({"text": "hello"})"));
  EXPECT_TRUE(IsRowsFile("meta.jsonl", R"({"path": "a.jpg", "size": 123, "checksum": "x"})"));
  EXPECT_FALSE(IsRowsFile("list.jsonl", R"({"url": "part-7", "nsamples": 3})"));
  EXPECT_TRUE(IsRowsFile("t.jsonl.gz", R"({"url": "a.tar"})"));
  EXPECT_TRUE(IsCompressedRowsUrl("s3://b/p/t.JSONL.ZST"));
  EXPECT_FALSE(IsCompressedRowsUrl("s3://b/p/t.tar.gz"));
}

TEST(RowsTest, LongLinesAndALastLineWithoutNewline) {
  TempDir dir;
  const std::string big(300000, 'x');  // longer than half of a 64 KiB read
  WriteFile(dir.Join("l.jsonl"), "{\"id\": 0, \"text\": \"" + big + "\"}\n{\"id\": 1, \"text\": \"b\"}");
  LoaderOptions o = Options(dir.Join("l.jsonl"));
  o.read_chunk = 64 << 10;
  auto got = ReadAll(o);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], big);
  EXPECT_EQ(got[1], "b");
}

TEST(RowsTest, BadLinesNameFileLineAndByteAndSkipPoliciesCount) {
  TempDir dir;
  const std::string good = "{\"id\": 0, \"text\": \"a\"}\n";
  WriteFile(dir.Join("bad.jsonl"), good + "{\"id\": 1, \"text\": \"b\"\n" + good.substr(0, 7) + "2" +
                                       good.substr(8) + "[1]\n{\"id\": 3, \"text\": \"c\", \"id\": 4}\n");
  LoaderOptions o = Options(dir.Join("bad.jsonl"));
  o.learn_sample_counts = false;
  o.batch_size = 1;
  {
    auto loader = Loader::Create(o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    auto b = (*loader)->next();
    ASSERT_TRUE(b.ok());
    b = (*loader)->next();
    ASSERT_FALSE(b.ok());
    const std::string msg = b.status().ToString();
    EXPECT_NE(msg.find("bad.jsonl, line 2 (byte 44)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected ',' or '}'"), std::string::npos) << msg;
  }
  o.error_policy = ErrorPolicy::kSkipSample;
  auto got = ReadAll(o);
  EXPECT_EQ(got.size(), 2u);  // rows 0 and 2; the unended object, the array and the twice-named key skipped
  EXPECT_TRUE(got.count(0) && got.count(2));
  auto loader = Loader::Create(o);
  ASSERT_TRUE(loader.ok());
  while (true) {
    auto b = (*loader)->next();
    ASSERT_TRUE(b.ok());
    if (b->empty()) break;
  }
  EXPECT_EQ((*loader)->stats().skipped_samples, 3u);
}

TEST(RowsTest, ATokenizerFeedsThePacker) {
  TempDir dir;
  std::string text;
  int64_t words = 0;
  for (int i = 0; i < 40; ++i) {
    std::string doc;
    for (int w = 0; w <= i % 9; ++w, ++words) doc += (w ? " w" : "w") + std::to_string(w);
    text += "{\"text\": \"" + doc + "\"}\n";
  }
  WriteFile(dir.Join("t.jsonl"), text);
  LoaderOptions o;
  o.inputs = {dir.Join("t.jsonl")};
  o.batch_size = 2;
  o.tokens.field = "text";
  o.tokens.seq_len = 16;
  o.tokens.eod_token = 0;
  o.tokens.tokenize = [](std::string_view t, std::vector<int32_t>* ids) {
    std::istringstream in{std::string(t)};
    for (std::string w; in >> w;) ids->push_back(std::stoi(w.substr(1)) + 1);
    return Status::OK();
  };
  auto loader = Loader::Create(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_EQ((*loader)->batches_per_epoch(), -1);  // unknown before tokenizing
  int64_t nonzero = 0, rows = 0;
  while (true) {
    auto b = (*loader)->next();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    if (b->empty()) break;
    TensorView t = b->tensor("tokens");
    ASSERT_EQ(t.shape[1], 16);
    for (int64_t k = 0; k < t.shape[0] * 16; ++k) nonzero += static_cast<const int32_t*>(t.data)[k] != 0;
    rows += t.shape[0];
  }
  EXPECT_GT(rows, 0);
  // Every word is a nonzero token; packing drops only the last partial batch.
  EXPECT_LE(nonzero, words);
  EXPECT_GE(nonzero, words - 2 * 16 - 16);

  // Text without a tokenizer is a config error that says what to give.
  o.tokens.tokenize = nullptr;
  auto bad = Loader::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("give a tokenizer"), std::string::npos) << bad.status().ToString();
  // A tokenizer that fails is an error naming the row, under every policy.
  o.tokens.tokenize = [](std::string_view, std::vector<int32_t>*) { return Status::Config("no vocab"); };
  o.error_policy = ErrorPolicy::kSkipSample;
  auto failing = Loader::Create(o);
  ASSERT_TRUE(failing.ok());
  auto b = (*failing)->next();
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().ToString().find("no vocab"), std::string::npos);
  EXPECT_NE(b.status().ToString().find("sample 't/0000000"), std::string::npos) << b.status().ToString();
}

TEST(RowsTest, ReaderSkipsAnOverlongLineInStepAndAByteOrderMark) {
  TempDir dir;
  const std::string big(200000, 'y');
  WriteFile(dir.Join("o.jsonl"), "\xEF\xBB\xBF{\"id\": 0}\n{\"id\": 1, \"t\": \"" + big +
                                     "\"}\n{\"id\": 2}\n{\"id\": 3, \"t\": \"" + big.substr(0, 1000) + "\"}\n{\"id\": 4}");
  for (size_t chunk : {size_t{64} << 10, size_t{1} << 20}) {  // the long line gathered, or in one read
    TarReaderOptions o;
    o.chunk_size = chunk;
    o.limits.max_member_size = 500;
    o.policy = ErrorPolicy::kSkipSample;
    auto in = DefaultSource()->OpenInputStream(dir.Join("o.jsonl"));
    ASSERT_TRUE(in.ok());
    auto reader = OpenJsonlReader(std::move(*in), o);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    std::vector<int64_t> rows;
    Sample s;
    while (true) {
      auto more = (*reader)->Next(&s);
      ASSERT_TRUE(more.ok()) << more.status().ToString();
      if (!*more) break;
      rows.push_back(s.index);
      EXPECT_EQ(s.fields[0].data, std::to_string(s.index));
    }
    EXPECT_EQ(rows, (std::vector<int64_t>{0, 2, 4}));
    EXPECT_EQ((*reader)->stats().skipped_samples, 2u);
    EXPECT_NE((*reader)->stats().last_error.ToString().find("line 4"), std::string::npos)
        << (*reader)->stats().last_error.ToString();
  }
}

TEST(RowsTest, AKeyTwiceAmongManyIsFound) {
  TempDir dir;
  std::string many = "{", dup;
  for (int k = 0; k < 40; ++k) many += (k ? ", \"k" : "\"k") + std::to_string(k) + "\": " + std::to_string(k);
  dup = many + ", \"k17\": 1}\n";
  many += "}\n";
  WriteFile(dir.Join("m.jsonl"), many + dup);
  TarReaderOptions o;
  o.policy = ErrorPolicy::kSkipSample;
  auto in = DefaultSource()->OpenInputStream(dir.Join("m.jsonl"));
  ASSERT_TRUE(in.ok());
  auto reader = OpenJsonlReader(std::move(*in), o);
  ASSERT_TRUE(reader.ok());
  Sample s;
  ASSERT_TRUE(*(*reader)->Next(&s));
  EXPECT_EQ(s.fields.size(), 40u);
  EXPECT_FALSE(*(*reader)->Next(&s));
  EXPECT_NE((*reader)->stats().last_error.ToString().find("the key 'k17' appears twice"), std::string::npos)
      << (*reader)->stats().last_error.ToString();
}

TEST(RowsTest, AFolderHoldingAManifestUnderAnotherNameIsNoRows) {
  TempDir dir;
  WriteFile(dir.Join("shards.jsonl"), "{\"url\": \"a.tar\", \"nsamples\": 3}\n");
  auto m = ResolveDataset({dir.path()});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound) << m.status().ToString();
  // A glob of tar shards leaves a JSON Lines file beside them alone.
  WriteFile(dir.Join("rows.jsonl"), "{\"id\": 1}\n");
  testing::RunCommand("tar cf " + dir.Join("s.tar") + " -C " + dir.path() + " rows.jsonl");
  auto g = ResolveDataset({dir.Join("*")}, ResolveOptions{nullptr, false});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->shards.size(), 1u);
  EXPECT_EQ(g->shards[0].url, "s.tar");
}

TEST(RowsTest, ParquetWithoutReadersSaysWhereItIsRead) {
  TempDir dir;
  WriteFile(dir.Join("t.parquet"), "PAR1 not really PAR1");
  LoaderOptions o;
  o.inputs = {dir.path()};
  auto loader = Loader::Create(o);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kConfig);
  EXPECT_NE(loader.status().ToString().find("read through pyarrow, from the Python package"),
            std::string::npos)
      << loader.status().ToString();
}

TEST(RowsTest, VerifyParsesEveryRowAndChecksTheIndex) {
  TempDir dir;
  WriteSet(dir);
  ASSERT_EQ(ReadAll(Options(dir.path())).size(), 21u);  // builds the .idx files
  std::string out;
  EXPECT_EQ(testing::RunCommand(testing::CliPath() + " verify " + dir.path(), &out), 0) << out;
  EXPECT_NE(out.find("ok   c.jsonl.zst"), std::string::npos) << out;
  EXPECT_NE(out.find("3 of 3 shards ok"), std::string::npos) << out;
  // A line damaged, and a row added after the index was built.
  WriteFile(dir.Join("a.jsonl"), testing::ReadFile(dir.Join("a.jsonl")) + "{\"id\": 99, \"text\": \"new\"}\n");
  EXPECT_NE(testing::RunCommand(testing::CliPath() + " verify " + dir.Join("a.jsonl"), &out), 0);
  EXPECT_NE(out.find("BAD  a.jsonl"), std::string::npos) << out;
  EXPECT_NE(out.find("stale"), std::string::npos) << out;
  WriteFile(dir.Join("e.jsonl"), "{\"id\": 1}\n{\"id\" 2}\n");
  EXPECT_NE(testing::RunCommand(testing::CliPath() + " verify " + dir.Join("e.jsonl"), &out), 0);
  EXPECT_NE(out.find("e.jsonl, line 2 (byte 16)"), std::string::npos) << out;
}

TEST(RowsTest, IndexCommandWritesARowIndexThatGivesTheCount) {
  TempDir dir;
  WriteSet(dir);
  std::string out;
  ASSERT_EQ(testing::RunCommand(testing::CliPath() + " index " + dir.Join("b.jsonl.gz"), &out), 0) << out;
  EXPECT_NE(out.find("7 samples (rows)"), std::string::npos) << out;
  // Counts from the written indexes only (nothing built): b's is there, the others' not.
  ResolveOptions ro;
  ro.build_indexes = false;
  auto m = ResolveDataset({dir.path()}, ro);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->shards[0].nsamples, -1);
  EXPECT_EQ(m->shards[1].nsamples, 7);
}

}  // namespace
}  // namespace shardstream
