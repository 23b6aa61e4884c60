// LoaderOptions from a Python dict of keyword arguments (see
// shardstream/loader.py for the names). REQUIRES: the GIL is held. Raises
// shardstream.ConfigError for an unknown key or a bad value.
#ifndef SHARDSTREAM_PYTHON_LOADER_OPTIONS_H_
#define SHARDSTREAM_PYTHON_LOADER_OPTIONS_H_

#include <pybind11/pybind11.h>

#include "shardstream/options.h"

namespace shardstream::python {

LoaderOptions LoaderOptionsFromDict(const pybind11::dict& d);

}  // namespace shardstream::python

#endif  // SHARDSTREAM_PYTHON_LOADER_OPTIONS_H_
