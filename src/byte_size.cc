#include "shardstream/byte_size.h"

#include <cctype>
#include <cstdio>

namespace shardstream {
namespace {

constexpr char kUnits[] =
    "B, KB, MB, GB, TB, PB, EB (powers of 1000) or KiB, MiB, GiB, TiB, PiB, EiB (powers of 1024)";

Status Bad(std::string_view text, const std::string& why) {
  return Status::Config("size '" + std::string(text) + "': " + why + "; expected a number with " +
                        "an optional unit " + kUnits + ", e.g. 512MiB or 0.2GB");
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Bytes per unit, or 0 for an unknown unit.
unsigned __int128 UnitBytes(const std::string& unit) {
  if (unit.empty() || unit == "b") return 1;
  static const char kPrefixes[] = "kmgtpe";
  const char* p = nullptr;
  for (const char* q = kPrefixes; *q; ++q)
    if (unit[0] == *q) p = q;
  if (p == nullptr) return 0;
  const int power = static_cast<int>(p - kPrefixes) + 1;
  const std::string rest = unit.substr(1);
  unsigned __int128 base;
  if (rest.empty() || rest == "b")
    base = 1000;
  else if (rest == "i" || rest == "ib")
    base = 1024;
  else
    return 0;
  unsigned __int128 m = 1;
  for (int i = 0; i < power; ++i) m *= base;
  return m;
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text) {
  size_t i = 0;
  auto skip_space = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  skip_space();
  if (i < text.size() && text[i] == '-') return Bad(text, "a size cannot be negative");
  if (i < text.size() && text[i] == '+') ++i;
  unsigned __int128 whole = 0, frac = 0, frac_scale = 1;
  size_t digits = 0, frac_digits = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++digits) {
    whole = whole * 10 + static_cast<unsigned>(text[i] - '0');
    if (whole > ~uint64_t{0}) return Bad(text, "more than 2^64 - 1 bytes");
  }
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (++frac_digits > 9) return Bad(text, "more than 9 decimal places");
      frac = frac * 10 + static_cast<unsigned>(text[i] - '0');
      frac_scale *= 10;
    }
  }
  if (digits + frac_digits == 0) return Bad(text, "no number");
  skip_space();
  size_t end = text.size();
  while (end > i && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  const std::string unit = Lower(text.substr(i, end - i));
  const unsigned __int128 mult = UnitBytes(unit);
  if (mult == 0) return Bad(text, "unknown unit '" + std::string(text.substr(i, end - i)) + "'");
  const unsigned __int128 bytes = whole * mult + frac * mult / frac_scale;
  if (bytes > ~uint64_t{0}) return Bad(text, "more than 2^64 - 1 bytes");
  return static_cast<uint64_t>(bytes);
}

std::string FormatByteSize(uint64_t bytes) {
  static const char* kBinary[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  static const char* kDecimal[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  int p = 0;
  uint64_t v = bytes;
  while (v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++p;
  }
  char buf[64];
  if (p > 0 || bytes < 1000) {
    std::snprintf(buf, sizeof(buf), "%llu %s", static_cast<unsigned long long>(v), kBinary[p]);
    return buf;
  }
  double d = static_cast<double>(bytes);
  p = 0;
  // 999.5 and up prints as 1000 with 3 digits: the next unit then.
  while (p < 6 && d >= 999.5) {
    d /= 1000;
    ++p;
  }
  std::snprintf(buf, sizeof(buf), "%.3g %s", d, kDecimal[p]);
  return buf;
}

}  // namespace shardstream
