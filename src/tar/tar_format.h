// The bytes of a tar header block (POSIX ustar, pax extensions, GNU long
// names): parsing for the fast reader and formatting for ShardWriter.
#ifndef SHARDSTREAM_TAR_TAR_FORMAT_H_
#define SHARDSTREAM_TAR_TAR_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shardstream/result.h"

namespace shardstream::internal {

constexpr size_t kTarBlock = 512;

// Offsets of the ustar header fields.
struct Ustar {
  static constexpr size_t kName = 0, kNameLen = 100;
  static constexpr size_t kMode = 100, kUid = 108, kGid = 116;
  static constexpr size_t kSize = 124, kSizeLen = 12;
  static constexpr size_t kMtime = 136, kChksum = 148, kTypeflag = 156;
  static constexpr size_t kLinkname = 157, kMagic = 257, kVersion = 263;
  static constexpr size_t kUname = 265, kGname = 297, kPrefix = 345, kPrefixLen = 155;
};

inline uint64_t PaddedSize(uint64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

bool IsZeroBlock(const char* block);
// True when the stored checksum matches (unsigned sum, or the signed sum that
// some old writers used).
bool ChecksumMatches(const char* block);
// A numeric field: octal (NUL/space terminated or padded) or GNU base-256.
// Returns nullopt for anything else (a hostile or broken header).
std::optional<uint64_t> ParseNumber(const char* field, size_t len);
// The ustar name joined with the prefix where the magic says "ustar".
std::string HeaderPath(const char* block);
// Same, reusing *out's storage.
void HeaderPath(const char* block, std::string* out);
// A string field up to its first NUL.
std::string_view FieldString(const char* field, size_t len);

// Pax extended header records ("<len> <key>=<value>\n").
struct PaxAttributes {
  std::optional<std::string> path;
  std::optional<std::string> linkpath;
  std::optional<uint64_t> size;
};
// Parses the records in `data`, adding to *attrs. Returns false with a reason
// in *why on a malformed record.
bool ParsePax(std::string_view data, PaxAttributes* attrs, std::string* why);

// Formatting (ShardWriter): a regular-file header with fixed metadata.
// `path` must fit in 100 bytes; size must fit in 11 octal digits (else pass
// 0 and a pax size record).
void FormatHeader(char* block, std::string_view path, uint64_t size, char typeflag,
                  uint64_t mtime);
// One pax record with its self-inclusive length prefix.
std::string PaxRecord(std::string_view key, std::string_view value);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_TAR_TAR_FORMAT_H_
