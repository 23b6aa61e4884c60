"""How remote shards are fetched: ranged parts over many connections.

A stream of an http(s):// or s3:// object larger than one part is read as
ranged GETs of ``part_size`` bytes over several connections at once, pinned
to the object's version and handed over in order; one engine per process
bounds the connections and the bytes held ahead of readers. See
docs/object-storage.md.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Union

from . import _core

_SIZES = ("part_size", "max_bytes_in_flight")

# What one node's processes share by default: each process (rank or DataLoader worker) takes
# its part of it (share_node_budget), never more than a lone process's defaults.
NODE_CONNECTIONS = 256
NODE_BYTES_IN_FLIGHT = 2 << 30
# The least a process is given, however many share the node.
_MIN_CONNECTIONS = 8
_MIN_BYTES = 64 << 20
_BUDGET_ENV = {"max_connections": "SHARDSTREAM_MAX_CONNECTIONS",
               "max_bytes_in_flight": "SHARDSTREAM_MAX_INFLIGHT"}
# A lone process's defaults (before any change in this process).
_DEFAULTS = dict(_core.get_transfer_options())
# Options the user set (set_transfer_options): share_node_budget leaves them alone.
_explicit: set = set()


def set_transfer_options(**options: Union[int, float, str]) -> None:
    """Changes the transfer options for streams opened from now on.

    Keys: ``part_size`` and ``max_bytes_in_flight`` (bytes, or a size such as
    "16MiB"), ``parts_per_stream``, ``max_connections``,
    ``initial_host_connections``, ``stall_s``, ``host_stall_s``, ``hedge_factor``,
    ``hedge_min_s``. An unknown key raises ValueError.
    """
    values: Dict[str, Any] = {}
    for key, value in options.items():
        if key in _SIZES and isinstance(value, str):
            value = _core.parse_size(value)
        values[key] = value
    _core.set_transfer_options(values)
    _explicit.update(values)


def share_node_budget(processes: int) -> Dict[str, Any]:
    """Gives this process its share of the node's transfer budget, when ``processes`` processes
    on the node read remote shards (ranks x DataLoader workers): NODE_CONNECTIONS and
    NODE_BYTES_IN_FLIGHT divided among them, at least 8 connections and 64 MiB, at most a
    lone process's defaults. Options set with set_transfer_options or the environment
    (SHARDSTREAM_MAX_CONNECTIONS, SHARDSTREAM_MAX_INFLIGHT) are left as they are. Returns the
    options in force. shardstream.torch calls it for every loader it starts."""
    processes = max(1, int(processes))
    change: Dict[str, Any] = {}
    for key, node, least in (("max_connections", NODE_CONNECTIONS, _MIN_CONNECTIONS),
                             ("max_bytes_in_flight", NODE_BYTES_IN_FLIGHT, _MIN_BYTES)):
        if key in _explicit or os.environ.get(_BUDGET_ENV[key]):
            continue
        lone = _DEFAULTS[key]
        change[key] = min(lone, max(least, node // processes))
    if "max_connections" in change and "initial_host_connections" not in _explicit:
        change["initial_host_connections"] = min(_DEFAULTS["initial_host_connections"],
                                                 change["max_connections"])
    if change:
        _core.set_transfer_options(change)
    return _core.get_transfer_options()


def transfer_options() -> Dict[str, Any]:
    """The transfer options in force in this process."""
    return _core.get_transfer_options()


def transfer_stats() -> Dict[str, Any]:
    """This process's remote-read counters: bytes and bytes/s from the source,
    connections in use (and the peak), part time p50/p99, hedges, retries,
    stalls, throttles (503/429) and the time readers waited for the network."""
    return _core.transfer_stats()
