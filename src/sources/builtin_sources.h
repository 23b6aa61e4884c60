// The network and process sources that DefaultSource() routes to: "http",
// "https", "s3" and "pipe". Called once by the router when it is first built
// (no static initializers; nothing connects until a url is opened).
#ifndef SHARDSTREAM_SOURCES_BUILTIN_SOURCES_H_
#define SHARDSTREAM_SOURCES_BUILTIN_SOURCES_H_

#include <functional>
#include <memory>
#include <string>

#include "shardstream/source.h"

namespace shardstream::internal {

using RegisterFn = std::function<void(const std::string& scheme, std::shared_ptr<Source>)>;
void RegisterBuiltinSources(const RegisterFn& reg);

// The "s3" source of DefaultSource(): configured from the environment.
std::shared_ptr<Source> NewEnvironmentS3Source();
// The "pipe" source: "pipe:COMMAND" streams the command's stdout.
std::shared_ptr<Source> NewPipeSource();

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SOURCES_BUILTIN_SOURCES_H_
