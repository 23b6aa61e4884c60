// Options of the Loader (loader.h): what to read, how to split it among
// consumers, how to shuffle, decode and batch it, and how many threads and
// how much memory to use. Every field has a documented default; only
// `manifest` (or `inputs`) must be set.
//
// Thread-safety: a plain value.
#ifndef SHARDSTREAM_OPTIONS_H_
#define SHARDSTREAM_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/decode.h"
#include "shardstream/dtype.h"
#include "shardstream/pinned_pool.h"
#include "shardstream/rows.h"
#include "shardstream/shard_cache.h"
#include "shardstream/source.h"
#include "shardstream/tar_reader.h"

namespace shardstream {

enum class TokenLayout {
  // Documents are concatenated, each followed by eod_token, and cut into rows
  // of seq_len: tensors "tokens" [B, L], "doc_ids" [B, L] int32 (document
  // number within the row, from 0; -1 on padding) and "positions" [B, L]
  // int32 (position within the document; continues when a document goes on
  // in the next row). What does not fit is carried into the next row and
  // batch; only the epoch's very last row is padded.
  kPack,
  // One document per row, padded with pad_token: "tokens" [B, L], "mask"
  // [B, L] uint8 (1 = real token), "positions" [B, L] int32 and "lengths" [B]
  // int32. A document longer than seq_len continues in the next rows.
  kPad,
};

// Language-model token batches. Enabled when `field` is non-empty; then
// `Loader` batches tokens instead of `fields`.
struct TokenOptions {
  // The field holding a document's tokens: a 1-D integer .npy, or raw
  // little-endian integers of `input_dtype` (any other name). Default: "".
  std::string field;
  // Element type of raw token fields. Default: int32.
  DType input_dtype = DType::kInt32;
  // Turns a text field (a JSON Lines string, a tar ".txt" member) into its
  // token ids, on the reader threads, before packing: `field` then holds
  // text, and input_dtype is int32. Called concurrently; an error fails the
  // read (it is no defect of the data, so no skip policy passes it).
  // Tokens are then known only once read: equal_batches needs a single
  // consumer (or tokens tokenized ahead: shardstream.convert). Default: none.
  std::function<Status(std::string_view text, std::vector<int32_t>* ids)> tokenize;
  // Element type of the "tokens" tensor. Default: int32.
  DType dtype = DType::kInt32;
  // Row length. Default: 2048.
  int64_t seq_len = 2048;
  // Default: kPack.
  TokenLayout layout = TokenLayout::kPack;
  // Appended after each document in kPack; -1 for none. Default: -1.
  int64_t eod_token = -1;
  // Fills padding. Default: 0.
  int64_t pad_token = 0;
  // kPack: also make "doc_ids" and "positions". Without them a batch is the
  // "tokens" tensor alone (a third of the bytes to write), for models that
  // attend across document boundaries. Default: true.
  bool document_metadata = true;
  // Every consumer (rank x worker) returns the same number of batches in an
  // epoch, so DDP ranks finish it together (uneven documents otherwise give
  // ranks different batch counts, and the first rank to finish leaves the
  // others waiting in a collective forever). Decided without communication:
  // each consumer computes every consumer's rows from the documents' token
  // counts (the shards' sample indexes, built for local shards that lack
  // one) and stops after the smallest count of batches; the tokens after it
  // are not read this epoch (the remainder is dropped, as with samples).
  // A data set whose token counts cannot be had (remote shards without
  // indexes) is an error naming the shard with more than one consumer. A
  // document skipped under a skip policy leaves its consumer short of the
  // common count. Default: true.
  bool equal_batches = true;
};

// One data set of a mix (LoaderOptions::streams), with how many of
// its samples each epoch takes: one of weight, repeat and choose (default:
// repeat 1, every sample once). An epoch takes floor(n / N) whole passes of
// a stream of N samples and, for the rest, a subset drawn from (seed,
// epoch, stream): whole shards in a seeded order, the last one in part.
// MosaicML Streaming's proportion, repeat and choose, by sample.
struct MixStream {
  // The stream's data, as LoaderOptions::manifest and inputs take it
  // (manifests, shards, directories, patterns). Required.
  std::vector<std::string> inputs;
  // Its name in stats() (stream_samples). Default: "stream<i>".
  std::string name;
  // A share of epoch_size, relative to the other streams' weights (all
  // streams give a weight, or none does). Default: -1 (not given).
  double weight = -1;
  // Samples per epoch as a multiple of the stream's (0.5: half of them, 3:
  // each three times). Default: -1 (not given).
  double repeat = -1;
  // Exactly this many samples per epoch. Default: -1 (not given).
  int64_t choose = -1;
};

enum class LoaderMode {
  kTrain,  // seeded shard order, sample shuffle, equal counts (drop or pad)
  // Shards and samples in manifest order, no shuffle; every sample exactly
  // once over all consumers, none dropped or padded: consumer c (rank x
  // worker) reads the c-th contiguous span, and spans differ by at most one
  // sample (so ranks may differ by one batch). For validation and inference.
  kEval,
};

struct LoaderOptions {
  // --- data ---
  // The data set: a manifest url (.jsonl, .csv, .json), a brace pattern
  // ("data-{000000..000099}.tar"), one shard (.tar, .tar.zst, .tar.gz) or a
  // directory (prefix) of shards; see dataset_inputs.h. This or `inputs` is
  // required.
  std::string manifest;
  // More inputs of the kinds `manifest` takes, read after it (e.g. a list of
  // shards). Default: empty.
  std::vector<std::string> inputs;
  // Several data sets mixed by weight, repeat or choose (MixStream),
  // instead of manifest/inputs. Each epoch's samples are then those the
  // streams give, shuffled together, split over the consumers exactly once;
  // sample counts must be known (manifests or indexes). With node_local each
  // stream's shards stay on their nodes and every node takes its part of
  // each stream's share from them. Not with kEval. Default: empty.
  std::vector<MixStream> streams;
  // With weights: samples per epoch over all streams. 0: the streams' total.
  // Default: 0.
  int64_t epoch_size = 0;
  // Learn unknown sample counts (no manifest) from the shards' sidecar
  // indexes, building and writing them for local shards, so the plan splits
  // samples exactly once; false balances shards instead. Default: true.
  bool learn_sample_counts = true;
  // A local folder for the indexes the loader builds (learning counts,
  // token counts for equal batches), instead of "<shard>.idx" beside each
  // shard: a data folder that must stay untouched or is read-only. Indexes
  // are looked for beside the shards first, then here. Default: "" (beside).
  std::string index_dir;
  // Readers of Parquet files (rows.h); the Python package sets them
  // (pyarrow). Without them a Parquet input is a ConfigError. Default: none.
  ParquetReaders parquet;
  // Where urls are opened. Default: null (DefaultSource()).
  Source* source = nullptr;
  // Shards are read through this node-local cache when set (shared with
  // other loaders and processes; see shard_cache.h). Default: null.
  std::shared_ptr<ShardCache> cache;

