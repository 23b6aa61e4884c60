// ReadManifestTable: a manifest straight into a ShardTable, a chunk at a
// time, so a million-line manifest is never a string nor a million
// ShardEntry objects.
#include <algorithm>
#include <cstring>
#include <limits>

#include "manifest/manifest_internal.h"
#include "manifest/shard_table.h"
#include "shardstream/url.h"

namespace shardstream::internal {

namespace {

constexpr size_t kChunk = size_t{1} << 20;

// Reads until `buf` holds `want` more bytes or the stream ends; false at
// the end.
Result<bool> Fill(InputStream& in, std::string* buf, size_t want) {
  const size_t start = buf->size();
  buf->resize(start + want);
  size_t got = 0;
  while (got < want) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t n, in.Read(want - got, buf->data() + start + got));
    if (n == 0) break;
    got += n;
  }
  buf->resize(start + got);
  return got > 0;
}

}  // namespace

Result<ShardTable> ReadManifestTable(const std::string& url, Source* source) {
  Source* src = source ? source : DefaultSource().get();
  SHARDSTREAM_ASSIGN_OR_RETURN(auto in, src->OpenInputStream(url));
  std::string buf;
  buf.reserve(2 * kChunk);
  SHARDSTREAM_ASSIGN_OR_RETURN(bool more, Fill(*in, &buf, kChunk));
  // The format as ParseManifest finds it in the whole text: by the name,
  // or else by the first line, which this chunk must then hold whole (if it
  // does not, ParseManifest decides on the whole text).
  ManifestFormat format = ManifestFormatByName(url);
  if (format == ManifestFormat::kAuto) {
    const size_t first = buf.find_first_not_of(" \t\r\n");
    if (!more || (first != std::string::npos && buf.find('\n', first) != std::string::npos))
      format = DetectManifestFormat(buf, url);
  }
  if (format != ManifestFormat::kJsonl) {
    // CSV and JSON documents (small in practice): parsed whole.
    while (more) {
      SHARDSTREAM_ASSIGN_OR_RETURN(more, Fill(*in, &buf, kChunk));
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(Manifest m, ParseManifest(buf, url));
    return ShardTable::FromManifest(std::move(m));
  }
  ShardTable t;
  t.set_source_url(url);
  const std::string base = UrlDirname(url);
  std::vector<uint32_t> lines;  // of each entry, for the duplicate error
  size_t line_no = 0;
  SimpleLine simple;
  ShardEntry entry;
  size_t pos = 0;  // start of the first line not yet parsed
  uint64_t consumed = 0;  // bytes before buf
  bool reserved = false;
  for (;;) {
    for (;;) {
      const size_t nl = buf.find('\n', pos);
      if (nl == std::string::npos && more) break;  // a partial line: read on
      const size_t end = nl == std::string::npos ? buf.size() : nl;
      std::string_view line(buf.data() + pos, end - pos);
      pos = nl == std::string::npos ? buf.size() : nl + 1;
      ++line_no;
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
        line.remove_suffix(1);
      if (!line.empty()) {
        SHARDSTREAM_ASSIGN_OR_RETURN(bool is_simple,
                                     ParseJsonlLine(line, url, line_no, &simple, &entry));
        if (is_simple) {
          t.Append(simple.url, base, simple.size, simple.nsamples, simple.checksum);
        } else {
          entry.resolved.clear();
          t.Append(entry, base);
        }
        lines.push_back(static_cast<uint32_t>(
            std::min<size_t>(line_no, std::numeric_limits<uint32_t>::max())));
      }
      if (pos >= buf.size()) break;
    }
    if (!more) break;
    consumed += pos;
    if (!reserved && in->size() && consumed > 0 && *in->size() > consumed) {
      // The rest will look like the first chunk: room for it now, rather
      // than columns copied as they double.
      reserved = true;
      const double scale = static_cast<double>(*in->size() - consumed) / static_cast<double>(consumed) * 1.02;
      t.Reserve(static_cast<size_t>(scale * static_cast<double>(t.size())) + 16,
                static_cast<size_t>(scale * static_cast<double>(t.name_bytes())) + 64);
      lines.reserve(t.size() + static_cast<size_t>(scale * static_cast<double>(lines.size())) + 16);
    }
    buf.erase(0, pos);
    pos = 0;
    SHARDSTREAM_ASSIGN_OR_RETURN(more, Fill(*in, &buf, kChunk));
  }
  std::string().swap(buf);
  if (t.empty())
    return Status(StatusCode::kConfig, "manifest " + RedactUrl(url) + " lists no shards",
                  RedactUrl(url));
  t.ShrinkToFit();
  if (auto dup = t.FirstDuplicate())
    return DuplicateUrlError(url, t.url(dup->first), lines[dup->first], lines[dup->second]);
  return t;
}

}  // namespace shardstream::internal
