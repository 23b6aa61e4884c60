// Stacks decoded sample fields into pool slots. Token packing is in
// token_packer.cc.
#include "pipeline/sample_batcher.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "format/decode_error.h"
#include "memory/stream_copy.h"
#include "shardstream/image.h"

using shardstream::internal::FieldError;

namespace shardstream::internal {

SampleBatcher::SampleBatcher(std::vector<FieldSpec> fields, int64_t batch_size, PoolConfig pool,
                             EmitFn emit)
    : fields_(std::move(fields)),
      batch_size_(batch_size),
      slots_(std::move(pool), std::move(emit)),
      decoded_(fields_.size()),
      shape_col_(fields_.size(), 0),
      pixels_(fields_.size()) {
  for (size_t i = 0; i < fields_.size(); ++i) {
    const FieldSpec& f = fields_[i];
    if (f.optional) optional_.push_back(i);
    Ragged r = f.ragged;
    if (r == Ragged::kError && f.decode == FieldDecode::kImage && f.image.height == 0) r = Ragged::kList;
    ragged_.push_back(r);
  }
}

Result<DecodedField> SampleBatcher::Absent(const FieldSpec& spec) const {
  const FieldDecode how = spec.decode == FieldDecode::kAuto ? DecodeForName(spec.name) : spec.decode;
  DecodedField d;
  switch (how) {
    case FieldDecode::kBytes:
    case FieldDecode::kAuto:
      return d;
    case FieldDecode::kString:
      d.is_string = true;
      return d;
    case FieldDecode::kJson:
      d.is_string = true;
      d.is_json = true;
      return d;
    case FieldDecode::kLabel:
      d.is_tensor = true;
      d.is_label = true;
      d.dtype = DType::kInt64;
      return d;
    case FieldDecode::kRaw: {
      if (spec.scalar) {  // one element, no dimensions (as DecodeRaw makes it)
        d.is_tensor = true;
        d.dtype = spec.dtype;
        return d;
      }
      bool full = !spec.shape.empty() && static_cast<int>(spec.shape.size()) <= kMaxDims;
      for (int64_t n : spec.shape) full = full && n >= 0;
      if (!full) break;
      d.is_tensor = true;
      d.dtype = spec.dtype;
      d.ndim = static_cast<int>(spec.shape.size());
      for (int k = 0; k < d.ndim; ++k) d.shape[k] = spec.shape[k];
      return d;
    }
    case FieldDecode::kImage: {
      d.is_tensor = true;
      d.ndim = 3;
      const bool hwc = spec.image.layout == ImageLayout::kHWC;
      d.shape[hwc ? 0 : 1] = spec.image.height;
      d.shape[hwc ? 1 : 2] = spec.image.width;
      d.shape[hwc ? 2 : 0] = 3;
      return d;
    }
    case FieldDecode::kNpy:
      break;
  }
  if (spec.ragged != Ragged::kError && how == FieldDecode::kRaw &&
      static_cast<int>(spec.shape.size()) <= kMaxDims) {
    d.is_tensor = true;
    d.dtype = spec.dtype;
    // No shape is one dimension of any length, as DecodeRaw reads it.
    d.ndim = spec.shape.empty() ? 1 : static_cast<int>(spec.shape.size());
    return d;
  }
  return Status::Config("optional field '" + spec.name +
                        "' is missing from the first sample, and its spec does not fix its type: "
                        "give it decode \"raw\" with a dtype and a full shape, or let the first "
                        "sample have it");
}

Status SampleBatcher::InitLayout(const std::vector<DecodedField>& decoded) {
  std::vector<ColumnLayout> cols;
  for (size_t i = 0; i < fields_.size(); ++i) {
    const DecodedField& d = decoded[i];
    ColumnLayout c;
    c.name = fields_[i].output_name();
    c.is_bytes = !d.is_tensor || ragged_[i] != Ragged::kError;
    c.is_string = d.is_string;
    c.is_json = d.is_json;
    if (ragged_[i] != Ragged::kError) {
      if (!d.is_tensor || d.is_label)
        return Status::Config("field '" + fields_[i].name +
                              "': ragged needs a tensor field (npy, raw or image)");
      c.ragged = ragged_[i];
    }
    c.dtype = d.dtype;
    c.ndim = d.ndim;
    for (int k = 0; k < d.ndim; ++k) c.shape[k] = d.shape[k];
    if (c.ragged != Ragged::kError) {
      for (int k = 0; k < d.ndim; ++k) c.shape[k] = 0;  // per row: see the shape column
    }
    c.row_bytes = c.is_bytes ? 0 : static_cast<size_t>(d.elements()) * DTypeSize(d.dtype);
    cols.push_back(std::move(c));
  }
  for (size_t i : optional_) {
    ColumnLayout c;
    c.name = fields_[i].output_name() + ".present";
    c.dtype = DType::kBool;
    c.row_bytes = 1;
    cols.push_back(std::move(c));
  }
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (ragged_[i] == Ragged::kError) continue;
    ColumnLayout c;
    c.name = fields_[i].output_name() + ".shape";
    c.dtype = DType::kInt64;
    c.ndim = 1;
    c.shape[0] = decoded[i].ndim;
    c.row_bytes = sizeof(int64_t) * static_cast<size_t>(decoded[i].ndim);
    shape_col_[i] = cols.size();
    cols.push_back(std::move(c));
  }
  return slots_.Init(BatchLayout::Make(std::move(cols), batch_size_, batch_size_,
                                       slots_.arena_bytes()));
}

