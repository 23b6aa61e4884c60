#include "status_to_exception.h"

namespace py = pybind11;

namespace shardstream::python {

void ThrowStatus(const Status& status) {
  py::object factory = py::module_::import("shardstream.errors").attr("_from_status");
  py::object exc = factory(std::string(StatusCodeName(status.code())), status.message(),
                           status.url(), status.offset());
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

}  // namespace shardstream::python
