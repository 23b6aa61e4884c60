// MDS (MosaicML Streaming) sets read by the C++ Loader: shards built here
// byte by byte as Streaming's MDSWriter lays them out (tests/python/test_mds.py
// checks sets from MDSWriter itself), raw and zstd-compressed, over files and
// http; and the bad inputs, each naming the index or shard, sample and column.
#include "shardstream/mds.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "shardstream/loader.h"
#include "support/http_server.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::TempDir;
using testing::WriteFile;

std::string U32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// Columns (sorted, as MDSWriter sorts them): label int (8 bytes), text str,
// tok ndarray:int32 (dynamic shape).
std::string EncodedSample(int i) {
  int64_t label = 100 + i;
  std::string text = "doc " + std::to_string(i);
  std::string tok;
  tok += static_cast<char>((1 << 2) | 0);  // ndim 1, uint8 shape entries
  tok += static_cast<char>(i + 1);
  for (int k = 0; k <= i; ++k) {
    int32_t v = i * 10 + k;
    tok.append(reinterpret_cast<const char*>(&v), 4);
  }
  return U32(static_cast<uint32_t>(text.size())) + U32(static_cast<uint32_t>(tok.size())) +
         std::string(reinterpret_cast<const char*>(&label), 8) + text + tok;
}

// MDSWriter puts the shard's config, as JSON text, between the offsets and the samples.
const std::string kConfigText = R"({"column_names": ["label", "text", "tok"], "format": "mds"})";

std::string Shard(int first, int n) {
  std::vector<std::string> samples;
  for (int i = first; i < first + n; ++i) samples.push_back(EncodedSample(i));
  std::string out = U32(static_cast<uint32_t>(n));
  uint32_t at = 4 + 4 * (n + 1) + static_cast<uint32_t>(kConfigText.size());
  out += U32(at);
  for (const std::string& s : samples) out += U32(at += static_cast<uint32_t>(s.size()));
  out += kConfigText;
  for (const std::string& s : samples) out += s;
  return out;
}

// Two shards of 5 and 7 samples; the second zstd-compressed when `zstd`.
std::string WriteSet(const TempDir& dir, bool zstd) {
  nlohmann::json shards = nlohmann::json::array();
  int first = 0;
  for (int k = 0; k < 2; ++k) {
    const int n = k == 0 ? 5 : 7;
    const std::string raw = "shard.0000" + std::to_string(k) + ".mds";
    const std::string bytes = Shard(first, n);
    WriteFile(dir.Join(raw), bytes);
    nlohmann::json s = {{"column_encodings", {"int", "str", "ndarray:int32"}},
                        {"column_names", {"label", "text", "tok"}},
                        {"column_sizes", {8, nullptr, nullptr}},
                        {"compression", nullptr}, {"format", "mds"}, {"hashes", nlohmann::json::array()},
                        {"raw_data", {{"basename", raw}, {"bytes", bytes.size()}, {"hashes", nlohmann::json::object()}}},
                        {"samples", n}, {"size_limit", 1 << 26}, {"version", 2}, {"zip_data", nullptr}};
    if (zstd && k == 1) {
      EXPECT_EQ(testing::RunCommand("zstd -q --rm -o " + dir.Join(raw + ".zstd") + " " + dir.Join(raw)), 0);
      s["compression"] = "zstd:7";
      s["zip_data"] = {{"basename", raw + ".zstd"},
                       {"bytes", testing::ReadFile(dir.Join(raw + ".zstd")).size()},
                       {"hashes", nlohmann::json::object()}};
    }
    shards.push_back(s);
    first += n;
  }
  WriteFile(dir.Join("index.json"), nlohmann::json({{"shards", shards}, {"version", 2}}).dump());
  return dir.path();
}

std::vector<std::pair<int64_t, std::vector<int32_t>>> ReadAll(LoaderOptions o) {
  auto loader = Loader::Create(o);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  std::vector<std::pair<int64_t, std::vector<int32_t>>> out;
  while (true) {
    auto b = (*loader)->next();
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok() || b->empty()) break;
    TensorView label = b->tensor("label"), tok = b->tensor("tok");
    EXPECT_EQ(label.ndim, 1);  // a scalar per sample
    for (int64_t r = 0; r < b->rows(); ++r) {
      std::string_view t = tok.bytes(r);
      std::vector<int32_t> v(t.size() / 4);
      std::memcpy(v.data(), t.data(), t.size());
      out.emplace_back(static_cast<const int64_t*>(label.data)[r], v);
    }
  }
  return out;
}

