"""Text in, token shards out: :func:`text_to_shards`.

Turns JSON Lines files (plain, ``.gz``, ``.zst``), Parquet files, or an
iterable of records (a generator, a list of dicts, a Hugging Face
``datasets.Dataset`` / ``IterableDataset``) into WebDataset token shards that
:class:`shardstream.Loader` reads with ``tokens={"field": "tokens.npy", ...}``,
using any tokenizer callable (text -> token ids), on several processes. See
docs/convert.md.

Layout of the output (the same bytes whatever ``processes`` is):

* input number ``i`` (in the order given) becomes the shards
  ``part-<i:05d>-<n:06d>.tar`` (plus their ``.idx`` sample indexes). With
  ``layout="compact"`` (the default) documents are written in document groups
  of about 128 KiB of tokens, ``{"__key__", "tokens.npy", "doc_offsets.npy"}``
  (and ``"doc_keys.txt"`` with ``key_field``), which readers hand out one
  document at a time; with ``layout="documents"`` one document is one sample
  ``{"__key__", "tokens.npy"}``;
* ``manifest.jsonl`` lists every shard, inputs in order and each input's
  shards in order, with an extra key ``"ntokens"``: the token ids the shard
  holds. It is written last, atomically, and only when everything worked.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import multiprocessing
import os
import pickle
import re
import time
from array import array
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import (Any, Callable, Deque, Dict, Iterable, Iterator, List, Mapping, NamedTuple,
                    Optional, Sequence, Tuple, Union)

import numpy as np

from .errors import ConfigError, CorruptError, Error, IoError
from .loader import parse_size
from .writer import ShardWriter, encode_field

__all__ = ["text_to_shards", "images_to_shards", "SHARD_PATTERN", "MANIFEST_NAME"]

#: Shard names: input number, then the shard's number within that input.
SHARD_PATTERN = "part-{input:05d}-%06d.tar"
#: The merged manifest, in out_dir.
MANIFEST_NAME = "manifest.jsonl"

# Everything this module may leave in out_dir: shards, their .idx sidecars and
# the writer's temporary files ('.part-...tar.tmp', 'part-...tar.idx.tmp.<hex>').
_OUR_FILES = re.compile(r"^\.?part-\d{5,}-\d{6,}\.tar(\.idx)?(\.tmp(\.[0-9a-f]+)?)?$")
_MANIFEST_TMP = "." + MANIFEST_NAME + ".tmp"

# Name endings -> (format, compression). JSON Lines files may also be named
# .json (as C4's .json.gz are); a .json file holding one JSON document fails
# on its first line that is not an object.
_SUFFIXES = (
    (".jsonl", "jsonl", None), (".ndjson", "jsonl", None), (".json", "jsonl", None),
    (".jsonl.gz", "jsonl", "gzip"), (".ndjson.gz", "jsonl", "gzip"), (".json.gz", "jsonl", "gzip"),
    (".jsonl.zst", "jsonl", "zstd"), (".ndjson.zst", "jsonl", "zstd"),
    (".json.zst", "jsonl", "zstd"), (".jsonl.zstd", "jsonl", "zstd"),
    (".parquet", "parquet", None),
)
_SUPPORTED = ", ".join(s for s, _, _ in _SUFFIXES)

_DTYPES = {"uint16": np.uint16, "int32": np.int32, "uint32": np.uint32}

_READ_BYTES = 1 << 20     # compressed / plain bytes read at a time
_BATCH = 1024             # documents tokenized (and, for iterables, sent to a worker) at a time
_POLL = 1024              # writes between looks at the writer's finished shards

Tokenizer = Callable[[Any], Any]


# --------------------------------------------------------------------------- inputs

def _format_of(path: str) -> Tuple[str, Optional[str]]:
    low = path.lower()
    best = None
    for suffix, fmt, comp in _SUFFIXES:
        if low.endswith(suffix) and (best is None or len(suffix) > len(best[0])):
            best = (suffix, fmt, comp)
    if best is None:
        raise ConfigError(f"{path}: unsupported input file (supported endings: {_SUPPORTED})")
    return best[1], best[2]


def _has_magic(text: str) -> bool:
    return any(c in text for c in "*?[")


def _expand_one(item: Union[str, "os.PathLike[str]"]) -> List[str]:
    path = os.fspath(item)
    if not isinstance(path, str):
        path = os.fsdecode(path)
    if _has_magic(path):
        found = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
        if not found:
            raise ConfigError(f"no input file matches {path!r}")
        return found
    if os.path.isdir(path):
        found = []
        for name in sorted(os.listdir(path)):
            full = os.path.join(path, name)
            if os.path.isfile(full) and any(name.lower().endswith(s) for s, _, _ in _SUFFIXES):
                found.append(full)
        if not found:
            raise ConfigError(f"directory {path} holds no input file (supported endings: "
                              f"{_SUPPORTED})")
        return found
    return [path]


def _is_path_list(inputs: Any) -> bool:
    if isinstance(inputs, (str, bytes, os.PathLike)):
        return True
    if isinstance(inputs, (list, tuple)) and inputs and all(
            isinstance(x, (str, bytes, os.PathLike)) for x in inputs):
        return True
    return False


def _resolve_files(inputs: Any) -> List[str]:
    items = [inputs] if isinstance(inputs, (str, bytes, os.PathLike)) else list(inputs)
    files: List[str] = []
    seen: Dict[str, int] = {}
    for item in items:
        for path in _expand_one(item):
            _format_of(path)
            if not os.path.exists(path):
                raise ConfigError(f"{path}: cannot read input file: no such file")
            if not os.path.isfile(path):
                raise ConfigError(f"{path}: cannot read input file: not a regular file")
            if not os.access(path, os.R_OK):
                raise ConfigError(f"{path}: cannot read input file: permission denied")
            real = os.path.realpath(path)
            if real in seen:
                raise ConfigError(f"{path}: input file given twice (as input {seen[real]} and "
                                  f"{len(files)})")
            seen[real] = len(files)
            files.append(path)
    return files


# --------------------------------------------------------------------------- reading

def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The lines (without the newline) of a stream of byte chunks."""
    rest = b""
    for chunk in chunks:
        if not chunk:
            continue
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        yield from parts
    if rest:
        yield rest


