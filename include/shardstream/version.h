// The library's version, for logs, the tool's --version and compatibility
// checks. Thread-safety: pure function.
#ifndef SHARDSTREAM_VERSION_H_
#define SHARDSTREAM_VERSION_H_

#include <string_view>

#include "shardstream/export.h"

namespace shardstream {
// "MAJOR.MINOR.PATCH" of the library actually linked.
SHARDSTREAM_EXPORT std::string_view Version();
}  // namespace shardstream

#endif  // SHARDSTREAM_VERSION_H_
