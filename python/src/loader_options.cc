// LoaderOptions from the keyword dict the Python layer builds. Unknown keys
// and bad values are refused with ConfigError naming the key, so a typo never
// silently falls back to a default.
#include "loader_options.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <cctype>
#include <set>
#include <tuple>
#include <type_traits>
#include <vector>
#include <string>
#include <utility>

#include <pybind11/stl.h>

#include "shardstream/image.h"
#include "shardstream/shard_cache.h"
#include "parquet.h"
#include "status_to_exception.h"

namespace py = pybind11;

namespace shardstream::python {
namespace {

[[noreturn]] void Bad(const std::string& what) { ThrowStatus(Status(StatusCode::kConfig, what)); }

template <typename T>
T Get(const py::dict& d, const char* key, const char* type) {
  try {
    return d[key].cast<T>();
  } catch (const py::cast_error&) {
    Bad(std::string("option ") + key + ": expected " + type + ", got " +
        std::string(py::str(py::type::of(d[key]).attr("__name__"))));
  }
}

// Accepts "int32", "<i4", numpy dtypes and numpy scalar types (their str()
// or their .name).
DType DTypeOf(const py::handle& h, const char* /*key*/) {
  std::string text = py::hasattr(h, "name") && !py::isinstance<py::str>(h)
                         ? py::str(h.attr("name")).cast<std::string>()
                         : py::str(h).cast<std::string>();
  return ValueOrThrow(ParseDType(text));
}

// True when a and b differ by one insertion, deletion, substitution or
// swap of neighbours (a misspelt key).
bool NearMiss(const std::string& a, const std::string& b) {
  if (a == b) return false;
  const size_t n = a.size(), m = b.size();
  if (n == m) {
    std::vector<size_t> diff;
    for (size_t i = 0; i < n; ++i)
      if (a[i] != b[i]) diff.push_back(i);
    if (diff.size() == 1) return true;
    return diff.size() == 2 && diff[1] == diff[0] + 1 && a[diff[0]] == b[diff[1]] &&
           a[diff[1]] == b[diff[0]];
  }
  const std::string& longer = n > m ? a : b;
  const std::string& shorter = n > m ? b : a;
  if (longer.size() != shorter.size() + 1) return false;
  size_t i = 0;
  while (i < shorter.size() && shorter[i] == longer[i]) ++i;
  return longer.compare(i + 1, std::string::npos, shorter, i, std::string::npos) == 0;
}

FieldDecode DecodeOf(const std::string& s) {
  if (s == "auto") return FieldDecode::kAuto;
  if (s == "npy") return FieldDecode::kNpy;
  if (s == "raw") return FieldDecode::kRaw;
  if (s == "bytes") return FieldDecode::kBytes;
  if (s == "str" || s == "string" || s == "text") return FieldDecode::kString;
  if (s == "json") return FieldDecode::kJson;
  if (s == "label" || s == "int") return FieldDecode::kLabel;
  if (s == "image") return FieldDecode::kImage;
  Bad("field decode '" + s + "': expected auto, npy, raw, bytes, str, json, label or image");
}

std::pair<double, double> RangeOf(const py::dict& d, const char* key) {
  auto v = Get<std::vector<double>>(d, key, "a pair of numbers");
  if (v.size() != 2) Bad(std::string("fields: '") + key + "' must be a pair [min, max]");
  return {v[0], v[1]};
}

// The image keys of a field dict (decode "image").
void ImageOf(const py::dict& d, FieldSpec* f) {
  ImageSpec& im = f->image;
  if (d.contains("size") && !d["size"].is_none()) {
    if (py::isinstance<py::int_>(d["size"])) {
      im.height = im.width = d["size"].cast<int>();
    } else {
      auto v = Get<std::vector<int>>(d, "size", "an int or [height, width]");
      if (v.size() != 2) Bad("fields: 'size' must be an int or [height, width]");
      im.height = v[0];
      im.width = v[1];
    }
  }
  if (d.contains("crop") && !d["crop"].is_none()) {
    std::string c = Get<std::string>(d, "crop", "str");
    if (c == "none" || c == "resize") im.crop = ImageCrop::kNone;
    else if (c == "center") im.crop = ImageCrop::kCenter;
    else if (c == "random_resized") im.crop = ImageCrop::kRandomResized;
    else Bad("fields: crop '" + c + "': expected none, center or random_resized");
  }
  if (d.contains("resize") && !d["resize"].is_none()) im.resize = Get<int>(d, "resize", "int");
  if (d.contains("scale")) std::tie(im.scale_min, im.scale_max) = RangeOf(d, "scale");
  if (d.contains("ratio")) std::tie(im.ratio_min, im.ratio_max) = RangeOf(d, "ratio");
  if (d.contains("flip")) {
    py::handle v = d["flip"];
    if (py::isinstance<py::bool_>(v)) im.flip = v.cast<bool>() ? 0.5 : 0.0;
    else im.flip = Get<double>(d, "flip", "a bool or a probability");
  }
  if (d.contains("layout")) {
    std::string l = Get<std::string>(d, "layout", "str");
    for (char& c : l) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (l == "HWC") im.layout = ImageLayout::kHWC;
    else if (l == "CHW") im.layout = ImageLayout::kCHW;
    else Bad("fields: layout '" + l + "': expected HWC or CHW");
  }
  if (d.contains("max_pixels")) im.max_pixels = Get<int64_t>(d, "max_pixels", "int");
  ThrowIfError(ValidateImageSpec(im, f->name).WithContext("fields"));
}

FieldSpec FieldOf(const py::handle& h) {
  FieldSpec f;
  if (py::isinstance<py::str>(h)) {
    f.name = h.cast<std::string>();
    return f;
  }
  if (!py::isinstance<py::dict>(h)) Bad("fields: each entry must be a str or a dict");
  py::dict d = py::reinterpret_borrow<py::dict>(h);
  static const std::set<std::string> kKeys = {"name", "output", "decode", "dtype", "shape",
                                              "optional", "ragged", "size", "crop", "resize",
                                              "scale", "ratio", "flip", "layout", "max_pixels"};
  static const std::set<std::string> kImageKeys = {"size", "crop", "resize", "scale",
                                                   "ratio", "flip", "layout", "max_pixels"};
  for (auto item : d) {
    std::string k = py::str(item.first);
    if (!kKeys.count(k)) {
      // Name the field and the closest key (one edit or a swap away), then every key.
      std::string name = d.contains("name") ? std::string(py::str(d["name"])) : std::string("?");
      std::string close, all;
      for (const std::string& key : kKeys) {
        all += (all.empty() ? "" : ", ") + key;
        if (close.empty() && NearMiss(k, key)) close = key;
      }
      Bad("fields: unknown key '" + k + "' in the entry of field '" + name + "'" +
          (close.empty() ? "" : " (did you mean '" + close + "'?)") + "; the keys are " + all);
    }
  }
  if (!d.contains("name")) Bad("fields: an entry without 'name'");
  f.name = Get<std::string>(d, "name", "str");
  if (d.contains("output") && !d["output"].is_none()) f.output = Get<std::string>(d, "output", "str");
  if (d.contains("decode")) f.decode = DecodeOf(Get<std::string>(d, "decode", "str"));
  if (d.contains("dtype")) f.dtype = DTypeOf(d["dtype"], "dtype");
  if (d.contains("shape") && !d["shape"].is_none())
    f.shape = Get<std::vector<int64_t>>(d, "shape", "a list of int");
  if (f.decode == FieldDecode::kRaw && f.shape.empty()) f.shape = {-1};
  if (d.contains("optional")) f.optional = Get<bool>(d, "optional", "bool");
  if (d.contains("ragged") && !d["ragged"].is_none()) {
    py::handle v = d["ragged"];
    if (py::isinstance<py::bool_>(v)) {
      f.ragged = v.cast<bool>() ? Ragged::kList : Ragged::kError;
    } else {
      std::string r = Get<std::string>(d, "ragged", "a str or bool");
      if (r == "list") f.ragged = Ragged::kList;
      else if (r == "pad") f.ragged = Ragged::kPad;
      else Bad("fields: ragged '" + r + "': expected list or pad");
    }
  }
  if (f.decode == FieldDecode::kImage) {
    ImageOf(d, &f);
  } else {
    for (const std::string& k : kImageKeys)
      if (d.contains(k.c_str())) Bad("fields: '" + k + "' needs \"decode\": \"image\" (field '" + f.name + "')");
  }
  return f;
}

// One entry of `streams`: {"inputs": url or [urls] (or "manifest"), "name",
// "weight" | "repeat" | "choose"}.
MixStream StreamOf(const py::handle& h) {
  if (!py::isinstance<py::dict>(h)) Bad("streams: each entry must be a dict");
  py::dict d = py::reinterpret_borrow<py::dict>(h);
  MixStream m;
  for (auto item : d) {
    const std::string k = py::str(item.first);
    py::handle v = item.second;
    if (k == "inputs" || k == "manifest" || k == "urls") {
      if (py::isinstance<py::str>(v)) m.inputs.push_back(v.cast<std::string>());
      else for (py::handle u : v) m.inputs.push_back(py::str(u).cast<std::string>());
    } else if (k == "name") {
      m.name = v.cast<std::string>();
    } else if (k == "weight" || k == "proportion") {
      if (!v.is_none()) m.weight = v.cast<double>();
    } else if (k == "repeat") {
      if (!v.is_none()) m.repeat = v.cast<double>();
    } else if (k == "choose") {
      if (!v.is_none()) m.choose = v.cast<int64_t>();
    } else {
      Bad("streams: unknown key '" + k + "' (inputs, name, weight, repeat, choose)");
    }
  }
  return m;
}

// A Python tokenizer (text -> ids) called from the reader threads, with the
// GIL. It may return a list or array of ints, a tokenizers.Encoding (.ids)
// or a transformers BatchEncoding / dict ("input_ids").
std::function<Status(std::string_view, std::vector<int32_t>*)> TokenizerOf(const py::handle& h) {
  if (!PyCallable_Check(h.ptr()))
    Bad("tokens.tokenizer: expected a callable (text -> token ids), got " +
        std::string(py::str(py::type::of(h).attr("__name__"))));
  // Released with the GIL held, wherever the last copy goes (a reader
  // thread, the loader's close). Left alone once the interpreter is gone.
  std::shared_ptr<py::object> fn(new py::object(py::reinterpret_borrow<py::object>(h)), [](py::object* p) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete p;
  });
  return [fn](std::string_view text, std::vector<int32_t>* ids) -> Status {
    py::gil_scoped_acquire gil;
    PyObject* decoded = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "strict");
    if (decoded == nullptr) {
      // Damaged text, not a failing tokenizer: the skip policies apply.
      py::error_already_set e;
      return Status(StatusCode::kCorrupt, std::string("the text is not UTF-8: ") + e.what());
    }
    py::str str = py::reinterpret_steal<py::str>(decoded);
    try {
      py::object r = (*fn)(str);
      if (py::hasattr(r, "ids")) {
        r = r.attr("ids");
      } else if (py::hasattr(r, "keys") && r.contains("input_ids")) {
        r = r["input_ids"];
      }
      auto add = [&](long long v) {
        if (v < INT32_MIN || v > INT32_MAX)
          throw std::out_of_range("token id " + std::to_string(v) + " does not fit int32");
        ids->push_back(static_cast<int32_t>(v));
      };
      if (py::hasattr(r, "tolist") && py::hasattr(r, "ndim")) {
        if (r.attr("ndim").cast<int>() != 1)
          return Status(StatusCode::kConfig, "the tokenizer returned an array of " +
                                                 std::to_string(r.attr("ndim").cast<int>()) +
                                                 " dimensions; one document's ids are 1-D");
        r = r.attr("tolist")();
      }
      if (py::isinstance<py::str>(r) || py::isinstance<py::bytes>(r))
        return Status(StatusCode::kConfig, "the tokenizer returned text, not token ids");
      for (py::handle v : r) add(v.cast<long long>());
    } catch (py::error_already_set& e) {
      return Status(StatusCode::kConfig, std::string("the tokenizer raised ") + e.what());
    } catch (const std::exception& e) {
      return Status(StatusCode::kConfig, std::string("the tokenizer's result: ") + e.what() +
                                             " (expected a sequence of int token ids)");
    }
    return Status::OK();
  };
}

