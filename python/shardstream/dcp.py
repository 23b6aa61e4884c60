"""torch.distributed.checkpoint storage with an atomic cross-rank commit and background upload.

Drop-in for DCP's ``FileSystemWriter`` / ``FileSystemReader``::

    import torch.distributed.checkpoint as dcp
    from shardstream.dcp import Writer, Reader, loader_state, restore_loader

    state = {"model": model.state_dict(), "optim": optim.state_dict(), **loader_state(ds)}
    dcp.save(state, storage_writer=Writer("/ckpt", step=step, remote="s3://bucket/run1"))
    ...
    reader = Reader("/ckpt")                 # the newest intact step (local, else the remote)
    dcp.load(state, storage_reader=reader)   # resharded by DCP's planner: 4 ranks -> 2 works
    restore_loader(ds, reader)               # every saved rank's data position, merged

``Writer(root, step=N)`` keeps numbered steps ``root/ckpt-000N`` with ``latest``, rotation and
an optional background upload, all from the single-process ``CheckpointManager``'s C++ writer
and uploader; ``Writer(path)`` (no step) commits one checkpoint at ``path``. Every rank writes
its files into the step's hidden temporary directory, hashing them (xxh3_128) as they are
written, and fsyncs them and the directory; the coordinator commits only after every rank's
write returned (DCP's ``finish``): ``.metadata`` and ``manifest.json`` are written and synced,
the directory is renamed into place, the parent synced, then ``latest`` replaced. A rank that
dies mid-save leaves no step: the temporary directory is removed when the root is next opened
for writing. Checkpoints stay plain DCP checkpoints (``FileSystemReader`` reads them too).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import (FileSystem, FileSystemReader,
                                                     FileSystemWriter, _StoragePrefix)
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult

from . import _core, _logging
from .errors import ConfigError

METADATA_FILE = ".metadata"
MANIFEST_FILE = "manifest.json"
LOADER_KEY = "shardstream.loader.rank"
_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"

# One native writer (it holds the root's lock) per root and process, shared by
# every Writer and Reader on that root.
_natives: Dict[str, Any] = {}
_natives_lock = threading.Lock()
# Temporary directories of saves this process coordinated and has not committed:
# a save that failed on some rank never reaches finish(), so the next save removes them.
_pending: set = set()


def _drop_failed_saves() -> None:
    with _natives_lock:
        stale = list(_pending)
        _pending.clear()
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)


def _native(root: str, policy: Optional[tuple], remote: Optional[str]) -> Any:
    """The native writer of ``root``; ``policy`` (keep_last, keep_every_steps,
    remote_keep_last) None: whatever one is open (else the defaults). A different policy or
    remote closes the open one first (its uploads finished)."""
    key = os.path.realpath(root)
    with _natives_lock:
        have = _natives.get(key)
        if have is not None and (policy is None or have[0] == (policy, remote)):
            return have[1]
        if have is not None:
            del _natives[key]
            have[1].wait_uploads(-1.0)
            del have
        keep_last, keep_every, remote_keep = policy if policy is not None else (3, 0, None)
        n = _core.CheckpointWriter(root, keep_last, keep_every, remote or "",
                                   keep_last if remote_keep is None else remote_keep, keep_every)
        _natives[key] = (((keep_last, keep_every, remote_keep), remote), n)
        return n


def _clean_leftovers(root: Path) -> None:
    """Removes what an interrupted save left under ``root`` (hidden temporaries), when no
    writer holds the root (its lock, as the C++ writer takes it)."""
    import fcntl
    lock = root / "LOCK"
    if not lock.exists():
        return
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # a writer is open on it: it cleaned up when it opened
        for p in root.iterdir():
            if p.name.startswith((_TMP_PREFIX, _TRASH_PREFIX)):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
        _fsync_dir(root)
    finally:
        os.close(fd)


def close_all() -> None:
    """Waits for the uploads of every root this process wrote to, then releases the roots'
    locks (so another process, or a new Writer with other options, may open them)."""
    with _natives_lock:
        natives = list(_natives.values())
        _natives.clear()
    for _, n in natives:
        n.wait_uploads(-1.0)
    del natives
    _logging.drain()


def wait_uploads(root: Union[str, os.PathLike], timeout: Optional[float] = None) -> None:
    """Waits until every checkpoint committed under ``root`` by this process is uploaded (the
    commit marker written); raises the first failure. Only the coordinator uploads."""
    with _natives_lock:
        have = _natives.get(os.path.realpath(os.fspath(root)))
    if have is not None:
        have[1].wait_uploads(-1.0 if timeout is None else float(timeout))
    _logging.drain()


def upload_status(root: Union[str, os.PathLike]) -> List[Dict[str, Any]]:
    """Per checkpoint: pending, uploading, done or failed (with the reason)."""
    with _natives_lock:
        have = _natives.get(os.path.realpath(os.fspath(root)))
    return have[1].uploads() if have is not None else []


@dataclasses.dataclass
class _Prefix(_StoragePrefix):
    """DCP's per-rank file prefix plus the save's temporary directory (a name under the
    root), chosen by the coordinator and sent to every rank with its plan."""
    tmp: str = ""


class _HashingStream(io.RawIOBase):
    """A file being written, hashed as it goes (what its manifest entry records). Its pages
    are handed to the device as they are written (writeback started a piece at a time), so
    the final fsync waits for the last piece only and the hash runs while the disk writes."""

    _PIECE = 16 << 20

    def __init__(self, f: Any) -> None:
        super().__init__()
        self._f = f
        self._fd = f.fileno()
        self._hasher = _core.Hasher()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        done = 0
        while done < len(view):
            piece = view[done:done + self._PIECE]
            n = self._f.write(piece)
            _core.start_writeback(self._fd, self.size, n)
            self._hasher.update(piece[:n])
            self.size += n
            done += n
        return done

    def tell(self) -> int:
        return self._f.tell()

    def fileno(self) -> int:
        return self._f.fileno()

    def flush(self) -> None:
        # IOBase's finalizer flushes too, after the file under it was closed; Python 3.13
        # reports the ValueError that raised, and pytest's record of it kept a writer (and its
        # root's lock) alive.
        if not self._f.closed:
            self._f.flush()

    def digest(self) -> str:
        return self._hasher.digest()


class _HashingFileSystem(FileSystem):
    def __init__(self) -> None:
        super().__init__()
        self.files: Dict[str, tuple] = {}
        self._lock = threading.Lock()

    def create_stream(self, path, mode):  # type: ignore[override]
        import contextlib

        @contextlib.contextmanager
        def gen():
            if "w" not in mode:
                with super(_HashingFileSystem, self).create_stream(path, mode) as s:
                    yield s
                return
            p = Path(path)
            with p.open(mode, buffering=0) as f:
                hs = _HashingStream(f)
                yield hs
                f.flush()
                os.fsync(f.fileno())
            with self._lock:
                self.files[p.name] = (hs.size, hs.digest())
        return gen()


def _fsync_dir(path: Union[str, os.PathLike]) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _hash_file(path: Union[str, os.PathLike]) -> tuple:
    h = _core.Hasher()
    size = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(8 << 20)
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
    return size, h.digest()


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _test_hook(point: str) -> None:
    """Crash tests: SHARDSTREAM_DCP_KILL="RANK:POINT" kills that rank (SIGKILL) at that point
    of its save ("written", "dir-sync", "sidecar", "finish")."""
    spec = os.environ.get("SHARDSTREAM_DCP_KILL")
    if not spec:
        return
    rank, _, where = spec.partition(":")
    if where == point and int(rank) == _rank():
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


def _test_full_disk(tmp: Path, prefix: str) -> None:
    """Fault tests: SHARDSTREAM_DCP_FULL="RANK" makes that rank's data files /dev/full, so its
    writes fail with the kernel's ENOSPC."""
    spec = os.environ.get("SHARDSTREAM_DCP_FULL")
    if spec and int(spec) == _rank():
        for k in range(16):
            os.symlink("/dev/full", tmp / f"{prefix}{k}.distcp")


