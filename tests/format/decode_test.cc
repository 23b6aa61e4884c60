#include "shardstream/decode.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace shardstream {
namespace {

const FieldContext kCtx{"sample7", "x.npy", "file:///d/shard-000003.tar", 1536};

std::string Ints(const std::vector<int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// A header written by hand in the given version, as numpy.lib.format does.
std::string NpyV(int major, const std::string& dict, const std::string& data) {
  std::string h = dict;
  size_t pre = major == 1 ? 10 : 12;
  h.append((64 - (pre + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::string out = std::string("\x93NUMPY", 6) + char(major) + '\0';
  uint32_t n = static_cast<uint32_t>(h.size());
  out.append(reinterpret_cast<const char*>(&n), major == 1 ? 2 : 4);
  return out + h + data;
}

TEST(DecodeTest, NpyRoundTripAllVersions) {
  std::string data = Ints({1, 2, 3, 4, 5, 6});
  std::string v1 = EncodeNpy(DType::kInt32, {2, 3}, data);
  auto f = DecodeNpy(v1, kCtx);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->dtype, DType::kInt32);
  ASSERT_EQ(f->ndim, 2);
  EXPECT_EQ(f->shape[0], 2);
  EXPECT_EQ(f->shape[1], 3);
  EXPECT_EQ(f->data, data);
  for (int v : {2, 3}) {
    auto g = DecodeNpy(NpyV(v, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }",
                            data), kCtx);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->dtype, DType::kFloat32);
    EXPECT_EQ(g->ndim, 1);
    EXPECT_EQ(g->shape[0], 6);
  }
  auto scalar = DecodeNpy(EncodeNpy(DType::kInt64, {}, std::string(8, '\1')), kCtx);
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->ndim, 0);
}

TEST(DecodeTest, NpyErrorsNameSampleFieldShardAndOffset) {
  std::string good = EncodeNpy(DType::kInt32, {2, 3}, Ints({1, 2, 3, 4, 5, 6}));
  auto short_data = DecodeNpy(good.substr(0, good.size() - 4), kCtx);
  ASSERT_FALSE(short_data.ok());
  EXPECT_EQ(short_data.status().code(), StatusCode::kCorrupt);
  const std::string& m = short_data.status().message();
  EXPECT_NE(m.find("sample7"), std::string::npos) << m;
  EXPECT_NE(m.find("x.npy"), std::string::npos) << m;
  EXPECT_NE(m.find("shard-000003.tar"), std::string::npos) << m;
  // The offset is where the data starts (the header is padded to 64 bytes).
  EXPECT_EQ(short_data.status().offset(), static_cast<int64_t>(1536 + good.size() - 24));
  EXPECT_EQ(short_data.status().url(), kCtx.url);

  auto fortran = DecodeNpy(
      NpyV(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", Ints({1, 2, 3, 4, 5, 6})),
      kCtx);
  ASSERT_FALSE(fortran.ok());
  EXPECT_NE(fortran.status().message().find("fortran_order"), std::string::npos);
  auto big = DecodeNpy(NpyV(1, "{'descr': '>i4', 'fortran_order': False, 'shape': (1,), }",
                            Ints({1})), kCtx);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("big-endian"), std::string::npos);
  auto obj = DecodeNpy(NpyV(1, "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
                            std::string(8, 0)), kCtx);
  EXPECT_EQ(obj.status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(DecodeNpy("hello", kCtx).status().code(), StatusCode::kCorrupt);
  std::string bad_version = good;
  bad_version[6] = 9;
  EXPECT_NE(DecodeNpy(bad_version, kCtx).status().message().find("version 9"), std::string::npos);
  std::string huge_len = good;
  huge_len[8] = '\xff';
  huge_len[9] = '\xff';
  EXPECT_EQ(DecodeNpy(huge_len, kCtx).status().code(), StatusCode::kCorrupt);
  auto garbage = DecodeNpy(NpyV(1, "{'descr': '<i4', 'shape': (1,), 'x': 1}", Ints({1})), kCtx);
  EXPECT_EQ(garbage.status().code(), StatusCode::kCorrupt);
}

// numpy's own header layout has a fast path; every other spelling the
// general parser accepts must decode the same, and near misses of the
// layout must fail as they did before it.
TEST(DecodeTest, NpyHeadersOfEverySpellingDecodeAlike) {
  const std::string six = Ints({1, 2, 3, 4, 5, 6});
  struct Case {
    const char* dict;
    std::vector<int64_t> shape;  // expected; empty with ok=false
    bool ok;
  };
  const Case cases[] = {
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }", {6}, true},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", {2, 3}, true},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (2,3)}", {2, 3}, true},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2, 3, 1), }", {1, 2, 3, 1}, true},
      {"{'shape': (6,), 'fortran_order': False, 'descr': '<i4'}", {6}, true},
      {"{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (6,)}", {6}, true},
      {"{ 'descr' : '<i4' , 'fortran_order' : False , 'shape' : ( 6 , ) , }", {6}, true},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (6L,), }", {6}, true},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (2,,3), }", {}, false},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (2 3), }", {}, false},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (6,), ", {}, false},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (6,)", {}, false},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (6,), 'x': 1}", {}, false},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999999999,), }", {}, false},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,6), }", {}, false},
      {"{'descr': '<i4 with a long tail', 'fortran_order': False, 'shape': (6,), }", {}, false},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }trailing", {6}, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dict);
    const std::string npy = NpyV(1, c.dict, six);  // the decoded field views it
    auto f = DecodeNpy(npy, kCtx);
    ASSERT_EQ(f.ok(), c.ok) << f.status();
    if (!c.ok) {
      EXPECT_EQ(f.status().code(), StatusCode::kCorrupt);
      EXPECT_EQ(f.status().url(), kCtx.url);
      continue;
    }
    EXPECT_EQ(f->dtype, DType::kInt32);
    ASSERT_EQ(f->ndim, static_cast<int>(c.shape.size()));
    for (size_t i = 0; i < c.shape.size(); ++i) EXPECT_EQ(f->shape[i], c.shape[i]);
    EXPECT_EQ(f->data, six);
  }
}