def _plain_chunks(f: Any) -> Iterator[bytes]:
    while True:
        chunk = f.read(_READ_BYTES)
        if not chunk:
            return
        yield chunk


def _zstd_chunks(f: Any, path: str) -> Iterator[bytes]:
    """Decompressed chunks of a .zst file (several frames allowed); a stream cut
    short is an error (zstandard's stream_reader would end quietly)."""
    try:
        import zstandard
    except ImportError as e:
        raise ConfigError(f"{path}: reading .zst files needs the 'zstandard' package "
                          "(pip install zstandard)") from e
    dctx = zstandard.ZstdDecompressor()
    dobj = dctx.decompressobj()
    started = False
    while True:
        data = f.read(_READ_BYTES)
        if not data:
            break
        while data:
            if dobj.eof:  # a new frame starts
                dobj = dctx.decompressobj()
            started = True
            out = dobj.decompress(data)
            if out:
                yield out
            data = dobj.unused_data if dobj.eof else b""
    if started and not dobj.eof:
        raise EOFError("the zstd stream ends in the middle of a frame (truncated file)")


def _jsonl_records(path: str, comp: Optional[str],
                   text_field: str, key_field: Optional[str]) -> Iterator[Tuple[int, Any, Any]]:
    """(line number, key or None, text) of each non-blank line, text unchecked."""
    try:
        raw = open(path, "rb")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read input file: {e.strerror or e}") from e
    lineno = 0
    with raw:
        if comp == "gzip":
            stream: Any = gzip.GzipFile(fileobj=raw, mode="rb")
            chunks = _plain_chunks(stream)
        elif comp == "zstd":
            chunks = _zstd_chunks(raw, path)
        else:
            chunks = _plain_chunks(raw)
        lines = _lines(chunks)
        while True:
            try:
                line = next(lines)
            except StopIteration:
                break
            except Error:
                raise
            except Exception as e:  # noqa: BLE001 - BadGzipFile, EOFError, zlib.error, ZstdError
                what = f"{comp} data" if comp else "the file"
                if isinstance(e, OSError) and not isinstance(e, gzip.BadGzipFile):
                    raise IoError(f"{path} line {lineno + 1}: cannot read {what}: {e}", path) from e
                raise CorruptError(f"{path} line {lineno + 1}: damaged {what} "
                                   f"({type(e).__name__}: {e})", path) from e
            lineno += 1
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
                raise CorruptError(f"{path} line {lineno}: not JSON ({e})", path) from e
            if not isinstance(rec, dict):
                raise ConfigError(f"{path} line {lineno}: expected a JSON object with "
                                  f"'{text_field}', got {_a(_json_type(rec))}", path)
            yield lineno, _field(rec, key_field, f"{path} line {lineno}") if key_field else None, \
                _field(rec, text_field, f"{path} line {lineno}")


def _json_type(value: Any) -> str:
    """What a value is, in words a JSON or a Python user reads alike."""
    if value is None:
        return "null (None)"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float, np.integer, np.floating)):
        return "number"
    if isinstance(value, (list, tuple)):
        return "list (JSON array)"
    if isinstance(value, Mapping):
        return "dict (JSON object)"
    return type(value).__name__