Status SampleBatcher::Add(const RowInput& row) {
  for (size_t i = 0; i < fields_.size(); ++i) {
    const FieldSpec& spec = fields_[i];
    const FieldRef& f = row.fields[i];
    FieldContext ctx{row.key, spec.name, row.url, f.present ? f.offset : row.offset};
    if (!f.present) {
      if (!spec.optional) {
        // Not corrupt data: a field that some samples lack (kConfig).
        Status e = FieldError(ctx, 0, "the sample has no field '" + spec.name +
                                          "'; if samples may lack it, mark it optional: "
                                          "{\"name\": \"" + spec.name +
                                          "\", \"optional\": True} in fields= (Python), "
                                          "FieldSpec::optional (C++); its batches then carry '" +
                                          spec.output_name() + ".present'" +
                                          internal::ImageAlternativesHint(spec.name));
        return Status(StatusCode::kConfig, e.message(), e.url(), e.offset());
      }
      if (!slots_.ready()) {
        SHARDSTREAM_ASSIGN_OR_RETURN(decoded_[i], Absent(spec));
      } else {
        decoded_[i] = DecodedField();
        decoded_[i].is_tensor = !slots_.writer().layout().columns[i].is_bytes;
      }
      decoded_[i].data = {};
      continue;
    }
    if (f.decoded != nullptr) {
      decoded_[i] = *f.decoded;
    } else if (spec.decode == FieldDecode::kImage) {
      SHARDSTREAM_ASSIGN_OR_RETURN(
          decoded_[i], DecodeImage(f.data, spec.image, ImageDraw{seed_, epoch_, row.key}, &pixels_[i], ctx));
    } else {
      SHARDSTREAM_ASSIGN_OR_RETURN(decoded_[i], DecodeField(f.data, spec, ctx));
    }
  }
  if (!slots_.ready()) SHARDSTREAM_RETURN_IF_ERROR(InitLayout(decoded_));
  // Check every field before writing any, so a skipped sample leaves no trace.
  const BatchLayout& layout = slots_.writer().layout();
  for (size_t i = 0; i < fields_.size(); ++i) {
    const ColumnLayout& c = layout.columns[i];
    const DecodedField& d = decoded_[i];
    if (!row.fields[i].present) continue;
    FieldContext ctx{row.key, fields_[i].name, row.url, row.fields[i].offset};
    if (c.ragged != Ragged::kError) {
      if (!d.is_tensor || d.is_label || d.dtype != c.dtype || d.ndim != c.ndim)
        return FieldError(ctx, 0, "ragged field is " + std::string(DTypeName(d.dtype)) + " with " +
                                      std::to_string(d.ndim) + " dimensions, but the batch holds " +
                                      std::string(DTypeName(c.dtype)) + " with " +
                                      std::to_string(c.ndim));
      continue;
    }
    if (c.is_bytes != !d.is_tensor)
      return FieldError(ctx, 0, "field changed from tensor to bytes between samples");
    if (c.is_bytes) continue;
    bool same = d.dtype == c.dtype && d.ndim == c.ndim;
    for (int k = 0; same && k < d.ndim; ++k) same = d.shape[k] == c.shape[k];
    if (!same) {
      std::string want = std::string(DTypeName(c.dtype)) + "[";
      for (int k = 0; k < c.ndim; ++k) want += (k ? "," : "") + std::to_string(c.shape[k]);
      std::string got = std::string(DTypeName(d.dtype)) + "[";
      for (int k = 0; k < d.ndim; ++k) got += (k ? "," : "") + std::to_string(d.shape[k]);
      return FieldError(ctx, 0, "is " + got + "] but the batch stacks " + want +
                                    "] (for variable shapes give the field \"ragged\": "
                                    "\"list\" or \"pad\")");
    }
  }
  SHARDSTREAM_RETURN_IF_ERROR(slots_.EnsureBatch());
  BatchWriter& w = slots_.writer();
  const int64_t r = w.rows();
  for (size_t i = 0; i < fields_.size(); ++i) {
    const ColumnLayout& c = layout.columns[i];
    if (c.ragged != Ragged::kError) {
      const bool have = row.fields[i].present;
      w.SetBytes(i, r, have ? decoded_[i].bytes() : std::string_view(), 8);
      auto* shape = reinterpret_cast<int64_t*>(w.column(shape_col_[i])) + r * c.ndim;
      for (int k = 0; k < c.ndim; ++k) shape[k] = have ? decoded_[i].shape[k] : 0;
    } else if (c.is_bytes) {
      w.SetBytes(i, r, row.fields[i].present ? decoded_[i].data : std::string_view());
    } else {
      char* dst = w.column(i) + static_cast<size_t>(r) * c.row_bytes;
      if (c.row_bytes == 0) continue;
      if (row.fields[i].present) {
        StreamCopy(dst, decoded_[i].bytes().data(), c.row_bytes);
      } else {
        std::memset(dst, 0, c.row_bytes);
      }
    }
  }
  for (size_t k = 0; k < optional_.size(); ++k) {
    const size_t col = fields_.size() + k;
    w.column(col)[static_cast<size_t>(r)] = row.fields[optional_[k]].present ? 1 : 0;
  }
  w.AddSample(row.id, row.key);
  w.set_rows(r + 1);
  if (r + 1 == batch_size_) return slots_.EmitBatch();
  return Status::OK();
}

