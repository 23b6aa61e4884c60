#include "tar/tar_format.h"

#include <cstdio>
#include <cstring>

#if defined(__SSE2__) && defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace shardstream::internal {

bool IsZeroBlock(const char* block) {
  // Asked of every header, whose name never starts with a NUL.
  if (block[0] != 0) return false;
  static const char kZero[kTarBlock] = {};
  return std::memcmp(block, kZero, kTarBlock) == 0;
}

namespace {
// Sum of the 512 bytes. This runs once per member and is on the hot path
// for small samples. SSE2 (every x86-64): PSADBW against zero sums 8 bytes
// into each 64-bit half, 16 bytes per instruction (_mm_cvtsi128_si64 needs
// x86-64).
#if defined(__SSE2__) && defined(__x86_64__)
uint64_t ByteSum(const char* block) {
  const __m128i zero = _mm_setzero_si128();
  __m128i acc = _mm_setzero_si128();
  for (size_t i = 0; i < kTarBlock; i += 16) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + i));
    acc = _mm_add_epi64(acc, _mm_sad_epu8(v, zero));
  }
  return static_cast<uint64_t>(_mm_cvtsi128_si64(acc)) +
         static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)));
}
#else
// Eight at a time: pairs of bytes are added into 16-bit lanes (64 words x
// 2 x 255 < 65536, so no lane overflows).
uint64_t ByteSum(const char* block) {
  constexpr uint64_t kLo = 0x00ff00ff00ff00ffull;
  uint64_t lanes = 0;
  for (size_t i = 0; i < kTarBlock; i += 8) {
    uint64_t w;
    std::memcpy(&w, block + i, 8);
    lanes += (w & kLo) + ((w >> 8) & kLo);
  }
  return (lanes & 0xffff) + ((lanes >> 16) & 0xffff) + ((lanes >> 32) & 0xffff) + (lanes >> 48);
}
#endif
}  // namespace

bool ChecksumMatches(const char* block) {
  auto stored = ParseNumber(block + Ustar::kChksum, 8);
  if (!stored) return false;
  // The checksum counts its own field as eight spaces.
  const auto* u = reinterpret_cast<const unsigned char*>(block);
  uint64_t usum = ByteSum(block);
  for (size_t i = Ustar::kChksum; i < Ustar::kChksum + 8; ++i) usum -= u[i];
  usum += 8 * ' ';
  if (*stored == usum) return true;
  // Some old writers summed signed chars.
  int64_t ssum = 0;
  for (size_t i = 0; i < kTarBlock; ++i) ssum += static_cast<signed char>(block[i]);
  for (size_t i = Ustar::kChksum; i < Ustar::kChksum + 8; ++i)
    ssum -= static_cast<signed char>(block[i]);
  ssum += 8 * ' ';
  return static_cast<int64_t>(*stored) == ssum;
}

std::optional<uint64_t> ParseNumber(const char* field, size_t len) {
  const auto* p = reinterpret_cast<const unsigned char*>(field);
  if (len > 0 && (p[0] & 0x80)) {
    // GNU base-256: the rest of the first byte and the following bytes, big
    // endian. Negative values (0xff lead byte) are never valid sizes here.
    if (p[0] == 0xff) return std::nullopt;
    uint64_t v = p[0] & 0x7f;
    for (size_t i = 1; i < len; ++i) {
      if (v >> 56) return std::nullopt;  // would overflow
      v = (v << 8) | p[i];
    }
    return v;
  }
  // Leading spaces (and NULs: an all-NUL field means 0, as some writers
  // leave unused fields empty).
  size_t i = 0;
  while (i < len && (p[i] == ' ' || p[i] == 0)) ++i;
  uint64_t v = 0;
  bool any = false;
  for (; i < len; ++i) {
    if (p[i] >= '0' && p[i] <= '7') {
      if (v >> 60) return std::nullopt;
      v = v * 8 + (p[i] - '0');
      any = true;
    } else {
      break;
    }
  }
  for (; i < len; ++i)
    if (p[i] != ' ' && p[i] != 0) return std::nullopt;
  if (!any) return 0;
  return v;
}

