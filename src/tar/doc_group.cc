#include "tar/doc_group.h"

#include <xxhash.h>

#include <cstring>
#include <memory>
#include <vector>

#include "format/decode_error.h"

namespace shardstream::internal {
namespace {

// The header of a version-1 .npy of `count` values of `dtype`, into `out`
// (kept by the caller: no allocation once it has grown). Bytes as
// EncodeNpy writes them.
void NpyHeader1D(DType dtype, uint64_t count, std::string* out) {
  out->assign("\x93NUMPY\x01\x00\x00\x00", 10);
  out->append("{'descr': '");
  out->append(DTypeCode(dtype));
  out->append("', 'fortran_order': False, 'shape': (");
  out->append(std::to_string(count));
  out->append(",), }");
  const size_t total = out->size() + 1;
  out->append((64 - total % 64) % 64, ' ');
  out->push_back('\n');
  const size_t dict = out->size() - 10;
  (*out)[8] = static_cast<char>(dict & 0xff);
  (*out)[9] = static_cast<char>(dict >> 8);
}

}  // namespace

bool IsDocGroup(const Sample& s) { return s.Find(kDocOffsetsField) != nullptr; }

Status ParseDocGroup(const Sample& s, const std::string& url, DocGroup* g) {
  g->array = nullptr;
  g->bounds.clear();
  g->keys.clear();
  const Field* offsets = nullptr;
  const Field* keys = nullptr;
  auto bad = [&](const Field& f, uint64_t at, const std::string& what) {
    return FieldError(FieldContext{s.key, f.name, url, f.offset}, at,
                      "document group: " + what);
  };
  for (const Field& f : s.fields) {
    if (f.name == kDocOffsetsField) {
      offsets = &f;
    } else if (f.name == kDocKeysField) {
      keys = &f;
    } else if (g->array == nullptr && DecodeForName(f.name) == FieldDecode::kNpy &&
               f.name.find(';') == std::string::npos) {
      g->array = &f;
    } else {
      return bad(f, 0, "a group holds one .npy array of documents, doc_offsets.npy and "
                       "optionally doc_keys.txt; '" + f.name + "' is not allowed");
    }
  }
  if (offsets == nullptr) return Status::Config("ParseDocGroup: not a group");
  if (g->array == nullptr)
    return bad(*offsets, 0, "no .npy array of documents beside doc_offsets.npy");
  const FieldContext actx{s.key, g->array->name, url, g->array->offset};
  SHARDSTREAM_ASSIGN_OR_RETURN(g->values, DecodeNpy(g->array->data, actx));
  if (g->values.ndim != 1)
    return bad(*g->array, 0, "the documents' array has " + std::to_string(g->values.ndim) +
                                 " dimensions, not 1");
  g->header_bytes = static_cast<uint64_t>(g->values.data.data() - g->array->data.data());
  g->header_hash = XXH3_64bits(g->array->data.data(), g->header_bytes);
  const FieldContext octx{s.key, offsets->name, url, offsets->offset};
  SHARDSTREAM_ASSIGN_OR_RETURN(DecodedField off, DecodeNpy(offsets->data, octx));
  const uint64_t off_header = static_cast<uint64_t>(off.data.data() - offsets->data.data());
  if (off.ndim != 1 || !IsInteger(off.dtype) || off.dtype == DType::kBool || off.shape[0] < 1)
    return bad(*offsets, 0, "doc_offsets.npy must be a 1-D integer array of n + 1 values");
  const uint64_t L = static_cast<uint64_t>(g->values.shape[0]);
  const size_t n1 = static_cast<size_t>(off.shape[0]);
  const size_t width = DTypeSize(off.dtype);
  const bool is_signed = off.dtype == DType::kInt8 || off.dtype == DType::kInt16 ||
                         off.dtype == DType::kInt32 || off.dtype == DType::kInt64;
  g->bounds.resize(n1);
  const auto* p = reinterpret_cast<const unsigned char*>(off.data.data());
  for (size_t i = 0; i < n1; ++i) {
    uint64_t v = 0;
    for (size_t b = 0; b < width; ++b) v |= uint64_t{p[i * width + b]} << (8 * b);
    const bool negative = is_signed && (v >> (8 * width - 1)) & 1;
    const uint64_t at = off_header + i * width;
    if (negative) return bad(*offsets, at, "offset " + std::to_string(i) + " is negative");
    if (i == 0 && v != 0)
      return bad(*offsets, at, "the first offset is " + std::to_string(v) + ", not 0");
    if (i > 0 && v < g->bounds[i - 1])
      return bad(*offsets, at, "offset " + std::to_string(i) + " (" + std::to_string(v) +
                                   ") is less than the one before it");
    if (v > L)
      return bad(*offsets, at, "offset " + std::to_string(i) + " (" + std::to_string(v) +
                                   ") is past the array's " + std::to_string(L) + " values");
    g->bounds[i] = v;
  }
  if (g->bounds.back() != L)
    return bad(*offsets, off_header + (n1 - 1) * width,
               "the last offset is " + std::to_string(g->bounds.back()) +
                   ", not the array's length " + std::to_string(L));
  if (keys != nullptr) {
    const std::string_view text = keys->data;
    const size_t invalid = FindInvalidUtf8(text);
    if (invalid != std::string_view::npos) return bad(*keys, invalid, "keys are not valid UTF-8");
    const size_t n = n1 - 1;
    size_t at = 0;
    if (n == 0 && !text.empty()) return bad(*keys, 0, "keys for a group of no documents");
    for (size_t i = 0; i < n; ++i) {
      const size_t nl = text.find('\n', at);
      const bool last = i + 1 == n;
      if (!last && nl == std::string_view::npos)
        return bad(*keys, text.size(), std::to_string(i + 1) + " keys for " + std::to_string(n) +
                                           " documents");
      const size_t end = last ? (nl == std::string_view::npos ? text.size() : nl) : nl;
      if (last && end != text.size() && end + 1 != text.size())
        return bad(*keys, end, "more keys than the " + std::to_string(n) + " documents");
      if (end == at) return bad(*keys, at, "key " + std::to_string(i) + " is empty");
      g->keys.push_back(text.substr(at, end - at));
      at = end + 1;
    }
  }
  return Status::OK();
}

std::string DocKey(const DocGroup& g, std::string_view group_key, size_t i) {
  if (!g.keys.empty()) return std::string(g.keys[i]);
  std::string k(group_key);
  k += '#';
  k += std::to_string(i);
  return k;
}

void IndexDocGroup(const DocGroup& g, std::string_view group_key, uint64_t sample_offset,
                   uint64_t end_offset, uint64_t array_offset, SampleIndex* index) {
  const size_t n = g.docs();
  const uint64_t ds = DTypeSize(g.values.dtype);
  const uint64_t values = array_offset + g.header_bytes;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t at = values + g.bounds[i] * ds;
    const uint64_t begin = i == 0 ? sample_offset : at;
    const uint64_t end = i + 1 == n ? end_offset : values + g.bounds[i + 1] * ds;
    SampleIndexEntry& e = index->samples.emplace_back();
    e.offset = begin;
    e.length = end - begin;
    e.nfields = 1;
    e.key = DocKey(g, group_key, i);
    e.first_field = index->fields.size();
    SampleIndexField& f = index->fields.emplace_back();
    f.name = g.array->name;
    // The first document's record is the array's own, as an .npy field's
    // (from its header; its values the document's): a reader that starts
    // in the group learns from it where the group's headers lie.
    f.offset = i == 0 ? array_offset : at;
    f.size = (i == 0 ? g.header_bytes : 0) + (g.bounds[i + 1] - g.bounds[i]) * ds;
    f.ndim = 1;
    f.dtype = g.values.dtype;
    f.payload = at;
    f.count = g.bounds[i + 1] - g.bounds[i];
    f.header_hash = g.header_hash;
    f.flags = kIndexFieldGrouped | (i == 0 ? kIndexFieldGroupStart : 0);
  }
}

