#include "shardstream/version.h"

namespace shardstream {
std::string_view Version() { return SHARDSTREAM_VERSION; }
}  // namespace shardstream
