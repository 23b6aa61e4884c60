#include "pipeline/first_sample.h"

#include <memory>
#include <string>

#include "shardstream/shard_cache.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"

namespace shardstream::internal {

Result<std::vector<FieldSpec>> FieldsOfFirstSample(const LoaderOptions& o,
                                                   const Manifest& manifest) {
  if (manifest.shards.empty()) return Status::Config("loader: the data set has no shards");
  TarReaderOptions t;
  t.policy = ErrorPolicy::kRaise;
  t.engine = o.engine;
  t.source = o.source;
  t.build_index = false;
  // The first shard that holds a sample (empty shards are passed over).
  Sample s;
  bool got = false;
  for (size_t i = 0; i < manifest.shards.size() && !got; ++i) {
    const ShardEntry& e = manifest.shards[i];
    if (e.nsamples == 0) continue;
    std::unique_ptr<TarReader> reader;
    if (o.cache != nullptr && o.cache->options().mode != CacheMode::kOff) {
      SHARDSTREAM_ASSIGN_OR_RETURN(auto stream, o.cache->Open(ShardRef::FromEntry(e)));
      SHARDSTREAM_ASSIGN_OR_RETURN(
          reader, TarReader::Open(std::unique_ptr<InputStream>(std::move(stream)), t));
    } else {
      SHARDSTREAM_ASSIGN_OR_RETURN(reader,
                                   TarReader::Open(e.resolved.empty() ? e.url : e.resolved, t));
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(got, reader->Next(&s));
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
  return fields;
}

}  // namespace shardstream::internal
