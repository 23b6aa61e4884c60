"""Is the job waiting for data? One call that tells.

:func:`measure_headspace` runs the training step on live batches, then on the
same batches replayed from memory (where no loader can be slow), and compares
the two paces: a loop that runs faster from memory is input-bound, and the
difference is what a faster loader could give. :class:`ReplayLoader` is the
replay on its own (SPDL's ``CacheDataLoader``): live batches first, then the
first few of them again and again, at the loop's pace (the copies of the
kept batches are made in the steps that take them).

The step must have finished its work when it returns (``loss.item()``, or a
CUDA synchronize: with ``sync="auto"`` the measure calls
``torch.cuda.synchronize()`` after each step once CUDA is in use), or the
time a GPU spends is counted in the next ``next()``.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

import numpy as np

__all__ = ["Headspace", "ReplayLoader", "measure_headspace", "own_copy"]


def own_copy(batch: Any) -> Any:
    """A copy of a batch that holds none of the loader's memory: arrays and
    tensors copied (a pinned tensor into pinned memory, so that a replayed
    copy to the GPU costs what the live one did), containers rebuilt."""
    if isinstance(batch, np.ndarray):
        return batch.copy()
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is optional
        torch = None
    if torch is not None and isinstance(batch, torch.Tensor):
        if batch.device.type == "cpu" and batch.is_pinned():
            out = torch.empty_like(batch, pin_memory=True)
            return out.copy_(batch)
        return batch.clone()
    if isinstance(batch, dict) or (hasattr(batch, "keys") and hasattr(batch, "__getitem__")):
        return {k: own_copy(batch[k]) for k in batch.keys()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(own_copy(v) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(own_copy(v) for v in batch)
    return copy.deepcopy(batch)


class ReplayLoader:
    """Live batches from ``batches`` for the first ``live`` steps, keeping
    copies of the first ``keep`` of them; after that the copies, in turn, for
    ``replay`` more steps (None: for ever). The replayed part shows how fast
    the loop runs when data costs nothing.

    Args:
        batches: any iterable of batches (a DataLoader, a Loader, ...).
        keep: batches kept for the replay [16]; each is copied once.
        live: live steps before the replay [keep].
        replay: replayed steps [None: no end].
    """

    def __init__(self, batches: Iterable[Any], keep: int = 16, live: Optional[int] = None,
                 replay: Optional[int] = None):
        if keep < 1:
            raise ValueError(f"ReplayLoader: keep must be >= 1, not {keep}")
        self._batches = batches
        self.keep = keep
        self.live = keep if live is None else live
        if self.live < keep:
            raise ValueError(f"ReplayLoader: live ({self.live}) must be at least keep ({keep})")
        self.replay = replay
        self.replaying = False  # True once the batches come from memory

    def __iter__(self) -> Iterator[Any]:
        kept: List[Any] = []
        self.replaying = False
        it = iter(self._batches)
        for _ in range(self.live):
            try:
                b = next(it)
            except StopIteration:
                break
            if len(kept) < self.keep:
                kept.append(own_copy(b))
            yield b
        if not kept:
            return
        self.replaying = True
        n = 0
        while self.replay is None or n < self.replay:
            yield kept[n % len(kept)]
            n += 1


@dataclass
class Headspace:
    """What :func:`measure_headspace` found. Times are mean seconds per
    step; ``wait_share`` is the live loop's time in ``next()`` over its
    whole time."""

    live_step_s: float
    replay_step_s: float
    wait_share: float
    wait_median_s: float
    wait_max_s: float
    steps: int
    input_bound: bool
    # Why, when input-bound: "waiting" (the loop waits in next()) or
    # "contention" (it hardly waits, but the loader's threads slow the step
    # itself by taking its CPUs: see the CPU controls); None otherwise.
    cause: Optional[str] = None
    loader_stats: Dict[str, Any] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        """How much faster the loop runs from memory (1.0: the loader keeps up)."""
        return self.live_step_s / self.replay_step_s if self.replay_step_s > 0 else float("inf")

    def __str__(self) -> str:
        verdict = ("input-bound: the loop waits for data in next()" if self.cause == "waiting"
                   else "input-bound: the loader's threads slow the step itself (CPU contention; "
                   "see reader_threads, reader_cpus, reader_nice)" if self.cause == "contention"
                   else "not input-bound: the step sets the pace")
        return (f"{verdict}. Live {self.live_step_s * 1e3:.2f} ms/step, from memory "
                f"{self.replay_step_s * 1e3:.2f} ms/step ({self.speedup:.2f}x); "
                f"{self.wait_share:.1%} of the live loop waited in next() "
                f"(median {self.wait_median_s * 1e3:.2f} ms, max {self.wait_max_s * 1e3:.2f} ms), "
                f"{self.steps} steps each.")


def _syncer(sync: Union[str, Callable[[], Any], None]) -> Callable[[], Any]:
    if callable(sync):
        return sync
    if sync is None or sync == "none":
        return lambda: None
    if sync != "auto":
        raise ValueError(f"sync {sync!r}: expected 'auto', None or a callable")
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is optional
        return lambda: None

    def auto() -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    return auto


def measure_headspace(batches: Iterable[Any], step: Callable[[Any], Any], *, steps: int = 50,
                      warmup: int = 5, keep: int = 16, tolerance: float = 0.05,
                      sync: Union[str, Callable[[], Any], None] = "auto",
                      loader: Any = None) -> Headspace:
    """Runs ``step(batch)`` on ``max(warmup, keep) + steps`` live batches,
    then as many times on the first ``keep`` of them replayed from memory,
    and compares the paces (mean seconds per step over the last ``steps``:
    stalls count, as they do in a training run). Input-bound: the live loop
    is more than ``tolerance`` slower than the replayed one. The kept
    batches are copied in the untimed first steps.

    It takes the batches from the iterable's current epoch; run it at the
    start of training or in a dry run. ``loader`` (or ``batches`` itself,
    when it has ``stats()``) adds the loader's own counters to the result.
    """
    if steps < 1 or warmup < 0 or keep < 1:
        raise ValueError("measure_headspace: steps and keep must be >= 1 and warmup >= 0")
    sync_fn = _syncer(sync)
    # The kept batches are copied in the first steps, which are not timed: while the measure
    # copies, the loader runs ahead, and a timed step after a copy would hide a wait.
    untimed = max(warmup, keep)
    total = untimed + steps
    kept: List[Any] = []
    live_steps: List[float] = []
    waits: List[float] = []
    it = iter(batches)
    for i in range(total):
        t0 = time.perf_counter()
        b = next(it, None)
        t1 = time.perf_counter()
        if b is None:
            raise ValueError(f"measure_headspace: the iterable ended after {i} batches; it "
                             f"needs {total} (max(warmup, keep) + steps)")
        if len(kept) < keep:
            kept.append(own_copy(b))  # untimed: the copy is the measure's, not the loader's
        t1c = time.perf_counter()
        step(b)
        sync_fn()
        t2 = time.perf_counter()
        del b
        if i >= untimed:
            waits.append(t1 - t0)
            live_steps.append((t1 - t0) + (t2 - t1c))
    replay_steps: List[float] = []
    for i in range(total):
        b = kept[i % len(kept)]
        t0 = time.perf_counter()
        step(b)
        sync_fn()
        t2 = time.perf_counter()
        if i >= untimed:
            replay_steps.append(t2 - t0)
    stats_of = loader if loader is not None else batches
    stats = {}
    if hasattr(stats_of, "stats"):
        try:
            stats = dict(stats_of.stats())
        except Exception:  # a closed loader: the measure stands without it
            stats = {}
    live = sum(live_steps) / len(live_steps)
    replay = sum(replay_steps) / len(replay_steps)
    wait_share = sum(waits) / sum(live_steps) if sum(live_steps) > 0 else 0.0
    bound = live > replay * (1 + tolerance)
    # Where the time went: into next(), or into a step slowed down by the
    # loader's threads (the difference the waits do not explain).
    cause = None
    if bound:
        cause = "waiting" if wait_share * live >= 0.5 * (live - replay) else "contention"
    return Headspace(
        live_step_s=live, replay_step_s=replay, wait_share=wait_share,
        wait_median_s=float(np.median(waits)), wait_max_s=float(max(waits)), steps=steps,
        input_bound=bound, cause=cause, loader_stats=stats)