TEST(DecodeTest, RawWithDeclaredShape) {
  FieldSpec spec{"x.bin", "", FieldDecode::kRaw, DType::kInt16, {-1, 2}};
  std::string bytes(12, '\0');
  auto f = DecodeField(bytes, spec, kCtx);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->ndim, 2);
  EXPECT_EQ(f->shape[0], 3);
  EXPECT_EQ(f->shape[1], 2);
  EXPECT_EQ(DecodeField(std::string(11, 0), spec, kCtx).status().code(), StatusCode::kCorrupt);
  spec.shape = {4};
  EXPECT_EQ(DecodeField(bytes, spec, kCtx).status().code(), StatusCode::kCorrupt);
  spec.shape = {-1, -1};
  EXPECT_EQ(DecodeField(bytes, spec, kCtx).status().code(), StatusCode::kConfig);
}

TEST(DecodeTest, CheckRawShapeIsTheRuleDecodingApplies) {
  // What CheckRawShape refuses, DecodeRaw refuses with the same error, and
  // what it takes decodes (here, 6 int16 values).
  const std::string bytes(12, '\0');
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{-2}, std::vector<int64_t>{-1, -1}, std::vector<int64_t>(9, 1),
        std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40}}) {
    FieldSpec spec{"x.bin", "", FieldDecode::kRaw, DType::kInt16, shape};
    const Status st = CheckRawShape(spec);
    EXPECT_EQ(st.code(), StatusCode::kConfig) << shape.size();
    EXPECT_NE(st.message().find("field 'x.bin'"), std::string::npos) << st;
    EXPECT_EQ(DecodeField(bytes, spec, kCtx).status().ToString(), st.ToString());
  }
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{}, std::vector<int64_t>{-1}, std::vector<int64_t>{2, -1},
        std::vector<int64_t>{6}}) {
    FieldSpec spec{"x.bin", "", FieldDecode::kRaw, DType::kInt16, shape};
    EXPECT_TRUE(CheckRawShape(spec).ok()) << shape.size();
    auto f = DecodeField(bytes, spec, kCtx);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->elements(), 6);
  }
  FieldSpec scalar{"x.bin", "", FieldDecode::kRaw, DType::kInt16, {-2}};
  scalar.scalar = true;  // a scalar's shape is not read
  EXPECT_TRUE(CheckRawShape(scalar).ok());
}

