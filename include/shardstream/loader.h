// Loader: the C++ face of the pipeline. It reads this consumer's part of an
// epoch (EpochPlan: rank x worker), shuffles, decodes and batches it on
// background threads, and hands out batches in pooled (pinned when CUDA is
// present) host memory:
//
//   auto loader = *Loader::Create(options);
//   for (int64_t e = 0; e < epochs; ++e) {
//     loader->set_epoch(e);
//     while (true) {
//       auto batch = loader->next();        // Result<Batch>
//       if (!batch.ok()) return batch.status();
//       if (batch->empty()) break;          // end of the epoch
//       Train(*batch);
//     }
//   }
//
// Determinism: the batches depend only on the manifest, the options (seed,
// epoch, topology, batch and shuffle settings), never on thread timing or
// thread counts (reader_threads). Shards are interleaved sample by sample
// in an order drawn from the seed.
//
// Exactly once: state() records what next() has returned so far (samples in
// the shuffle buffer or the queue are not delivered); restore() resumes the
// epoch with exactly the rest, also with another world size or worker count
// (merge the ranks' states with MergeLoaderStates first).
//
// Threads start at the first next() after Create, set_epoch or restore,
// never before (a Python process may fork until then). The destructor stops
// and joins them promptly, also while they are blocked on a full queue.
//
// Thread-safety: next(), set_epoch(), state() and restore() are called by one
// thread (the training loop); stats() may be called from any thread.
#ifndef SHARDSTREAM_LOADER_H_
#define SHARDSTREAM_LOADER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/batch.h"
#include "shardstream/export.h"
#include "shardstream/options.h"
#include "shardstream/resume_state.h"
#include "shardstream/result.h"

namespace shardstream {

// Where an epoch stands, as far as the caller has received batches.
struct SHARDSTREAM_EXPORT LoaderState {
  // The plan's delivered samples (see resume_state.h).
  ResumeState resume;
  // Token batches: a document whose first `tokens` tokens (end-of-document
  // token included) were returned, the rest not yet. Its sample is not in
  // `resume` as delivered; a restore skips those tokens.
  struct Partial {
    int64_t shard = 0;
    int64_t sample = 0;
    int64_t tokens = 0;
  };
  std::vector<Partial> partial;
  // Token batches with TokenOptions::equal_batches, and sample batches of
  // several consumers under a skip policy: the batches this consumer still
  // returns in the epoch (own_state() only; -1 otherwise, and after a
  // merge). A restore of one consumer's own state returns
  // exactly these, so consumers resumed from their own states stay equal;
  // a merged state's count is decided again over the new topology.
  int64_t batches_left = -1;

  // {"format":"shardstream-loader-state","version":1,"resume":{...},"partial":[...]
  //  [, "batches_left": n]}
  std::string ToJson() const;
  // On failure returns kCorrupt (malformed) or kConfig (unknown version).
  static Result<LoaderState> FromJson(std::string_view json);
};

// Joins the states of the consumers of one epoch (e.g. every rank's), for a
// restore with another topology. On failure returns kConfig as
// MergeResumeStates does.
SHARDSTREAM_EXPORT Result<LoaderState> MergeLoaderStates(const std::vector<LoaderState>& states);

// Joins the own_state()s of disjoint consumers of one epoch into one state:
// a position is delivered when no consumer still owes it (the intersection
// of their delivered sets); partial documents are joined, one per (shard,
// sample), with the most tokens delivered. Joined over every consumer it restores on
// any topology; over some, it restores exactly their rest. On failure returns
// kConfig as MergeLoaderStates does.
SHARDSTREAM_EXPORT Result<LoaderState> MergeOwnLoaderStates(
    const std::vector<LoaderState>& states);

struct SHARDSTREAM_EXPORT LoaderStats {
  int64_t epoch = 0;
  uint64_t batches = 0;        // returned by next() since Create
  uint64_t samples = 0;        // samples in those batches
  uint64_t bytes = 0;          // tensor bytes in those batches
  double seconds = 0;          // since the first next()
  double batches_per_s = 0, samples_per_s = 0, bytes_per_s = 0;
  // Shard bytes read, by where they came from: "cache" (cache hits),
  // "file", "http", "s3", ... (the url scheme).
  std::map<std::string, uint64_t> read_bytes;
  // Time the caller waited inside next(), the GPU-idle proxy: counts per
  // bucket, bucket i holding waits below wait_bucket_us[i] (the last one is
  // unbounded).
  std::vector<double> wait_bucket_us;
  std::vector<uint64_t> wait_counts;
  double wait_seconds = 0;     // total
  double wait_p50_us = 0, wait_p99_us = 0;
  int64_t queue_depth = 0, queue_capacity = 0;
  int64_t shuffle_fill = 0, shuffle_capacity = 0;
  // Cache hits / opens through the cache; -1 without a cache. The counts
  // (since Create): a shard opened through the cache, and one whose entry
  // was complete (nothing downloaded).
  double cache_hit_rate = -1;
  uint64_t cache_hits = 0, cache_opens = 0;
  // Mixed streams: samples returned since Create, per stream name.
  std::map<std::string, uint64_t> stream_samples;
  uint64_t skipped_samples = 0, skipped_shards = 0;
  // Equal token batches (several consumers): documents, and their tokens,
  // that the cut to the smallest consumer's batch count left out of this
  // consumer's epochs since Create (a partly read document counts its rest).
  uint64_t cut_samples = 0, cut_tokens = 0;
  // Token documents read straight into their batches (LoaderOptions::
  // direct_reads); the others went through read buffers.
  uint64_t direct_samples = 0;
  // Bytes of shard files kept mapped across epochs (LoaderOptions::
  // mapped_keep_bytes): as much of the resident set is theirs once read.
  uint64_t mapped_kept_bytes = 0;
  HostMemoryKind memory_kind = HostMemoryKind::kPageable;
  uint64_t slot_bytes = 0, slots = 0;
  uint64_t heap_spills = 0;    // batches whose byte fields spilled to the heap
  // Slots that were lent again only after the device finished an
  // asynchronous copy from them (pinned memory; see pinned_pool.h).
  uint64_t copy_waits = 0;
  // Where the pipeline waited (seconds since Create): the assembler for a
  // lane to get a sample (reading or the source is the bottleneck), and for the
  // caller (queue full or every slot held: the training loop is the
  // bottleneck). Neither: assembly itself is.
  double reader_wait_seconds = 0;
  double caller_wait_seconds = 0;
  // The watchdog (LoaderOptions::watchdog_s): how long the next() in
  // progress has waited so far (0: none waiting), the reports it made since
  // Create, and the last one.
  double waiting_seconds = 0;
  uint64_t watchdog_reports = 0;
  std::string watchdog_report;

