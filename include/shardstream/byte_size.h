// Byte sizes written by people: "512MiB", "0.2MB", "10 GB", "64k", "1000".
// The one parser behind every size on the command line and in Python, so a
// unit means the same thing everywhere:
//
//   B or no unit                     bytes
//   k K KB  M MB  G GB  T TB  P PB  E EB   powers of 1000 (SI, as disks and S3 count)
//   Ki KiB  Mi MiB  Gi GiB  Ti TiB  Pi PiB  Ei EiB   powers of 1024
//
// Units are case-insensitive ("mb" = "MB", "gib" = "GiB"); "b" is bytes,
// never bits. The number may have a decimal part ("1.5GiB"); the result is
// rounded down to whole bytes. Space between number and unit is allowed.
//
// Thread-safety: pure functions.
#ifndef SHARDSTREAM_BYTE_SIZE_H_
#define SHARDSTREAM_BYTE_SIZE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "shardstream/export.h"
#include "shardstream/result.h"

namespace shardstream {

// On success returns the number of bytes. On failure returns kConfig naming
// the text and the units accepted (empty, negative, an unknown unit, more
// than 9 decimal places, or more than 2^64 - 1 bytes).
SHARDSTREAM_EXPORT Result<uint64_t> ParseByteSize(std::string_view text);

// A short human form that ParseByteSize reads back to within rounding:
// "512 MiB" for exact powers of 1024, else "1.23 GB" (powers of 1000).
SHARDSTREAM_EXPORT std::string FormatByteSize(uint64_t bytes);

}  // namespace shardstream

#endif  // SHARDSTREAM_BYTE_SIZE_H_