TEST(DecodeTest, JsonIsCheckedToParseAndErrorsSayWhere) {
  auto ok = DecodeField("{\"a\": [1, 2.5, \"\xc3\xa9\"]}", FieldSpec{"meta.json"}, kCtx);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->is_json);
  EXPECT_TRUE(ok->is_string);
  EXPECT_EQ(ok->data, "{\"a\": [1, 2.5, \"\xc3\xa9\"]}");
  // Broken JSON: kCorrupt at the byte where parsing stopped, naming the way out.
  auto bad = DecodeField("{\"a\": [1, 2,}", FieldSpec{"meta.json"}, kCtx);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad.status().message().find("not valid JSON"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("decode \"string\" keeps the text"), std::string::npos);
  EXPECT_NE(bad.status().message().find("sample 'sample7'"), std::string::npos);
  EXPECT_EQ(bad.status().offset(), 1536 + 12);  // the '}' where a value should be
  EXPECT_FALSE(DecodeField("", FieldSpec{"meta.json"}, kCtx).ok());
  EXPECT_FALSE(DecodeField("{} {}", FieldSpec{"meta.json"}, kCtx).ok());
  // Found by field_decode_fuzz: a number beyond a double's range is an error, not an abort.
  auto huge = DecodeField("[1, 5" + std::string(400, '4') + "]", FieldSpec{"meta.json"}, kCtx);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(huge.status().message().find("number overflow"), std::string::npos) << huge.status();
  // The text as it is, when asked.
  auto text = DecodeField("{broken", FieldSpec{"meta.json", "", FieldDecode::kString}, kCtx);
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->is_json);
}

TEST(DecodeTest, LabelsTextAndBytesByExtension) {
  FieldSpec cls{"cls"};
  auto l = DecodeField(" 42\n", cls, kCtx);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->label, 42);
  EXPECT_EQ(l->dtype, DType::kInt64);
  int64_t v;
  std::memcpy(&v, l->bytes().data(), 8);
  EXPECT_EQ(v, 42);
  EXPECT_EQ(DecodeField("-3", cls, kCtx)->label, -3);
  EXPECT_EQ(DecodeField("4x", cls, kCtx).status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(DecodeField("", cls, kCtx).status().code(), StatusCode::kCorrupt);

  auto t = DecodeField("h\xc3\xa9llo", FieldSpec{"caption.txt"}, kCtx);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->is_string);
  EXPECT_FALSE(t->is_tensor);
  auto bad = DecodeField("ab\xc3", FieldSpec{"meta.json"}, kCtx);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().offset(), 1536 + 2);
  auto raw_txt = DecodeField("ab\xc3", FieldSpec{"meta.json", "", FieldDecode::kBytes}, kCtx);
  EXPECT_TRUE(raw_txt.ok());
  auto jpg = DecodeField("\xff\xd8", FieldSpec{"jpg"}, kCtx);
  ASSERT_TRUE(jpg.ok());
  EXPECT_FALSE(jpg->is_tensor);
  EXPECT_FALSE(jpg->is_string);
  EXPECT_EQ(DecodeForName("tokens.NPY"), FieldDecode::kNpy);
  EXPECT_EQ(DecodeForName("Cls2"), FieldDecode::kLabel);
  EXPECT_EQ(DecodeForName("meta.JSON"), FieldDecode::kJson);
  EXPECT_EQ(DecodeForName("caption.TXT"), FieldDecode::kString);
  EXPECT_EQ(DecodeForName("jpg;png;webp"), FieldDecode::kBytes);
  EXPECT_EQ(DecodeForName("x.npy;y.json"), FieldDecode::kNpy);  // as the first
  EXPECT_EQ(DecodeForName("tokens.npyz"), FieldDecode::kBytes);
  EXPECT_EQ(DecodeForName("tokens.np"), FieldDecode::kBytes);
  EXPECT_EQ(DecodeForName("cls.jpg"), FieldDecode::kBytes);  // the last extension decides
}

TEST(DTypeTest, ParsesNamesAndCodes) {
  EXPECT_EQ(*ParseDType("int32"), DType::kInt32);
  EXPECT_EQ(*ParseDType("<u2"), DType::kUint16);
  EXPECT_EQ(*ParseDType("|b1"), DType::kBool);
  EXPECT_EQ(*ParseDType("bf16"), DType::kBFloat16);
  EXPECT_EQ(*ParseDType(">u1"), DType::kUint8);
  EXPECT_EQ(ParseDType(">i4").status().code(), StatusCode::kConfig);
  EXPECT_EQ(ParseDType("complex64").status().code(), StatusCode::kConfig);
  EXPECT_EQ(DTypeSize(DType::kFloat64), 8u);
}

}  // namespace
}  // namespace shardstream
