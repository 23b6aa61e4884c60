// What a manifest entry's file holds, read from its extra fields: one rule
// for every place that asks (the loader's lanes and field probes, the data
// set's checks, the token budget, `shardstream verify`).
#ifndef SHARDSTREAM_PLAN_ENTRY_FORMAT_H_
#define SHARDSTREAM_PLAN_ENTRY_FORMAT_H_

#include <cstdint>
#include <map>
#include <string>

#include "shardstream/mds.h"
#include "shardstream/rows.h"

namespace shardstream::internal {

enum class EntryFormat : uint8_t { kTar, kMds, kJsonl, kParquet };

inline EntryFormat FormatOf(const std::map<std::string, std::string>& extra) {
  if (extra.count(kMdsLayoutKey) > 0) return EntryFormat::kMds;
  const auto rows = extra.find(kRowsFormatKey);
  if (rows == extra.end()) return EntryFormat::kTar;
  return rows->second == kRowsParquet ? EntryFormat::kParquet : EntryFormat::kJsonl;
}

// Rows of records (rows.h): JSON Lines or Parquet.
inline bool IsRows(EntryFormat f) { return f == EntryFormat::kJsonl || f == EntryFormat::kParquet; }

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PLAN_ENTRY_FORMAT_H_
