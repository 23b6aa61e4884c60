"""Ray Data: write shard data sets from a Ray cluster, and read them into one
(``pip install "shardstream[ray]"``).

``ds.write_datasink(ShardSink("/data/set/", shard_size="1GiB"))`` (or ``"s3://bucket/set/"``)
writes the rows of any Ray Dataset as tar shards, each write task into its own folder ``part-NNNNN/`` (named by the task's
index, so a retried task replaces its own output), with ``.idx`` sidecars; the manifest (url,
size, nsamples, checksum, and ntokens for a token column) is written last, atomically, once
every task has finished, so a job killed midway leaves no manifest naming shards that are not
there. The result reads with ``ShardDataset(".../manifest.jsonl")`` without an indexing pass.

A row is a sample: the ``key`` column (default ``__key__``) is its key, every other column a
field named as in a shard (``jpg``, ``tokens.npy``, ``cls``, ``txt``) and encoded by its
extension as :class:`shardstream.ShardWriter` does (bytes as they are, text, numbers, NumPy
arrays, images).

``shardstream.convert.text_to_shards(..., engine="ray")`` converts text on the cluster's nodes
(one task per file or per batch of documents), byte-identical to a conversion on one machine.

``read_shards(".../manifest.jsonl")`` is the way back: a Ray Dataset of samples, one read task
per shard, read by shardstream's Loader (its sources, cache and error policies), for offline
work such as filtering, re-tokenizing or statistics.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, Iterable, List, Optional, Union

import numpy as np

try:
    import ray.data
    from ray.data import Datasink, Datasource, ReadTask
    from ray.data.block import BlockAccessor, BlockMetadata
except ImportError as e:  # the base package works without Ray; this module cannot
    raise ImportError('shardstream.ray needs Ray Data, which is not installed: '
                      'pip install "shardstream[ray]" (or ray[data] itself)', name="ray") from e

from . import _core
from .errors import ConfigError
from .loader import Loader, parse_size
from .writer import _IMAGE_FORMATS, ShardWriter

__all__ = ["ShardSink", "read_shards"]  # and text_to_shards(engine="ray") runs on _TaskPool

_PART = "part-{:05d}"


def _out_dir(path: Union[str, "os.PathLike[str]"]) -> str:
    p = os.fspath(path)
    if p.startswith("file://"):
        p = p[len("file://"):]
    elif p.startswith("s3://"):
        return p.rstrip("/")
    elif "://" in p:
        raise ConfigError(f"ShardSink {p!r}: writes a local folder (or file://) or s3://")
    return os.path.abspath(p)


class _Folder:
    """The few file operations ShardSink needs, on a local folder or through the Source seam
    (s3://: the credential chain, retries; an object appears whole when written)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.remote = root.startswith("s3://")

    def join(self, *names: str) -> str:
        return "/".join((self.root,) + names) if self.remote else os.path.join(self.root, *names)

    def exists(self, url: str) -> bool:
        return _core.source_exists(url) if self.remote else os.path.exists(url)

    def remove(self, url: str) -> None:
        if self.remote:
            _core.source_remove(url)
        elif os.path.exists(url):
            os.remove(url)

    def remove_tree(self, url: str) -> None:
        if not self.remote:
            shutil.rmtree(url, ignore_errors=True)
            return
        for child, is_dir in _core.source_list(url + "/"):
            if is_dir:
                self.remove_tree(child.rstrip("/"))
            else:
                _core.source_remove(child)

    def parts(self) -> List[str]:
        """The part-NNNNN folders in the root."""
        if not self.remote:
            if not os.path.isdir(self.root):
                return []
            return [os.path.join(self.root, n) for n in os.listdir(self.root)
                    if n.startswith("part-") and os.path.isdir(os.path.join(self.root, n))]
        return [u.rstrip("/") for u, is_dir in _core.source_list(self.root + "/")
                if is_dir and u.rstrip("/").rsplit("/", 1)[-1].startswith("part-")]

    def write_text(self, url: str, text: str) -> None:
        if self.remote:
            _core.source_write_file(url, text.encode())
            return
        tmp = url + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, url)
        fd = os.open(os.path.dirname(url), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _token_count(value: Any, where: str, key: str, column: str) -> int:
    """The tokens of one row's token column: the elements of a 1-D array (or list)."""
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"{where}, key {key!r}: token column {column!r} holds a "
                         f"{arr.dtype} array of shape {arr.shape}, not a 1-D integer array")
    return int(arr.size)


