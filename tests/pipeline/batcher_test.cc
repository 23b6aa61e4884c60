#include "pipeline/sample_batcher.h"
#include "pipeline/token_packer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <numeric>
#include <vector>

#include "shardstream/image_spec.h"
#include "support/test_util.h"

namespace shardstream::internal {
namespace {

PoolConfig Pool(size_t slots = 8) {
  PoolConfig p;
  p.slots = slots;
  p.allocator = PageableAllocator();
  p.arena_bytes = 256;  // small: exercises the heap spill
  return p;
}

std::string Int32s(const std::vector<int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(SampleBatcherTest, StacksFixedFieldsAndKeepsBytes) {
  std::vector<Batch> out;
  std::vector<FieldSpec> specs = {FieldSpec{"x.npy"}, FieldSpec{"cls"}, FieldSpec{"txt"}};
  SampleBatcher b(specs, 3, Pool(), [&](Batch&& batch) {
    out.push_back(std::move(batch));
    return Status::OK();
  });
  std::vector<std::string> npys, keys, texts;
  for (int i = 0; i < 7; ++i) {
    npys.push_back(EncodeNpy(DType::kInt32, {2}, Int32s({i, 10 * i})));
    keys.push_back("k" + std::to_string(i));
    texts.push_back(std::string(static_cast<size_t>(40 * i), 'a' + i));
  }
  for (int i = 0; i < 7; ++i) {
    std::string cls = std::to_string(i % 3);
    FieldRef f[3] = {{npys[i], 100, true}, {cls, 200, true}, {texts[i], 300, true}};
    RowInput row{SampleId{1, i}, keys[i], "u", 0, f};
    ASSERT_TRUE(b.Add(row).ok());
  }
  ASSERT_TRUE(b.Flush().ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].rows(), 1);
  int i = 0;
  for (const Batch& batch : out) {
    TensorView x = batch.tensor("x.npy");
    ASSERT_EQ(x.ndim, 2);
    EXPECT_EQ(x.shape[1], 2);
    EXPECT_EQ(x.dtype, DType::kInt32);
    TensorView cls = batch.tensor("cls");
    EXPECT_EQ(cls.dtype, DType::kInt64);
    TensorView txt = batch.tensor(2);
    EXPECT_TRUE(txt.is_bytes && txt.is_string);
    for (int64_t r = 0; r < batch.rows(); ++r, ++i) {
      EXPECT_EQ(static_cast<int32_t*>(x.data)[2 * r + 1], 10 * i);
      EXPECT_EQ(static_cast<int64_t*>(cls.data)[r], i % 3);
      EXPECT_EQ(txt.bytes(r), texts[i]);
      EXPECT_EQ(batch.key(r), keys[i]);
      EXPECT_EQ(batch.sample(r).index, i);
    }
  }
}

TEST(SampleBatcherTest, ShapeChangeIsCorruptWithContext) {
  std::vector<Batch> out;
  SampleBatcher b({FieldSpec{"x.npy"}}, 4, Pool(), [&](Batch&& batch) {
    out.push_back(std::move(batch));
    return Status::OK();
  });
  std::string a = EncodeNpy(DType::kInt32, {2}, Int32s({1, 2}));
  std::string c = EncodeNpy(DType::kInt32, {3}, Int32s({1, 2, 3}));
  FieldRef f1[1] = {{a, 512, true}};
  FieldRef f2[1] = {{c, 4096, true}};
  ASSERT_TRUE(b.Add(RowInput{{0, 0}, "a", "s.tar", 0, f1}).ok());
  Status s = b.Add(RowInput{{0, 1}, "b", "s.tar", 0, f2});
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.offset(), 4096);
  EXPECT_NE(s.message().find("'b'"), std::string::npos) << s;
  FieldRef none[1] = {{{}, 0, false}};
  // A sample without the field is not corrupt: kConfig, naming the fix.
  Status missing = b.Add(RowInput{{0, 2}, "c", "s.tar", 0, none});
  EXPECT_EQ(missing.code(), StatusCode::kConfig);
  EXPECT_NE(missing.message().find("mark it optional"), std::string::npos) << missing;
}

// A consumer that batched no sample pads with the columns its specs fix,
// and those must be the columns a sample makes (the other ranks' batches):
// spec by spec, padding made before any sample against padding made after
// one.
TEST(SampleBatcherTest, PaddingBeforeAnySampleHasTheColumnsASampleMakes) {
  auto columns = [](const Batch& b) {
    std::vector<std::string> out;
    for (size_t i = 0; i < b.num_tensors(); ++i) {
      const TensorView t = b.tensor(i);
      std::string c = std::string(t.name) + " " + std::string(DTypeName(t.dtype)) +
                      (t.is_bytes ? " bytes" : "") + (t.is_string ? " string" : "") +
                      (t.is_json ? " json" : "") + " ragged " +
                      std::to_string(static_cast<int>(t.ragged)) + " ndim " + std::to_string(t.ndim);
      for (int k = 1; k < t.ndim; ++k) c += " " + std::to_string(t.shape[k]);
      out.push_back(c);
    }
    return out;
  };
  auto spec = [](const char* name, FieldDecode how) {
    FieldSpec f;
    f.name = name;
    f.decode = how;
    return f;
  };
  const std::string jpeg =
      testing::ReadFile(std::string(SHARDSTREAM_TEST_DATA_DIR) + "/images/rgb.jpg");
  std::vector<std::pair<FieldSpec, std::string>> cases;
  FieldSpec scalar = spec("s.bin", FieldDecode::kRaw);
  scalar.dtype = DType::kInt64;
  scalar.scalar = true;
  cases.push_back({scalar, std::string(8, '\1')});
  FieldSpec full = spec("f.bin", FieldDecode::kRaw);
  full.dtype = DType::kFloat32;
  full.shape = {2, 3};
  cases.push_back({full, std::string(24, '\0')});
  FieldSpec ragged = spec("r.bin", FieldDecode::kRaw);
  ragged.dtype = DType::kInt32;
  ragged.ragged = Ragged::kList;
  cases.push_back({ragged, std::string(12, '\2')});
  cases.push_back({spec("cls", FieldDecode::kAuto), "3"});
  cases.push_back({spec("b.bin", FieldDecode::kBytes), "xyz"});
  cases.push_back({spec("txt", FieldDecode::kAuto), "hello"});
  cases.push_back({spec("json", FieldDecode::kAuto), "{\"a\": 1}"});
  FieldSpec hwc = spec("jpg", FieldDecode::kImage);
  hwc.image.height = 8;
  hwc.image.width = 6;
  cases.push_back({hwc, jpeg});
  FieldSpec chw = hwc;
  chw.image.layout = ImageLayout::kCHW;
  cases.push_back({chw, jpeg});
  cases.push_back({spec("jpg", FieldDecode::kImage), jpeg});  // no size: ragged
  for (const auto& [field, data] : cases) {
    FieldSpec opt = spec("o.bin", FieldDecode::kRaw);  // absent from the sample
    opt.dtype = DType::kInt16;
    opt.shape = {2};
    opt.optional = true;
    const std::vector<FieldSpec> specs = {field, opt};
    std::vector<Batch> after, before;
    SampleBatcher a(specs, 2, Pool(), [&](Batch&& batch) {
      after.push_back(std::move(batch));
      return Status::OK();
    });
    SampleBatcher b(specs, 2, Pool(), [&](Batch&& batch) {
      before.push_back(std::move(batch));
      return Status::OK();
    });
    FieldRef f[2] = {{data, 512, true}, {{}, 0, false}};
    ASSERT_TRUE(a.Add(RowInput{{0, 0}, "k", "s.tar", 0, f}).ok()) << field.name;
    ASSERT_TRUE(a.Flush().ok());
    ASSERT_TRUE(a.Pad(1).ok());
    ASSERT_TRUE(b.Pad(1).ok()) << field.name;
    ASSERT_EQ(after.size(), 2u);
    ASSERT_EQ(before.size(), 1u);
    EXPECT_EQ(columns(before[0]), columns(after[0])) << field.name;
    EXPECT_EQ(columns(before[0]), columns(after[1])) << field.name;
    EXPECT_EQ(before[0].rows(), 2);
    EXPECT_EQ(before[0].num_samples(), 0);
  }
  // A spec that leaves the shape to the data: no padding, naming the field.
  SampleBatcher npy({spec("x.npy", FieldDecode::kAuto)}, 2, Pool(),
                    [](Batch&&) { return Status::OK(); });
  const Status st = npy.Pad(1);
  EXPECT_EQ(st.code(), StatusCode::kConfig);
  EXPECT_NE(st.message().find("the spec of field 'x.npy' does not fix its type"), std::string::npos)
      << st;
}

// Rebuilds each document's tokens from packed batches via doc_ids/positions.
struct Doc {
  std::vector<int32_t> tokens;
};

std::vector<std::vector<int32_t>> Docs(int n, uint64_t seed) {
  std::vector<std::vector<int32_t>> docs;
  uint64_t x = seed;
  for (int d = 0; d < n; ++d) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    int len = static_cast<int>((x >> 33) % 40);  // 0..39, seq_len 16: many split
    std::vector<int32_t> t(static_cast<size_t>(len));
    for (int i = 0; i < len; ++i) t[static_cast<size_t>(i)] = d * 1000 + i + 1;
    docs.push_back(t);
  }
  return docs;
}

