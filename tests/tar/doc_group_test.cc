// Document groups (tar/doc_group.h): written by ShardWriter, read back as
// one sample per document by both engines, indexed alike by the writer and
// the reader, opened at any document, and refused with the shard, key,
// field and offset when broken.
#include "tar/doc_group.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "shardstream/decode.h"
#include "shardstream/shard_index.h"
#include "shardstream/shard_writer.h"
#include "shardstream/tar_reader.h"
#include "support/tar_fixtures.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::TarBuilder;
using testing::TempDir;

template <typename T>
std::string Npy(DType dtype, const std::vector<T>& v) {
  return EncodeNpy(dtype, {static_cast<int64_t>(v.size())},
                   std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
}

struct Doc {
  std::string key;
  std::vector<uint16_t> tokens;
};

// Shard content: a plain sample, a group of 4 (one document empty), a group
// of none, a group of 2 with its own keys, a plain sample.
struct Expected {
  std::vector<Doc> docs;
};

Sample GroupSample(const std::string& key, const std::vector<std::vector<uint16_t>>& docs,
                   const std::vector<std::string>& keys, std::vector<std::string>* hold) {
  std::vector<uint16_t> all;
  std::vector<int64_t> bounds{0};
  for (const auto& d : docs) {
    all.insert(all.end(), d.begin(), d.end());
    bounds.push_back(static_cast<int64_t>(all.size()));
  }
  hold->push_back(Npy(DType::kUint16, all));
  hold->push_back(Npy(DType::kInt64, bounds));
  Sample s;
  s.key = key;
  s.fields.resize(2);
  s.fields[0].name = "tokens.npy";
  s.fields[0].data = (*hold)[hold->size() - 2];
  s.fields[1].name = "doc_offsets.npy";
  s.fields[1].data = hold->back();
  if (!keys.empty()) {
    std::string text;
    for (const auto& k : keys) text += k + "\n";
    hold->push_back(text);
    s.fields.emplace_back();
    s.fields.back().name = "doc_keys.txt";
    s.fields.back().data = hold->back();
  }
  return s;
}

Sample PlainSample(const std::string& key, const std::vector<uint16_t>& t,
                   std::vector<std::string>* hold) {
  hold->push_back(Npy(DType::kUint16, t));
  Sample s;
  s.key = key;
  s.fields.resize(1);
  s.fields[0].name = "tokens.npy";
  s.fields[0].data = hold->back();
  return s;
}

std::vector<uint16_t> Values(const std::string& npy) {
  auto f = DecodeNpy(npy, FieldContext{});
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return {};
  EXPECT_EQ(f->ndim, 1);
  EXPECT_EQ(f->dtype, DType::kUint16);
  std::vector<uint16_t> v(f->data.size() / 2);
  if (!v.empty()) std::memcpy(v.data(), f->data.data(), f->data.size());
  return v;
}

// Writes the shard; returns its path and fills `want`.
std::string WriteShard(const std::string& dir, std::vector<Doc>* want, uint64_t* nsamples) {
  ShardWriterOptions o;
  o.write_index = true;
  auto w = ShardWriter::Create(dir, o);
  EXPECT_TRUE(w.ok()) << w.status();
  std::vector<std::string> hold;
  hold.reserve(64);
  EXPECT_TRUE((*w)->Write(PlainSample("a", {1, 2, 3}, &hold)).ok());
  want->push_back({"a", {1, 2, 3}});
  std::vector<std::vector<uint16_t>> g1 = {{10, 11}, {}, {12, 13, 14, 15}, {16}};
  EXPECT_TRUE((*w)->Write(GroupSample("g1", g1, {}, &hold)).ok());
  for (size_t i = 0; i < g1.size(); ++i) want->push_back({"g1#" + std::to_string(i), g1[i]});
  EXPECT_TRUE((*w)->Write(GroupSample("g2", {}, {}, &hold)).ok());
  std::vector<std::vector<uint16_t>> g3 = {{20, 21, 22}, {23}};
  EXPECT_TRUE((*w)->Write(GroupSample("g3", g3, {"doc-x", "doc-y"}, &hold)).ok());
  want->push_back({"doc-x", g3[0]});
  want->push_back({"doc-y", g3[1]});
  EXPECT_TRUE((*w)->Write(PlainSample("z", {9}, &hold)).ok());
  want->push_back({"z", {9}});
  EXPECT_TRUE((*w)->Close().ok());
  *nsamples = static_cast<uint64_t>((*w)->manifest().shards.at(0).nsamples);
  return dir + "/" + (*w)->manifest().shards.at(0).url;
}

TEST(DocGroupTest, EveryDocumentIsASampleByBothEnginesAndTheIndexesAgree) {
  TempDir dir;
  std::vector<Doc> want;
  uint64_t nsamples = 0;
  const std::string shard = WriteShard(dir.path(), &want, &nsamples);
  EXPECT_EQ(nsamples, want.size()) << "the manifest counts documents";
  for (TarEngine engine : {TarEngine::kFast, TarEngine::kLibarchive}) {
    TarReaderOptions o;
    o.engine = engine;
    auto r = testing::ReadAll(shard, o);
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(r.samples.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(r.samples[i].key, want[i].key);
      ASSERT_EQ(r.samples[i].fields.size(), 1u);
      EXPECT_EQ(r.samples[i].fields[0].first, "tokens.npy");
      EXPECT_EQ(Values(r.samples[i].fields[0].second), want[i].tokens) << want[i].key;
    }
    EXPECT_EQ(r.stats.samples, want.size());
  }
  // The writer's index (the sidecar) and the reader's are the same records.
  auto written = ReadSampleIndex(shard);
  ASSERT_TRUE(written.ok()) << written.status();
  auto built = BuildSampleIndex(shard);
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_EQ(written->samples.size(), want.size());
  ASSERT_EQ(built->samples.size(), want.size());
  ASSERT_EQ(written->fields.size(), built->fields.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& a = written->samples[i];
    const auto& b = built->samples[i];
    EXPECT_EQ(a.offset, b.offset) << i;
    EXPECT_EQ(a.length, b.length) << i;
    EXPECT_EQ(a.key, b.key) << i;
    const auto& fa = written->fields[a.first_field];
    const auto& fb = built->fields[b.first_field];
    EXPECT_EQ(fa.offset, fb.offset) << i;
    EXPECT_EQ(fa.count, fb.count) << i;
    EXPECT_EQ(fa.count, want[i].tokens.size()) << i;
    EXPECT_EQ(fa.flags, fb.flags) << i;
    EXPECT_EQ(fa.header_hash, fb.header_hash) << i;
    if (i + 1 < want.size()) {
      // In order; within a group they tile its bytes.
      const auto& next = written->samples[i + 1];
      EXPECT_LE(a.offset + a.length, next.offset) << i;
      if (written->fields[next.first_field].flags == kIndexFieldGrouped)
        EXPECT_EQ(a.offset + a.length, next.offset) << "documents of a group tile it";
    }
  }
  // Flags: plain samples none; g1's first document starts its group.
  EXPECT_EQ(written->fields[written->samples[0].first_field].flags, 0);
  EXPECT_EQ(written->fields[written->samples[1].first_field].flags,
            kIndexFieldGrouped | kIndexFieldGroupStart);
  EXPECT_EQ(written->fields[written->samples[2].first_field].flags, kIndexFieldGrouped);
  // The values each record places are the document's, in the shard's bytes.
  const std::string bytes = testing::ReadFile(shard);
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& f = written->fields[written->samples[i].first_field];
    if (f.flags == 0) continue;
    std::vector<uint16_t> v(f.count);
    if (f.count) std::memcpy(v.data(), bytes.data() + f.payload, f.count * 2);
    EXPECT_EQ(v, want[i].tokens) << i;
  }
}

