// Errors, memory and allocation behaviour of the Loader.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "shardstream/loader.h"
#include "support/alloc_counter.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::DatasetSpec;
using testing::DrainIds;
using testing::FieldOptions;
using testing::TempDir;

// Overwrites bytes of a file in place.
void Smash(const std::string& path, uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(LoaderFaultTest, CorruptShardSurfacesAtNextWithShardAndOffset) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{3, 40});
  // The 11th member header of shard 1: its checksum no longer matches.
  Smash(d.shard_paths[1], 512 * 40 + 100, "garbage!");
  LoaderOptions o = FieldOptions(d.manifest);
  auto loader = *Loader::Create(o);
  Status err;
  int batches = 0;
  while (true) {
    auto b = loader->next();
    if (!b.ok()) {
      err = b.status();
      break;
    }
    ASSERT_FALSE(b->empty()) << "epoch ended without the error";
    ++batches;
  }
  EXPECT_EQ(err.code(), StatusCode::kCorrupt) << err;
  EXPECT_NE(err.ToString().find("shard-000001.tar"), std::string::npos) << err;
  EXPECT_GE(err.offset(), 512 * 40) << err;
  EXPECT_LT(batches, 15);  // not after the epoch's samples
  // The error is sticky until the epoch is restarted.
  EXPECT_EQ(loader->next().status().code(), StatusCode::kCorrupt);

  // Decoding errors surface the same way: a bad .npy payload.
  o.error_policy = ErrorPolicy::kSkipShard;
  auto skipping = *Loader::Create(o);
  auto ids = DrainIds(skipping.get());
  EXPECT_LT(ids.size(), 120u);
  EXPECT_GE(ids.size(), 80u);
  EXPECT_EQ(skipping->stats().skipped_shards, 1u);
}

TEST(LoaderFaultTest, MissingShardIsNotFoundAtNext) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{3, 10});
  std::remove(d.shard_paths[2].c_str());
  auto loader = *Loader::Create(FieldOptions(d.manifest));
  Status err;
  for (int i = 0; i < 100 && err.ok(); ++i) {
    auto b = loader->next();
    if (!b.ok()) err = b.status();
    else if (b->empty()) break;
  }
  EXPECT_EQ(err.code(), StatusCode::kNotFound) << err;
  EXPECT_NE(err.ToString().find("shard-000002.tar"), std::string::npos) << err;
}

TEST(LoaderFaultTest, AWrongManifestSizeIsAnErrorNamingTheShardWithoutACache) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{3, 10});
  // The manifest says shard 1 is 512 bytes longer than it is.
  std::string text = testing::ReadFile(d.manifest), out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["url"] == "shard-000001.tar") j["size"] = j["size"].get<int64_t>() + 512;
    out += j.dump() + "\n";
  }
  testing::WriteFile(d.manifest, out);
  LoaderOptions o = FieldOptions(d.manifest);
  o.shuffle_buffer = 0;
  auto loader = *Loader::Create(o);
  Status err = testing::FirstError(loader.get(), 100);
  EXPECT_EQ(err.code(), StatusCode::kChecksum) << err;
  EXPECT_NE(err.ToString().find("shard-000001.tar"), std::string::npos) << err;
  EXPECT_NE(err.ToString().find("its manifest entry says"), std::string::npos) << err;
  EXPECT_NE(err.ToString().find("shardstream verify"), std::string::npos) << err;
}