// Runs RunPending whenever the packer notifies, on its own thread (as the
// loader's idle worker does).
class Completer {
 public:
  explicit Completer(TokenPacker* p) : p_(p), t_([this] { Loop(); }) {}
  ~Completer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    t_.join();
  }
  // Every other batch, waits until this thread has taken up that notice,
  // so both this thread and the packer (racing for the rest) complete
  // batches. It waits for the notice, not for a run: a run for an earlier
  // notice may already have completed the batch this notice posts.
  void Notify() {
    std::unique_lock<std::mutex> lock(mu_);
    const int notice = ++notified_;
    cv_.notify_all();
    if (notice % 2 == 0) cv_.wait(lock, [&] { return taken_ >= notice; });
  }
  int ran() const { return ran_.load(); }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || taken_ < notified_; });
      if (stop_) return;
      lock.unlock();
      // Runs the posted batch, or finds it completed already (by a run for
      // an earlier notice, or by the packer's next hand-over); either way
      // the notice is taken up. The try-lock in RunPending cannot fail
      // while the packer waits in Notify().
      if (p_->RunPending()) ++ran_;
      lock.lock();
      ++taken_;
      cv_.notify_all();
    }
  }
  TokenPacker* p_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int notified_ = 0, taken_ = 0;
  std::atomic<int> ran_{0};
  std::thread t_;
};

