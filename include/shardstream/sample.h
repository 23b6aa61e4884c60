// Sample: one training example read from a shard, WebDataset style. A shard's
// members "dir/abc.jpg" and "dir/abc.cls" form the sample with key "dir/abc"
// and fields "jpg" and "cls": the key is the member path up to the first dot
// of its basename, the rest is the field name ("tokens.npy").
//
// Field bytes are views into large reference-counted read buffers: `data`
// stays valid as long as the Field (or a copy of its `owner`) is alive, also
// after the reader has moved on or been destroyed.
//
// Thread-safety: Sample and Field are values; the buffers they share are
// immutable, so copies may be used from different threads.
#ifndef SHARDSTREAM_SAMPLE_H_
#define SHARDSTREAM_SAMPLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardstream/export.h"

namespace shardstream {

struct Field {
  std::string name;        // "jpg", "tokens.npy"; case preserved
  std::string_view data;   // the member's bytes; valid while `owner` lives
  std::shared_ptr<const void> owner;  // keeps the buffer behind `data` alive
  uint64_t offset = 0;     // offset of the member's data in the (uncompressed)
                           // tar; 0 under TarEngine::kLibarchive, which does not say
};

struct Sample {
  std::string key;         // WebDataset's __key__
  std::string url;         // WebDataset's __url__: the shard, credentials redacted
  int64_t index = -1;      // position of the sample in its shard, from 0
  uint64_t offset = 0;     // offset of its first header in the (uncompressed) tar
  std::vector<Field> fields;  // in shard order

  // The field called `name`, or nullptr.
  const Field* Find(std::string_view name) const {
    for (const Field& f : fields)
      if (f.name == name) return &f;
    return nullptr;
  }
  // The first field named by `names`, one name or alternatives separated
  // by ';' as WebDataset writes them ("jpg;png;webp"), or nullptr.
  const Field* FindAny(std::string_view names) const {
    while (true) {
      const size_t semi = names.find(';');
      if (const Field* f = Find(names.substr(0, semi))) return f;
      if (semi == std::string_view::npos) return nullptr;
      names.remove_prefix(semi + 1);
    }
  }
  // Sum of the field sizes.
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const Field& f : fields) n += f.data.size();
    return n;
  }
  // Member-wise: the pipeline moves samples between its stages by swapping,
  // which the generic three-move swap makes several times dearer.
  friend void swap(Sample& a, Sample& b) noexcept {
    a.key.swap(b.key);
    a.url.swap(b.url);
    std::swap(a.index, b.index);
    std::swap(a.offset, b.offset);
    a.fields.swap(b.fields);
  }
};

// Splits a member path by WebDataset's rule. Returns false (and leaves the
// outputs untouched) when the basename has no dot or nothing before it:
// such members belong to no sample.
SHARDSTREAM_EXPORT bool SplitSampleKey(std::string_view path, std::string_view* key,
                                       std::string_view* field);

}  // namespace shardstream

#endif  // SHARDSTREAM_SAMPLE_H_
