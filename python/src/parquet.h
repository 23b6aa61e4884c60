// Parquet readers (rows.h) backed by pyarrow, for LoaderOptions::parquet.
#ifndef SHARDSTREAM_PYTHON_PARQUET_H_
#define SHARDSTREAM_PYTHON_PARQUET_H_

#include <pybind11/pybind11.h>

#include "shardstream/rows.h"

namespace shardstream::python {

ParquetReaders MakeParquetReaders();
void RegisterParquet(pybind11::module_& m);

}  // namespace shardstream::python

#endif  // SHARDSTREAM_PYTHON_PARQUET_H_
