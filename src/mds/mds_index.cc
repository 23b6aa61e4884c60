// MDS index.json -> Manifest, and the column rules: which encodings exist,
// their fixed sizes, and what each becomes in a batch (one home: the reader
// and the loader's field resolution both ask here).
#include <nlohmann/json.hpp>

#include "mds/mds_internal.h"
#include "shardstream/mds.h"
#include "shardstream/url.h"

namespace shardstream {
namespace {

using json = nlohmann::json;

struct ScalarType {
  const char* name;
  DType dtype;
};
constexpr ScalarType kScalars[] = {
    {"int", DType::kInt64},      {"int8", DType::kInt8},       {"int16", DType::kInt16},
    {"int32", DType::kInt32},    {"int64", DType::kInt64},     {"uint8", DType::kUint8},
    {"uint16", DType::kUint16},  {"uint32", DType::kUint32},   {"uint64", DType::kUint64},
    {"float16", DType::kFloat16}, {"float32", DType::kFloat32}, {"float64", DType::kFloat64},
};

// Streaming's NDArray value dtypes (the byte a dynamic-dtype array starts with).
constexpr std::pair<int, DType> kArrayDTypes[] = {
    {8, DType::kUint8},   {9, DType::kInt8},     {16, DType::kUint16}, {17, DType::kInt16},
    {18, DType::kFloat16}, {32, DType::kUint32}, {33, DType::kInt32},  {34, DType::kFloat32},
    {64, DType::kUint64}, {65, DType::kInt64},   {66, DType::kFloat64},
};

const char* const kNamed[] = {"str", "bytes", "json", "str_int", "str_float", "str_decimal",
                              "jpeg", "png", "pil", "pkl"};

Status IndexError(const std::string& url, const std::string& what) {
  return Status(StatusCode::kConfig, "MDS index " + RedactUrl(url) + ": " + what, RedactUrl(url));
}

}  // namespace

namespace internal {

Result<MdsEncoding> ParseMdsEncoding(const std::string& encoding) {
  MdsEncoding e;
  const size_t colon = encoding.find(':');
  const std::string head = encoding.substr(0, colon);
  for (const ScalarType& s : kScalars)
    if (head == s.name && colon == std::string::npos) {
      e.kind = MdsEncoding::kScalar;
      e.dtype = s.dtype;
      return e;
    }
  if (head == "ndarray") {
    e.kind = MdsEncoding::kArray;
    if (colon == std::string::npos) return e;
    const std::string rest = encoding.substr(colon + 1);
    const size_t colon2 = rest.find(':');
    const std::string dt = rest.substr(0, colon2);
    bool known = false;
    for (const auto& [code, t] : kArrayDTypes)
      if (dt == DTypeName(t)) {
        e.dtype = t;
        known = true;
      }
    if (!known) return Status::Config("encoding '" + encoding + "': unknown ndarray dtype '" + dt + "'");
    e.fixed_dtype = true;
    if (colon2 == std::string::npos) return e;
    std::string dims = rest.substr(colon2 + 1);
    size_t at = 0;
    while (at <= dims.size()) {
      const size_t comma = dims.find(',', at);
      const std::string d = dims.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      char* end = nullptr;
      const long long v = std::strtoll(d.c_str(), &end, 10);
      if (d.empty() || *end != '\0' || v < 1 || v > (1LL << 40) ||
          e.shape.size() >= static_cast<size_t>(kMaxDims))
        return Status::Config("encoding '" + encoding + "': bad shape");
      e.shape.push_back(v);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    // Bounded, so sizes computed from it cannot overflow: a value of more than
    // 1 TiB is no sample.
    uint64_t bytes = DTypeSize(e.dtype);
    for (int64_t d : e.shape)
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) || bytes > (uint64_t{1} << 40))
        return Status::Config("encoding '" + encoding + "': a shape of more than 1 TiB");
    e.fixed_shape = true;
    return e;
  }
  if (head == "jpeg" && colon != std::string::npos) {  // "jpeg:QUALITY"
    e.kind = MdsEncoding::kJpeg;
    return e;
  }
  if (colon == std::string::npos) {
    static const MdsEncoding::Kind kinds[] = {
        MdsEncoding::kStr,      MdsEncoding::kBytes,    MdsEncoding::kJson, MdsEncoding::kStrInt,
        MdsEncoding::kStrFloat, MdsEncoding::kStrFloat, MdsEncoding::kJpeg, MdsEncoding::kPng,
        MdsEncoding::kPil,      MdsEncoding::kPickle};
    for (size_t i = 0; i < sizeof(kNamed) / sizeof(kNamed[0]); ++i)
      if (head == kNamed[i]) {
        e.kind = kinds[i];
        return e;
      }
  }
  return Status::Config("unknown MDS column encoding '" + encoding + "'");
}

bool MdsArrayDType(int code, DType* out) {
  for (const auto& [c, t] : kArrayDTypes)
    if (c == code) {
      *out = t;
      return true;
    }
  return false;
}

}  // namespace internal