TokenOptions TokensOf(const py::dict& d) {
  TokenOptions t;
  for (auto item : d) {
    std::string k = py::str(item.first);
    if (k == "field") t.field = item.second.cast<std::string>();
    else if (k == "input_dtype") t.input_dtype = DTypeOf(item.second, "input_dtype");
    else if (k == "dtype") t.dtype = DTypeOf(item.second, "dtype");
    else if (k == "seq_len") t.seq_len = item.second.cast<int64_t>();
    else if (k == "layout") {
      std::string l = item.second.cast<std::string>();
      if (l == "pack") t.layout = TokenLayout::kPack;
      else if (l == "pad") t.layout = TokenLayout::kPad;
      else Bad("tokens.layout '" + l + "': expected pack or pad");
    } else if (k == "eod_token") t.eod_token = item.second.is_none() ? -1 : item.second.cast<int64_t>();
    else if (k == "pad_token") t.pad_token = item.second.cast<int64_t>();
    else if (k == "document_metadata") t.document_metadata = item.second.cast<bool>();
    else if (k == "equal_batches") t.equal_batches = item.second.cast<bool>();
    else if (k == "tokenizer") {
      if (!item.second.is_none()) t.tokenize = TokenizerOf(item.second);
    }
    else Bad("tokens: unknown key '" + k + "'");
  }
  return t;
}