// Each document's tokens live in a buffer freed right after Add (ASan sees
// a packer that reads them later). `deferred`: the metadata of full batches
// is written by a Completer thread (or by the packer, when it gets there
// first), as in the loader.
void RunPacker(TokenLayout layout, std::vector<Batch>* out,
               const std::vector<std::vector<int32_t>>& docs, bool metadata = true,
               bool deferred = false, int* completed_elsewhere = nullptr) {
  TokenOptions o;
  o.document_metadata = metadata;
  o.field = "tokens.npy";
  o.seq_len = 16;
  o.layout = layout;
  o.eod_token = layout == TokenLayout::kPack ? 0 : -1;
  o.pad_token = -7;
  TokenPacker p(o, 4, Pool(64), [&](Batch&& b) {
    out->push_back(std::move(b));
    return Status::OK();
  });
  std::unique_ptr<Completer> completer;
  if (deferred) {
    completer = std::make_unique<Completer>(&p);
    p.set_notify([&] { completer->Notify(); });
  }
  std::vector<std::string> keys;
  for (size_t d = 0; d < docs.size(); ++d) keys.push_back("doc" + std::to_string(d));
  for (size_t d = 0; d < docs.size(); ++d) {
    auto own = std::make_shared<std::vector<int32_t>>(docs[d]);
    DecodedField f;
    f.is_tensor = true;
    f.dtype = DType::kInt32;
    f.ndim = 1;
    f.shape[0] = static_cast<int64_t>(own->size());
    f.data = std::string_view(reinterpret_cast<const char*>(own->data()), own->size() * 4);
    RowInput row{SampleId{0, static_cast<int64_t>(d)}, keys[d], "u", 0, nullptr};
    ASSERT_TRUE(p.Add(row, f, 0).ok());
  }
  ASSERT_TRUE(p.Flush().ok());
  ASSERT_TRUE(p.FinishPending().ok());
  if (completer && completed_elsewhere) *completed_elsewhere = completer->ran();
  completer.reset();
}

