// ResumeState: interval bookkeeping and the JSON and binary encodings.
#include "shardstream/resume_state.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "shardstream/checksum.h"

namespace shardstream {
namespace {

constexpr std::string_view kMagic = "SSRS";
constexpr std::string_view kJsonFormat = "shardstream-resume";

Status Corrupt(const std::string& what) { return Status::Corrupt("resume state: " + what); }

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

bool GetVarint(std::string_view* in, uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift <= 63 && !in->empty(); shift += 7) {
    uint8_t byte = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) {
      *v = result;
      return true;
    }
  }
  return false;
}

// Checks what both decoders must: a usable layout and intervals inside it.
Status Validate(ResumeState* s) {
  if (s->nodes < 1 || s->segment_length < 0 ||
      (s->segment_length > 0 && s->nodes > INT64_MAX / s->segment_length))
    return Corrupt("bad layout (nodes " + std::to_string(s->nodes) + ", segment_length " +
                   std::to_string(s->segment_length) + ")");
  for (const auto& [a, b] : s->delivered)
    if (a < 0 || b <= a || b > s->positions())
      return Corrupt("delivered interval [" + std::to_string(a) + ", " + std::to_string(b) +
                     ") outside [0, " + std::to_string(s->positions()) + ")");
  s->Normalize();
  return Status::OK();
}

}  // namespace

int64_t ResumeState::DeliveredCount() const {
  int64_t n = 0;
  for (const auto& [a, b] : delivered) n += b - a;
  return n;
}

void ResumeState::Normalize() {
  std::sort(delivered.begin(), delivered.end());
  size_t w = 0;
  for (size_t r = 0; r < delivered.size(); ++r) {
    if (delivered[r].first >= delivered[r].second) continue;
    if (w > 0 && delivered[r].first <= delivered[w - 1].second) {
      delivered[w - 1].second = std::max(delivered[w - 1].second, delivered[r].second);
    } else {
      delivered[w++] = delivered[r];
    }
  }
  delivered.resize(w);
}

void ResumeState::AddDelivered(int64_t begin, int64_t end) {
  if (begin >= end) return;
  // Appending in order is the common case; merge without a full sort.
  if (delivered.empty() || begin > delivered.back().second) {
    delivered.emplace_back(begin, end);
    return;
  }
  if (begin >= delivered.back().first) {
    delivered.back().second = std::max(delivered.back().second, end);
    return;
  }
  delivered.emplace_back(begin, end);
  Normalize();
}

bool ResumeState::SameEpoch(const ResumeState& o) const {
  return fingerprint == o.fingerprint && seed == o.seed && epoch == o.epoch && nodes == o.nodes &&
         segment_length == o.segment_length;
}

std::string ResumeState::ToJson() const {
  nlohmann::json j;
  j["format"] = kJsonFormat;
  j["version"] = kVersion;
  j["fingerprint"] = fingerprint;
  j["seed"] = seed;
  j["epoch"] = epoch;
  j["nodes"] = nodes;
  j["segment_length"] = segment_length;
  nlohmann::json d = nlohmann::json::array();
  for (const auto& [a, b] : delivered) d.push_back({a, b});
  j["delivered"] = std::move(d);
  return j.dump();
}

Result<ResumeState> ResumeState::FromJson(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt("not a JSON object");
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kJsonFormat)
    return Corrupt("missing \"format\": \"shardstream-resume\"");
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer()) return Corrupt("missing \"version\"");
  if (version->get<int64_t>() != kVersion)
    return Status::Config("resume state version " + version->dump() +
                          " is not supported (this build reads version " +
                          std::to_string(kVersion) + ")");
  ResumeState s;
  auto get_int = [&](const char* key, int64_t* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer())
      return Corrupt(std::string("missing integer \"") + key + "\"");
    *out = it->get<int64_t>();
    return Status::OK();
  };
  auto fp = j.find("fingerprint");
  if (fp == j.end() || !fp->is_string()) return Corrupt("missing \"fingerprint\"");
  s.fingerprint = fp->get<std::string>();
  auto seed = j.find("seed");
  if (seed == j.end() || !seed->is_number_unsigned()) return Corrupt("missing unsigned \"seed\"");
  s.seed = seed->get<uint64_t>();
  SHARDSTREAM_RETURN_IF_ERROR(get_int("epoch", &s.epoch));
  SHARDSTREAM_RETURN_IF_ERROR(get_int("nodes", &s.nodes));
  SHARDSTREAM_RETURN_IF_ERROR(get_int("segment_length", &s.segment_length));
  auto d = j.find("delivered");
  if (d == j.end() || !d->is_array()) return Corrupt("missing \"delivered\" array");
  for (const auto& pair : *d) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() ||
        !pair[1].is_number_integer())
      return Corrupt("\"delivered\" holds " + pair.dump() + ", expected [begin, end]");
    s.delivered.emplace_back(pair[0].get<int64_t>(), pair[1].get<int64_t>());
  }
  SHARDSTREAM_RETURN_IF_ERROR(Validate(&s));
  return s;
}