std::shared_ptr<ShardCache> CacheOf(const py::dict& d) {
  ShardCacheOptions o;
  for (auto item : d) {
    std::string k = py::str(item.first);
    if (k == "dir") o.dir = item.second.cast<std::string>();
    else if (k == "limit_bytes") o.limit_bytes = item.second.cast<uint64_t>();
    else if (k == "low_watermark") o.low_watermark = item.second.cast<double>();
    else if (k == "mode") {
      std::string m = item.second.cast<std::string>();
      if (m == "rw" || m == "read_write") o.mode = CacheMode::kReadWrite;
      else if (m == "ro" || m == "read_only") o.mode = CacheMode::kReadOnly;
      else if (m == "off") o.mode = CacheMode::kOff;
      else Bad("cache.mode '" + m + "': expected rw, ro or off");
    } else if (k == "download_threads") o.download_threads = item.second.cast<int>();
    else if (k == "prefetch_lookahead") o.prefetch_lookahead = item.second.cast<int>();
    else if (k == "max_attempts") o.max_attempts = item.second.cast<int>();
    else if (k == "sync_entries") o.sync_entries = item.second.cast<bool>();
    else Bad("cache: unknown key '" + k + "'");
  }
  std::unique_ptr<ShardCache> cache;
  {
    py::gil_scoped_release release;
    auto r = ShardCache::Create(std::move(o));
    if (r.ok()) cache = std::move(r).value();
    else {
      py::gil_scoped_acquire acquire;
      ThrowStatus(r.status());
    }
  }
  return std::shared_ptr<ShardCache>(std::move(cache));
}

