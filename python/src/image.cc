// shardstream._core image functions: one image decoded as the loader would
// decode it (for tests, previews and callers with their own pipeline), and
// the crop box the loader draws for a sample.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "loader_options.h"
#include "shardstream/decode.h"
#include "shardstream/image.h"
#include "status_to_exception.h"

namespace py = pybind11;

namespace shardstream::python {
namespace {

ImageSpec SpecOf(const py::dict& field) {
  py::dict d(field);
  if (!d.contains("name")) d["name"] = "image";
  d["decode"] = "image";
  return FieldSpecFromPython(d).image;
}

py::array ToArray(const DecodedField& f) {
  std::vector<py::ssize_t> shape(f.shape, f.shape + f.ndim);
  py::array_t<uint8_t> out(shape);
  std::memcpy(out.mutable_data(), f.data.data(), f.data.size());
  return std::move(out);
}

}  // namespace

void RegisterImage(py::module_& m) {
  m.def(
      "decode_image",
      [](py::bytes data, const py::dict& field, py::object box, uint64_t seed, int64_t epoch,
         const std::string& key) {
        ImageSpec spec = SpecOf(field);
        std::string_view bytes = data;
        std::vector<uint8_t> px;
        const FieldContext ctx{key, "image", "", 0};
        std::optional<Result<DecodedField>> r;
        if (box.is_none()) {
          py::gil_scoped_release release;
          r.emplace(DecodeImage(bytes, spec, ImageDraw{seed, epoch, key}, &px, ctx));
        } else {
          auto t = box.cast<std::vector<double>>();  // top, left, height, width[, flip]
          if (t.size() != 4 && t.size() != 5) throw py::value_error("box: (top, left, height, width[, flip])");
          CropBox b{t[1], t[0], t[3], t[2]};
          b.flip = t.size() == 5 && t[4] != 0;
          py::gil_scoped_release release;
          r.emplace(DecodeImageBox(bytes, spec, b, &px, ctx));
        }
        return ToArray(ValueOrThrow(std::move(*r)));
      },
      py::arg("data"), py::arg("field"), py::arg("box") = py::none(), py::arg("seed") = 0,
      py::arg("epoch") = 0, py::arg("key") = "");
  m.def(
      "image_crop_box",
      [](int width, int height, const py::dict& field, uint64_t seed, int64_t epoch,
         const std::string& key) {
        CropBox b = DrawCropBox(SpecOf(field), width, height, ImageDraw{seed, epoch, key});
        return py::make_tuple(b.y, b.x, b.height, b.width, b.flip);
      },
      py::arg("width"), py::arg("height"), py::arg("field"), py::arg("seed") = 0,
      py::arg("epoch") = 0, py::arg("key") = "");
}

}  // namespace shardstream::python