  // --- topology and order ---
  int rank = 0;          // Default: 0
  int world_size = 1;    // Default: 1
  int worker = 0;        // Default: 0
  int num_workers = 1;   // Default: 1
  uint64_t seed = 0;     // Default: 0
  int64_t epoch = 0;     // first epoch; later ones via set_epoch(). Default: 0
  // Pad (true) instead of drop (false) the samples left over when the epoch
  // does not divide evenly among consumers. Default: false.
  bool pad_remainder = false;
  // Node-local shard affinity: shards are assigned to nodes of
  // local_world_size consecutive ranks once for all epochs (and shuffled
  // within the node each epoch), so a node's shard cache keeps serving it;
  // exactly once still holds. world_size must be a multiple of
  // local_world_size. Default: false.
  bool node_local = false;
  // Ranks per node (torchrun's LOCAL_WORLD_SIZE); required by node_local.
  // Default: 0.
  int local_world_size = 0;
  // kEval reads in manifest order, exactly once, without drop or pad (see
  // LoaderMode); it ignores shuffle_buffer and refuses drop_last and
  // pad_remainder. Default: kTrain.
  LoaderMode mode = LoaderMode::kTrain;
  // Samples held for shuffling; 0 or 1 disables the sample shuffle (shards
  // are still read in the plan's seeded order). Default: 1000.
  int64_t shuffle_buffer = 1000;
  // Samples the buffer holds before it lets the first one out; -1 means
  // shuffle_buffer. Smaller values start faster and shuffle less at first.
  // Default: -1.
  int64_t shuffle_initial = -1;

  // --- batches ---
  // Samples (or token rows) per batch. Default: 32.
  int64_t batch_size = 32;
  // Drop the last, smaller batch of an epoch (sample batches only; token
  // batches never drop tokens). Default: false.
  bool drop_last = false;
  // Fields taken from each sample, in tensor order. Empty (without tokens):
  // every field of the data set's first sample, decoded by extension, read
  // at the first next(). Default: empty.
  std::vector<FieldSpec> fields;
  // Token batching (see TokenOptions). Default: off.
  TokenOptions tokens;
  // Bytes per batch reserved in the slot for byte/string fields and sample
  // keys; a batch needing more spills them to the heap. Default: 1 MiB.
  size_t variable_bytes = size_t{1} << 20;