class Writer(FileSystemWriter):
    """A DCP ``StorageWriter``: ``Writer(path)`` commits one checkpoint at ``path``;
    ``Writer(root, step=N, remote=..., keep_last=3, keep_every_steps=0)`` commits
    ``root/ckpt-<N>`` and moves ``root/latest`` to it, rotates old steps and uploads every
    rank's files in the background, the remote's commit marker written last by the
    coordinator once every file is up. ``metadata``: a JSON object kept in the manifest.
    ``thread_count`` and ``sync_files`` are DCP's; files and directories are always synced.
    """

    def __init__(self, path: Union[str, os.PathLike], step: Optional[int] = None, *,
                 remote: Optional[str] = None, keep_last: int = 3, keep_every_steps: int = 0,
                 remote_keep_last: Optional[int] = None, metadata: Optional[Dict[str, Any]] = None,
                 thread_count: int = 1, **kwargs: Any) -> None:
        kwargs.pop("sync_files", None)
        super().__init__(path, thread_count=thread_count, sync_files=False, **kwargs)
        self.root = Path(os.fspath(path))
        self.step = step
        self.remote = remote
        if remote is not None and step is None:
            raise ConfigError("dcp.Writer: a remote needs numbered steps (Writer(root, step=N, "
                              "remote=...)); Writer(path) commits one local checkpoint")
        if step is not None and (not isinstance(step, int) or step < 0):
            raise ConfigError(f"dcp.Writer: step must be an integer >= 0, not {step!r}")
        self._policy = (keep_last, keep_every_steps, remote_keep_last)
        self._metadata = dict(metadata or {})
        self._coordinator = False
        self._tmp: Optional[Path] = None
        self.manifest: Optional[Dict[str, Any]] = None
        self._native: Any = None

    # -- DCP protocol ---------------------------------------------------------
    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)
        self._coordinator = is_coordinator
        self.fs = _HashingFileSystem()
        if is_coordinator and self.step is not None:
            self._native = _native(os.fspath(self.root), self._policy, self.remote)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan  # the temporary directory exists once the coordinator planned

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        _drop_failed_saves()
        if self.step is not None:
            tmp_url = self._native.new_temp_dir(f"ckpt-{self.step:06d}")
            tmp = Path(_local_path(tmp_url)).name
        else:
            parent = self.root.parent
            parent.mkdir(parents=True, exist_ok=True)
            _remove_leftovers(parent, self.root.name)
            tmp = f"{_TMP_PREFIX}{self.root.name}-{uuid.uuid4().hex[:12]}"
            (parent / tmp).mkdir()
        self._tmp = self._tmp_dir(tmp)
        with _natives_lock:
            _pending.add(self._tmp)
        return [dataclasses.replace(p, storage_data=_Prefix(prefix=f"__{i}_", tmp=tmp))
                for i, p in enumerate(plans)]

    def _tmp_dir(self, tmp: str) -> Path:
        return (self.root if self.step is not None else self.root.parent) / tmp

    def write_data(self, plan: SavePlan, planner: SavePlanner):  # type: ignore[override]
        info: _Prefix = plan.storage_data
        self.path = self._tmp_dir(info.tmp)
        _test_full_disk(self.path, info.prefix)
        fut = super().write_data(plan, planner)
        _test_hook("written")
        # Every file was fsynced as it was closed; their directory entries now.
        _fsync_dir(self.path)
        _test_hook("dir-sync")
        # This rank's files, sizes and checksums, for the coordinator's manifest.
        rank = _rank()
        entries = [[name, size, digest] for name, (size, digest) in sorted(self.fs.files.items())]
        side = self.path / f"{_TMP_PREFIX}files-{rank}.json"
        with open(side, "w") as f:
            json.dump(entries, f)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(self.path)
        _test_hook("sidecar")
        return fut

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        _test_hook("finish")
        # DCP's .metadata into the temporary directory (written, fsynced, renamed).
        super().finish(metadata, results)
        tmp = self.path
        meta = tmp / METADATA_FILE
        with open(meta, "rb+") as f:
            os.fsync(f.fileno())
        files: List[tuple] = []
        seen = set()
        for side in sorted(tmp.glob(f"{_TMP_PREFIX}files-*.json")):
            with open(side) as f:
                for name, size, digest in json.load(f):
                    if name not in seen:
                        seen.add(name)
                        files.append((name, size, digest))
        written = {wr.storage_data.relative_path for rl in results for wr in rl}
        missing = sorted(written - seen)
        if missing:
            raise RuntimeError(f"dcp.Writer: no checksum for {missing} in {tmp} (a rank's "
                               "sidecar is missing)")
        size, digest = _hash_file(meta)
        files.append((METADATA_FILE, size, digest))
        for side in tmp.glob(f"{_TMP_PREFIX}files-*.json"):
            side.unlink()
        md = dict(self._metadata, dcp=True, ranks=len(results))
        with _natives_lock:
            _pending.discard(tmp)
        if self.step is not None:
            self.manifest = self._native.commit_directory(str(tmp), self.step, files,
                                                          json.dumps(md))
            _logging.drain()
        else:
            self.manifest = _commit_single(tmp, self.root, files, md)

    def storage_meta(self):  # type: ignore[override]
        meta = super().storage_meta()
        if meta is not None:
            meta.checkpoint_id = str(self.root)
        return meta


