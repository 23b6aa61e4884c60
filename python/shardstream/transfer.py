"""How remote shards are fetched: ranged parts over many connections.

A stream of an http(s):// or s3:// object larger than one part is read as
ranged GETs of ``part_size`` bytes over several connections at once, pinned
to the object's version and handed over in order; one engine per process
bounds the connections and the bytes held ahead of readers. See
docs/object-storage.md.
"""

from __future__ import annotations

from typing import Any, Dict, Union

from . import _core

_SIZES = ("part_size", "max_bytes_in_flight")


def set_transfer_options(**options: Union[int, float, str]) -> None:
    """Changes the transfer options for streams opened from now on.

    Keys: ``part_size`` and ``max_bytes_in_flight`` (bytes, or a size such as
    "16MiB"), ``parts_per_stream``, ``max_connections``,
    ``initial_host_connections``, ``stall_s``, ``hedge_factor``,
    ``hedge_min_s``. An unknown key raises ValueError.
    """
    values: Dict[str, Any] = {}
    for key, value in options.items():
        if key in _SIZES and isinstance(value, str):
            value = _core.parse_size(value)
        values[key] = value
    _core.set_transfer_options(values)


def transfer_options() -> Dict[str, Any]:
    """The transfer options in force in this process."""
    return _core.get_transfer_options()


def transfer_stats() -> Dict[str, Any]:
    """This process's remote-read counters: bytes and bytes/s from the source,
    connections in use (and the peak), part time p50/p99, hedges, retries,
    stalls, throttles (503/429) and the time readers waited for the network."""
    return _core.transfer_stats()
