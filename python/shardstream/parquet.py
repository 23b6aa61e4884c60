"""Parquet files as rows, for the native loader: pyarrow reads them through
shardstream's Source (a ``_core.SourceFile``: local files, http(s), s3 with the
same credentials and retries as every other read), and the loader takes the
record batches through the Arrow C stream interface. Not called directly:
``ShardDataset("data/*.parquet")`` uses it. Needs pyarrow.
"""

from __future__ import annotations

from typing import Any, List, Tuple

from .errors import ConfigError

_BATCH_ROWS = 1024  # rows per record batch handed to the loader


def _pq():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:  # pragma: no cover - pyarrow is a test dependency
        raise ConfigError("reading Parquet needs pyarrow (14 or later): pip install pyarrow") from e
    if not hasattr(pa.RecordBatchReader, "__arrow_c_stream__"):  # pragma: no cover
        raise ConfigError(f"reading Parquet needs pyarrow 14 or later (the Arrow C stream "
                          f"interface); this is pyarrow {pa.__version__}")
    return pq


def _file(source_file: Any):
    pq = _pq()
    import pyarrow as pa
    return pq.ParquetFile(pa.PythonFile(source_file, mode="r"))


def _kind(t: Any) -> str:
    import pyarrow.types as pt
    if pt.is_string(t) or pt.is_large_string(t):
        return "string"
    if pt.is_integer(t):
        return "integer"
    if pt.is_floating(t) and not pt.is_float16(t):
        return "float"
    if pt.is_boolean(t):
        return "bool"
    if pt.is_binary(t) or pt.is_large_binary(t):
        return "binary"
    return "unsupported"


def count_rows(source_file: Any) -> int:
    return _file(source_file).metadata.num_rows


def columns(source_file: Any) -> List[Tuple[str, str, str]]:
    """(name, kind, type) of each column; kind "unsupported" for a type not read
    (named as a field, it is an error; otherwise it is left out)."""
    return [(f.name, _kind(f.type), str(f.type)) for f in _file(source_file).schema_arrow]


def open_rows(source_file: Any, first: int):
    """A RecordBatchReader of the file's rows from row ``first`` on: the row
    groups before the one that holds it are not read."""
    import pyarrow as pa
    f = _file(source_file)
    read = [c.name for c in f.schema_arrow if _kind(c.type) != "unsupported"]
    schema = pa.schema([f.schema_arrow.field(n) for n in read])
    md = f.metadata
    group, start = 0, 0
    while group < md.num_row_groups and start + md.row_group(group).num_rows <= first:
        start += md.row_group(group).num_rows
        group += 1

    def batches():
        skip = first - start
        for b in f.iter_batches(batch_size=_BATCH_ROWS, row_groups=range(group, md.num_row_groups),
                                columns=read, use_threads=False):
            if skip >= b.num_rows:
                skip -= b.num_rows
                continue
            if skip:
                b, skip = b.slice(skip), 0
            yield b

    return pa.RecordBatchReader.from_batches(schema, batches())
