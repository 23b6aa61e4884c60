#include "pipeline/mds_fields.h"

#include "common/log.h"
#include "shardstream/url.h"

namespace shardstream::internal {
namespace {

const MdsColumn* FindColumn(const std::vector<MdsColumn>& columns, std::string_view name) {
  for (const MdsColumn& c : columns)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace

Result<std::vector<MdsColumn>> MdsColumnsOf(const ShardTable& shards) {
  std::vector<MdsColumn> out;
  // Entries of one index share their columns (ReadMdsIndex checks it) but
  // not their counts and names: only a new columns text is parsed. The text
  // starts with them (FormatMdsLayout dumps keys in order, "columns" first),
  // and '],"' ends them: inside a JSON string the quote would be escaped.
  std::string_view last;
  for (const auto& [i, extra] : shards.extras()) {
    auto it = extra.find(kMdsLayoutKey);
    if (it == extra.end()) continue;
    const std::string_view text = it->second;
    const std::string_view columns = text.substr(0, text.find("],\""));
    if (columns == last) continue;
    last = columns;
    const std::string url = shards.resolved(i);
    SHARDSTREAM_ASSIGN_OR_RETURN(MdsLayout l, ParseMdsLayout(it->second, url));
    for (MdsColumn& c : l.columns) {
      const MdsColumn* seen = FindColumn(out, c.name);
      if (seen == nullptr) {
        out.push_back(std::move(c));
      } else if (seen->encoding != c.encoding) {
        // One field, two meanings: decoded by the first, the other's values
        // would be wrong without a word.
        return Status(StatusCode::kConfig,
                      "loader: MDS column '" + c.name + "' is " + seen->encoding +
                          " in one data set and " + c.encoding + " in another (" + RedactUrl(url) +
                          "); a field must decode alike in every stream",
                      RedactUrl(url));
      }
    }
  }
  return out;
}

Status ResolveMdsFields(const std::vector<MdsColumn>& columns, LoaderOptions* opt,
                        FieldDecode* token_decode) {
  *token_decode = FieldDecode::kAuto;
  if (columns.empty()) return Status::OK();
  for (FieldSpec& f : opt->fields) {
    if (f.decode != FieldDecode::kAuto) continue;
    std::string_view names = f.name;
    while (true) {
      const size_t semi = names.find(';');
      if (const MdsColumn* c = FindColumn(columns, names.substr(0, semi))) {
        auto spec = MdsFieldSpec(*c, "the data set");
        if (!spec.ok()) return spec.status().WithContext("loader: field '" + f.name + "'");
        f.decode = spec->decode;
        f.dtype = spec->dtype;
        f.shape = spec->shape;
        f.scalar = spec->scalar;
        if (f.ragged == Ragged::kError) f.ragged = spec->ragged;
        break;
      }
      if (semi == std::string_view::npos) break;
      names.remove_prefix(semi + 1);
    }
  }
  if (const MdsColumn* c = FindColumn(columns, opt->tokens.field)) {
    auto spec = MdsFieldSpec(*c, "the data set");
    if (!spec.ok()) return spec.status().WithContext("loader: tokens.field");
    const bool integer = spec->dtype != DType::kFloat16 && spec->dtype != DType::kBFloat16 &&
                         spec->dtype != DType::kFloat32 && spec->dtype != DType::kFloat64 &&
                         spec->dtype != DType::kBool;
    if (spec->decode == FieldDecode::kRaw && !spec->scalar && integer) {
      opt->tokens.input_dtype = spec->dtype;
      *token_decode = FieldDecode::kRaw;
    } else if (spec->decode == FieldDecode::kNpy && c->encoding.rfind("ndarray", 0) == 0) {
      *token_decode = FieldDecode::kNpy;
    } else if (c->encoding == "bytes") {
      *token_decode = FieldDecode::kRaw;  // token ids as raw bytes of tokens.input_dtype
    } else {
      return Status::Config("loader: tokens.field '" + c->name + "' is an MDS column of encoding " +
                            c->encoding + "; token batches need an integer ndarray column, or bytes of tokens.input_dtype");
    }
  }
  return Status::OK();
}

std::vector<FieldSpec> MdsDefaultFields(const std::vector<MdsColumn>& columns) {
  std::vector<FieldSpec> out;
  for (const MdsColumn& c : columns) {
    if (c.encoding == "pkl") {
      Log().warn("loader: no fields given; MDS column '{}' is pickled (pkl) and is not batched: "
                 "shardstream does not unpickle; name it with decode \"bytes\" for its raw bytes",
                 c.name);
      continue;
    }
    FieldSpec spec;
    spec.name = c.name;
    out.push_back(std::move(spec));
  }
  return out;
}

}  // namespace shardstream::internal
