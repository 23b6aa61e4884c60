"""CheckpointManager: atomic local checkpoints of a training state, uploaded
in the background, restored from the newest intact one (locally, else from
the remote).

    mgr = shardstream.CheckpointManager("/nvme/ckpt", remote="file:///mnt/shared/run1",
                                        keep_last=3, every_steps=500)
    state = mgr.load_latest(map_location="cpu")
    if state is not None:
        model.load_state_dict(state["model"]); ds.load_state_dict(state["data"])
    for step in ...:
        if mgr.should_save(step):
            mgr.save_async(step, {"model": model.state_dict(), "data": ds.state_dict()})
    mgr.wait()
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
from typing import Any, Dict, List, Optional, Union

from . import _core, _logging

STATE_FILE = "state.pt"


class _SaveStream(io.RawIOBase):
    """A write-only file whose bytes go straight into a native CheckpointSave."""

    def __init__(self, save: Any) -> None:
        super().__init__()
        self._save = save
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        self._save.append(view)
        self.written += view.nbytes
        return view.nbytes


def _to_host(obj: Any) -> Any:
    """A copy of `obj` whose tensors are detached host copies (what save_async
    must snapshot before training goes on)."""
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        items = [(k, _to_host(v)) for k, v in obj.items()]
        try:
            return type(obj)(items)  # dict, OrderedDict (module state_dicts)
        except TypeError:
            return dict(items)
    if isinstance(obj, list):
        return [_to_host(v) for v in obj]
    if isinstance(obj, tuple):
        items = [_to_host(v) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return obj


class CheckpointManager:
    """Saves and restores training state as atomic checkpoint directories.

    ``local_dir`` holds ``ckpt-000200/`` directories (``state.pt`` plus a
    manifest with sizes and checksums) and ``latest``; a second manager (in
    any process) on the same directory is refused. ``remote`` (a directory
    url, e.g. file://...; http(s):// and s3:// where this build has those
    sources) receives every committed checkpoint in the background, with a
    commit marker written last. Rotation keeps the newest ``keep_last`` and,
    with ``every_steps``, also every multiple of it (never deleting what is
    still uploading). The remote is rotated with the same policy after each
    commit marker is up (marker deleted first), unless ``remote_keep_last``
    says otherwise (0: the remote keeps every checkpoint). ``should_save``
    follows ``every_steps`` and/or ``every_minutes``.
    """

    def __init__(self, local_dir: Union[str, os.PathLike], remote: Optional[str] = None,
                 keep_last: int = 3, every_steps: Optional[int] = None,
                 every_minutes: Optional[float] = None, keep_every_steps: int = 0,
                 remote_keep_last: Optional[int] = None) -> None:
        self.local_dir = os.fspath(local_dir)
        self.remote = remote
        self.every_steps = every_steps
        self.every_minutes = every_minutes
        if remote_keep_last is None:
            remote_keep_last = keep_last
        self._native = _core.CheckpointWriter(self.local_dir, keep_last, keep_every_steps,
                                              remote or "", remote_keep_last, keep_every_steps)
        self._last_save_time = time.monotonic()
        self._async: Optional[threading.Thread] = None
        self._async_error: Optional[BaseException] = None
        self._lock = threading.Lock()
        self.last_restored: Optional[Dict[str, Any]] = None

    # -- saving -------------------------------------------------------------
    def should_save(self, step: int) -> bool:
        """True when ``step`` is a multiple of every_steps, or every_minutes have
        passed since the last save."""
        if self.every_steps and step > 0 and step % self.every_steps == 0:
            return True
        if self.every_minutes is not None:
            return time.monotonic() - self._last_save_time >= self.every_minutes * 60
        return False

    def save(self, step: int, state: Any, metadata: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Writes ``state`` with torch.save, streamed into checkpoint ``step``.

        Returns the checkpoint's manifest once it is committed locally (files
        and directory fsynced, renamed into place, ``latest`` updated); the
        upload goes on in the background. Raises (and leaves ``latest`` as it
        was) when a write fails.
        """
        self._raise_async_error()
        self._join_async()
        return self._save_now(step, state, metadata)

    def save_async(self, step: int, state: Any, metadata: Optional[Dict[str, Any]] = None) -> None:
        """Copies the tensors in ``state`` to host memory now, then serialises
        and commits in a background thread; training stalls only for the copy.
        A failure is raised by the next save, save_async or wait."""
        self._raise_async_error()
        self._join_async()
        snapshot = _to_host(state)

        def run() -> None:
            try:
                self._save_now(step, snapshot, metadata)
            except BaseException as e:  # noqa: B902 - re-raised in the caller's thread
                self._async_error = e

        self._async = threading.Thread(target=run, name=f"shardstream-ckpt-{step}", daemon=False)
        self._async.start()

    def _save_now(self, step: int, state: Any, metadata: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        import torch
        with self._lock:
            save = self._native.begin_save(step, json.dumps(metadata or {}))
            try:
                save.open_file(STATE_FILE)
                stream = io.BufferedWriter(_SaveStream(save), buffer_size=4 << 20)
                torch.save(state, stream)
                stream.flush()
                manifest = save.commit()
            except BaseException:
                save.abort()
                raise
            finally:
                _logging.drain()
            self._last_save_time = time.monotonic()
            return manifest

    def _join_async(self) -> None:
        if self._async is not None:
            self._async.join()
            self._async = None
        self._raise_async_error()

    def _raise_async_error(self) -> None:
        if self._async_error is not None:
            e, self._async_error = self._async_error, None
            raise e

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits for a save_async in flight and for every queued upload; raises
        the first failure. Ctrl-C interrupts the wait (not the uploads)."""
        self._join_async()
        self._native.wait_uploads(-1.0 if timeout is None else float(timeout))
        _logging.drain()

    # -- reading ------------------------------------------------------------
    def latest(self) -> Optional[Dict[str, Any]]:
        """The manifest of the newest local checkpoint (step, name, files,
        metadata), or None."""
        all_ = self._native.list()
        return all_[-1] if all_ else None

    def checkpoints(self) -> List[Dict[str, Any]]:
        """Manifests of the local checkpoints, oldest first."""
        return self._native.list()

    def load_latest(self, map_location: Any = None, verify: bool = True) -> Any:
        """The state of the newest intact checkpoint (each file's checksum is
        checked; corrupt or incomplete ones are skipped with a warning in
        favour of the one before; with a remote, a newer or the only intact
        copy is downloaded), or None when there is none. Its manifest is in
        ``last_restored``."""
        import torch
        self._join_async()
        found = self._native.restore_latest(verify)
        _logging.drain()
        if found is None:
            return None
        self.last_restored = found
        path = os.path.join(_local_path(found["url"]), STATE_FILE)
        return torch.load(path, map_location=map_location, weights_only=False)

    def status(self) -> Dict[str, Any]:
        """Uploads per checkpoint (pending, uploading, done, failed with the
        reason) and whether a save_async is in flight."""
        return {"saving": self._async is not None and self._async.is_alive(),
                "uploads": self._native.uploads()}

    def retry_failed_uploads(self) -> None:
        """Tries failed uploads again now."""
        self._native.retry_failed()

    def close(self) -> None:
        """Finishes a save_async in flight and releases the directory lock
        (uploads still queued stop; they resume with the next manager)."""
        self._join_async()
        native, self._native = self._native, None
        del native

    def __enter__(self) -> "CheckpointManager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _local_path(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url
