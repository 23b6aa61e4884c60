// LoaderOptions from a Python dict of keyword arguments (see
// shardstream/loader.py for the names). REQUIRES: the GIL is held. Raises
// shardstream.ConfigError for an unknown key or a bad value.
#ifndef SHARDSTREAM_PYTHON_LOADER_OPTIONS_H_
#define SHARDSTREAM_PYTHON_LOADER_OPTIONS_H_

#include <pybind11/pybind11.h>

#include "shardstream/options.h"

namespace shardstream::python {

LoaderOptions LoaderOptionsFromDict(const pybind11::dict& d);

// Every key LoaderOptionsFromDict takes, with the C++ default as Python sees
// it (None for fields, tokens, cache and the inputs, which Python builds).
pybind11::dict LoaderOptionDefaults();

// One entry of `fields`: a name, or a dict of the keys docs/images.md and
// docs/python.md list. Raises ConfigError as above.
FieldSpec FieldSpecFromPython(const pybind11::handle& h);

}  // namespace shardstream::python

#endif  // SHARDSTREAM_PYTHON_LOADER_OPTIONS_H_
