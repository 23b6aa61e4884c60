#include "sources/builtin_sources.h"

#include "shardstream/http_source.h"

namespace shardstream::internal {

void RegisterBuiltinSources(const RegisterFn& reg) {
  // One client (one connection pool) for both schemes.
  std::shared_ptr<Source> http = NewHttpSource();
  reg("http", http);
  reg("https", http);
  reg("s3", NewEnvironmentS3Source());
  reg("pipe", NewPipeSource());
}

}  // namespace shardstream::internal
