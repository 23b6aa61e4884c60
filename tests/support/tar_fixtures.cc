#include "support/tar_fixtures.h"

#include <cstdio>
#include <cstring>

namespace shardstream::testing {

std::string TarBuilder::Header(const std::string& name, char typeflag, uint64_t size) {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(&h[100], 8, "%07o", 0644);
  std::snprintf(&h[108], 8, "%07o", 0);
  std::snprintf(&h[116], 8, "%07o", 0);
  std::snprintf(&h[124], 12, "%011llo", static_cast<unsigned long long>(size));
  std::snprintf(&h[136], 12, "%011o", 0);
  h[156] = typeflag;
  std::memcpy(&h[257], "ustar\0" "00", 8);
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(&h[148], 8, "%06o", sum);
  h[155] = ' ';
  return h;
}

std::string TarBuilder::PaxRecord(const std::string& key, const std::string& value) {
  size_t body = key.size() + value.size() + 3;
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) ++len;
  return std::to_string(len) + " " + key + "=" + value + "\n";
}

TarBuilder& TarBuilder::Entry(const std::string& name, char typeflag, const std::string& data,
                              int64_t declared_size) {
  offsets_.push_back(bytes_.size());
  uint64_t size = declared_size >= 0 ? static_cast<uint64_t>(declared_size) : data.size();
  if (size > 077777777777ull) {
    // GNU base-256 for sizes an octal field cannot hold.
    std::string h = Header(name, typeflag, 0);
    std::memset(&h[124], 0, 12);
    h[124] = static_cast<char>(0x80);
    for (int i = 0; i < 8; ++i) h[135 - i] = static_cast<char>(size >> (8 * i));
    std::memset(&h[148], ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(&h[148], 8, "%06o", sum);
    h[155] = ' ';
    bytes_ += h;
  } else {
    bytes_ += Header(name, typeflag, size);
  }
  bytes_ += data;
  bytes_.append((512 - data.size() % 512) % 512, '\0');
  return *this;
}

TarBuilder& TarBuilder::File(const std::string& name, const std::string& data,
                             int64_t declared_size) {
  return Entry(name, '0', data, declared_size);
}

TarBuilder& TarBuilder::Pax(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string body;
  for (const auto& [k, v] : records) body += PaxRecord(k, v);
  bytes_ += Header("PaxHeader", 'x', body.size());
  bytes_ += body;
  bytes_.append((512 - body.size() % 512) % 512, '\0');
  return *this;
}

TarBuilder& TarBuilder::GnuLongName(const std::string& name) {
  std::string body = name + std::string(1, '\0');
  bytes_ += Header("././@LongLink", 'L', body.size());
  bytes_ += body;
  bytes_.append((512 - body.size() % 512) % 512, '\0');
  return *this;
}

TarBuilder& TarBuilder::End() {
  bytes_.append(1024, '\0');
  return *this;
}

namespace {
ReadOutcome Drain(Result<std::unique_ptr<TarReader>> opened) {
  ReadOutcome out;
  if (!opened.ok()) {
    out.status = opened.status();
    return out;
  }
  auto& reader = *opened;
  Sample s;
  while (true) {
    auto got = reader->Next(&s);
    if (!got.ok()) {
      out.status = got.status();
      break;
    }
    if (!*got) break;
    FlatSample f;
    f.key = s.key;
    f.offset = s.offset;
    for (const Field& field : s.fields) {
      f.fields.emplace_back(field.name, std::string(field.data));
      f.field_offsets.push_back(field.offset);
    }
    out.samples.push_back(std::move(f));
  }
  out.stats = reader->stats();
  out.index = reader->index();
  return out;
}
}  // namespace

ReadOutcome ReadAll(const std::string& url, const TarReaderOptions& options) {
  return Drain(TarReader::Open(url, options));
}

ReadOutcome ReadBytes(const std::string& bytes, const TarReaderOptions& options,
                      const std::string& url) {
  auto mem = NewMemorySource();
  auto w = mem->NewWritableFile(url);
  if (!w.ok()) {
    ReadOutcome out;
    out.status = w.status();
    return out;
  }
  (void)(*w)->Append(bytes);
  (void)(*w)->Close();
  TarReaderOptions o = options;
  o.source = mem.get();
  return Drain(TarReader::Open(url, o));
}

}  // namespace shardstream::testing
