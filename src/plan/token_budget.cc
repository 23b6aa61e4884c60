#include "plan/token_budget.h"

#include <algorithm>

#include "plan/entry_format.h"
#include "shardstream/decode.h"
#include "shardstream/dtype.h"
#include "shardstream/mds.h"
#include "shardstream/url.h"
#include "tar/index_lookup.h"

namespace shardstream::internal {
namespace {

// An MDS shard has no sample index: its documents' token counts come from
// reading it once, for local shards (a remote set would be downloaded whole
// before the first batch).
Result<std::vector<int64_t>> MdsTokenPrefix(const std::string& url, const std::string& layout_json,
                                            const TokenOptions& tokens, Source* source) {
  if (LocalPath(url).empty())
    return Status(StatusCode::kConfig,
                  "loader: equal batches need every document's token count; the MDS shard " +
                      RedactUrl(url) + " is remote and MDS sets carry no counts: set "
                      "tokens.equal_batches=false, or copy the set to local disk",
                  RedactUrl(url));
  SHARDSTREAM_ASSIGN_OR_RETURN(MdsLayout layout, ParseMdsLayout(layout_json, url));
  Source* src = source ? source : DefaultSource().get();
  SHARDSTREAM_ASSIGN_OR_RETURN(auto in, src->OpenInputStream(url, 0));
  TarReaderOptions o;
  o.source = src;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto reader, OpenMdsReader(std::move(in), layout, o));
  std::vector<int64_t> pre{0};
  Sample s;
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(bool more, reader->Next(&s));
    if (!more) break;
    int64_t n = 0;
    if (const Field* f = s.Find(tokens.field)) {
      size_t payload = 0;
      auto npy = f->data.size() >= 6 && f->data.compare(0, 6, "\x93NUMPY") == 0
                     ? DecodeNpyHeader(f->data, f->data.size(), FieldContext{}, &payload)
                     : Result<DecodedField>(Status::NotFound(""));
      n = npy.ok() ? npy->elements()
                   : static_cast<int64_t>(f->data.size() / DTypeSize(tokens.input_dtype));
    }
    pre.push_back(pre.back() + n);
  }
  return pre;
}

}  // namespace

Status TokenBudget::Load(const ShardTable& manifest, const TokenOptions& tokens, Source* source,
                         const std::string& index_dir) {
  if (loaded()) return Status::OK();
  std::vector<std::vector<int64_t>> out(manifest.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const ShardEntry e = manifest[i];
    const std::string& url = e.resolved.empty() ? e.url : e.resolved;
    if (FormatOf(e.extra) == EntryFormat::kMds) {
      SHARDSTREAM_ASSIGN_OR_RETURN(out[i], MdsTokenPrefix(url, e.extra.at(kMdsLayoutKey), tokens, source));
      continue;
    }
    auto found = LoadOrBuildSampleIndex(url, source, index_dir, /*build=*/true,
                                        /*need_fields=*/true);
    const Status why = !found.ok() ? found.status() : found->missing;
    if (!why.ok())
      return why.WithContext("loader: equal batches need every document's token count, "
                             "from the shard's sample index", RedactUrl(url));
    const SampleIndex& index = found->index;
    if (!index.has_fields())
      return Status::Config("loader: equal batches need every document's token count, but the index "
                            "of " + RedactUrl(url) + " is a version 1 index without field records; "
                            "rebuild it (shardstream index), or set tokens.equal_batches=false");
    if (e.nsamples >= 0 && static_cast<int64_t>(index.samples.size()) != e.nsamples)
      return Status::Corrupt("loader: the index of " + RedactUrl(url) + " lists " +
                             std::to_string(index.samples.size()) + " samples; the manifest says " +
                             std::to_string(e.nsamples));
    std::vector<int64_t>& pre = out[i];
    pre.assign(index.samples.size() + 1, 0);
    for (size_t k = 0; k < index.samples.size(); ++k) {
      const SampleIndexEntry& s = index.samples[k];
      int64_t n = 0;
      for (uint64_t f = s.first_field; f < s.first_field + s.nfields && f < index.fields.size(); ++f) {
        const SampleIndexField& r = index.fields[f];
        if (r.name != tokens.field) continue;
        n = r.ndim >= 0 ? static_cast<int64_t>(r.count)
                        : static_cast<int64_t>(r.size / DTypeSize(tokens.input_dtype));
        break;
      }
      pre[k + 1] = pre[k] + n;
    }
  }
  prefix_ = std::move(out);
  loaded_ = true;
  return Status::OK();
}

int64_t TokenBudget::Rows(const ConsumerPlan& p, const Locate& locate,
                          const Partial& partial) const {
  const int64_t L = seq_len_;
  int64_t total = 0, rows = 0;
  // Entry and sample numbers of the epoch's list, to the manifest's.
  auto length = [&](int64_t shard, int64_t i) {
    const auto [real, base] = locate(shard);
    return Tokens(real, i + base, i + base + 1) + eod_;
  };
  for (const ShardRange& r : p.ranges) {
    const auto [real, base] = locate(r.shard);
    if (pack_) {
      total += Tokens(real, r.first + base, r.end + base) + eod_ * r.size();
    } else {
      for (int64_t i = r.first; i < r.end; ++i) rows += (length(r.shard, i) + L - 1) / L;
    }
    // Partly delivered documents go on where they stopped.
    for (auto it = partial.lower_bound({r.shard, r.first});
         it != partial.end() && it->first.first == r.shard && it->first.second < r.end; ++it) {
      const int64_t n = length(r.shard, it->first.second);
      const int64_t left = std::max<int64_t>(0, n - it->second);
      if (pack_) {
        total -= n - left;
      } else {
        rows += (left + L - 1) / L - (n + L - 1) / L;
      }
    }
  }
  return pack_ ? (total + L - 1) / L : rows;
}

int64_t TokenBudget::LeastBatches(const EpochPlan& all, int world_size, int num_workers,
                                  const Locate& locate, const Partial& partial) const {
  int64_t least = -1;
  for (int r = 0; r < world_size; ++r)
    for (int w = 0; w < num_workers; ++w) {
      const int64_t n = Batches(Rows(all.Consumer(r, w), locate, partial));
      least = least < 0 ? n : std::min(least, n);
    }
  return least;
}

}  // namespace shardstream::internal