std::string_view FieldString(const char* field, size_t len) {
  const void* nul = std::memchr(field, 0, len);
  return std::string_view(field, nul ? static_cast<const char*>(nul) - field : len);
}

void HeaderPath(const char* block, std::string* out) {
  std::string_view name = FieldString(block + Ustar::kName, Ustar::kNameLen);
  // POSIX ustar ("ustar\0") has a prefix field; old GNU ("ustar  \0") uses
  // that space for other things.
  if (std::memcmp(block + Ustar::kMagic, "ustar\0", 6) == 0) {
    std::string_view prefix = FieldString(block + Ustar::kPrefix, Ustar::kPrefixLen);
    if (!prefix.empty()) {
      out->assign(prefix.data(), prefix.size());
      *out += '/';
      out->append(name.data(), name.size());
      return;
    }
  }
  out->assign(name.data(), name.size());
}

std::string HeaderPath(const char* block) {
  std::string out;
  HeaderPath(block, &out);
  return out;
}

bool ParsePax(std::string_view data, PaxAttributes* attrs, std::string* why) {
  while (!data.empty()) {
    if (data.find_first_not_of('\0') == std::string_view::npos) break;  // padding
    size_t sp = data.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp > 20) {
      *why = "pax record without a length";
      return false;
    }
    uint64_t len = 0;
    for (size_t i = 0; i < sp; ++i) {
      if (data[i] < '0' || data[i] > '9') {
        *why = "pax record length is not a number";
        return false;
      }
      len = len * 10 + static_cast<uint64_t>(data[i] - '0');
    }
    if (len <= sp + 1 || len > data.size() || data[len - 1] != '\n') {
      *why = "pax record length does not match its text";
      return false;
    }
    std::string_view rec = data.substr(sp + 1, len - sp - 2);
    size_t eq = rec.find('=');
    if (eq == std::string_view::npos) {
      *why = "pax record without '='";
      return false;
    }
    std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1);
    if (key == "path") {
      attrs->path = std::string(value);
    } else if (key == "linkpath") {
      attrs->linkpath = std::string(value);
    } else if (key == "size") {
      uint64_t v = 0;
      if (value.empty() || value.size() > 19) {
        *why = "pax size is not a number";
        return false;
      }
      for (char c : value) {
        if (c < '0' || c > '9') {
          *why = "pax size is not a number";
          return false;
        }
        v = v * 10 + static_cast<uint64_t>(c - '0');
      }
      attrs->size = v;
    }
    data.remove_prefix(len);
  }
  return true;
}

namespace {
void PutOctal(char* field, size_t len, uint64_t v) {
  // len-1 digits, zero padded, then NUL.
  std::snprintf(field, len, "%0*llo", static_cast<int>(len - 1),
                static_cast<unsigned long long>(v));
}
}  // namespace

void FormatHeader(char* block, std::string_view path, uint64_t size, char typeflag,
                  uint64_t mtime) {
  std::memset(block, 0, kTarBlock);
  std::memcpy(block + Ustar::kName, path.data(), std::min(path.size(), Ustar::kNameLen));
  PutOctal(block + Ustar::kMode, 8, 0644);
  PutOctal(block + Ustar::kUid, 8, 0);
  PutOctal(block + Ustar::kGid, 8, 0);
  PutOctal(block + Ustar::kSize, 12, size);
  PutOctal(block + Ustar::kMtime, 12, mtime);
  block[Ustar::kTypeflag] = typeflag;
  std::memcpy(block + Ustar::kMagic, "ustar\0" "00", 8);
  std::memset(block + Ustar::kChksum, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < kTarBlock; ++i) sum += static_cast<unsigned char>(block[i]);
  std::snprintf(block + Ustar::kChksum, 8, "%06o", sum);
  block[Ustar::kChksum + 7] = ' ';
}

std::string PaxRecord(std::string_view key, std::string_view value) {
  size_t body = 1 + key.size() + 1 + value.size() + 1;  // " key=value\n"
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) ++len;
  std::string out = std::to_string(len);
  out += ' ';
  out += key;
  out += '=';
  out += value;
  out += '\n';
  return out;
}

}  // namespace shardstream::internal
