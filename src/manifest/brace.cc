// Brace patterns, as WebDataset and bash write them: "data-{000000..000999}.tar",
// "{a,b}/part-{0..9}.tar". A pattern stands in for a manifest, so the shards'
// sizes and sample counts are unknown.
#include <cstdlib>
#include <string>
#include <unordered_set>

#include "shardstream/manifest.h"
#include "shardstream/url.h"

namespace shardstream {
namespace {

constexpr size_t kMaxNames = 10'000'000;

Status PatternError(std::string_view pattern, const std::string& what) {
  return Status(StatusCode::kConfig,
                "brace pattern " + RedactUrl(pattern) + ": " + what, RedactUrl(pattern));
}

bool AllDigits(std::string_view s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// The alternatives of one group's body ("000..010" or "a,b,c"); an empty
// result means the body is not an expanding group.
Result<std::vector<std::string>> GroupAlternatives(std::string_view body,
                                                   std::string_view pattern) {
  std::vector<std::string> out;
  size_t dots = body.find("..");
  if (dots != std::string_view::npos && body.find(',') == std::string_view::npos) {
    std::string_view a = body.substr(0, dots), b = body.substr(dots + 2);
    if (!AllDigits(a) || !AllDigits(b))
      return PatternError(pattern, "range {" + std::string(body) +
                                       "} needs two non-negative integers");
    int64_t lo = std::strtoll(std::string(a).c_str(), nullptr, 10);
    int64_t hi = std::strtoll(std::string(b).c_str(), nullptr, 10);
    bool padded = (a.size() > 1 && a[0] == '0') || (b.size() > 1 && b[0] == '0');
    size_t width = padded ? std::max(a.size(), b.size()) : 0;
    uint64_t n = static_cast<uint64_t>(lo <= hi ? hi - lo : lo - hi) + 1;
    if (n > kMaxNames) return PatternError(pattern, "expands to more than 10,000,000 names");
    out.reserve(n);
    int64_t step = lo <= hi ? 1 : -1;
    for (int64_t v = lo;; v += step) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      out.push_back(std::move(s));
      if (v == hi) break;
    }
    return out;
  }
  if (body.find(',') != std::string_view::npos) {
    size_t start = 0;
    while (true) {
      size_t comma = body.find(',', start);
      out.emplace_back(body.substr(start, comma == std::string_view::npos ? comma : comma - start));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

}  // namespace

bool IsBracePattern(std::string_view spec) {
  size_t open = spec.find('{');
  while (open != std::string_view::npos) {
    size_t close = spec.find('}', open);
    if (close == std::string_view::npos) return false;
    std::string_view body = spec.substr(open + 1, close - open - 1);
    if (body.find("..") != std::string_view::npos || body.find(',') != std::string_view::npos)
      return true;
    open = spec.find('{', close);
  }
  return false;
}

Result<std::vector<std::string>> ExpandBraces(std::string_view pattern) {
  // Literal pieces and groups alternate: lit0 {g0} lit1 {g1} ... litN.
  std::vector<std::string> literals(1);
  std::vector<std::vector<std::string>> groups;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '}') return PatternError(pattern, "'}' without '{' at offset " + std::to_string(i));
    if (c != '{') {
      literals.back().push_back(c);
      continue;
    }
    size_t close = pattern.find('}', i);
    size_t nested = pattern.find('{', i + 1);
    if (close == std::string_view::npos)
      return PatternError(pattern, "'{' at offset " + std::to_string(i) + " is never closed");
    if (nested != std::string_view::npos && nested < close)
      return PatternError(pattern, "nested braces are not supported");
    std::string_view body = pattern.substr(i + 1, close - i - 1);
    SHARDSTREAM_ASSIGN_OR_RETURN(auto alts, GroupAlternatives(body, pattern));
    if (alts.empty()) {  // "{x}": kept literally, as bash does
      literals.back() += "{" + std::string(body) + "}";
    } else {
      groups.push_back(std::move(alts));
      literals.emplace_back();
    }
    i = close;
  }
  uint64_t total = 1;
  for (const auto& g : groups) {
    total *= g.size();
    if (total > kMaxNames) return PatternError(pattern, "expands to more than 10,000,000 names");
  }
  std::vector<std::string> out;
  out.reserve(total);
  std::vector<size_t> idx(groups.size(), 0);
  for (uint64_t n = 0; n < total; ++n) {
    std::string s = literals[0];
    for (size_t g = 0; g < groups.size(); ++g) {
      s += groups[g][idx[g]];
      s += literals[g + 1];
    }
    out.push_back(std::move(s));
    // Odometer: the last group varies fastest.
    for (size_t g = groups.size(); g-- > 0;) {
      if (++idx[g] < groups[g].size()) break;
      idx[g] = 0;
    }
  }
  return out;
}

Result<Manifest> ManifestFromPattern(std::string_view pattern) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto names, ExpandBraces(pattern));
  Manifest m;
  m.url = std::string(pattern);
  m.shards.reserve(names.size());
  for (auto& name : names) {
    ShardEntry e;
    e.resolved = name;
    e.url = std::move(name);
    m.shards.push_back(std::move(e));
  }
  // A repeated list alternative ("{a,a}") would name a shard twice.
  std::unordered_set<std::string_view> seen;
  seen.reserve(m.shards.size());
  for (const auto& e : m.shards)
    if (!seen.insert(e.url).second)
      return PatternError(pattern, "names shard " + RedactUrl(e.url) + " twice");
  return m;
}

}  // namespace shardstream