// One row per option the Python layer may pass: how to set it from a Python
// value, and its C++ default as Python sees it (None where Python builds the
// value: fields, tokens, cache). Python's option table (shardstream/options.py)
// is checked against these rows by the tests, so the two cannot drift.
struct OptionRow {
  const char* name;
  void (*set)(LoaderOptions&, py::handle);
  py::object (*get)(const LoaderOptions&);
};

py::object NoneOf(const LoaderOptions&) { return py::none(); }

// A plain option: the Python value cast to the field's own type. The rows of
// plain options are generated from the option table (loader_option_rows.inc);
// the rows written here convert their values themselves.
#define SS_PLAIN(field)                                                                   \
  OptionRow {                                                                             \
    #field,                                                                               \
        [](LoaderOptions& o, py::handle v) {                                              \
          o.field = v.cast<std::decay_t<decltype(LoaderOptions::field)>>();               \
        },                                                                                \
        [](const LoaderOptions& o) -> py::object { return py::cast(o.field); }            \
  }

const std::vector<OptionRow>& OptionRows() {
  static const std::vector<OptionRow> rows = {
      {"manifest", [](LoaderOptions& o, py::handle v) { o.manifest = v.cast<std::string>(); },
       NoneOf},
      {"inputs",
       [](LoaderOptions& o, py::handle v) {
         for (py::handle u : v) o.inputs.push_back(u.cast<std::string>());
       },
       NoneOf},
      {"streams",
       [](LoaderOptions& o, py::handle v) {
         for (py::handle h : v) o.streams.push_back(StreamOf(h));
       },
       NoneOf},
      {"index_dir", [](LoaderOptions& o, py::handle v) { o.index_dir = v.cast<std::string>(); },
       NoneOf},
      {"mode",
       [](LoaderOptions& o, py::handle v) {
         const std::string m = v.cast<std::string>();
         if (m == "train") o.mode = LoaderMode::kTrain;
         else if (m == "eval") o.mode = LoaderMode::kEval;
         else Bad("mode '" + m + "': expected train or eval");
       },
       [](const LoaderOptions& o) -> py::object {
         return py::str(o.mode == LoaderMode::kEval ? "eval" : "train");
       }},
      {"fields",
       [](LoaderOptions& o, py::handle v) {
         for (py::handle f : v) o.fields.push_back(FieldOf(f));
       },
       NoneOf},
      {"tokens", [](LoaderOptions& o, py::handle v) { o.tokens = TokensOf(v.cast<py::dict>()); },
       NoneOf},
      {"pinned",
       [](LoaderOptions& o, py::handle v) {
         if (!v.cast<bool>()) o.allocator = PageableAllocator();
       },
       [](const LoaderOptions& o) -> py::object { return py::bool_(o.allocator == nullptr); }},
      {"error_policy",
       [](LoaderOptions& o, py::handle v) {
         const std::string p = v.cast<std::string>();
         if (p == "raise") o.error_policy = ErrorPolicy::kRaise;
         else if (p == "skip_shard") o.error_policy = ErrorPolicy::kSkipShard;
         else if (p == "skip_sample") o.error_policy = ErrorPolicy::kSkipSample;
         else Bad("error_policy '" + p + "': expected raise, skip_shard or skip_sample");
       },
       [](const LoaderOptions& o) -> py::object {
         return py::str(o.error_policy == ErrorPolicy::kRaise       ? "raise"
                        : o.error_policy == ErrorPolicy::kSkipShard ? "skip_shard"
                                                                    : "skip_sample");
       }},
      {"engine",
       [](LoaderOptions& o, py::handle v) {
         const std::string e = v.cast<std::string>();
         if (e == "fast") o.engine = TarEngine::kFast;
         else if (e == "libarchive") o.engine = TarEngine::kLibarchive;
         else Bad("engine '" + e + "': expected fast or libarchive");
       },
       [](const LoaderOptions& o) -> py::object {
         return py::str(o.engine == TarEngine::kFast ? "fast" : "libarchive");
       }},
      {"cache", [](LoaderOptions& o, py::handle v) { o.cache = CacheOf(v.cast<py::dict>()); },
       NoneOf},
#include "loader_option_rows.inc"
  };
  return rows;
}

#undef SS_PLAIN

}  // namespace

LoaderOptions LoaderOptionsFromDict(const py::dict& d) {
  LoaderOptions o;
  o.parquet = MakeParquetReaders();  // pyarrow, imported when a Parquet file is read
  const auto& rows = OptionRows();
  for (auto item : d) {
    std::string k = py::str(item.first);
    py::handle v = item.second;
    if (v.is_none()) continue;  // None: the documented default
    auto row = std::find_if(rows.begin(), rows.end(),
                            [&](const OptionRow& r) { return k == r.name; });
    if (row == rows.end()) Bad("unknown option '" + k + "'");
    try {
      row->set(o, v);
    } catch (const py::cast_error&) {
      Bad("option " + k + ": value of the wrong type (" +
          std::string(py::str(py::type::of(v).attr("__name__"))) + ")");
    }
  }
  return o;
}

py::dict LoaderOptionDefaults() {
  const LoaderOptions o;
  py::dict d;
  for (const OptionRow& r : OptionRows()) d[r.name] = r.get(o);
  return d;
}

FieldSpec FieldSpecFromPython(const py::handle& h) { return FieldOf(h); }

}  // namespace shardstream::python