  // One line: "loader: epoch 0, 812 batches, 5.1 batches/s, ..." (the
  // periodic log line).
  std::string ToString() const;
};

class SHARDSTREAM_EXPORT Loader {
 public:
  // Reads the manifest and plans the first epoch. Starts no thread.
  // On failure returns kConfig for invalid options (no manifest, no fields,
  // batch_size < 1, rank/worker out of range, options that do not fit
  // memory_budget, ...) or the manifest's read/parse error.
  static Result<std::unique_ptr<Loader>> Create(LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch of the epoch, or an empty Batch at its end (and on every
  // call after it until set_epoch or restore). A reader or decode error
  // (per error_policy) is returned once, in stream order, naming shard and
  // offset; the epoch then stops (later calls return it again).
  // Returns kCancelled after Stop().
  Result<Batch> next();
  // Whether next() would return at once: a batch, the epoch's end or an
  // error is ready. Same thread rules as next().
  bool ready() const;

  // Starts epoch `epoch` from its beginning (discarding what is in flight).
  // On failure returns kConfig as Create does.
  Status set_epoch(int64_t epoch);
  int64_t epoch() const;

  // What has been returned so far in this epoch.
  // On failure returns kConfig when the manifest's sample counts are unknown
  // (brace patterns), so nothing can be tracked.
  Result<LoaderState> state() const;
  // This consumer's share as a state of its own: state() plus every
  // position outside this consumer's plan counted as delivered, so only what
  // this consumer still owes is left. Restored on a single-consumer loader it
  // reads exactly that, without the other consumers' states (a DataLoader
  // worker under StatefulDataLoader gets back only its own). The own states
  // of all consumers of a plan join by intersecting their delivered sets.
  // Padding copies are not owed (they are not recorded). Fails as state().
  Result<LoaderState> own_state() const;
  // Continues the epoch of `state` with exactly its undelivered samples,
  // split over this loader's topology. On failure returns kConfig when the
  // state is of another data set or seed.
  Status restore(const LoaderState& state);

  // Samples this consumer gets in the current epoch (-1 when unknown).
  int64_t samples_per_epoch() const;
  // Batches next() will return in the current epoch (-1 when unknown). For
  // token batches: known from the documents' token counts (sample indexes);
  // after a restore, the batches left.
  int64_t batches_per_epoch() const;
  // Batches the current epoch gives every worker of this rank together
  // (num_workers consumers): what a DataLoader with num_workers processes
  // yields on this rank. batches_per_epoch() with one worker; -1 when
  // unknown (also after restoring one consumer's own state).
  int64_t rank_batches_per_epoch() const;

  LoaderStats stats() const;

  // Stops and joins the threads; idempotent. next() then returns kCancelled.
  // Called by the thread that calls next(), never concurrently with it.
  void Stop();
  // Wakes a next() blocked on another thread, which then returns kCancelled,
  // as do later calls; joins nothing. Safe from any thread, at any time
  // (Ctrl-C handlers, watchdogs); follow it with Stop() on the owner thread.
  void Cancel();

  class Impl;

 private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardstream

#endif  // SHARDSTREAM_LOADER_H_