LoaderOptions Options(const std::string& input) {
  LoaderOptions o;
  o.inputs = {input};
  o.batch_size = 3;
  o.shuffle_buffer = 0;
  FieldSpec label;
  label.name = "label";
  FieldSpec tok;
  tok.name = "tok";
  tok.ragged = Ragged::kList;
  o.fields = {label, tok};
  return o;
}

void ExpectEverySample(const std::vector<std::pair<int64_t, std::vector<int32_t>>>& got) {
  ASSERT_EQ(got.size(), 12u);
  std::set<int64_t> labels;
  for (const auto& [label, tok] : got) {
    const int i = static_cast<int>(label - 100);
    labels.insert(label);
    ASSERT_EQ(tok.size(), static_cast<size_t>(i + 1));
    for (int k = 0; k <= i; ++k) EXPECT_EQ(tok[k], i * 10 + k);
  }
  EXPECT_EQ(labels.size(), 12u);
}

TEST(MdsTest, LoaderReadsRawAndZstdShardsFromTheDirectory) {
  TempDir dir;
  ExpectEverySample(ReadAll(Options(WriteSet(dir, true))));
  ExpectEverySample(ReadAll(Options(dir.Join("index.json"))));
}

TEST(MdsTest, ManifestKeepsCountsAndLayout) {
  TempDir dir;
  auto m = ReadMdsIndex(WriteSet(dir, true) + "/index.json");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->shards.size(), 2u);
  EXPECT_EQ(m->shards[0].nsamples, 5);
  EXPECT_EQ(m->shards[1].url, "shard.00001.mds.zstd");
  auto l = ParseMdsLayout(m->shards[1].extra.at(kMdsLayoutKey), "x");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->compression, "zstd");
  ASSERT_EQ(l->columns.size(), 3u);
  EXPECT_EQ(l->columns[2].encoding, "ndarray:int32");
}

TEST(MdsTest, OverHttpFromTheIndex) {
  TempDir dir;
  WriteSet(dir, true);
  testing::HttpTestServer server(dir.path());
  ExpectEverySample(ReadAll(Options(server.Url("/"))));
}

TEST(MdsTest, BadIndexesAreConfigErrorsNamingIt) {
  TempDir dir;
  WriteSet(dir, false);
  auto doc = nlohmann::json::parse(testing::ReadFile(dir.Join("index.json")));
  auto expect = [&](const nlohmann::json& bad, const std::string& what) {
    WriteFile(dir.Join("index.json"), bad.dump());
    auto m = ReadMdsIndex(dir.Join("index.json"));
    ASSERT_FALSE(m.ok()) << what;
    EXPECT_EQ(m.status().code(), StatusCode::kConfig);
    EXPECT_NE(m.status().message().find("index.json"), std::string::npos) << m.status().ToString();
    EXPECT_NE(m.status().message().find(what), std::string::npos) << m.status().ToString();
  };
  nlohmann::json v = doc;
  v["version"] = 1;
  expect(v, "version 1");
  nlohmann::json enc = doc;
  enc["shards"][1]["column_encodings"][1] = "utf7";
  expect(enc, "shard 1, column 'text': unknown MDS column encoding 'utf7'");
  nlohmann::json size = doc;
  size["shards"][0]["column_sizes"][0] = 4;
  expect(size, "column 'label' (int): size 4, the encoding's is 8");
  nlohmann::json huge = doc;  // a shape whose byte count would overflow
  huge["shards"][0]["column_encodings"][0] = "ndarray:uint8:4,4611686018427387905";
  huge["shards"][0]["column_sizes"][0] = 4;
  expect(huge, "column 'label': encoding 'ndarray:uint8:4,4611686018427387905': bad shape");
  nlohmann::json count = doc;
  count["shards"][0]["samples"] = int64_t{1} << 40;
  expect(count, "shard 0: \"samples\" 1099511627776");
  nlohmann::json comp = doc;
  comp["shards"][0]["compression"] = "bz2";
  expect(comp, "compression \"bz2\"");
}

