#include "tar/index_lookup.h"

#include "shardstream/rows.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"

namespace shardstream::internal {

Result<IndexLookup> LoadOrBuildSampleIndex(const std::string& url, Source* source,
                                           const std::string& index_dir, bool build,
                                           bool need_fields, bool rows, int64_t shard_size) {
  IndexLookup out;
  auto read = ReadSampleIndex(url, source, index_dir, shard_size);
  if (!read.ok() && read.status().code() != StatusCode::kNotFound &&
      read.status().code() != StatusCode::kCorrupt)
    return read.status();
  const bool may_build = build && !LocalPath(url).empty();
  if (read.ok() && (!need_fields || read->has_fields() || !may_build)) {
    out.index = std::move(*read);
    out.found = true;
    return out;
  }
  if (!may_build) {
    out.missing = read.status();
    return out;
  }
  TarReaderOptions t;
  t.source = source;
  auto built = rows ? BuildJsonlIndex(url, t) : BuildSampleIndex(url, t);
  if (!built.ok()) {
    out.missing = built.status();
    out.build_failed = true;
    return out;
  }
  out.index = std::move(*built);
  out.found = out.built = true;
  out.kept = WriteSampleIndex(out.index, url, source, index_dir);
  return out;
}

}  // namespace shardstream::internal