void ExpectSameBatches(const std::vector<Batch>& a, const std::vector<Batch>& b,
                       const std::vector<std::string>& tensors) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].rows(), b[i].rows());
    EXPECT_EQ(a[i].num_samples(), b[i].num_samples());
    for (const std::string& name : tensors) {
      TensorView x = a[i].tensor(name), y = b[i].tensor(name);
      ASSERT_EQ(x.nbytes, y.nbytes) << name;
      EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << "batch " << i << " " << name;
    }
    SampleId ia, ib;
    int64_t da = -1, db = -1;
    EXPECT_EQ(a[i].continued(&ia, &da), b[i].continued(&ib, &db));
    EXPECT_EQ(da, db);
  }
}

TEST(TokenPackerTest, PackedBatchesHoldEveryTokenOnceWithDocIdsAndPositions) {
  auto docs = Docs(60, 1);
  std::vector<Batch> out;
  RunPacker(TokenLayout::kPack, &out, docs);
  std::vector<std::vector<int32_t>> rebuilt;
  size_t next_doc = 0;
  int64_t samples_listed = 0;
  std::vector<int32_t> current;
  for (size_t bi = 0; bi < out.size(); ++bi) {
    const Batch& b = out[bi];
    if (bi + 1 < out.size()) EXPECT_EQ(b.rows(), 4);
    samples_listed += b.num_samples();
    TensorView tok = b.tensor("tokens"), doc = b.tensor("doc_ids"), pos = b.tensor("positions");
    ASSERT_EQ(tok.shape[1], 16);
    for (int64_t r = 0; r < b.rows(); ++r) {
      int32_t last_doc = -1;
      for (int64_t c = 0; c < 16; ++c) {
        int64_t i = r * 16 + c;
        int32_t t = static_cast<int32_t*>(tok.data)[i];
        int32_t d = static_cast<int32_t*>(doc.data)[i];
        int32_t p = static_cast<int32_t*>(pos.data)[i];
        if (d < 0) {  // padding only at the very end
          EXPECT_EQ(bi + 1, out.size());
          EXPECT_EQ(t, -7);
          continue;
        }
        EXPECT_GE(d, last_doc);
        last_doc = d;
        EXPECT_EQ(p, static_cast<int32_t>(current.size()));
        if (t == 0) {  // eod
          rebuilt.push_back(current);
          current.clear();
          ++next_doc;
        } else {
          current.push_back(t);
        }
      }
    }
    SampleId id;
    int64_t done;
    if (b.continued(&id, &done)) {
      EXPECT_EQ(static_cast<size_t>(id.index), next_doc);
      EXPECT_EQ(done, static_cast<int64_t>(current.size()));
    }
  }
  EXPECT_EQ(rebuilt, docs);
  EXPECT_EQ(samples_listed, 60);
}

TEST(TokenPackerTest, PaddedRowsSplitLongDocumentsAndMask) {
  auto docs = Docs(30, 2);
  std::vector<Batch> out;
  RunPacker(TokenLayout::kPad, &out, docs);
  std::vector<std::vector<int32_t>> rebuilt;
  std::vector<int32_t> current;
  for (const Batch& b : out) {
    TensorView tok = b.tensor("tokens"), mask = b.tensor("mask"), len = b.tensor("lengths");
    TensorView pos = b.tensor("positions");
    for (int64_t r = 0; r < b.rows(); ++r) {
      int32_t n = static_cast<int32_t*>(len.data)[r];
      int32_t p0 = static_cast<int32_t*>(pos.data)[r * 16];
      if (p0 == 0 && !(current.empty() && n == 0)) {
        rebuilt.push_back(current);
        current.clear();
      }
      for (int c = 0; c < 16; ++c) {
        bool real = static_cast<uint8_t*>(mask.data)[r * 16 + c] != 0;
        EXPECT_EQ(real, c < n);
        int32_t t = static_cast<int32_t*>(tok.data)[r * 16 + c];
        if (real) current.push_back(t); else EXPECT_EQ(t, -7);
      }
    }
  }
  rebuilt.push_back(current);
  std::vector<std::vector<int32_t>> nonempty;
  for (auto& d : docs)
    if (!d.empty()) nonempty.push_back(d);
  std::vector<std::vector<int32_t>> got;
  for (auto& d : rebuilt)
    if (!d.empty()) got.push_back(d);
  EXPECT_EQ(got, nonempty);
}

