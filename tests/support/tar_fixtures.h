// Tar test fixtures: a hand-rolled tar builder (independent of the library's
// own writer, so hostile headers can be crafted byte by byte) and helpers
// that read a whole shard into comparable values.
#ifndef SHARDSTREAM_TESTS_SUPPORT_TAR_FIXTURES_H_
#define SHARDSTREAM_TESTS_SUPPORT_TAR_FIXTURES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardstream/tar_reader.h"

namespace shardstream::testing {

// Builds tar bytes member by member.
class TarBuilder {
 public:
  // A regular file (typeflag '0'). `declared_size` overrides the size field.
  TarBuilder& File(const std::string& name, const std::string& data,
                   int64_t declared_size = -1);
  // Any entry with a raw typeflag and data.
  TarBuilder& Entry(const std::string& name, char typeflag, const std::string& data,
                    int64_t declared_size = -1);
  // A pax extended header ('x') with the given records (key -> value).
  TarBuilder& Pax(const std::vector<std::pair<std::string, std::string>>& records);
  // A GNU long name ('L') record.
  TarBuilder& GnuLongName(const std::string& name);
  // Two zero blocks.
  TarBuilder& End();
  const std::string& bytes() const { return bytes_; }
  // Offset of the header of the i-th Entry/File call.
  const std::vector<size_t>& header_offsets() const { return offsets_; }

  static std::string Header(const std::string& name, char typeflag, uint64_t size);
  static std::string PaxRecord(const std::string& key, const std::string& value);

 private:
  std::string bytes_;
  std::vector<size_t> offsets_;
};

// A sample flattened for comparisons.
struct FlatSample {
  std::string key;
  uint64_t offset = 0;
  std::vector<std::pair<std::string, std::string>> fields;  // name, bytes
  std::vector<uint64_t> field_offsets;  // not compared by ==
  bool operator==(const FlatSample& o) const {
    return key == o.key && offset == o.offset && fields == o.fields;
  }
};

struct ReadOutcome {
  std::vector<FlatSample> samples;
  Status status;  // the error Next returned, or OK
  TarStats stats;
  SampleIndex index;
};

// Reads a whole shard (url through options.source / DefaultSource).
ReadOutcome ReadAll(const std::string& url, const TarReaderOptions& options = {});
// Same, from bytes held in a fresh memory source.
ReadOutcome ReadBytes(const std::string& bytes, const TarReaderOptions& options = {},
                      const std::string& url = "mem://shard.tar");

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_TAR_FIXTURES_H_