def _remove_leftovers(parent: Path, name: str) -> None:
    for p in parent.glob(f"{_TMP_PREFIX}{name}-*"):
        shutil.rmtree(p, ignore_errors=True)
    for p in parent.glob(f"{_TRASH_PREFIX}{name}-*"):
        shutil.rmtree(p, ignore_errors=True)


def _commit_single(tmp: Path, path: Path, files: Sequence[tuple], md: Dict[str, Any]) -> Dict:
    """Writer(path): the one checkpoint at ``path``, committed by the C++ rule
    (CommitSingleCheckpoint: manifest synced, an older checkpoint there moved
    aside, the directory renamed into place, the parent synced)."""
    manifest = _core.commit_single_checkpoint(str(tmp), str(path), [tuple(f) for f in files],
                                              json.dumps(md))
    _logging.drain()
    return manifest


def _local_path(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url


def _intact(ckpt: Path, verify: bool) -> Optional[str]:
    """None when the checkpoint directory is intact, else why not (CheckIntactCheckpoint,
    the rule of RestoreLatest and `shardstream ckpt verify`, with DCP's .metadata required)."""
    return _core.check_checkpoint(str(ckpt), verify, METADATA_FILE)


def _newest_local(root: Path, verify: bool) -> tuple:
    """(checkpoint dir or None, skipped reasons): the highest intact ckpt-* step, as
    RestoreLatest chooses (FindNewestIntact; `latest` may lag or name a damaged one)."""
    if not root.is_dir():
        return None, []
    url, skipped = _core.find_newest_checkpoint(str(root), verify, METADATA_FILE)
    return (Path(url) if url is not None else None), list(skipped)


def resolve(path: Union[str, os.PathLike], *, remote: Optional[str] = None,
            verify: bool = True) -> Path:
    """The checkpoint directory ``Reader(path)`` reads: ``path`` itself when it holds one,
    else the newest intact ``ckpt-*`` under it, else (with ``remote``) the newest committed
    one on the remote, downloaded and verified into ``path``. With torch.distributed
    initialised, rank 0 decides and every rank gets its answer (call it on every rank).
    Raises FileNotFoundError naming what was skipped when there is none."""
    return _resolve_pinned(path, remote, verify)[0]


def _pin(ckpt: Path) -> Any:
    """A read pin on a checkpoint this library committed (rotation keeps it while held);
    None for a plain DCP checkpoint (no manifest)."""
    if not (ckpt / MANIFEST_FILE).exists():
        return None
    return _core.CheckpointReadPin(str(ckpt))


def _resolve_pinned(path: Union[str, os.PathLike], remote: Optional[str],
                    verify: bool) -> tuple:
    root = Path(os.fspath(path))
    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    answer: List[Any] = [None]
    pin = None
    if not distributed or dist.get_rank() == 0:
        try:
            found, pin = _resolve_here(root, remote, verify)
            answer[0] = ("ok", str(found))
        except FileNotFoundError as e:
            answer[0] = ("missing", str(e))
    if distributed:
        dist.broadcast_object_list(answer, src=0)
    kind, value = answer[0]
    if kind != "ok":
        raise FileNotFoundError(value)
    if distributed and dist.get_rank() != 0:
        # Rank 0 holds its pin: on a file system every rank shares, this one succeeds.
        pin = _pin(Path(value))
    return Path(value), pin


def _resolve_here(root: Path, remote: Optional[str], verify: bool) -> tuple:
    if (root / MANIFEST_FILE).exists() or (root / METADATA_FILE).exists():
        why = _intact(root, verify) if (root / MANIFEST_FILE).exists() else None
        if why is not None:
            raise FileNotFoundError(f"{root}: {why}")
        return root, _pin(root)
    _clean_leftovers(root)
    for _ in range(8):
        found, skipped = _newest_local(root, verify)
        if found is None:
            break
        try:
            return found, _pin(found)
        except (FileNotFoundError, ConnectionError):
            continue  # rotated away since it was chosen: choose again
    if remote:
        root.mkdir(parents=True, exist_ok=True)
        got = _native(os.fspath(root), None, remote).restore_latest(verify)
        _logging.drain()
        if got is not None:
            found = Path(_local_path(got["url"]))
            return found, _pin(found)
    raise FileNotFoundError(f"no intact checkpoint in {root}" +
                            (f" or {remote}" if remote else "") +
                            (f"; skipped {skipped}" if skipped else ""))


class Reader(FileSystemReader):
    """A DCP ``StorageReader`` over ``resolve(path, remote=..., verify=...)``: the checkpoint
    at ``path``, or the newest intact step under a root. Build it on every rank (rank 0
    decides, the others follow). ``checkpoint`` is the directory chosen. The reader pins it:
    rotation by a writer in any process keeps it until ``close()`` (or until the reader is
    garbage collected); a context manager closes on exit."""

    def __init__(self, path: Union[str, os.PathLike], *, remote: Optional[str] = None,
                 verify: bool = True, **kwargs: Any) -> None:
        self.checkpoint, self._pin = _resolve_pinned(path, remote, verify)
        super().__init__(self.checkpoint, **kwargs)

    def manifest(self) -> Dict[str, Any]:
        with open(self.checkpoint / MANIFEST_FILE) as f:
            return json.load(f)

    def close(self) -> None:
        """Releases the pin: rotation may now remove this checkpoint."""
        if self._pin is not None:
            self._pin.release()
            self._pin = None

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- the data loader's position ---------------------------------------------------------
def loader_state(ds: Any, rank: Optional[int] = None) -> Dict[str, str]:
    """``{"shardstream.loader.rank<R>": json}``: this rank's ``ds.state_dict()`` as one DCP
    entry (a string, so DCP does not flatten it). Put it in the state dict you save."""
    if rank is None:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    return {f"{LOADER_KEY}{rank}": json.dumps(ds.state_dict())}


def restore_loader(ds: Any, reader: Reader, process_group: Any = None) -> Dict[str, Any]:
    """Restores ``ds`` to the data position saved in the checkpoint ``reader`` reads. On the
    world size that saved it, each rank takes its own entry; on another, every saved rank's
    entry is loaded and merged (``shardstream.torch.merge_state_dicts``), so the position is
    exact whatever the saving world size was. A collective: call it on every rank. Returns
    the state loaded."""
    import torch.distributed.checkpoint as dcp
    from .torch import merge_state_dicts
    md = reader.read_metadata()
    keys = sorted(k for k in md.state_dict_metadata if k.startswith(LOADER_KEY))
    if not keys:
        raise ConfigError(f"{reader.checkpoint}: the checkpoint holds no loader state "
                          f"(save {{**loader_state(ds)}} with the model)")
    distributed = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size(process_group) if distributed else 1
    own = f"{LOADER_KEY}{_rank()}"
    # DCP loads only the keys asked for; every rank must ask in the same collective.
    wanted = [own] if len(keys) == world and own in keys else keys
    sd: Dict[str, Any] = {k: "" for k in wanted}
    with Reader(reader.checkpoint, verify=False) as again:
        dcp.load(sd, storage_reader=again, process_group=process_group)
    states = [json.loads(sd[k]) for k in wanted]
    state = merge_state_dicts(states) if len(states) > 1 else states[0]
    ds.load_state_dict(state)
    return state
