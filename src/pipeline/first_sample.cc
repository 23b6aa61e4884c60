#include "pipeline/first_sample.h"

#include <map>
#include <memory>
#include <string>

#include "common/log.h"
#include "pipeline/mds_fields.h"
#include "plan/entry_format.h"
#include "shardstream/rows.h"
#include "shardstream/shard_cache.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"

namespace shardstream::internal {

namespace {
// Samples of the first shard whose fields are looked at.
constexpr int kSampledForFields = 64;
}  // namespace

Result<std::unique_ptr<InputStream>> OpenForFields(const LoaderOptions& o, const ShardEntry& e) {
  if (o.cache != nullptr && o.cache->options().mode != CacheMode::kOff) {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto stream, o.cache->Open(ShardRef::FromEntry(e)));
    return std::unique_ptr<InputStream>(std::move(stream));
  }
  Source& source = o.source ? *o.source : *DefaultSource();
  return source.OpenInputStream(e.resolved.empty() ? e.url : e.resolved);
}

Result<std::vector<FieldSpec>> FieldsOfFirstSample(const LoaderOptions& o,
                                                   const ShardTable& manifest) {
  if (manifest.empty()) return Status::Config("loader: the data set has no shards");
  TarReaderOptions t;
  t.policy = ErrorPolicy::kRaise;
  t.engine = o.engine;
  t.source = o.source;
  t.build_index = false;
  // The first shard that holds a sample (empty shards are passed over).
  Sample s;
  bool got = false;
  std::unique_ptr<TarReader> first_reader;
  for (size_t i = 0; i < manifest.size() && !got; ++i) {
    if (manifest.nsamples(i) == 0) continue;
    const ShardEntry e = manifest[i];
    const EntryFormat format = FormatOf(e.extra);
    if (format == EntryFormat::kMds) {
      // An MDS data set: its columns, no sample needed (their encodings type
      // them: ResolveMdsFields).
      SHARDSTREAM_ASSIGN_OR_RETURN(auto columns, MdsColumnsOf(manifest));
      return MdsDefaultFields(columns);
    }
    std::unique_ptr<TarReader> reader;
    if (format == EntryFormat::kParquet) {
      if (!o.parquet) return Status::Config("loader: Parquet is read from the Python package (pyarrow)");
      SHARDSTREAM_ASSIGN_OR_RETURN(reader, o.parquet.open(e.resolved.empty() ? e.url : e.resolved, o.source, 0, ErrorPolicy::kRaise));
    } else if (format == EntryFormat::kJsonl) {
      SHARDSTREAM_ASSIGN_OR_RETURN(auto in, OpenForFields(o, e));
      SHARDSTREAM_ASSIGN_OR_RETURN(reader, OpenJsonlReader(std::move(in), t));
    } else if (o.cache != nullptr && o.cache->options().mode != CacheMode::kOff) {
      SHARDSTREAM_ASSIGN_OR_RETURN(auto stream, o.cache->Open(ShardRef::FromEntry(e)));
      SHARDSTREAM_ASSIGN_OR_RETURN(
          reader, TarReader::Open(std::unique_ptr<InputStream>(std::move(stream)), t));
    } else {
      SHARDSTREAM_ASSIGN_OR_RETURN(reader,
                                   TarReader::Open(e.resolved.empty() ? e.url : e.resolved, t));
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(got, reader->Next(&s));
    if (got) first_reader = std::move(reader);
  }
  if (!got)
    return Status::Config("loader: no fields given, and no shard of the data set holds a sample "
                          "to take them from");
  std::vector<FieldSpec> fields;
  for (const Field& f : s.fields) {
    FieldSpec spec;
    spec.name = f.name;
    fields.push_back(std::move(spec));
  }
  if (fields.empty())
    return Status::Config("loader: no fields given, and the first sample ('" + s.key + "' in " +
                          s.url + ") has none");
  // The next samples of that shard: a field some of them lack is optional
  // (batches carry "<field>.present"), so a later sample without it is not
  // an error; a field the first sample lacks cannot be typed from it and is
  // left out, with a warning (name it in fields= to have it).
  const std::string first_key = s.key;
  std::map<std::string, int> later;  // fields the first sample lacks: samples with them
  int sampled = 1;
  for (; sampled < kSampledForFields; ++sampled) {
    auto more = first_reader->Next(&s);
    if (!more.ok() || !*more) break;  // an error here is the epoch's to report
    for (FieldSpec& spec : fields)
      if (s.FindAny(spec.name) == nullptr) spec.optional = true;
    for (const Field& f : s.fields) {
      bool known = false;
      for (const FieldSpec& spec : fields) known = known || spec.name == f.name;
      if (!known) later[f.name]++;
    }
  }
  for (const auto& [name, n] : later)
    internal::Log().warn("loader: no fields given; field '{}' is in {} of the first {} samples but not "
                         "in the first ('{}'), so it is not batched: name it in fields= (optional) "
                         "to have it",
                         name, n, sampled, first_key);
  return fields;
}

}  // namespace shardstream::internal