  // --- threads and memory ---
  // Batches ready ahead of the caller. Default: 4.
  int64_t prefetch = 4;
  // Worker threads: they read shards and take turns assembling batches
  // (one core each at full speed; match the cores the loader may use).
  // Default: 2.
  int reader_threads = 2;
  // CPUs the worker threads (reading, decoding, assembling) may run on, as
  // Linux numbers them, so that a training process keeps cores for the
  // thread that launches GPU kernels; each must be one this process may
  // use. Empty: the process's own. Default: empty.
  std::vector<int> reader_cpus;
  // Niceness the worker threads add to the consumer's (0-19): where they
  // and the training thread want the same core, the scheduler favours the
  // training thread. Default: 0.
  int reader_nice = 0;
  // Shards open at once, interleaved sample by sample in a fixed seeded
  // order; at least reader_threads. Default: 4.
  int open_shards = 4;
  // Read-buffer size per open shard (the tar reader's chunk); a sample
  // larger than half of it gets a buffer of its own. Default: 512 KiB,
  // small enough that the chunk the assembler copies from is still in the
  // CPU cache (4 MiB chunks measured 30-40% slower on token batches).
  size_t read_chunk = size_t{512} << 10;
  // Samples buffered per open shard between its reader and the interleaver,
  // and at most 8 x read_chunk bytes of them. Default: 256 (64 measured 20%
  // slower on token batches: the assembler waited for readers that were
  // asleep, waiting to be woken).
  int64_t shard_queue = 256;
  // Upper bound on the loader's resident memory (batch slots, shuffle buffer
  // estimate, read buffers; shards kept mapped get what is left, see
  // mapped_keep_bytes); Loader::Create fails with kConfig when the options
  // cannot fit. 0 means no check. Default: 0.
  size_t memory_budget = 0;
  // Host memory for batch slots. Default: null (DefaultHostAllocator():
  // CUDA pinned when available).
  std::shared_ptr<HostAllocator> allocator;

  // --- errors and telemetry ---
  // What a corrupt shard or sample does: kRaise reaches the caller's next();
  // the skip policies drop and count. Default: kRaise.
  ErrorPolicy error_policy = ErrorPolicy::kRaise;
  // Tar reader engine. Default: kFast.
  TarEngine engine = TarEngine::kFast;
  // Token batches: read each document from its shard straight into the
  // batch (one copy instead of two), placed by the shard's sample index.
  // Used for uncompressed local shards with a version 2 index (written by
  // `shardstream index`, `shardstream pack --index`, ShardWriter) whose
  // token field is a 1-D .npy of `tokens.dtype`, under kRaise, local or a
  // complete cache entry. With a sample shuffle (a batch's documents then
  // lie apart) only shards whose file maps into memory
  // (RandomAccessFile::MapView), their documents copied from the mapping;
  // other shards are read the usual way. The reads go through `source` when
  // set (vectored reads: RandomAccessFile::ReadVAt). The batches are the
  // same either way.
  // Default: true.
  bool direct_reads = true;
  // Shuffled token documents copied from mapped shards (direct_reads): local
  // shard files stay open and mapped from one epoch to the next, the first
  // ones read up to this many bytes of files in all (and 256 files), so
  // that a later epoch copies from pages already mapped instead of faulting
  // each one in again (on small folios, most of what a shuffle costs on a
  // data set in the page cache). Their pages count in the resident set, as
  // file pages shared with the page cache. A shard whose size or mtime has
  // changed is mapped afresh. Shard cache entries are not kept (that would
  // pin them). With a memory_budget, at most what the budget leaves over the
  // rest of its estimate. 0: off. Default: 4 GiB.
  uint64_t mapped_keep_bytes = uint64_t{4} << 30;
  // Seconds between "loader: ..." log lines; 0 for none. Default: 0.
  double log_interval_s = 0;
  // The watchdog: when next() has waited this many seconds for a batch, it
  // logs what each reader lane is at (the shard, its URL redacted, the last
  // sample and its byte offset, whether a worker is on it) and the process's
  // connections, again at each further multiple; LoaderStats counts the
  // reports and keeps the last. 0: off. Default: 60.
  double watchdog_s = 60;
  // With the watchdog on, its first report is also next()'s error
  // (kUnavailable) instead of waiting on: a hung source fails the step
  // rather than the job's time limit. Default: false.
  bool watchdog_error = false;
};

}  // namespace shardstream

#endif  // SHARDSTREAM_OPTIONS_H_