class ShardSink(Datasink):
    """A Ray Data sink that writes tar shards, ``.idx`` sidecars and a manifest.

    Args:
        path: the output folder: local or ``file://`` (every node of the cluster must see it,
            a shared file system, for the result to be whole), or ``s3://bucket/prefix``
            (written through the credential chain from every node).
        shard_size: largest shard, e.g. ``"1GiB"`` [``"512MiB"``].
        max_samples: most samples per shard [0: no limit].
        key: the column holding each row's key [``"__key__"``]; keys must be unique (each write
            task checks its own rows; keys repeated across tasks are not caught).
        tokens: a token column (1-D arrays) whose lengths the manifest sums per shard as
            ``ntokens`` [None; ``"tokens.npy"`` when the rows have that column].
        compression: ``"none"`` or ``"zstd"`` [``"none"``].
        write_index: ``.idx`` sidecars beside the shards [True].
        overwrite: replace an earlier run's output in ``path`` (its manifest and part folders)
            [False: a folder that holds a manifest is refused].
        manifest_name: [``"manifest.jsonl"``].
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], *,
                 shard_size: Union[int, str] = "512MiB", max_samples: int = 0,
                 key: str = "__key__", tokens: Optional[str] = None, compression: str = "none",
                 write_index: bool = True, overwrite: bool = False,
                 manifest_name: str = "manifest.jsonl") -> None:
        self.path = _out_dir(path)
        self.shard_size = parse_size(shard_size)
        if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 0:
            raise ConfigError(f"ShardSink: max_samples {max_samples!r}: expected an integer >= 0")
        self.max_samples = max_samples
        self.key = key
        self.tokens = tokens
        if compression not in ("none", "zstd"):
            raise ConfigError(f"ShardSink: compression {compression!r}: expected none or zstd")
        self.compression = compression
        self.write_index = write_index
        self.overwrite = overwrite
        self.manifest_name = manifest_name
        self.manifest_path = _Folder(self.path).join(manifest_name)
        self.rows_written = 0  # set on the driver by on_write_complete
        self.shards: List[Dict[str, Any]] = []

    def get_name(self) -> str:
        return "ShardSink"

    # -- the driver, before any task -----------------------------------------------------
    def on_write_start(self, schema: Any = None) -> None:
        out = _Folder(self.path)
        if not out.remote:
            os.makedirs(self.path, exist_ok=True)
        if out.exists(self.manifest_path):
            if not self.overwrite:
                raise ConfigError(f"ShardSink: {self.manifest_path} exists (an earlier run's "
                                  "output); give overwrite=True to replace it")
            out.remove(self.manifest_path)
        if self.overwrite:
            # An earlier run's parts, including those of a run killed before its manifest.
            for part in out.parts():
                out.remove_tree(part)
        # The key column is checked row by row in the tasks, not against `schema`: Ray passes
        # the schema of the write operator's input, which is from before any map fused into
        # the write (a .map() that adds the key would be refused).

    # -- one write task, on any node ------------------------------------------------------
    def write(self, blocks: Iterable[Any], ctx: Any) -> Dict[str, Any]:
        task = int(ctx.task_idx)
        part = _PART.format(task)
        out = _Folder(self.path)
        folder = out.join(part)
        # A retried task starts over in its own folder: nothing of the failed attempt stays.
        out.remove_tree(folder)
        writer = ShardWriter(folder, max_bytes=self.shard_size, max_samples=self.max_samples,
                             compression=self.compression, write_index=self.write_index,
                             manifest_name="part.jsonl")
        seen: Dict[str, int] = {}
        lengths: List[int] = []
        tokens = self.tokens  # None: "tokens.npy" where the rows have it (decided per task)
        row_no = 0
        try:
            for block in blocks:
                for row in BlockAccessor.for_block(block).iter_rows(public_row_format=True):
                    where = f"ShardSink: write task {task}, row {row_no}"
                    if self.key not in row:
                        raise ValueError(f"{where}: no key column {self.key!r} (columns: "
                                         f"{', '.join(map(str, row.keys()))})")
                    k = row[self.key]
                    k = k.decode() if isinstance(k, bytes) else str(k)
                    if k in seen:
                        raise ValueError(f"{where}: key {k!r} again (first at row {seen[k]} "
                                         "of this task): keys must be unique")
                    seen[k] = row_no
                    # Fields: every column but the key and the reserved "__" ones (a
                    # read_shards row's own __key__ and __url__ when key= names another).
                    sample = {c: v for c, v in row.items()
                              if c != self.key and not c.startswith("__")}
                    sample["__key__"] = k
                    if row_no == 0 and tokens is None and "tokens.npy" in row:
                        tokens = "tokens.npy"
                    if tokens is not None:
                        if tokens not in row:
                            raise ValueError(f"{where}, key {k!r}: no token column {tokens!r}")
                        lengths.append(_token_count(row[tokens], where, k, tokens))
                    try:
                        writer.write(sample)
                    except (TypeError, ValueError) as e:
                        raise type(e)(f"{where}: {e}") from e
                    row_no += 1
        except BaseException:
            writer.abort()
            out.remove_tree(folder)
            raise
        writer.close()
        out.remove(out.join(part, "part.jsonl"))  # the job's manifest lists these shards
        if row_no == 0:
            out.remove_tree(folder)
        shards = []
        at = 0
        for s in writer.shards:
            entry = {"url": f"{part}/{s['url']}", "size": s["size"], "nsamples": s["nsamples"],
                     "checksum": s["checksum"]}
            if tokens is not None:
                entry["ntokens"] = int(sum(lengths[at:at + s["nsamples"]]))
            at += s["nsamples"]
            shards.append(entry)
        return {"task": task, "rows": row_no, "shards": shards}

    # -- the driver, after every task ------------------------------------------------------
    def on_write_complete(self, write_result: Any) -> None:
        returns = [r for r in write_result.write_returns if r]
        tasks = [r["task"] for r in returns]
        if len(set(tasks)) != len(tasks):
            raise RuntimeError(f"ShardSink: write tasks reported twice: {sorted(tasks)}")
        shards = [s for r in sorted(returns, key=lambda r: r["task"]) for s in r["shards"]]
        _Folder(self.path).write_text(self.manifest_path,
                                      "".join(json.dumps(s) + "\n" for s in shards))
        self.rows_written = sum(r["rows"] for r in returns)
        self.shards = shards


# -- reading ---------------------------------------------------------------------------------

# Image fields stay encoded: the extensions the writer encodes images for.
_IMAGE_EXTS = frozenset(_IMAGE_FORMATS)


def _manifest_entries(manifest: str) -> List[Dict[str, Any]]:
    """The shards a manifest names (local, file://, http(s)://, s3://), urls resolved, read
    through the Loader's sources (credentials as for any read)."""
    path = manifest[len("file://"):] if manifest.startswith("file://") else manifest
    if "://" not in path:
        path = os.path.abspath(path)  # the read tasks may run in another directory
    return _core.read_manifest(path)  # errors name the manifest (and line)


def _field_specs(names: List[str], decode: bool) -> List[Dict[str, Any]]:
    specs = []
    for name in names:
        ext = name.rsplit(".", 1)[-1].lower()
        if not decode or ext in _IMAGE_EXTS:
            specs.append({"name": name, "decode": "bytes"})  # images stay encoded
        elif ext == "npy":
            specs.append({"name": name, "ragged": "list"})   # any shape, row by row
        else:
            specs.append({"name": name})                    # labels, text, JSON by extension
    return specs


class _ShardSource(Datasource):
    def __init__(self, entries: List[Dict[str, Any]], specs: List[Dict[str, Any]],
                 rows_per_block: int, loader_options: Dict[str, Any]) -> None:
        self.entries, self.specs = entries, specs
        self.rows_per_block, self.loader_options = rows_per_block, loader_options

    def get_name(self) -> str:
        return "Shards"

    def estimate_inmemory_data_size(self) -> Optional[int]:
        sizes = [e["size"] for e in self.entries]
        return sum(sizes) if all(isinstance(x, int) for x in sizes) else None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: Optional[int] = None,
                       **_: Any) -> List[Any]:
        tasks = []
        # A ragged field's companion "<name>.shape": each row's array has its own shape.
        shape_columns = {f"{sp['name']}.shape" for sp in self.specs if sp.get("ragged")}
        for e in self.entries:  # one task per shard, whatever the parallelism asked
            def read(url=e["url"], specs=self.specs, rows=self.rows_per_block,
                     options=self.loader_options):
                with Loader(url, mode="eval", batch_size=rows, fields=specs,
                            **options) as loader:
                    for b in loader:
                        # Copies: a batch's arrays view the Loader's pooled slots, which a
                        # block held by Ray would keep from the pool.
                        yield BlockAccessor.batch_to_block(
                            {k: (list(v) if isinstance(v, (list, tuple)) else np.array(v))
                             for k, v in b.items() if k not in shape_columns})
            meta = BlockMetadata(num_rows=e["nsamples"], size_bytes=e["size"],
                                 exec_stats=None, input_files=(e["url"],))
            tasks.append(ReadTask(read, meta))
        return tasks