Status SampleBatcher::Flush(bool drop) {
  if (drop && slots_.ready() && slots_.writer().active()) {
    Batch dropped = slots_.writer().Finish();  // its slot goes back to the pool
    return Status::OK();
  }
  return slots_.EmitBatch();
}

Status SampleBatcher::Pad(int64_t batches) {
  if (batches <= 0) return Status::OK();
  if (!slots_.ready()) {
    // No sample of this consumer's share was batched (all skipped): the
    // padding takes its shapes from the specs, where each fixes its field's
    // type as a sample would (the other consumers' batches have the same).
    for (size_t i = 0; i < fields_.size(); ++i) {
      auto d = Absent(fields_[i]);
      if (!d.ok())
        return Status(StatusCode::kConfig,
                      "loader: no sample of this consumer's share was batched (skipped under "
                      "error_policy, or none left after a resume), and the spec of field '" + fields_[i].name +
                      "' does not fix its type, so there are no shapes for the " +
                      std::to_string(batches) +
                      " batch(es) of padding that would keep it in step with the other "
                      "consumers (an npy field's shape is in its data). Use fewer consumers "
                      "(each then gets a larger share) or error_policy \"raise\", or store the "
                      "field without a header and decode it \"raw\" with its dtype and shape");
      decoded_[i] = *d;
    }
    SHARDSTREAM_RETURN_IF_ERROR(InitLayout(decoded_));
  }
  const BatchLayout& layout = slots_.writer().layout();
  for (int64_t b = 0; b < batches; ++b) {
    SHARDSTREAM_RETURN_IF_ERROR(slots_.EnsureBatch());
    BatchWriter& w = slots_.writer();
    for (int64_t r = 0; r < batch_size_; ++r) {
      for (size_t i = 0; i < fields_.size(); ++i) {
        const ColumnLayout& c = layout.columns[i];
        if (c.ragged != Ragged::kError) {
          w.SetBytes(i, r, std::string_view(), 8);
          auto* shape = reinterpret_cast<int64_t*>(w.column(shape_col_[i])) + r * c.ndim;
          std::fill(shape, shape + c.ndim, int64_t{0});
        } else if (c.is_bytes) {
          w.SetBytes(i, r, std::string_view());
        } else if (c.row_bytes > 0) {
          std::memset(w.column(i) + static_cast<size_t>(r) * c.row_bytes, 0, c.row_bytes);
        }
      }
      for (size_t k = 0; k < optional_.size(); ++k)
        w.column(fields_.size() + k)[static_cast<size_t>(r)] = 0;
    }
    w.set_rows(batch_size_);
    SHARDSTREAM_RETURN_IF_ERROR(slots_.EmitBatch());
  }
  return Status::OK();
}

}  // namespace shardstream::internal