void ExplodeDocGroup(const DocGroup& g, const Sample& group, std::vector<Sample>* docs) {
  const size_t n = g.docs();
  const uint64_t ds = DTypeSize(g.values.dtype);
  docs->resize(n);
  if (n == 0) return;
  // Each document a whole .npy of its own: every consumer of a field (the
  // decoders, Python's bytes) sees what a document alone in a member gives.
  // The headers are made once, then copied with the values.
  thread_local std::string header, headers;
  thread_local std::vector<size_t> header_end;
  headers.clear();
  header_end.clear();
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    NpyHeader1D(g.values.dtype, g.bounds[i + 1] - g.bounds[i], &header);
    headers += header;
    header_end.push_back(headers.size());
    total += header.size() + (g.bounds[i + 1] - g.bounds[i]) * ds;
  }
  auto buffer = std::shared_ptr<char[]>(new char[total > 0 ? total : 1]);
  char* w = buffer.get();
  const uint64_t values_at = g.array->offset + g.header_bytes;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t count = g.bounds[i + 1] - g.bounds[i];
    const size_t h0 = i == 0 ? 0 : header_end[i - 1], hlen = header_end[i] - h0;
    Sample& d = (*docs)[i];
    d.key = DocKey(g, group.key, i);
    d.url = group.url;
    // (A sample's offset is where its index entry starts: the group's
    // first header for the first document, its values for the others.)
    d.offset = i == 0 ? group.offset : values_at + g.bounds[i] * ds;
    d.fields.resize(1);
    Field& f = d.fields[0];
    f.name = g.array->name;
    std::memcpy(w, headers.data() + h0, hlen);
    std::memcpy(w + hlen, g.values.data.data() + g.bounds[i] * ds, count * ds);
    f.data = std::string_view(w, hlen + count * ds);
    f.owner = buffer;
    f.offset = values_at + g.bounds[i] * ds;
    w += hlen + count * ds;
  }
}

}  // namespace shardstream::internal