TEST(TokenPackerTest, TokensOnlyWithoutDocumentMetadata) {
  auto docs = Docs(40, 3);
  std::vector<Batch> with, without;
  RunPacker(TokenLayout::kPack, &with, docs, true);
  RunPacker(TokenLayout::kPack, &without, docs, false);
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) {
    ASSERT_EQ(without[i].num_tensors(), 1u);
    TensorView a = with[i].tensor("tokens"), b = without[i].tensor("tokens");
    ASSERT_EQ(a.nbytes, b.nbytes);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0);
    EXPECT_EQ(with[i].num_samples(), without[i].num_samples());
  }
}

// The loader's idle worker writes a full batch's doc_ids and positions
// (or mask and positions) while the packer goes on: the batches, their
// order and their bytes are those written in place.
TEST(TokenPackerTest, MetadataWrittenOnAnotherThreadMatchesWrittenInPlace) {
  auto docs = Docs(150, 4);  // about 48 batches: all kept, within the 64 slots
  int elsewhere_total = 0;
  for (int round = 0; round < 5; ++round) {
    std::vector<Batch> in_place, deferred;
    RunPacker(TokenLayout::kPack, &in_place, docs);
    int elsewhere = 0;
    RunPacker(TokenLayout::kPack, &deferred, docs, true, true, &elsewhere);
    ExpectSameBatches(in_place, deferred, {"tokens", "doc_ids", "positions"});
    elsewhere_total += elsewhere;

    std::vector<Batch> pad_in_place, pad_deferred;
    RunPacker(TokenLayout::kPad, &pad_in_place, docs);
    RunPacker(TokenLayout::kPad, &pad_deferred, docs, true, true);
    ExpectSameBatches(pad_in_place, pad_deferred, {"tokens", "mask", "positions", "lengths"});
  }
  // The other thread did complete batches (not only the packer itself).
  EXPECT_GT(elsewhere_total, 0);
}

// An emit that fails for a batch completed by someone else reaches the
// packer's next call, and nothing after that batch is emitted.
TEST(TokenPackerTest, FailedEmitOfAHandedOverBatchReachesTheNextCall) {
  auto docs = Docs(200, 5);
  TokenOptions o;
  o.field = "tokens.npy";
  o.seq_len = 16;
  o.eod_token = 0;
  int emitted = 0;
  TokenPacker p(o, 4, Pool(64), [&](Batch&&) {
    if (++emitted == 2) return Status(StatusCode::kCancelled, "queue closed");
    return Status::OK();
  });
  bool posted = false;
  p.set_notify([&] { posted = true; });  // nobody completes: the packer does, on the next hand-over
  Status first_error;
  size_t d = 0;
  for (; d < docs.size() && first_error.ok(); ++d) {
    DecodedField f;
    f.is_tensor = true;
    f.dtype = DType::kInt32;
    f.ndim = 1;
    f.shape[0] = static_cast<int64_t>(docs[d].size());
    f.data = std::string_view(reinterpret_cast<const char*>(docs[d].data()), docs[d].size() * 4);
    RowInput row{SampleId{0, static_cast<int64_t>(d)}, "k", "u", 0, nullptr};
    first_error = p.Add(row, f, 0);
  }
  EXPECT_TRUE(posted);
  ASSERT_FALSE(first_error.ok());
  EXPECT_EQ(first_error.code(), StatusCode::kCancelled);
  EXPECT_LT(d, docs.size());
  EXPECT_EQ(emitted, 2);  // the third batch was never emitted
  EXPECT_EQ(p.FinishPending().code(), StatusCode::kCancelled);
  EXPECT_EQ(emitted, 2);
}

}  // namespace
}  // namespace shardstream::internal