TEST(LoaderFaultTest, UndecodableFieldNamesSampleAndShard) {
  TempDir dir;
  auto d = testing::WriteDataset(dir.path(), DatasetSpec{2, 10});
  LoaderOptions o = FieldOptions(d.manifest);
  o.fields = {FieldSpec{"txt", "", FieldDecode::kLabel}};  // "sample number N" is no label
  auto b = (*Loader::Create(o))->next();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(b.status().message().find("field 'txt'"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find(".tar"), std::string::npos) << b.status();
}

// Sanitizers keep shadow memory and freed blocks (quarantine) resident, so
// RSS says nothing about the loader there; the bound is checked in plain
// builds (the default test run) only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

size_t RssBytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages_total = 0, pages_rss = 0;
  f >> pages_total >> pages_rss;
  return pages_rss * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Small batches of "x.npy" and the padding, two lanes, a 12 MiB budget.
LoaderOptions BudgetOptions(const std::string& manifest) {
  LoaderOptions o = FieldOptions(manifest);
  o.fields = {FieldSpec{"x.npy"}, FieldSpec{"pad.bin", "", FieldDecode::kRaw}};
  o.batch_size = 4;
  o.prefetch = 2;
  o.open_shards = 2;
  o.reader_threads = 2;
  o.variable_bytes = 64 << 10;
  o.memory_budget = 12 << 20;
  return o;
}

// Drains the epoch; the resident set may grow by less than the budget
// (not checked under sanitizers, whose shadow memory counts too).
void ExpectRssWithinBudget(Loader* loader, uint64_t budget, uint64_t* seen) {
  const size_t base = RssBytes();
  size_t peak = base;
  while (true) {
    auto b = loader->next();
    ASSERT_TRUE(b.ok()) << b.status();
    if (b->empty()) break;
    *seen += b->nbytes();
    peak = std::max(peak, RssBytes());
  }
  std::printf("RSS grew by %zu KiB (budget %zu KiB) while streaming %llu MiB\n",
              (peak - base) >> 10, static_cast<size_t>(budget >> 10),
              static_cast<unsigned long long>(*seen >> 20));
  if (!kSanitized) EXPECT_LT(peak - base, budget);
}

TEST(LoaderFaultTest, RssStaysWithinBudgetOnDataTwentyTimesLarger) {
  TempDir dir;
  DatasetSpec spec{8, 320};
  spec.pad_bytes = 100 << 10;  // ~100 KiB samples, 250 MiB in all
  auto d = testing::WriteDataset(dir.path(), spec);
  LoaderOptions o = BudgetOptions(d.manifest);  // 12 MiB: the data set is 20 times larger
  o.read_chunk = 256 << 10;
  o.shard_queue = 4;
  o.shuffle_buffer = 8;
  auto loader = Loader::Create(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  uint64_t seen = 0;
  ExpectRssWithinBudget(loader->get(), o.memory_budget, &seen);
  EXPECT_GT(seen, uint64_t{20} * o.memory_budget);
}

// With the default shard_queue (256 samples a lane) the rings are bounded
// by bytes (8 read chunks), not by count. A ring slot whose sample was placed
// must not keep that sample's bytes until the slot is filled again: most
// slots are then placed ones, and each would hold its sample (here its own
// 40 KiB buffer) for a whole ring cycle, several times the budget.
TEST(LoaderFaultTest, RssStaysWithinBudgetWhenRingsAreBoundByBytes) {
  TempDir dir;
  DatasetSpec spec{4, 500};
  spec.pad_bytes = 40 << 10;  // over half a 64 KiB read chunk: a buffer each
  auto d = testing::WriteDataset(dir.path(), spec);
  LoaderOptions o = BudgetOptions(d.manifest);  // 12 MiB: the data set is over 6 times larger
  o.read_chunk = 64 << 10;
  o.shard_queue = LoaderOptions().shard_queue;  // 256: each lane cycles its ring 3 times
  auto loader = Loader::Create(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  uint64_t seen = 0;
  ExpectRssWithinBudget(loader->get(), o.memory_budget, &seen);
  EXPECT_GT(seen, uint64_t{6} * o.memory_budget);
}

// Direct reads (the default for these shards) or through read buffers;
// direct ones unshuffled (read) or shuffled (copied from the mapped shards).
void ExpectNoAllocationPerBatch(bool direct, bool shuffled_direct = false) {
  TempDir dir;
  DatasetSpec spec{2, 1500};  // both shards open all along (open_shards 2)
  spec.tokens = true;
  spec.max_doc_tokens = 200;
  auto d = testing::WriteDataset(dir.path(), spec);
  LoaderOptions o;
  o.manifest = d.manifest;
  o.tokens.field = "tokens.npy";
  o.tokens.seq_len = 128;
  o.batch_size = 4;
  o.shuffle_buffer = 16;
  o.prefetch = 2;
  o.reader_threads = 2;
  o.open_shards = 2;
  o.read_chunk = 8 << 20;  // larger than a shard: one read chunk per shard
  o.allocator = PageableAllocator();
  o.direct_reads = direct;
  if (direct && !shuffled_direct) o.shuffle_buffer = 0;
  auto loader = *Loader::Create(o);
  // Warm up: the pool, every shard opened, and every sample storage that
  // circulates between the rings (256 per lane) and the shuffle buffer
  // filled once by a reader, so its strings and field vector have their
  // capacity. A storage that enters a ring from the shuffle buffer is
  // first filled at most a ring later (the assembler reads items in their
  // slots, so none waits aside): 300 batches (about 1,500 documents) are
  // three ring cycles per lane.
  for (int i = 0; i < 300; ++i) ASSERT_FALSE(loader->next()->empty());
  uint64_t allocations;
  int batches = 0;
  {
    testing::AllocationCounter counter;
    for (; batches < 120; ++batches) {
      auto b = loader->next();
      ASSERT_TRUE(b.ok());
      if (b->empty()) break;
    }
    allocations = counter.count();
  }
  EXPECT_EQ(batches, 120);
  // Nothing is allocated per batch: slots, control blocks, samples, rings,
  // shuffle slots, delivery records and read chunks are all recycled, and the
  // Loader's tar readers keep no sample index. (Opening the next shard does
  // allocate: per shard, not per batch; both shards stay open here.)
  if (testing::AllocationCounter::available())
    EXPECT_EQ(allocations, 0u) << "over " << batches << " batches; first ones from:\n"
                               << testing::AllocationCounter::Where();
  std::printf("steady state (%s): %llu allocations over %d batches\n",
              direct ? (shuffled_direct ? "shuffled, mapped" : "direct reads") : "read buffers",
              static_cast<unsigned long long>(allocations), batches);
  if (direct) {
    EXPECT_GT(loader->stats().direct_samples, 1500u);
  } else {
    EXPECT_EQ(loader->stats().direct_samples, 0u);
  }
}

TEST(LoaderFaultTest, SteadyStateAllocatesNothingPerBatch) { ExpectNoAllocationPerBatch(true); }

TEST(LoaderFaultTest, SteadyStateAllocatesNothingPerBatchThroughReadBuffers) {
  ExpectNoAllocationPerBatch(false);
}

TEST(LoaderFaultTest, SteadyStateAllocatesNothingPerBatchShuffledFromMappedShards) {
  ExpectNoAllocationPerBatch(true, true);
}

// A token batch waiting for its doc_ids and positions holds no slot of its
// own: a caller holding batches gets as many as with fields (prefetch + 2)
// before the loader says it holds every slot. One worker, so nobody but the
// assembler completes the waiting batch; it must before waiting for a slot.
TEST(LoaderFaultTest, TokenBatchesWaitingForMetadataCostTheCallerNoSlot) {
  TempDir dir;
  DatasetSpec spec{2, 200};
  spec.tokens = true;
  spec.max_doc_tokens = 200;
  auto d = testing::WriteDataset(dir.path(), spec);
  LoaderOptions o;
  o.manifest = d.manifest;
  o.tokens.field = "tokens.npy";  // with doc_ids and positions (the default)
  o.tokens.seq_len = 128;
  o.batch_size = 4;
  o.prefetch = 2;  // 4 slots
  o.reader_threads = 1;
  o.allocator = PageableAllocator();
  auto loader = *Loader::Create(o);
  std::vector<Batch> held = testing::HoldEverySlot(loader.get(), 4);
  ASSERT_FALSE(held.empty());
  EXPECT_NE(held.back().tensor("doc_ids").data, nullptr);
  held.clear();  // released: the loader goes on
  auto b = loader->next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->empty());
}

// A lane reads ahead shard_queue samples but at most 8 x read_chunk bytes of
// them: with 64 KiB samples a ring of 256 would otherwise hold 16 MiB per
// open shard while the caller does not take the next batch.
TEST(LoaderFaultTest, ReadAheadStopsAtTheRingsByteLimitForLargeSamples) {
  TempDir dir;
  DatasetSpec spec{1, 200};
  spec.pad_bytes = 64 << 10;
  auto d = testing::WriteDataset(dir.path(), spec);  // one shard of 12.5 MiB
  LoaderOptions o = FieldOptions(d.manifest);
  o.fields.push_back(FieldSpec{"pad.bin"});
  o.batch_size = 1;
  o.prefetch = 1;
  o.shuffle_buffer = 0;
  o.open_shards = 1;
  o.reader_threads = 1;
  o.read_chunk = 64 << 10;  // lane limit 512 KiB
  o.shard_queue = 256;
  auto loader = *Loader::Create(o);
  ASSERT_FALSE(loader->next()->empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the reader stops on its own
  const uint64_t read = loader->stats().read_bytes["file"];
  // Ring: 512 KiB + a burst of 8 samples (the assembler's claimed batch is
  // part of it), the queued and the held batch: under 3 MiB in all.
  EXPECT_GT(read, uint64_t{512} << 10);
  EXPECT_LT(read, uint64_t{3} << 20);
  // And nothing is lost: the rest of the epoch arrives.
  auto ids = DrainIds(loader.get());
  EXPECT_EQ(ids.size(), 199u);
}

}  // namespace
}  // namespace shardstream
