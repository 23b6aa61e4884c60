// The sources DefaultSource() (default_source.cc) routes "s3" and "pipe" to
// that have no public factory.
#ifndef SHARDSTREAM_SOURCES_BUILTIN_SOURCES_H_
#define SHARDSTREAM_SOURCES_BUILTIN_SOURCES_H_

#include <memory>
#include <string>

#include "shardstream/source.h"

namespace shardstream::internal {

// The "s3" source of DefaultSource(): configured from the environment.
std::shared_ptr<Source> NewEnvironmentS3Source();
// The "pipe" source: "pipe:COMMAND" streams the command's stdout.
std::shared_ptr<Source> NewPipeSource();

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SOURCES_BUILTIN_SOURCES_H_