def read_shards(manifest: Union[str, "os.PathLike[str]"], *, fields: Optional[List[str]] = None,
                decode: bool = True, rows_per_block: int = 256,
                **loader_options: Any) -> "ray.data.Dataset":
    """A Ray Dataset of the samples of a shard data set (a manifest: local, file://, http(s)://
    or s3://), one read task per shard, in manifest order within each shard.

    Each row holds ``__key__``, ``__url__`` and the fields: ``fields`` (default: those of the
    first sample). With ``decode`` (the default) ``.npy`` fields become arrays of any shape,
    labels ints, text str and JSON objects; images stay encoded bytes (decode them in a
    ``map``). ``decode=False`` gives every field's bytes. Loader options (``cache_dir``,
    ``cache_limit``, ``error_policy``, ...) apply in every read task: a shard cache on each
    node is used and filled as training would.
    """
    entries = _manifest_entries(os.fspath(manifest))
    if fields is None:
        with Loader(entries[0]["url"], mode="eval", batch_size=1, fields=[],
                    **loader_options) as probe:
            first = next(iter(probe), None)
        if first is None:
            raise ConfigError(f"read_shards: {entries[0]['url']} holds no sample to take the "
                              "fields from; give fields=")
        fields = [k for k in first if not k.startswith("__")]
    source = _ShardSource(entries, _field_specs(list(fields), decode), rows_per_block,
                          loader_options)
    return ray.data.read_datasource(source)


