// Data sets for the loader tests, written with the library's ShardWriter
// into a temporary directory: sample g carries its global id in every field,
// so a test can tell exactly which samples a batch holds.
#ifndef SHARDSTREAM_TESTS_SUPPORT_LOADER_FIXTURE_H_
#define SHARDSTREAM_TESTS_SUPPORT_LOADER_FIXTURE_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "shardstream/loader.h"

namespace shardstream::testing {

struct DatasetSpec {
  int shards = 6;
  int samples_per_shard = 49;
  // Token documents ("tokens.npy", int32, lengths 0..max_doc_tokens-1)
  // instead of the fixed fields ("x.npy" int32[4], "cls", "txt").
  bool tokens = false;
  int max_doc_tokens = 300;
  // Extra zero bytes per sample in a "pad.bin" field (for large data sets).
  size_t pad_bytes = 0;
  bool write_index = true;
  // Token documents written this many to a document group (one sample
  // with "tokens.npy" and "doc_offsets.npy", the last of a shard smaller);
  // 0: each document a sample of its own.
  int docs_per_group = 0;
};

// Writes the data set under dir; returns the manifest url and the total.
struct Dataset {
  std::string manifest;
  int64_t samples = 0;
  std::vector<std::string> shard_paths;
};
Dataset WriteDataset(const std::string& dir, const DatasetSpec& spec);

// The tokens of document g (deterministic).
std::vector<int32_t> DocTokens(int64_t g, int max_doc_tokens);

// Options reading "x.npy" and "cls" in batches of 8.
LoaderOptions FieldOptions(const std::string& manifest);

// Global ids of every sample a loader returns in the rest of its epoch, in
// order (from the "x.npy" field). Fails the test on an error.
std::vector<int64_t> DrainIds(Loader* loader, int64_t max_batches = -1);

// The error that ends the loader's epoch, taking batches (at most
// max_batches) until next() fails; OK if the epoch ends without one.
Status FirstError(Loader* loader, int64_t max_batches = 100000);

// Takes batches without releasing any until next() fails (at most
// slots + 1 calls); expects that to be after exactly `slots` batches, with
// the "holds every batch slot" error (kConfig). Returns the batches held.
std::vector<Batch> HoldEverySlot(Loader* loader, size_t slots);

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_LOADER_FIXTURE_H_
