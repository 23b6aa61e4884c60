#include "pipeline/row_fields.h"

#include "pipeline/first_sample.h"
#include "plan/entry_format.h"
#include "shardstream/url.h"

namespace shardstream::internal {
namespace {

const RowColumn* FindColumn(const std::vector<RowColumn>& columns, std::string_view name) {
  for (const RowColumn& c : columns)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace

Result<std::vector<RowColumn>> RowColumnsOf(const LoaderOptions& o, const ShardTable& manifest) {
  TarReaderOptions t;
  t.source = o.source;
  // Rows and Parquet entries carry the format key: only entries with extras.
  for (const auto& [i, extra] : manifest.extras()) {
    if (FormatOf(extra) != EntryFormat::kParquet) continue;
    const ShardEntry e = manifest[i];
    if (!o.parquet)
      return Status(StatusCode::kConfig,
                    "loader: " + RedactUrl(e.resolved.empty() ? e.url : e.resolved) +
                        " is a Parquet file; Parquet is read through pyarrow, from the Python "
                        "package (shardstream.Loader, ShardDataset): the C++ library reads "
                        "tar, MDS and JSON Lines",
                    RedactUrl(e.resolved.empty() ? e.url : e.resolved));
  }
  for (const auto& [i, extra] : manifest.extras()) {
    const EntryFormat format = FormatOf(extra);
    if (!IsRows(format) || manifest.nsamples(i) == 0) continue;
    const ShardEntry e = manifest[i];
    if (format == EntryFormat::kParquet) {
      SHARDSTREAM_ASSIGN_OR_RETURN(auto columns, o.parquet.columns(e.resolved.empty() ? e.url : e.resolved, o.source));
      if (!columns.empty()) return columns;
      continue;
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(auto in, OpenForFields(o, e));
    SHARDSTREAM_ASSIGN_OR_RETURN(auto columns, ReadJsonlColumns(std::move(in), t));
    if (!columns.empty()) return columns;
  }
  return std::vector<RowColumn>{};
}

Status ResolveRowFields(const std::vector<RowColumn>& columns, LoaderOptions* opt) {
  if (columns.empty()) return Status::OK();
  for (FieldSpec& f : opt->fields) {
    std::string_view names = f.name;
    while (true) {
      const size_t semi = names.find(';');
      const RowColumn* c = FindColumn(columns, names.substr(0, semi));
      if (c != nullptr && c->kind == JsonKind::kUnsupported)
        return Status::Config("loader: field '" + c->name + "' is a Parquet column of type " + c->type +
                              ", which is not read (strings, binary, integers, floats and bools "
                              "are): cast it before writing, or convert the data set");
      if (c != nullptr && f.decode == FieldDecode::kAuto) {
        f.decode = RowFieldSpec(*c).decode;
        break;
      }
      if (c != nullptr) break;
      if (semi == std::string_view::npos) break;
      names.remove_prefix(semi + 1);
    }
  }
  if (const RowColumn* c = opt->tokens.field.empty() ? nullptr : FindColumn(columns, opt->tokens.field)) {
    if (c->kind != JsonKind::kString)
      return Status::Config("loader: tokens.field '" + c->name + "' is a JSON Lines column that holds " +
                            (c->kind == JsonKind::kArray ? "an array" : "no text") +
                            "; token batches are made of a text column and a tokenizer "
                            "(tokens.tokenize), or of token shards (shardstream.convert)");
    if (!opt->tokens.tokenize)
      return Status::Config("loader: tokens.field '" + c->name + "' is a JSON Lines column of text; "
                            "give a tokenizer to turn it into tokens (Python: tokens={'field': '" +
                            c->name + "', 'tokenizer': fn}; C++: TokenOptions::tokenize)");
  }
  return Status::OK();
}

}  // namespace shardstream::internal