TEST(MdsTest, ShortShardAndBadSizesAreCorruptNamingShardSampleColumn) {
  TempDir dir;
  WriteSet(dir, false);
  const std::string path = dir.Join("shard.00001.mds");
  std::string bytes = testing::ReadFile(path);
  WriteFile(path, bytes.substr(0, bytes.size() - 2));
  LoaderOptions o = Options(dir.path());
  auto loader = Loader::Create(o);
  ASSERT_TRUE(loader.ok());
  Status err;
  while (true) {
    auto b = (*loader)->next();
    if (!b.ok()) {
      err = b.status();
      break;
    }
    if (b->empty()) break;
  }
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.message().find("shard.00001.mds"), std::string::npos) << err.ToString();

  // A variable column's size that overruns its sample: the sample and column are named;
  // skip_sample drops that sample alone.
  WriteFile(path, bytes);
  const uint32_t at = 4 + 4 * 8 + static_cast<uint32_t>(kConfigText.size() + EncodedSample(5).size());  // sample 1 of shard 1
  bytes.replace(at, 4, U32(1000));
  WriteFile(path, bytes);
  auto mds = ReadMdsIndex(dir.Join("index.json"));
  ASSERT_TRUE(mds.ok());
  auto layout = ParseMdsLayout(mds->shards[1].extra.at(kMdsLayoutKey), path);
  ASSERT_TRUE(layout.ok());
  auto source = DefaultSource();
  auto in = source->OpenInputStream(path, 0);
  ASSERT_TRUE(in.ok());
  auto reader = OpenMdsReader(std::move(*in), *layout);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  Sample s;
  auto first = (*reader)->Next(&s);
  ASSERT_TRUE(first.ok() && *first);
  EXPECT_EQ(s.key, "shard.00001/000000000");
  auto second = (*reader)->Next(&s);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(second.status().message().find("sample 1, column 'text'"), std::string::npos)
      << second.status().ToString();
  // Where the column's bytes start: after the sizes (8 bytes) and the label (8).
  EXPECT_EQ(second.status().offset(), at + 16);

  TarReaderOptions skip;
  skip.policy = ErrorPolicy::kSkipSample;
  in = source->OpenInputStream(path, 0);
  ASSERT_TRUE(in.ok());
  reader = OpenMdsReader(std::move(*in), *layout, skip);
  ASSERT_TRUE(reader.ok());
  int n = 0;
  while (true) {
    auto more = (*reader)->Next(&s);
    ASSERT_TRUE(more.ok());
    if (!*more) break;
    ++n;
  }
  EXPECT_EQ(n, 6);
  EXPECT_EQ((*reader)->stats().skipped_samples, 1u);
}

TEST(MdsTest, VerifyReadsEverySampleAgainstTheIndex) {
  TempDir dir;
  WriteSet(dir, true);
  std::string out;
  EXPECT_EQ(testing::RunCommand(testing::CliPath() + " verify " + dir.path() + " --samples", &out), 0)
      << out;
  EXPECT_NE(out.find("ok   shard.00001.mds.zstd"), std::string::npos) << out;
  std::string bytes = testing::ReadFile(dir.Join("shard.00000.mds"));
  const uint32_t at = 4 + 4 * 6 + static_cast<uint32_t>(kConfigText.size());  // sample 0
  bytes.replace(at, 4, U32(1000));
  WriteFile(dir.Join("shard.00000.mds"), bytes);
  EXPECT_NE(testing::RunCommand(testing::CliPath() + " verify " + dir.Join("index.json") + " --samples", &out), 0);
  EXPECT_NE(out.find("BAD  shard.00000.mds"), std::string::npos) << out;
  EXPECT_NE(out.find("sample 0, column 'text'"), std::string::npos) << out;
}

TEST(MdsTest, OpensAtASampleAndPickleIsRefused) {
  TempDir dir;
  WriteSet(dir, true);
  auto mds = ReadMdsIndex(dir.Join("index.json"));
  ASSERT_TRUE(mds.ok());
  auto layout = ParseMdsLayout(mds->shards[1].extra.at(kMdsLayoutKey), "x");
  ASSERT_TRUE(layout.ok());
  auto in = DefaultSource()->OpenInputStream(mds->shards[1].resolved, 0);
  ASSERT_TRUE(in.ok());
  auto reader = OpenMdsReader(std::move(*in), *layout, {}, 4);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  Sample s;
  auto more = (*reader)->Next(&s);
  ASSERT_TRUE(more.ok() && *more);
  EXPECT_EQ(s.index, 4);
  const Field* label = s.Find("label");
  ASSERT_NE(label, nullptr);
  int64_t v;
  std::memcpy(&v, label->data.data(), 8);
  EXPECT_EQ(v, 100 + 5 + 4);

  MdsColumn pkl{"obj", "pkl", -1};
  auto spec = MdsFieldSpec(pkl, "s3://b/set/index.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("pickled"), std::string::npos);
}

}  // namespace
}  // namespace shardstream
