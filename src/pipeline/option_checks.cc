#include "pipeline/option_checks.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "common/thread_controls.h"
#include "pipeline/loader_run.h"
#include "shardstream/decode.h"
#include "shardstream/image.h"

namespace shardstream::internal {

namespace {

Status ValidateStreams(const LoaderOptions& o) {
  if (!o.manifest.empty() || !o.inputs.empty())
    return Status::Config("loader: give the data as streams or as manifest/inputs, not both");
  if (o.mode == LoaderMode::kEval) return Status::Config("loader: eval mode does not mix streams");
  const bool weighted = o.streams.front().weight >= 0;
  for (size_t k = 0; k < o.streams.size(); ++k) {
    const MixStream& so = o.streams[k];
    const std::string which = "loader: stream " + std::to_string(k) + ": ";
    if (so.inputs.empty()) return Status::Config(which + "no inputs");
    const int given = (so.weight >= 0) + (so.repeat >= 0) + (so.choose >= 0);
    if (given > 1) return Status::Config(which + "give one of weight, repeat and choose");
    if ((so.weight >= 0) != weighted)
      return Status::Config(which + "weights are given for every stream or for none");
    if (weighted && !(so.weight > 0)) return Status::Config(which + "weight must be > 0");
  }
  if (o.epoch_size < 0) return Status::Config("loader: epoch_size must be >= 0");
  if (o.epoch_size > 0 && !weighted)
    return Status::Config("loader: epoch_size applies to weighted streams");
  return Status::OK();
}

}  // namespace

Status ValidateLoaderOptions(const LoaderOptions& o) {
  if (!o.streams.empty()) SHARDSTREAM_RETURN_IF_ERROR(ValidateStreams(o));
  if (o.manifest.empty() && o.inputs.empty() && o.streams.empty())
    return Status::Config("loader: no data set given (a manifest, shards, a directory or a pattern)");
  if (o.batch_size < 1) return Status::Config("loader: batch_size must be >= 1");
  if (!o.tokens.field.empty()) {
    if (o.tokens.seq_len < 1) return Status::Config("loader: tokens.seq_len must be >= 1");
    if (!IsInteger(o.tokens.dtype) || !IsInteger(o.tokens.input_dtype))
      return Status::Config("loader: token dtypes must be integer types");
  }
  if (o.fields.size() > 64) return Status::Config("loader: at most 64 fields");
  for (const FieldSpec& f : o.fields) {
    if (f.name.empty()) return Status::Config("loader: a field spec has no name");
    if (f.name.find(';') != std::string::npos) {
      // Alternatives: each named, and under kAuto each decoded alike.
      std::string_view rest = f.name;
      const FieldDecode first = DecodeForName(f.name);
      while (true) {
        const size_t semi = rest.find(';');
        const std::string_view one = rest.substr(0, semi);
        if (one.empty())
          return Status::Config("loader: field '" + f.name + "': an empty alternative");
        if (f.decode == FieldDecode::kAuto && DecodeForName(one) != first)
          return Status::Config("loader: field '" + f.name + "': its alternatives decode "
                                "differently by extension ('" + std::string(one) +
                                "'); give the field a decode");
        if (semi == std::string_view::npos) break;
        rest.remove_prefix(semi + 1);
      }
    }
    if (f.decode == FieldDecode::kImage)
      SHARDSTREAM_RETURN_IF_ERROR(ValidateImageSpec(f.image, f.name).WithContext("loader"));
    if (f.decode == FieldDecode::kRaw)
      SHARDSTREAM_RETURN_IF_ERROR(CheckRawShape(f).WithContext("loader"));
  }
  if (o.mode == LoaderMode::kEval && (o.drop_last || o.pad_remainder))
    return Status::Config("loader: eval mode reads every sample once: drop_last and "
                          "pad_remainder must be false");
  if (o.prefetch < 1) return Status::Config("loader: prefetch must be >= 1");
  if (o.reader_threads < 1) return Status::Config("loader: reader_threads must be >= 1");
  SHARDSTREAM_RETURN_IF_ERROR(CheckThreadControls(o.reader_cpus, o.reader_nice));
  if (o.read_chunk < (size_t{64} << 10)) return Status::Config("loader: read_chunk must be >= 64 KiB");
  return Status::OK();
}

namespace {

// What the options make resident, for memory_budget (docs/pipeline.md).
struct MemoryEstimate {
  uint64_t slots = 0, read = 0, buffered = 0;
  uint64_t total() const { return slots + read + buffered; }
};

MemoryEstimate Estimate(const LoaderOptions& o, const ShardTable& m) {
  MemoryEstimate e;
  double avg = 0;
  int64_t n = 0, bytes = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    if (m.nsamples(i) > 0 && m.bytes(i) > 0) {
      n += m.nsamples(i);
      bytes += m.bytes(i);
    }
  }
  avg = n > 0 ? static_cast<double>(bytes) / static_cast<double>(n) : 64 * 1024;
  const uint64_t nslots = static_cast<uint64_t>(o.prefetch) + 2;
  uint64_t slot;
  const uint64_t B = static_cast<uint64_t>(o.batch_size);
  if (!o.tokens.field.empty()) {
    uint64_t L = static_cast<uint64_t>(o.tokens.seq_len);
    slot = B * L * (DTypeSize(o.tokens.dtype) + 4 + 4) + B * 4 + o.variable_bytes;
  } else {
    slot = static_cast<uint64_t>(static_cast<double>(B) * avg) + o.variable_bytes;
  }
  e.slots = nslots * slot;
  const uint64_t lanes = static_cast<uint64_t>(std::max(o.open_shards, o.reader_threads));
  const uint64_t chunk = o.read_chunk;
  // Each open shard holds the chunk being parsed, the one its buffered
  // samples still point into, and the tar reader keeps a couple of spare
  // chunks for reuse.
  e.read = lanes * 4 * chunk;
  // Samples in the lane rings, and in the shuffle buffer: a shuffled sample
  // may keep its whole read chunk alive, bounded here by twice its size.
  const size_t queue = static_cast<size_t>(std::max<int64_t>(o.shard_queue, 1));
  // A lane's ring (at most RingBytes of samples, plus the last burst of 8;
  // the batch the assembler has claimed is part of it).
  const double per_lane =
      std::min(static_cast<double>(queue) * avg, static_cast<double>(internal::RingBytes(o)) + 8 * avg);
  const double shuffle = static_cast<double>(std::max<int64_t>(o.shuffle_buffer, 1));
  e.buffered = static_cast<uint64_t>(static_cast<double>(lanes) * per_lane + shuffle * std::min(2 * avg, static_cast<double>(chunk)));
  // Images decoded ahead: their pixels sit with their samples in the rings
  // (within the rings' byte bound) and in the shuffle buffer; each batch
  // slot holds a batch of them.
  double pixels = 0;
  for (const FieldSpec& f : o.fields)
    if (f.decode == FieldDecode::kImage && f.image.height > 0)
      pixels += 3.0 * f.image.height * f.image.width;
  e.buffered += static_cast<uint64_t>(pixels * shuffle + static_cast<double>(lanes) *
                                                           static_cast<double>(internal::RingBytes(o)) *
                                                           (pixels > 0 ? 1 : 0));
  e.slots += nslots * static_cast<uint64_t>(pixels) * B;
  // Allocator slack (per-thread arenas, fragmentation from fields copied
  // out of chunk boundaries): a quarter more, plus thread stacks in use,
  // rings and tables.
  e.buffered += (e.slots + e.read + e.buffered) / 4 + (uint64_t{2} << 20);
  return e;
}

}  // namespace

Result<uint64_t> CheckMemoryBudget(const LoaderOptions& o, const ShardTable& m) {
  if (o.memory_budget == 0) return o.mapped_keep_bytes;
  const MemoryEstimate e = Estimate(o, m);
  if (e.total() <= o.memory_budget)
    return std::min<uint64_t>(o.mapped_keep_bytes, o.memory_budget - e.total());
  return Status::Config("loader: the options need about " + std::to_string(e.total() >> 20) +
                        " MiB (batch slots " + std::to_string(e.slots >> 20) +
                        " MiB, read buffers " + std::to_string(e.read >> 20) +
                        " MiB, buffered samples " + std::to_string(e.buffered >> 20) +
                        " MiB), over memory_budget " + std::to_string(o.memory_budget >> 20) +
                        " MiB; lower prefetch, batch_size, open_shards, read_chunk or "
                        "shuffle_buffer");
}

}  // namespace shardstream::internal