TEST(DocGroupTest, OpenAtAnyDocumentGivesTheRest) {
  TempDir dir;
  std::vector<Doc> want;
  uint64_t nsamples = 0;
  const std::string shard = WriteShard(dir.path(), &want, &nsamples);
  for (int64_t k = 0; k <= static_cast<int64_t>(want.size()); ++k) {
    auto r = TarReader::OpenAt(shard, k);
    ASSERT_TRUE(r.ok()) << r.status();
    Sample s;
    for (int64_t i = k; i < static_cast<int64_t>(want.size()); ++i) {
      auto got = (*r)->Next(&s);
      ASSERT_TRUE(got.ok() && *got) << "at " << k << ": " << got.status();
      EXPECT_EQ(s.index, i);
      EXPECT_EQ(s.key, want[static_cast<size_t>(i)].key) << "opened at " << k;
      EXPECT_EQ(Values(std::string(s.fields.at(0).data)), want[static_cast<size_t>(i)].tokens);
    }
    auto end = (*r)->Next(&s);
    ASSERT_TRUE(end.ok());
    EXPECT_FALSE(*end) << "opened at " << k;
  }
}

TEST(DocGroupTest, GroupsAsStoredWhenAsked) {
  TempDir dir;
  std::vector<Doc> want;
  uint64_t nsamples = 0;
  const std::string shard = WriteShard(dir.path(), &want, &nsamples);
  TarReaderOptions o;
  o.document_groups = false;
  auto r = testing::ReadAll(shard, o);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.samples.size(), 5u);
  EXPECT_EQ(r.samples[1].key, "g1");
  EXPECT_EQ(r.samples[1].fields.size(), 2u);
  EXPECT_EQ(r.samples[3].fields.size(), 3u);
}

// A shard of one group made byte by byte: tokens, offsets, extra fields.
std::string GroupTar(const std::string& tokens, const std::string& offsets,
                     const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  TarBuilder b;
  b.File("ok.tokens.npy", Npy(DType::kUint16, std::vector<uint16_t>{7}));
  b.File("grp.doc_offsets.npy", offsets);
  b.File("grp.tokens.npy", tokens);
  for (const auto& [name, data] : extra) b.File("grp." + name, data);
  b.File("after.tokens.npy", Npy(DType::kUint16, std::vector<uint16_t>{8}));
  b.End();
  return b.bytes();
}