# -- conversion on a cluster (text_to_shards(engine="ray")) -----------------------------------

# A task whose worker died (its node lost, killed) runs again twice, then fails the conversion.
@ray.remote(num_cpus=1, max_retries=2)
def _convert_task(payload: bytes, enc_args: tuple, fn: Any, args: tuple) -> Any:
    if payload is not None:  # a tokenizing job (images_to_shards has none)
        from . import convert
        convert._ensure_worker(payload, enc_args)  # the job's tokenizer, once per worker process
    return fn(*args)


class _TaskResult:
    """A task's result as convert._result takes it: the task's own exception raised as it
    is, a lost worker as convert._WorkerLost."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def result(self) -> Any:
        from .convert import _WorkerLost
        try:
            return ray.get(self.ref)
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except ray.exceptions.RayError as e:  # worker or node died, object lost
            raise _WorkerLost(f"{type(e).__name__}: {e}") from e


class _TaskPool:
    """The part of ProcessPoolExecutor text_to_shards uses, as Ray tasks on the cluster."""

    def __init__(self, payload: bytes, enc_args: tuple) -> None:
        if not ray.is_initialized():
            ray.init()  # a local cluster, as Ray Data does when none is running
        self.payload = ray.put(payload)
        self.enc_args = enc_args
        self.refs: List[Any] = []

    @staticmethod
    def dumps(obj: Any) -> bytes:
        return ray.cloudpickle.dumps(obj)

    @staticmethod
    def cluster_cpus() -> int:
        if not ray.is_initialized():
            ray.init()
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def submit(self, fn: Any, *args: Any) -> _TaskResult:
        ref = _convert_task.remote(self.payload, self.enc_args, fn, args)
        self.refs.append(ref)
        return _TaskResult(ref)

    def shutdown(self, wait: bool = True) -> None:
        if wait and self.refs:
            ray.wait(self.refs, num_returns=len(self.refs))
        self.refs = []

    def stop(self) -> None:
        """After an error: tasks not done are cancelled and waited for, so none writes into
        out_dir after the caller removes what they wrote. A plain cancel first (a running
        task gets KeyboardInterrupt and aborts its writer): Ray 2.60.0's force-kill of a task
        whose reply is already on its way can crash the driver (a failed check in its task
        manager, seen in a test run). Only a task still running after 30 s is killed."""
        pending = self.refs
        for force in (False, True):
            if pending:
                _, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
            for ref in pending:
                try:
                    ray.cancel(ref, force=force)
                except Exception:  # noqa: BLE001 - already done
                    pass
            if pending:
                _, pending = ray.wait(pending, num_returns=len(pending), timeout=30)
        self.refs = []
