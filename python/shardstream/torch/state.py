"""ShardDataset state dicts: their format, and merging the states of every
rank and DataLoader worker into one (``merge_state_dicts``, ``gather_state_dict``)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from ..errors import ConfigError
from ..loader import Loader, merge_own_states, merge_states

if TYPE_CHECKING:
    from .dataset import ShardDataset


STATE_FORMAT = "shardstream-dataset-state"


def _state(epoch: int, consumers: List[Dict[str, Any]], version: int = 2,
           **extra: Any) -> Dict[str, Any]:
    """A state dict of this format (see :meth:`ShardDataset.state_dict`)."""
    return {"format": STATE_FORMAT, "version": version, "epoch": epoch, "consumers": consumers,
            **extra}


def _own_share(me: Tuple[int, int], loader: Loader) -> Optional[Dict[str, Any]]:
    """Consumer ``me`` = (index, count)'s share: its own state, nothing owed by others. None
    when the plan has no resume state (sample counts unknown: remote shards without indexes),
    so a worker ends its epoch like any other rather than failing at the end."""
    try:
        state = loader.own_state()
    except ConfigError:
        return None
    return {"members": [me[0]], "of": me[1], "state": state}


def _check_state_dict(state: Mapping[str, Any]) -> Dict[str, Any]:
    if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
        raise ValueError(f"not a {STATE_FORMAT} dict")
    version = int(state.get("version", 0))
    if version not in (1, 2):
        raise ValueError(f"unsupported {STATE_FORMAT} version {state.get('version')}")
    out = copy.deepcopy(dict(state))
    out["consumers"] = list(out.get("consumers") or [])
    if version == 2:
        for entry in out["consumers"]:
            if not (isinstance(entry, Mapping) and {"members", "of", "state"} <= set(entry)):
                raise ValueError(f"{STATE_FORMAT}: malformed share {entry!r:.200}")
    return out


def _merge_entries(entries: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """One share from the shares of disjoint consumers of one layout.

    A position is delivered when no consumer still owes it, so the delivered
    sets intersect (each share counts the others' positions as delivered).
    """
    entries = list(entries)
    if len(entries) == 1:
        e = entries[0]
        return {"members": sorted(int(m) for m in e["members"]), "of": int(e["of"]),
                "state": e["state"]}
    layouts = {int(e["of"]) for e in entries}
    if len(layouts) > 1:
        raise ValueError(f"{STATE_FORMAT}: shares of different layouts ({sorted(layouts)} consumers)")
    members = [int(m) for e in entries for m in e["members"]]
    if len(set(members)) != len(members):
        raise ValueError(f"{STATE_FORMAT}: a consumer's share given twice ({sorted(members)})")
    # Shares of different epochs or data sets raise ConfigError (a ValueError).
    return {"members": sorted(members), "of": layouts.pop(),
            "state": merge_own_states([e["state"] for e in entries])}


def merge_state_dicts(states: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """One state dict from the state dicts of consumers (rank, worker) of an epoch.

    Merge every consumer's for a resume on another topology (merging in steps,
    e.g. a rank's workers and then the ranks, is fine).
    """
    states = [_check_state_dict(s) for s in states]
    if not states:
        raise ValueError("no state dicts to merge")
    epochs = {int(s["epoch"]) for s in states if s["consumers"]}
    if len(epochs) > 1:
        raise ValueError(f"state dicts of different epochs: {sorted(epochs)}")
    epoch = epochs.pop() if epochs else max(int(s["epoch"]) for s in states)
    versions = {int(s["version"]) for s in states if s["consumers"]}
    if versions == {1}:
        consumers = [c for s in states for c in s["consumers"]]
        return _state(epoch, [merge_states(consumers)], version=1)
    if len(versions) > 1:
        raise ValueError(f"{STATE_FORMAT}: cannot merge version 1 and version 2 dicts")
    live = [s for s in states if s["consumers"]]
    if not live:
        return _state(epoch, [])
    entry = _merge_entries([e for s in live for e in s["consumers"]])
    if all(s.get("ended") for s in live):
        if entry["members"] == list(range(entry["of"])):
            # Every consumer finished: between epochs.
            return _state(epoch + 1, [])
        return _state(epoch, [entry], ended=True)
    return _state(epoch, [entry])


def state_dict_from_stateful_dataloader(state: Mapping[str, Any]) -> Dict[str, Any]:
    """The data set's state, merged over the workers, from ``StatefulDataLoader.state_dict()``.

    Load it into the data set (``ds.load_state_dict``) before building a
    DataLoader with another worker count, which StatefulDataLoader's own
    ``load_state_dict`` refuses. Needs ``snapshot_every_n_steps=1`` (the
    default) with workers: an older worker snapshot would repeat samples.
    """
    if "_snapshot" not in state:  # num_workers=0: the data set's own state
        ds_state = state.get("dataset_state")
        if ds_state is None:
            raise ValueError("no data set state in this StatefulDataLoader state")
        return merge_state_dicts([ds_state])
    if int(state.get("_steps_since_snapshot", 0)) != 0:
        raise ValueError(f"the worker states are {state['_steps_since_snapshot']} batches older "
                         "than the state: use snapshot_every_n_steps=1")
    workers = state["_snapshot"]["_worker_snapshots"]
    dicts = [w["dataset_state"] for w in workers.values()]
    if any(d is None for d in dicts):
        raise ValueError("a worker's state has no data set state")
    return merge_state_dicts(dicts)


def gather_state_dict(dataset: ShardDataset) -> Dict[str, Any]:
    """Every rank's state, merged (a collective: call it on every rank).

    With torch.distributed not initialised this is ``dataset.state_dict()``.
    """
    own = dataset.state_dict()
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return own
    all_states: List[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(all_states, own)
    return merge_state_dicts(all_states)