TEST(DocGroupTest, BrokenGroupsNameTheShardKeyFieldAndOffset) {
  const std::string five = Npy(DType::kUint16, std::vector<uint16_t>{1, 2, 3, 4, 5});
  struct Case {
    const char* what;
    std::string tar;
    const char* field;
    const char* says;
  };
  std::vector<Case> cases = {
      {"offsets past the end", GroupTar(five, Npy(DType::kInt64, std::vector<int64_t>{0, 2, 9})),
       "doc_offsets.npy", "past the array's 5 values"},
      {"offsets that do not reach the end",
       GroupTar(five, Npy(DType::kInt64, std::vector<int64_t>{0, 2, 4})), "doc_offsets.npy",
       "not the array's length 5"},
      {"decreasing offsets", GroupTar(five, Npy(DType::kInt32, std::vector<int32_t>{0, 3, 2, 5})),
       "doc_offsets.npy", "less than the one before it"},
      {"a first offset not 0", GroupTar(five, Npy(DType::kUint32, std::vector<uint32_t>{1, 5})),
       "doc_offsets.npy", "first offset is 1"},
      {"negative offsets", GroupTar(five, Npy(DType::kInt64, std::vector<int64_t>{0, -1, 5})),
       "doc_offsets.npy", "negative"},
      {"float offsets", GroupTar(five, Npy(DType::kFloat32, std::vector<float>{0, 5})),
       "doc_offsets.npy", "1-D integer array"},
      {"a 2-D array", GroupTar(EncodeNpy(DType::kUint16, {1, 2}, std::string(4, '\0')),
                               Npy(DType::kInt64, std::vector<int64_t>{0, 2})),
       "tokens.npy", "2 dimensions"},
      {"a broken array", GroupTar("not an npy", Npy(DType::kInt64, std::vector<int64_t>{0, 2})),
       "tokens.npy", ""},
      {"another field", GroupTar(five, Npy(DType::kInt64, std::vector<int64_t>{0, 5}),
                                 {{"jpg", "x"}}),
       "jpg", "is not allowed"},
      {"too few keys", GroupTar(five, Npy(DType::kInt64, std::vector<int64_t>{0, 2, 5}),
                                {{"doc_keys.txt", "one"}}),
       "doc_keys.txt", "1 keys for 2 documents"},
      {"too many keys", GroupTar(five, Npy(DType::kInt64, std::vector<int64_t>{0, 5}),
                                 {{"doc_keys.txt", "one\ntwo\n"}}),
       "doc_keys.txt", "more keys"},
      {"an empty key", GroupTar(five, Npy(DType::kInt64, std::vector<int64_t>{0, 2, 5}),
                                {{"doc_keys.txt", "\nb"}}),
       "doc_keys.txt", "key 0 is empty"},
      {"keys not UTF-8", GroupTar(five, Npy(DType::kInt64, std::vector<int64_t>{0, 5}),
                                  {{"doc_keys.txt", "\xff"}}),
       "doc_keys.txt", "UTF-8"},
  };
  for (const Case& c : cases) {
    auto raised = testing::ReadBytes(c.tar);
    ASSERT_FALSE(raised.status.ok()) << c.what;
    EXPECT_EQ(raised.status.code(), StatusCode::kCorrupt) << c.what;
    const std::string msg = raised.status.ToString();
    EXPECT_NE(msg.find("mem://shard.tar"), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find("'grp'"), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.what << ": " << msg;
    EXPECT_GT(raised.status.offset(), 512) << c.what << ": the offset is the group's bytes";
    ASSERT_EQ(raised.samples.size(), 1u) << c.what;  // "ok", then the error
    // Skipped under kSkipSample: the samples around it still come, counted.
    TarReaderOptions skip;
    skip.policy = ErrorPolicy::kSkipSample;
    auto skipped = testing::ReadBytes(c.tar, skip);
    ASSERT_TRUE(skipped.status.ok()) << c.what << ": " << skipped.status;
    ASSERT_EQ(skipped.samples.size(), 2u) << c.what;
    EXPECT_EQ(skipped.samples[1].key, "after");
    EXPECT_EQ(skipped.stats.skipped_samples, 1u) << c.what;
  }
}

TEST(DocGroupTest, TheWriterRefusesABrokenGroup) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path());
  ASSERT_TRUE(w.ok());
  std::vector<std::string> hold;
  Sample s = GroupSample("g", {{1, 2}, {3}}, {}, &hold);
  const std::string bad = Npy(DType::kInt64, std::vector<int64_t>{0, 4});
  s.fields[1].data = bad;
  Status st = (*w)->Write(s);
  EXPECT_EQ(st.code(), StatusCode::kConfig) << st;
  EXPECT_NE(st.ToString().find("past the array's 3 values"), std::string::npos) << st;
}

}  // namespace
}  // namespace shardstream