bool IsMdsIndexUrl(std::string_view url) {
  return UrlBasename(url.substr(0, url.find('?'))) == "index.json";
}

std::string FormatMdsLayout(const MdsLayout& layout) {
  json cols = json::array();
  for (const MdsColumn& c : layout.columns)
    cols.push_back({{"name", c.name}, {"encoding", c.encoding},
                    {"size", c.size < 0 ? json(nullptr) : json(c.size)}});
  json doc = {{"columns", cols}, {"samples", layout.samples}, {"raw_bytes", layout.raw_bytes}};
  if (!layout.name.empty()) doc["name"] = layout.name;
  if (!layout.compression.empty()) doc["compression"] = layout.compression;
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<MdsLayout> ParseMdsLayout(std::string_view text, const std::string& url) {
  MdsLayout l;
  try {
    const json doc = json::parse(text);
    for (const json& c : doc.at("columns")) {
      MdsColumn col;
      col.name = c.at("name").get<std::string>();
      col.encoding = c.at("encoding").get<std::string>();
      col.size = c.at("size").is_null() ? -1 : c.at("size").get<int64_t>();
      l.columns.push_back(std::move(col));
    }
    l.samples = doc.value("samples", int64_t{-1});
    l.raw_bytes = doc.value("raw_bytes", int64_t{-1});
    l.compression = doc.value("compression", std::string());
    l.name = doc.value("name", std::string());
  } catch (const json::exception& e) {
    return Status(StatusCode::kConfig,
                  "shard " + RedactUrl(url) + ": its MDS layout in the manifest cannot be read: " +
                      e.what(),
                  RedactUrl(url));
  }
  return l;
}

Result<FieldSpec> MdsFieldSpec(const MdsColumn& column, const std::string& url) {
  SHARDSTREAM_ASSIGN_OR_RETURN(internal::MdsEncoding e, internal::ParseMdsEncoding(column.encoding));
  FieldSpec spec;
  spec.name = column.name;
  switch (e.kind) {
    case internal::MdsEncoding::kScalar:
      spec.decode = FieldDecode::kRaw;
      spec.dtype = e.dtype;
      spec.scalar = true;
      break;
    case internal::MdsEncoding::kArray:
      if (e.fixed_dtype && e.fixed_shape) {
        spec.decode = FieldDecode::kRaw;
        spec.dtype = e.dtype;
        spec.shape = e.shape;
      } else {
        // The reader makes .npy of the MDS header. The encoding says shapes
        // vary: padded to the batch's largest (Python adds the lengths).
        spec.decode = FieldDecode::kNpy;
        spec.ragged = e.fixed_shape ? Ragged::kError : Ragged::kPad;
      }
      break;
    case internal::MdsEncoding::kPil:
      spec.decode = FieldDecode::kNpy;
      spec.ragged = Ragged::kPad;
      break;
    case internal::MdsEncoding::kStr:
    case internal::MdsEncoding::kStrFloat: spec.decode = FieldDecode::kString; break;
    case internal::MdsEncoding::kStrInt: spec.decode = FieldDecode::kLabel; break;
    case internal::MdsEncoding::kJson: spec.decode = FieldDecode::kJson; break;
    case internal::MdsEncoding::kBytes:
    case internal::MdsEncoding::kJpeg:
    case internal::MdsEncoding::kPng: spec.decode = FieldDecode::kBytes; break;
    case internal::MdsEncoding::kPickle:
      return Status(StatusCode::kConfig,
                    "MDS column '" + column.name + "' of " + RedactUrl(url) +
                        " is pickled (pkl): shardstream does not unpickle (a pickle runs code "
                        "when loaded); rewrite the column as json, bytes or ndarray, or ask for "
                        "its raw bytes with decode \"bytes\"",
                    RedactUrl(url));
  }
  return spec;
}

Result<Manifest> ReadMdsIndex(const std::string& index_url, Source* source) {
  Source* src = source ? source : DefaultSource().get();
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(*src, index_url));
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    return Status(StatusCode::kConfig,
                  "MDS index " + RedactUrl(index_url) + " is not JSON (byte " +
                      std::to_string(e.byte) + "): " + e.what(),
                  RedactUrl(index_url), static_cast<int64_t>(e.byte));
  }
  if (!doc.is_object() || !doc.contains("shards") || !doc["shards"].is_array())
    return IndexError(index_url, "no \"shards\" list: not a MosaicML Streaming index");
  if (!doc.contains("version") || doc["version"] != 2)
    return IndexError(index_url, "version " + (doc.contains("version") ? doc["version"].dump() : "(none)") +
                                     "; shardstream reads version 2 (MosaicML Streaming >= 0.4)");
  Manifest m;
  m.url = index_url;
  const std::string dir = UrlDirname(index_url);
  std::string first_columns;
  int64_t i = -1;
  for (const json& s : doc["shards"]) {
    ++i;
    const std::string where = "shard " + std::to_string(i);
    try {
      if (s.value("version", 0) != 2)
        return IndexError(index_url, where + ": version " + s.value("version", json(nullptr)).dump() +
                                         "; shardstream reads version 2");
      const std::string format = s.value("format", std::string());
      if (format != "mds")
        return IndexError(index_url, where + ": format \"" + format +
                                         "\"; shardstream reads \"mds\" (not Streaming's "
                                         "jsonl/csv/tsv/xsv shards)");
      MdsLayout l;
      const json& names = s.at("column_names");
      const json& encs = s.at("column_encodings");
      const json& sizes = s.at("column_sizes");
      if (names.size() != encs.size() || names.size() != sizes.size())
        return IndexError(index_url, where + ": column_names, column_encodings and column_sizes "
                                             "differ in length");
      for (size_t c = 0; c < names.size(); ++c) {
        MdsColumn col;
        col.name = names[c].get<std::string>();
        col.encoding = encs[c].get<std::string>();
        col.size = sizes[c].is_null() ? -1 : sizes[c].get<int64_t>();
        auto enc = internal::ParseMdsEncoding(col.encoding);
        if (!enc.ok())
          return IndexError(index_url, where + ", column '" + col.name + "': " + enc.status().message());
        const int64_t want = internal::MdsFixedSize(*enc);
        if (want != col.size)
          return IndexError(index_url, where + ", column '" + col.name + "' (" + col.encoding +
                                           "): size " + sizes[c].dump() + ", the encoding's is " +
                                           (want < 0 ? std::string("variable") : std::to_string(want)));
        l.columns.push_back(std::move(col));
      }
      std::string compression;
      if (s.contains("compression") && !s["compression"].is_null())
        compression = s["compression"].get<std::string>();
      compression = compression.substr(0, compression.find(':'));
      if (!compression.empty() && compression != "zstd")
        return IndexError(index_url, where + ": compression \"" + compression +
                                         "\"; shardstream reads zstd-compressed and uncompressed "
                                         "MDS shards");
      l.compression = compression;
      const json& raw = s.at("raw_data");
      const json& file = compression.empty() ? raw : s.at("zip_data");
      if (!file.is_object())
        return IndexError(index_url, where + ": compression \"" + compression + "\" but no zip_data");
      l.samples = s.at("samples").get<int64_t>();
      l.raw_bytes = raw.value("bytes", int64_t{-1});
      // An MDS shard's offsets are u32: it cannot hold more samples than this.
      if (l.samples < 0 || l.samples > (int64_t{1} << 30))
        return IndexError(index_url, where + ": \"samples\" " + std::to_string(l.samples) +
                                         " (an MDS shard holds 0 to 2^30)");
      ShardEntry e;
      e.url = file.at("basename").get<std::string>();
      e.resolved = JoinUrl(dir, e.url);
      e.size = file.value("bytes", int64_t{-1});
      e.nsamples = l.samples;
      MdsLayout cols_only;
      cols_only.columns = l.columns;
      const std::string cols = FormatMdsLayout(cols_only);
      if (first_columns.empty()) first_columns = cols;
      else if (cols != first_columns)
        return IndexError(index_url, where + " (" + e.url +
                                         ") has other columns than shard 0: a data set's shards "
                                         "must share their columns");
      l.name = e.url;
      e.extra[kMdsLayoutKey] = FormatMdsLayout(l);
      m.shards.push_back(std::move(e));
    } catch (const json::exception& e) {
      return IndexError(index_url, where + ": " + e.what());
    }
  }
  if (m.shards.empty()) return IndexError(index_url, "lists no shards");
  return m;
}

}  // namespace shardstream
