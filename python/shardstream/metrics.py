"""Loader metrics as a dict and as Prometheus text exposition."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

_COUNTERS = {
    "batches": "Batches returned by next()",
    "samples": "Samples in the returned batches",
    "bytes": "Tensor bytes in the returned batches",
    "skipped_samples": "Samples skipped by the error policy",
    "skipped_shards": "Shards skipped by the error policy",
    "cut_samples": "Documents the equal-batches cut left out of this consumer's epochs",
    "cut_tokens": "Tokens of the documents the equal-batches cut left out",
    "direct_samples": "Token documents read straight into their batches",
    "heap_spills": "Batches whose variable-length fields spilled to the heap",
    "copy_waits": "Batch slots reused only after the GPU finished copying them",
    "reader_wait_seconds": "Seconds the assembler waited for a lane to get a sample",
    "caller_wait_seconds": "Seconds the assembler waited for the caller (queue full or no free slot)",
    "watchdog_reports": "Times next() waited watchdog_s (or a multiple) and logged the readers' state",
}
_GAUGES = {
    "epoch": "Epoch being read",
    "batches_per_s": "Batches per second since the first next()",
    "samples_per_s": "Samples per second since the first next()",
    "bytes_per_s": "Tensor bytes per second since the first next()",
    "queue_depth": "Batches ready in the prefetch queue",
    "queue_capacity": "Capacity of the prefetch queue",
    "shuffle_fill": "Samples in the shuffle buffer",
    "shuffle_capacity": "Capacity of the shuffle buffer",
    "cache_hit_rate": "Cache hits per shard open through the cache (-1: no cache)",
    "slot_bytes": "Bytes per batch slot",
    "slots": "Batch slots in the pool",
    "mapped_kept_bytes": "Bytes of shard files kept mapped across epochs (in RSS once read)",
    "waiting_seconds": "Seconds the next() in progress has waited for a batch (0: none waiting)",
}


_TRANSFER_COUNTERS = {
    "bytes": "Body bytes received from remote sources",
    "parts": "Ranged parts completed",
    "hedges": "Parts asked for a second time on another connection",
    "hedge_wins": "Hedged parts won by the second request",
    "retries": "GETs retried (resets, stalls, 5xx, 429)",
    "stalls": "GETs dropped after stall_s without a byte",
    "throttles": "503 and 429 answers",
    "reader_wait_seconds": "Seconds readers waited for a part's bytes",
    "upload_parts": "Checkpoint multipart parts uploaded",
    "upload_bytes": "Bytes of checkpoint multipart parts uploaded",
}
_TRANSFER_GAUGES = {
    "bytes_per_s": "Bytes per second from remote sources while transfers ran",
    "connections": "GETs running now",
    "bytes_in_flight": "Part bytes held for readers now",
    "part_p50_s": "Median time of a part, request to last byte",
    "part_p99_s": "99th percentile time of a part",
}


def _labels(labels: Mapping[str, Any]) -> str:
    if not labels:
        return ""
    parts = []
    for k, v in sorted(labels.items()):
        text = str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        parts.append(f'{k}="{text}"')
    return "{" + ",".join(parts) + "}"


def _scalars(lines: List[str], prefix: str, stats: Mapping[str, Any], lab: str,
             counters: Mapping[str, str] = _COUNTERS, gauges: Mapping[str, str] = _GAUGES) -> None:
    """Appends the counters (as ``_total``) and gauges of ``stats`` present in the tables."""
    for name, help_text in counters.items():
        if name in stats:
            lines += [f"# HELP {prefix}_{name}_total {help_text}",
                      f"# TYPE {prefix}_{name}_total counter",
                      f"{prefix}_{name}_total{lab} {stats[name]}"]
    for name, help_text in gauges.items():
        if name in stats:
            lines += [f"# HELP {prefix}_{name} {help_text}", f"# TYPE {prefix}_{name} gauge",
                      f"{prefix}_{name}{lab} {stats[name]}"]


def to_prometheus(stats: Mapping[str, Any], prefix: str = "shardstream_loader",
                  labels: Mapping[str, Any] = {}) -> str:
    """Prometheus text format (version 0.0.4) for a Loader's stats() dict.

    Counters get ``_total``; the batch wait time (the GPU-idle proxy) becomes a
    histogram ``<prefix>_wait_seconds`` with cumulative buckets; read bytes are
    one counter labelled by source ("cache", "file", "http", ...).
    """
    lines: List[str] = []
    lab = _labels(labels)
    _scalars(lines, prefix, stats, lab)
    read = stats.get("read_bytes") or {}
    lines += [f"# HELP {prefix}_read_bytes_total Shard bytes read, by where they came from",
              f"# TYPE {prefix}_read_bytes_total counter"]
    for source, n in sorted(read.items()):
        lines.append(f"{prefix}_read_bytes_total{_labels({**labels, 'source': source})} {n}")
    _scalars(lines, prefix.replace("_loader", "") + "_transfer", stats.get("transfer") or {}, lab,
             _TRANSFER_COUNTERS, _TRANSFER_GAUGES)
    bounds = stats.get("wait_bucket_us") or []
    counts = stats.get("wait_counts") or []
    if counts:
        lines += [f"# HELP {prefix}_wait_seconds Time the caller waited inside next()",
                  f"# TYPE {prefix}_wait_seconds histogram"]
        total = 0
        for i, c in enumerate(counts):
            total += c
            le = "+Inf" if i >= len(bounds) or i == len(counts) - 1 else repr(bounds[i] / 1e6)
            lines.append(f"{prefix}_wait_seconds_bucket{_labels({**labels, 'le': le})} {total}")
        lines.append(f"{prefix}_wait_seconds_sum{lab} {stats.get('wait_seconds', 0.0)}")
        lines.append(f"{prefix}_wait_seconds_count{lab} {total}")
    return "\n".join(lines) + "\n"


def summary(stats: Mapping[str, Any]) -> Dict[str, Any]:
    """The figures a training log wants: throughput, wait time, cache hit rate."""
    return {k: stats.get(k) for k in ("epoch", "batches", "samples", "batches_per_s",
                                      "samples_per_s", "bytes_per_s", "wait_seconds",
                                      "wait_p50_us", "wait_p99_us", "cache_hit_rate")}