std::string ResumeState::ToBytes() const {
  std::string out(kMagic);
  out.push_back(static_cast<char>(kVersion));
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((seed >> (8 * i)) & 0xff));
  PutVarint(&out, static_cast<uint64_t>(epoch));
  PutVarint(&out, static_cast<uint64_t>(nodes));
  PutVarint(&out, static_cast<uint64_t>(segment_length));
  PutVarint(&out, fingerprint.size());
  out += fingerprint;
  ResumeState sorted = *this;  // deltas need sorted, merged intervals
  sorted.Normalize();
  PutVarint(&out, sorted.delivered.size());
  int64_t prev = 0;
  for (const auto& [a, b] : sorted.delivered) {
    PutVarint(&out, static_cast<uint64_t>(a - prev));  // gap since the last end
    PutVarint(&out, static_cast<uint64_t>(b - a));
    prev = b;
  }
  // A trailing xxh3_64 so that a damaged file is refused, not misread.
  std::string sum = ChecksumOf(out, "xxh3_64");
  out += sum.substr(sum.find(':') + 1);
  return out;
}

Result<ResumeState> ResumeState::FromBytes(std::string_view bytes) {
  constexpr size_t kSumLen = 16;
  if (bytes.size() < kMagic.size() + 1 + 8 + kSumLen || bytes.substr(0, 4) != kMagic)
    return Corrupt("not a binary resume state (bad magic or too short)");
  if (static_cast<uint8_t>(bytes[4]) != kVersion)
    return Status::Config("resume state version " + std::to_string(static_cast<uint8_t>(bytes[4])) +
                          " is not supported (this build reads version " +
                          std::to_string(kVersion) + ")");
  std::string_view body = bytes.substr(0, bytes.size() - kSumLen);
  std::string sum = ChecksumOf(body, "xxh3_64");
  if (sum.substr(sum.find(':') + 1) != bytes.substr(bytes.size() - kSumLen))
    return Corrupt("checksum mismatch (damaged or truncated)");
  std::string_view in = body.substr(5);
  ResumeState s;
  for (int i = 0; i < 8; ++i) s.seed |= static_cast<uint64_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  in.remove_prefix(8);
  uint64_t epoch, nodes, seglen, fplen, count;
  if (!GetVarint(&in, &epoch) || !GetVarint(&in, &nodes) || !GetVarint(&in, &seglen) ||
      !GetVarint(&in, &fplen) || fplen > in.size())
    return Corrupt("truncated header");
  s.epoch = static_cast<int64_t>(epoch);
  s.nodes = static_cast<int64_t>(nodes);
  s.segment_length = static_cast<int64_t>(seglen);
  s.fingerprint = std::string(in.substr(0, fplen));
  in.remove_prefix(fplen);
  if (!GetVarint(&in, &count) || count > in.size()) return Corrupt("truncated interval count");
  s.delivered.reserve(count);
  int64_t prev = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t gap, len;
    if (!GetVarint(&in, &gap) || !GetVarint(&in, &len)) return Corrupt("truncated intervals");
    if (gap > static_cast<uint64_t>(INT64_MAX - prev) ||
        len > static_cast<uint64_t>(INT64_MAX - prev) - gap)
      return Corrupt("interval out of range");
    int64_t a = prev + static_cast<int64_t>(gap);
    s.delivered.emplace_back(a, a + static_cast<int64_t>(len));
    prev = a + static_cast<int64_t>(len);
  }
  if (!in.empty()) return Corrupt(std::to_string(in.size()) + " unexpected trailing bytes");
  SHARDSTREAM_RETURN_IF_ERROR(Validate(&s));
  return s;
}

namespace {

// kConfig unless every state describes the epoch of states[0].
Status CheckSameEpoch(const std::vector<ResumeState>& states, const char* what) {
  if (states.empty()) return Status::Config(std::string(what) + ": no states");
  for (size_t i = 1; i < states.size(); ++i) {
    if (!states[i].SameEpoch(states[0]))
      return Status::Config("resume states " + std::to_string(i) +
                            " and 0 describe different epochs or data sets (fingerprint " +
                            states[i].fingerprint + " epoch " + std::to_string(states[i].epoch) +
                            " vs " + states[0].fingerprint + " epoch " +
                            std::to_string(states[0].epoch) + ")");
  }
  return Status::OK();
}

}  // namespace

Result<ResumeState> MergeResumeStates(const std::vector<ResumeState>& states) {
  SHARDSTREAM_RETURN_IF_ERROR(CheckSameEpoch(states, "MergeResumeStates"));
  ResumeState out = states[0];
  for (size_t i = 1; i < states.size(); ++i)
    out.delivered.insert(out.delivered.end(), states[i].delivered.begin(),
                         states[i].delivered.end());
  out.Normalize();
  return out;
}

Result<ResumeState> IntersectResumeStates(const std::vector<ResumeState>& states) {
  SHARDSTREAM_RETURN_IF_ERROR(CheckSameEpoch(states, "IntersectResumeStates"));
  ResumeState out = states[0];
  out.Normalize();
  for (size_t k = 1; k < states.size(); ++k) {
    ResumeState other = states[k];
    other.Normalize();
    const auto& a = out.delivered;
    const auto& b = other.delivered;
    std::vector<std::pair<int64_t, int64_t>> both;
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
      const int64_t lo = std::max(a[i].first, b[j].first);
      const int64_t hi = std::min(a[i].second, b[j].second);
      if (lo < hi) both.emplace_back(lo, hi);
      if (a[i].second < b[j].second) ++i; else ++j;
    }
    out.delivered = std::move(both);
  }
  return out;
}

}  // namespace shardstream