def _a(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def _field(rec: Mapping[str, Any], name: str, where: str) -> Any:
    try:
        return rec[name]
    except KeyError:
        have = ", ".join(repr(k) for k in list(rec)[:20])
        raise ConfigError(f"{where}: no '{name}' field (fields: {have or 'none'})") from None


def _parquet_records(path: str, text_field: str,
                     key_field: Optional[str]) -> Iterator[Tuple[int, Any, Any]]:
    """(row number from 1, key or None, text) of each row."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        pf = pq.ParquetFile(path)
    except OSError as e:
        if isinstance(e, (FileNotFoundError, PermissionError)):
            raise ConfigError(f"{path}: cannot read input file: {e}") from e
        raise CorruptError(f"{path}: not a readable Parquet file: {e}", path) from e
    except (pa.ArrowException, ValueError) as e:
        raise CorruptError(f"{path}: not a readable Parquet file: {e}", path) from e
    schema = pf.schema_arrow
    columns = [text_field] + ([key_field] if key_field and key_field != text_field else [])
    for name in columns:
        if schema.get_field_index(name) < 0:
            raise ConfigError(f"{path}: no column '{name}' (columns: "
                              f"{', '.join(schema.names) or 'none'})", path)
    ttype = schema.field(text_field).type
    if not (pa.types.is_string(ttype) or pa.types.is_large_string(ttype)
            or getattr(pa.types, "is_string_view", lambda t: False)(ttype)):
        raise ConfigError(f"{path}: column '{text_field}' holds {ttype}, not strings", path)
    row = 0
    batches = pf.iter_batches(batch_size=_BATCH, columns=columns)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError, ValueError) as e:
            raise CorruptError(f"{path} row {row + 1}: cannot read Parquet data after row {row}: "
                               f"{e}", path) from e
        texts = batch.column(text_field).to_pylist()
        keys = batch.column(key_field).to_pylist() if key_field else None
        for i, text in enumerate(texts):
            row += 1
            yield row, (keys[i] if keys is not None else None), text


# --------------------------------------------------------------------------- tokenizing

class _Encoder:
    """Per-process state: the tokenizer and what to do with its ids."""

    def __init__(self, tokenize: Tokenizer, dtype: str, append_eod: Optional[int],
                 skip_empty: bool, batched: bool, text_field: str,
                 key_field: Optional[str]) -> None:
        self.tokenize = tokenize
        self.text_field = text_field
        self.key_field = key_field
        self.dtype_name = dtype
        self.dtype = np.dtype(_DTYPES[dtype])
        self.max_id = int(np.iinfo(self.dtype).max)
        self.eod = append_eod
        self.skip_empty = skip_empty
        self.batched = batched

    def _ids(self, result: Any, where: str) -> np.ndarray:
        if isinstance(result, (list, tuple)):
            try:  # the common case, about a third faster than np.asarray and strict about types
                result = np.frombuffer(array("q", result), np.int64)
            except (TypeError, OverflowError):
                pass  # floats, huge ints, nested lists: np.asarray below says what is wrong
        if isinstance(result, np.ndarray):
            arr = result
        else:
            if not isinstance(result, (list, tuple)):
                if hasattr(result, "ids") and not isinstance(result, Mapping):
                    result = result.ids            # tokenizers.Encoding
                elif isinstance(result, Mapping) and "input_ids" in result:
                    result = result["input_ids"]   # transformers BatchEncoding
            try:
                arr = np.asarray(result)
            except (ValueError, TypeError, OverflowError) as e:
                raise ConfigError(f"{where}: the tokenizer returned a {type(result).__name__} that "
                                  f"is not a list of token ids ({e})") from e
        if arr.ndim != 1:
            raise ConfigError(f"{where}: the tokenizer returned ids of shape {tuple(arr.shape)}; "
                              "expected a flat list of token ids")
        if arr.size == 0:
            return np.empty(0, self.dtype)
        if arr.dtype.kind not in "iu":
            if arr.dtype == object:  # ints too big for int64, or mixed types
                bad = next((v for v in arr.tolist() if not isinstance(v, (int, np.integer))
                            or isinstance(v, bool) or v < 0 or v > self.max_id), None)
                if isinstance(bad, (int, np.integer)) and not isinstance(bad, bool):
                    raise ConfigError(f"{where}: token id {bad} does not fit dtype "
                                      f"{self.dtype_name} (0..{self.max_id})")
            raise ConfigError(f"{where}: the tokenizer returned {arr.dtype} values, not integer "
                              "token ids")
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > self.max_id:
            raise ConfigError(f"{where}: token id {lo if lo < 0 else hi} does not fit dtype "
                              f"{self.dtype_name} (0..{self.max_id}); choose a wider dtype")
        return arr.astype(self.dtype, copy=False)

    def encode(self, items: Sequence[Tuple[str, Any]]) -> List[Optional[Tuple[bytes, int]]]:
        """(where, text) -> the document's .npy bytes and token count, or None when skipped."""
        for where, text in items:
            if not isinstance(text, str):
                raise ConfigError(f"{where}: the text is {_a(_json_type(text))}, not a string")
        if self.batched and items:
            texts = [t for _, t in items]
            span = items[0][0] if len(items) == 1 else f"{items[0][0]} to {items[-1][0]}"
            try:
                results = self.tokenize(texts)
            except Exception as e:  # noqa: BLE001 - any tokenizer failure, with where it happened
                raise Error(f"{span}: the tokenizer raised {type(e).__name__}: {e}") from e
            if isinstance(results, Mapping) and "input_ids" in results:
                results = results["input_ids"]
            if hasattr(results, "__len__") and len(results) != len(texts):
                raise ConfigError(f"{span}: the batched tokenizer returned {len(results)} results "
                                  f"for {len(texts)} texts")
            results = list(results)
        else:
            results = []
            for where, text in items:
                try:
                    results.append(self.tokenize(text))
                except Exception as e:  # noqa: BLE001
                    raise Error(f"{where}: the tokenizer raised {type(e).__name__}: {e}") from e
        out: List[Optional[Tuple[bytes, int]]] = []
        for (where, _), result in zip(items, results):
            ids = self._ids(result, where)
            if ids.size == 0 and self.skip_empty:
                out.append(None)
                continue
            if self.eod is not None:
                ids = np.concatenate([ids, np.array([self.eod], self.dtype)])
            out.append((_npy_bytes(ids), int(ids.size)))
        return out


# (dtype, digits of the length) -> the .npy header before and after the length
_NPY_HEADERS: Dict[Tuple[str, int], Tuple[bytes, bytes]] = {}


def _npy_bytes(ids: np.ndarray) -> bytes:
    """``encode_field("tokens.npy", ids)`` for a 1-D array, byte for byte, without
    formatting a header per document: the header of an array of the same dtype
    whose length has as many digits is NumPy's own, with the digits swapped."""
    n = int(ids.shape[0])
    digits = len(str(n))
    parts = _NPY_HEADERS.get((ids.dtype.str, digits))
    if parts is None:
        n0 = 10 ** (digits - 1)
        probe = np.lib.stride_tricks.as_strided(np.zeros(1, ids.dtype), shape=(n0,), strides=(0,))
        buf = io.BytesIO()
        try:
            fmt = np.lib.format
            fmt.write_array_header_1_0(buf, fmt.header_data_from_array_1_0(probe))
        except AttributeError:  # a NumPy without these helpers: the writer's way, per document
            return encode_field("tokens.npy", ids)
        header = buf.getvalue()
        mark = f"({n0},)".encode()
        at = header.index(mark) + 1
        parts = (header[:at], header[at + len(str(n0)):])
        _NPY_HEADERS[(ids.dtype.str, digits)] = parts
    return b"".join((parts[0], str(n).encode(), parts[1], np.ascontiguousarray(ids).tobytes()))


def _make_encoder(tokenize: Optional[Tokenizer], factory: Optional[Callable[[], Tokenizer]],
                  args: Tuple[Any, ...]) -> _Encoder:
    if factory is not None:
        try:
            tokenize = factory()
        except Exception as e:  # noqa: BLE001 - reported with what raised it
            raise Error(f"tokenizer_factory raised {type(e).__name__}: {e}") from e
        if not callable(tokenize):
            raise ConfigError(f"tokenizer_factory returned a {type(tokenize).__name__}, which is "
                              "not callable")
    assert tokenize is not None
    return _Encoder(tokenize, *args)


# A worker's encoder, or why it has none. The initializer never raises: a
# failing initializer would make the pool unusable without saying why.
_WORKER: Optional[_Encoder] = None
_WORKER_ERROR: Optional[Exception] = None


def _init_worker(payload: bytes, args: Tuple[Any, ...]) -> None:
    global _WORKER, _WORKER_ERROR
    try:
        try:
            tokenize, factory = pickle.loads(payload)
        except Exception as e:  # noqa: BLE001 - e.g. a function of an interactive __main__
            raise ConfigError(
                f"the worker processes cannot unpickle the tokenizer ({type(e).__name__}: {e}); "
                "define it in an importable module, pass a tokenizer_factory from one, or use "
                "processes=1") from e
        _WORKER = _make_encoder(tokenize, factory, args)
    except Exception as e:  # noqa: BLE001
        _WORKER_ERROR = e


_WORKER_JOB: Optional[Tuple[bytes, Tuple[Any, ...]]] = None  # which job's tokenizer a reused process (Ray's) holds


def _ensure_worker(payload: bytes, args: Tuple[Any, ...]) -> None:
    """_init_worker once per job in a process that runs many tasks of many jobs (a Ray
    worker): the tokenizer is unpickled, and its factory called, once per process."""
    global _WORKER_JOB
    job = (payload, args)
    if _WORKER_JOB != job:
        _init_worker(payload, args)
        _WORKER_JOB = job


def _worker_encoder() -> _Encoder:
    if _WORKER is None:
        raise _WORKER_ERROR if _WORKER_ERROR is not None else Error("internal: worker not set up")
    return _WORKER


# --------------------------------------------------------------------------- writing

# A document group's tokens: about this many bytes. Large enough that a
# group's two tar headers, two .npy headers and padding (about 1.8 KiB) are
# about 1% of it; small enough that a group lies in one of the tar reader's
# 512 KiB read buffers, as documents alone do (docs/shards.md).
GROUP_BYTES = 128 << 10


class _Output(NamedTuple):
    """How shards are written (travels to the worker processes)."""
    write_index: bool
    layout: str      # "compact" (document groups) or "documents"
    dtype: str       # of the token ids, a key of _DTYPES


class _InputWriter:
    """One input's shards (part-<input>-NNNNNN.tar) and each shard's token count."""

    def __init__(self, out_dir: str, index: int, max_bytes: int, output: _Output,
                 key_prefix: str) -> None:
        self.writer = ShardWriter(out_dir, max_bytes=max_bytes,
                                  pattern=SHARD_PATTERN.format(input=index), manifest_name="",
                                  write_index=output.write_index)
        self.key_prefix = key_prefix
        self.compact = output.layout == "compact"
        self.dtype = np.dtype(_DTYPES[output.dtype])
        self.itemsize = self.dtype.itemsize
        # The document group being gathered (compact): values, bounds, keys.
        self.group_values: List[bytes] = []
        self.group_bounds = array("q", [0])
        self.group_keys: List[str] = []
        self.group_named = False   # some document has a key of its own
        self.group_key = ""
        self.group_bytes = 0
        self.pending = array("q")   # token counts of the samples not yet in a finished shard
        self.shard_tokens: List[int] = []
        self.documents = 0
        self.tokens = 0
        self.skipped = 0
        self.last_key: Optional[str] = None
        self.since_poll = 0

    def add(self, no: int, key: Any, where: str, encoded: Optional[Tuple[bytes, int]]) -> None:
        if encoded is None:
            self.skipped += 1
            return
        npy, ntok = encoded
        named = key is not None
        if key is None:
            key = f"{self.key_prefix}{no:09d}"
        elif not isinstance(key, (str, int)) or isinstance(key, bool):
            raise ConfigError(f"{where}: the key is {_a(_json_type(key))}, not a string or integer")
        key = str(key)
        if key == self.last_key:
            raise ConfigError(f"{where}: key {key!r} repeats the previous document's (consecutive "
                              "samples with one key would merge into one)")
        if self.compact:
            if named and ("\n" in key or not key):
                raise ConfigError(f"{where}: key {key!r} is empty or holds a line break, which "
                                  "a document group's doc_keys.txt cannot store")
            if not self.group_keys:
                self.group_key = f"{self.key_prefix}{no:09d}"
            values = npy[len(npy) - ntok * self.itemsize:] if ntok else b""
            self.group_values.append(values)
            self.group_bounds.append(self.group_bounds[-1] + ntok)
            self.group_keys.append(key)
            self.group_named = self.group_named or named
            self.group_bytes += len(values)
            if self.group_bytes >= GROUP_BYTES:
                self._write_group(where)
        else:
            self._write(where, {"__key__": key, "tokens.npy": npy})
        self.last_key = key
        self.pending.append(ntok)
        self.documents += 1
        self.tokens += ntok
        self.since_poll += 1
        if self.since_poll >= _POLL:
            self.since_poll = 0
            self._settle()

    def _write(self, where: str, sample: Dict[str, Any]) -> None:
        try:
            self.writer.write(sample)
        except ConfigError as e:
            message = e.message[len("config: "):] if e.message.startswith("config: ") else e.message
            raise ConfigError(f"{where}: {message}") from e

    def _write_group(self, where: str) -> None:
        """Writes the documents gathered as one group (docs/shards.md)."""
        if not self.group_keys:
            return
        tokens = np.frombuffer(b"".join(self.group_values), self.dtype)
        last = self.group_bounds[-1]
        bounds = np.frombuffer(self.group_bounds, np.int64)
        if last < 1 << 32:
            bounds = bounds.astype(np.uint32)  # 4 bytes a document, not 8
        sample = {"__key__": self.group_key, "tokens.npy": _npy_bytes(tokens),
                  "doc_offsets.npy": _npy_bytes(bounds)}
        if self.group_named:
            sample["doc_keys.txt"] = "\n".join(self.group_keys).encode()
        self._write(where, sample)
        self.group_values.clear()
        self.group_bounds = array("q", [0])
        self.group_keys.clear()
        self.group_named = False
        self.group_bytes = 0

    def _settle(self) -> None:
        shards = self.writer.shards
        for entry in shards[len(self.shard_tokens):]:
            n = int(entry["nsamples"])
            self.shard_tokens.append(int(sum(self.pending[:n])))
            del self.pending[:n]

    def close(self) -> List[Dict[str, Any]]:
        self._write_group("the last documents")
        self.writer.close()
        self._settle()
        if len(self.pending):
            raise Error("internal: token counts left over after the last shard")
        out = []
        for entry, ntok in zip(self.writer.shards, self.shard_tokens):
            out.append({"url": entry["url"], "size": int(entry["size"]),
                        "nsamples": int(entry["nsamples"]), "checksum": entry["checksum"],
                        "ntokens": ntok})
        return out

    def abort(self) -> None:
        try:
            self.writer.abort()
        except Exception:  # noqa: BLE001 - already failing
            pass

    def result(self, name: str, shards: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {"input": name, "documents": self.documents, "tokens": self.tokens,
                "skipped": self.skipped, "shards": shards}


def _batched(records: Iterator[Tuple[int, Any, Any]], where: Callable[[int], str],
             size: int = _BATCH) -> Iterator[List[Tuple[int, Any, str, Any]]]:
    batch: List[Tuple[int, Any, str, Any]] = []
    for no, key, text in records:
        batch.append((no, key, where(no), text))
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _file_records(path: str, text_field: str,
                  key_field: Optional[str]) -> Tuple[Iterator[Tuple[int, Any, Any]], str]:
    """The records of an input file and what to call their numbers ("line", "row")."""
    fmt, comp = _format_of(path)
    if fmt == "parquet":
        return _parquet_records(path, text_field, key_field), "row"
    return _jsonl_records(path, comp, text_field, key_field), "line"


def _convert_records(records: Iterator[Tuple[int, Any, Any]], where: Callable[[int], str],
                     name: str, index: int, out_dir: str, max_bytes: int, output: _Output,
                     encoder: Optional[_Encoder], pool: Any, processes: int) -> Dict[str, Any]:
    """Writes one input's records, in order, into its shards. Batches of records are
    tokenized here (``pool`` None) or by the pool's workers (at most ``3 x
    processes`` batches in flight); the shards are written here either way, so the
    bytes do not depend on which."""
    out = _InputWriter(out_dir, index, max_bytes, output, f"{index:05d}-")
    try:
        batches = _batched(records, where)
        if pool is None:
            assert encoder is not None
            for batch in batches:
                encoded = encoder.encode([(w, t) for _, _, w, t in batch])
                for (no, key, w, _), e in zip(batch, encoded):
                    out.add(no, key, w, e)
        else:
            inflight: Deque[Tuple[List[Tuple[int, Any, str, Any]], Any]] = deque()

            def drain_one() -> None:
                batch, fut = inflight.popleft()
                encoded = _result(fut, f"{batch[0][2]} to {batch[-1][2]}")
                for (no, key, w, _), e in zip(batch, encoded):
                    out.add(no, key, w, e)

            for batch in batches:
                inflight.append((batch, pool.submit(
                    _encode_chunk, [(w, t) for _, _, w, t in batch])))
                if len(inflight) >= 3 * processes:
                    drain_one()
            while inflight:
                drain_one()
        shards = out.close()
    except BaseException:
        out.abort()
        raise
    return out.result(name, shards)


def _convert_file(job: Tuple[int, str, str, int, _Output]) -> Dict[str, Any]:
    """Converts one input file into its own shards, all in this worker process."""
    index, path, out_dir, max_bytes, output = job
    enc = _worker_encoder()
    records, unit = _file_records(path, enc.text_field, enc.key_field)
    return _convert_records(records, _where(path, unit), path, index, out_dir, max_bytes,
                            output, enc, None, 1)


def _where(path: str, unit: str) -> Callable[[int], str]:
    return lambda no: f"{path} {unit} {no}"


def _encode_chunk(items: List[Tuple[str, Any]]) -> List[Optional[Tuple[bytes, int]]]:
    return _worker_encoder().encode(items)


def _iterable_records(data: Any, text_field: str,
                      key_field: Optional[str]) -> Iterator[Tuple[int, Any, Any]]:
    """(record number from 1, key or None, text) of an iterable of records; a
    ``datasets`` data set is read a column batch at a time (only the columns used)."""
    columns = getattr(data, "column_names", None)
    if type(data).__module__.startswith("datasets.") and hasattr(data, "iter") \
            and isinstance(columns, list):
        wanted = [text_field] + ([key_field] if key_field and key_field != text_field else [])
        for name in wanted:
            if name not in columns:
                raise ConfigError(f"the data set has no column '{name}' (columns: "
                                  f"{', '.join(columns) or 'none'})")
        if hasattr(data, "select_columns"):
            data = data.select_columns(wanted)
        no = 0
        for batch in data.iter(batch_size=_BATCH):
            texts = batch[text_field]
            keys = batch[key_field] if key_field else None
            for i, text in enumerate(texts):
                no += 1
                yield no, (keys[i] if keys is not None else None), text
        return
    for no, rec in enumerate(data, 1):
        if isinstance(rec, str):
            if key_field:
                raise ConfigError(f"input record {no}: a plain string has no '{key_field}' field")
            yield no, None, rec
        elif isinstance(rec, Mapping):
            key = _field(rec, key_field, f"input record {no}") if key_field else None
            yield no, key, _field(rec, text_field, f"input record {no}")
        else:
            raise ConfigError(f"input record {no}: expected a dict with '{text_field}' (or a "
                              f"string), got {_a(_json_type(rec))}")


# --------------------------------------------------------------------------- processes

def _result(fut: Future, what: str) -> Any:
    """A worker's result. A worker that died (killed, out of memory) breaks the pool:
    an Error naming the first input (or documents) not done, not a hang."""
    try:
        return fut.result()
    except _WorkerLost as e:
        raise Error(f"a Ray worker died (killed, or out of memory?) before {what} was "
                    f"converted: {e}") from e
    except BrokenProcessPool as e:
        raise Error(f"a worker process died (killed, or out of memory?) before {what} was "
                    f"converted: {e}") from e


class _WorkerLost(Exception):
    """A Ray task's worker died (shardstream.ray._TaskPool raises it from a future)."""


def _engine(engine: str, processes: Optional[int]) -> Tuple[Any, int]:
    """The pool class for engine="ray" (None for "processes") and the process count: the
    CPUs this process may use, or the Ray cluster's, unless given."""
    if engine not in ("processes", "ray"):
        raise ConfigError(f"engine {engine!r}: expected 'processes' (this machine) or 'ray' "
                          "(the tasks of a Ray cluster)")
    ray_pool: Any = None
    if engine == "ray":
        from .ray import _TaskPool  # needs ray: the [ray] extra
        ray_pool = _TaskPool
        if processes is None:
            processes = _TaskPool.cluster_cpus()
    if processes is None:
        try:
            processes = len(os.sched_getaffinity(0))
        except AttributeError:
            processes = os.cpu_count() or 1
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ConfigError(f"processes {processes!r}: expected an integer >= 1")
    return ray_pool, processes


def _stop(pool: Any) -> None:
    """Stops the workers now (after an error): queued work is dropped and running
    work killed; the shards it was writing are then removed by the caller."""
    if not isinstance(pool, ProcessPoolExecutor):
        pool.stop()
        return
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.terminate()
        except Exception:  # noqa: BLE001 - already gone
            pass
    for p in procs:
        p.join()
    pool.shutdown(wait=True)


# --------------------------------------------------------------------------- out_dir

def _our_files(out_dir: str) -> List[str]:
    try:
        names = os.listdir(out_dir)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if _OUR_FILES.match(n))


def _remove(out_dir: str, names: Iterable[str]) -> None:
    for n in names:
        try:
            os.remove(os.path.join(out_dir, n))
        except FileNotFoundError:
            pass


def _claim(out_dir: str, overwrite: bool, extra: Sequence[str] = ()) -> bool:
    """Makes out_dir ready for a conversion: an earlier one's manifest, shards (and the
    extra files named) are refused, or removed with overwrite. Returns whether out_dir was
    created (then a failed conversion removes it again)."""
    created = not os.path.exists(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    old = _our_files(out_dir)
    has_manifest = os.path.exists(os.path.join(out_dir, MANIFEST_NAME))
    if (old or has_manifest) and not overwrite:
        raise ConfigError(f"{out_dir} already holds "
                          f"{'a ' + MANIFEST_NAME if has_manifest else 'shards'} of a conversion; "
                          "pass overwrite=True to replace it, or use another directory")
    if has_manifest:
        os.remove(os.path.join(out_dir, MANIFEST_NAME))
    _remove(out_dir, old + [_MANIFEST_TMP, *extra])
    return created


def _abandon(out_dir: str, created: bool, pool: Any, extra: Sequence[str] = ()) -> None:
    """After an error: the workers stopped, what they wrote removed, no manifest."""
    if pool is not None:
        _stop(pool)
    _remove(out_dir, _our_files(out_dir) + [_MANIFEST_TMP, *extra])
    if created:
        try:
            os.rmdir(out_dir)  # only if empty: nothing of the user's goes
        except OSError:
            pass


def _write_manifest(out_dir: str, shards: List[Dict[str, Any]]) -> str:
    """JSON Lines with the keys in the order the C++ writer uses (url, size,
    nsamples, checksum, then extras sorted), written atomically."""
    lines = []
    for s in shards:
        entry = {"url": s["url"], "size": s["size"], "nsamples": s["nsamples"],
                 "checksum": s["checksum"]}
        if "ntokens" in s:
            entry["ntokens"] = s["ntokens"]
        lines.append(json.dumps(entry) + "\n")
    path = os.path.join(out_dir, MANIFEST_NAME)
    _write_text(path, "".join(lines), os.path.join(out_dir, _MANIFEST_TMP))
    return path


def _write_text(path: str, text: str, tmp: Optional[str] = None) -> None:
    """Writes a file atomically and durably: a temporary name, fsync, rename, fsync of the folder."""
    folder = os.path.dirname(path) or "."
    tmp = tmp or os.path.join(folder, "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- API

def text_to_shards(inputs: Any, out_dir: Union[str, "os.PathLike[str]"],
                   tokenize: Optional[Tokenizer] = None, *,
                   tokenizer_factory: Optional[Callable[[], Tokenizer]] = None,
                   text_field: str = "text", key_field: Optional[str] = None,
                   dtype: Any = "int32", max_bytes: Union[int, str] = "512MB",
                   processes: Optional[int] = None, write_index: bool = True,
                   append_eod: Optional[int] = None, skip_empty: bool = True,
                   batched: bool = False, parallel: str = "auto", overwrite: bool = False,
                   start_method: str = "spawn", layout: str = "compact",
                   engine: str = "processes") -> Dict[str, Any]:
    """Tokenizes text documents into token shards plus ``out_dir/manifest.jsonl``.

    ``inputs``: a path, glob pattern (``"data/*.jsonl.zst"``, sorted) or
    directory (its supported files, sorted), or a list of them, of JSON Lines
    files (``.jsonl``/``.ndjson``/``.json``, optionally ``.gz`` or ``.zst``;
    one JSON object per line, blank lines ignored) or ``.parquet`` files; or
    any iterable of records: dicts holding ``text_field`` (or plain strings), a
    generator, a ``datasets.Dataset`` / ``IterableDataset`` (only the used
    columns are read).

    ``tokenize(text)`` returns the document's token ids: a list, tuple, NumPy
    array or 1-D tensor of ints, a ``tokenizers.Encoding`` (its ``.ids``) or a
    ``transformers`` ``BatchEncoding`` (its ``"input_ids"``). With
    ``batched=True`` it is called with a list of up to 1024 texts and returns
    one such result per text (or a ``BatchEncoding``). With ``processes > 1``
    the tokenizer is pickled into each worker process, so it must be picklable
    (a module-level function, a bound method of a picklable object, a
    ``functools.partial``); otherwise pass ``tokenizer_factory``: a picklable
    zero-argument callable that returns the tokenizer, called once per process.

    Each document's ids are a 1-D array of ``dtype`` (``"uint16"``,
    ``"int32"`` or ``"uint32"``; an id outside its range is a ConfigError
    naming the file and line), followed by ``append_eod`` when given. With
    ``layout="compact"`` (the default) documents are written in document
    groups (docs/shards.md) of about 128 KiB of tokens: one sample
    ``{"__key__", "tokens.npy", "doc_offsets.npy"}`` holding many documents,
    which every reader hands out one document at a time (as a sample
    ``{"__key__", "tokens.npy"}``), so that short documents do not pay a tar
    header and padding each (200-token documents: at least 95% of the shard
    bytes are tokens, against 26-52% one per sample). A group's key is
    ``"<input:05d>-<line or row or record:09d>"`` of its first document, and
    its documents' keys are ``"<group key>#<i>"``, or ``key_field``'s values
    (stored in the group's ``doc_keys.txt``; a key must not hold a line
    break). ``layout="documents"`` writes each document as a sample of its
    own, keyed by ``key_field``'s value or
    ``"<input:05d>-<line or row or record:09d>"``. A document with no tokens
    is skipped when ``skip_empty``.

    Work goes to ``processes`` worker processes (default: the CPUs this
    process may use; started with ``start_method``, "spawn" by default, safe
    with torch and threads imported). ``parallel="files"``: each file is read,
    tokenized and written by one worker. ``parallel="documents"``: the inputs
    are read here, in order, batches of 1024 documents are tokenized by the
    workers, and the shards are written here, in order (the only way for an
    iterable; the parallel way for a few large files). ``"auto"`` (default)
    takes "files" when there are at least as many files as processes. Either
    way input ``i`` gets its own shards ``part-<i:05d>-<n:06d>.tar`` of at
    most ``max_bytes`` (plus ``.idx`` sample indexes when ``write_index``), and
    the shards and manifest are byte-identical whatever ``processes`` and
    ``parallel`` are. A worker that dies (killed, out of memory) is an Error,
    not a hang.

    ``engine="ray"`` runs the same work as Ray tasks on every node of the Ray
    cluster this process is connected to (``ray.init()`` first, or one is
    started on this machine; ``pip install "shardstream[ray]"``): one task per
    file, or per batch of documents, each taking a CPU. ``processes`` then
    defaults to the cluster's CPUs and bounds the batches in flight; ``out_dir``
    must be a folder every node sees (a shared file system) when files are
    converted on other nodes. The shards and manifest are byte-identical to
    ``engine="processes"``. A task whose worker dies is retried by Ray and then
    an Error naming the file or documents.

    Bad input raises in this process, naming the file and line (row for
    Parquet, record for an iterable): ConfigError (a ValueError: a missing
    field, a text that is not a string, an unsupported or unreadable file, a
    token id that does not fit), CorruptError (a line that is not JSON, damaged
    gzip/zstd/Parquet data), Error (the tokenizer raised). Then the shards
    written so far are removed and no manifest is written. ``out_dir`` must not
    hold a manifest or shards of an earlier conversion unless ``overwrite``
    (which removes them first).

    Returns a summary: ``out_dir``, ``manifest``, ``documents``, ``tokens``,
    ``skipped``, ``shards``, ``bytes``, ``dtype``, ``layout``, ``engine``, ``processes``,
    ``parallel``
    ("files", "documents" or "none": all in this process), ``seconds``,
    ``documents_per_s``, ``tokens_per_s`` and ``inputs`` (per input: ``input``,
    ``documents``, ``tokens``, ``skipped``, ``shards``).
    """
    t0 = time.perf_counter()
    if (tokenize is None) == (tokenizer_factory is None):
        raise ConfigError("give exactly one of tokenize and tokenizer_factory")
    fn = tokenize if tokenize is not None else tokenizer_factory
    if not callable(fn):
        raise ConfigError(f"{'tokenize' if tokenize is not None else 'tokenizer_factory'} must "
                          f"be callable, not {type(fn).__name__}")
    dtype_name = dtype if isinstance(dtype, str) else str(dtype)
    if dtype_name.startswith("torch."):
        dtype_name = dtype_name[len("torch."):]
    elif not isinstance(dtype, str):
        try:
            dtype_name = np.dtype(dtype).name
        except TypeError:
            pass
    if dtype_name not in _DTYPES:
        raise ConfigError(f"dtype {dtype!r}: expected one of {', '.join(_DTYPES)}")
    max_id = int(np.iinfo(_DTYPES[dtype_name]).max)
    if append_eod is not None:
        if isinstance(append_eod, bool) or not isinstance(append_eod, (int, np.integer)) \
                or not 0 <= int(append_eod) <= max_id:
            raise ConfigError(f"append_eod {append_eod!r}: expected a token id in 0..{max_id} "
                              f"(dtype {dtype_name})")
        append_eod = int(append_eod)
    if not isinstance(text_field, str) or not text_field:
        raise ConfigError("text_field must be a non-empty string")
    max_bytes_n = parse_size(max_bytes)
    if not max_bytes_n:
        raise ConfigError("max_bytes must be > 0")
    ray_pool, processes = _engine(engine, processes)

    if inputs is None:
        raise ConfigError("no inputs given")
    files: Optional[List[str]] = None
    if _is_path_list(inputs):
        files = _resolve_files(inputs)
    elif isinstance(inputs, (list, tuple)) and not inputs:
        raise ConfigError("no inputs given: the list is empty")
    elif type(inputs).__module__.split(".")[0] in ("pandas", "pyarrow", "polars"):
        # iterating a data frame gives its column names, which would become the documents
        raise ConfigError(f"inputs: a {type(inputs).__name__} is not an iterable of records; "
                          "pass datasets.Dataset.from_pandas(df) (or .from_dict, "
                          "datasets.Dataset(table)) or df.to_dict('records')")
    elif isinstance(inputs, Mapping) or not isinstance(inputs, Iterable):
        raise ConfigError(f"inputs: expected paths or an iterable of records, not "
                          f"{type(inputs).__name__}")

    if layout not in ("compact", "documents"):
        raise ConfigError(f"layout {layout!r}: expected 'compact' (document groups) or "
                          "'documents' (one sample per document)")
    if parallel not in ("auto", "files", "documents"):
        raise ConfigError(f"parallel {parallel!r}: expected 'auto', 'files' or 'documents'")
    out_dir = os.fspath(out_dir)
    created = _claim(out_dir, overwrite)

    if files is None or parallel == "documents" or (parallel == "auto" and len(files) < processes):
        mode = "documents"  # read and write here, tokenize batches in the workers
        workers = processes
    else:
        mode = "files"      # a worker reads, tokenizes and writes a whole file
        workers = min(processes, len(files))
    enc_args = (dtype_name, append_eod, skip_empty, batched, text_field, key_field)
    pool: Optional[ProcessPoolExecutor] = None
    encoder: Optional[_Encoder] = None
    try:
        if workers > 1 or ray_pool is not None:
            try:
                # Ray's cloudpickle sends a function of __main__ (a script, a notebook) or
                # a lambda by value; Ray workers could not import them by name.
                dumps = ray_pool.dumps if ray_pool is not None else pickle.dumps
                payload = dumps((tokenize, tokenizer_factory))
            except Exception as e:  # noqa: BLE001 - PicklingError, TypeError, AttributeError
                what = "tokenize" if tokenize is not None else "tokenizer_factory"
                raise ConfigError(
                    f"{what} cannot be pickled into the worker processes "
                    f"({type(e).__name__}: {e}); "
                    "pass a module-level function or picklable object, a tokenizer_factory that "
                    "builds the tokenizer in each process, or processes=1") from e
            if ray_pool is not None:
                pool = ray_pool(payload, enc_args)
            else:
                pool = ProcessPoolExecutor(
                    workers, mp_context=multiprocessing.get_context(start_method),
                    initializer=_init_worker, initargs=(payload, enc_args))
        else:
            encoder = _make_encoder(tokenize, tokenizer_factory, enc_args)

        results: List[Dict[str, Any]] = []
        output = _Output(bool(write_index), layout, dtype_name)
        common = (out_dir, max_bytes_n, output, encoder, pool, workers)
        if files is None:
            results.append(_convert_records(
                _iterable_records(inputs, text_field, key_field), lambda no: f"input record {no}",
                "<" + type(inputs).__name__ + ">", 0, *common))
        elif mode == "documents" or pool is None:
            for i, path in enumerate(files):
                records, unit = _file_records(path, text_field, key_field)
                results.append(_convert_records(records, _where(path, unit), path, i, *common))
        else:
            jobs = [(i, path, out_dir, max_bytes_n, output) for i, path in enumerate(files)]
            pending = [pool.submit(_convert_file, job) for job in jobs]
            for job, fut in zip(jobs, pending):  # in input order: the first failing one is reported
                results.append(_result(fut, job[1]))
        if pool is not None:
            pool.shutdown(wait=True)
            pool = None

        shards = [s for r in results for s in r["shards"]]
        documents = sum(r["documents"] for r in results)
        if not shards:
            skipped = sum(r["skipped"] for r in results)
            raise ConfigError(f"no documents to write: the inputs hold none"
                              f"{f' ({skipped} skipped as empty)' if skipped else ''}")
        manifest = _write_manifest(out_dir, shards)
    except BaseException:
        _abandon(out_dir, created, pool)
        raise

    seconds = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)
    return {
        "out_dir": out_dir, "manifest": manifest, "documents": documents, "tokens": tokens,
        "skipped": sum(r["skipped"] for r in results), "shards": len(shards),
        "bytes": sum(s["size"] for s in shards), "dtype": dtype_name, "layout": layout,
        "engine": engine, "processes": workers,
        "parallel": mode if workers > 1 or ray_pool is not None else "none",
        "seconds": seconds, "documents_per_s": documents / seconds if seconds > 0 else 0.0,
        "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        "inputs": [{"input": r["input"], "documents": r["documents"], "tokens": r["tokens"],
                    "skipped": r["skipped"], "shards": len(r["shards"])} for r in results],
    }


# An ImageFolder tree in: its own module, exported here beside text_to_shards.
from .image_folder import images_to_shards  # noqa: E402
