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
  const ShardEntry& first = manifest.shards.front();
  TarReaderOptions t;
  t.policy = ErrorPolicy::kRaise;
  t.engine = o.engine;
  t.source = o.source;
  t.build_index = false;
  std::unique_ptr<TarReader> reader;
  if (o.cache != nullptr && o.cache->options().mode != CacheMode::kOff) {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto stream, o.cache->Open(ShardRef::FromEntry(first)));
    SHARDSTREAM_ASSIGN_OR_RETURN(
        reader, TarReader::Open(std::unique_ptr<InputStream>(std::move(stream)), t));
  } else {
    const std::string& url = first.resolved.empty() ? first.url : first.resolved;
    SHARDSTREAM_ASSIGN_OR_RETURN(reader, TarReader::Open(url, t));
  }
  Sample s;
  SHARDSTREAM_ASSIGN_OR_RETURN(bool got, reader->Next(&s));
  if (!got)
    return Status::Config("loader: no fields given, and the first shard holds no sample to take "
                          "them from: " + RedactUrl(first.resolved.empty() ? first.url
                                                                           : first.resolved));
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
