"""The loader options, listed once.

Every option of :class:`shardstream.Loader` and
:class:`shardstream.torch.ShardDataset` is a row here: its name, type, help,
the native ``LoaderOptions`` field it sets, and how the binding sets it.
Made from this table:

- the keywords and signature of :func:`shardstream.loader.loader_options`
  (``Loader(urls, **options)``), and the options dict it builds;
- the binding's rows for plain options (``python/src/loader_option_rows.inc``:
  the value cast to the field's own C++ type), ``python -m shardstream.options
  --binding``;
- ``docs/options.md``, ``python -m shardstream.options``.

A plain option's default is the C++ field's initializer (``options.h``), read
from the native module, not written here again. The tests check the generated
files are current and the Python signatures agree, so adding a plain option is
a field in ``LoaderOptions`` (its implementation) and a row here.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any, Optional, Tuple

# A plain option's default: the native field's initializer.
NATIVE = object()


@dataclass(frozen=True)
class Option:
    name: str               # the Python keyword
    type: str               # as shown in the docs; "size" takes "500GB" too, "path" a PathLike,
                            # "cpus" a list or "0-3,8"
    default: Any            # the effective default; NATIVE: the C++ field's
    help: str
    native: Optional[str] = None  # the native option it sets; None: Python only
    cpp: str = ""           # the C++ LoaderOptions field, for the docs
    # The binding converts the value itself (an enum, a nested spec) instead of
    # casting it to the field's type.
    own: bool = False

    @property
    def plain(self) -> bool:
        return self.native is not None and not self.own


OPTIONS: Tuple[Option, ...] = (
    Option("fields", "list of names or specs", None,
           "Fields that become tensors; None: every field of the first sample, decoded by extension "
           "(image fields: docs/images.md)",
           "fields", "fields", own=True),
    Option("tokens", "dict", None,
           'Language-model token batches: {"field", "seq_len", "layout", "eod_token", "pad_token", '
           '"dtype", "input_dtype", "document_metadata", "equal_batches", "tokenizer"} (tokenizer: '
           'a callable text -> ids for a text field, run on the reader threads)',
           "tokens", "tokens", own=True),
    Option("batch_size", "int", NATIVE, "Samples (or token rows) per batch", "batch_size",
           "batch_size"),
    Option("shuffle", "bool", True,
           "False turns the sample shuffle off (shuffle_buffer 0); shards stay in the plan's "
           "seeded order, read several at once: for manifest order use `mode=\"eval\"`"),
    Option("shuffle_buffer", "int", NATIVE,
           "Samples held for shuffling (alias shuffle_size); 0 or 1: none", "shuffle_buffer",
           "shuffle_buffer"),
    Option("shuffle_initial", "int", NATIVE,
           "Samples buffered before the first one leaves; -1: shuffle_buffer", "shuffle_initial",
           "shuffle_initial"),
    Option("seed", "int", NATIVE, "Seed of every shuffle and split", "seed", "seed"),
    Option("epoch", "int", NATIVE, "First epoch (later ones: set_epoch)", "epoch", "epoch"),
    Option("streams", "list of dicts", None,
           'Data sets mixed per epoch: [{"inputs": url(s), "weight" | "repeat" | "choose", '
           '"name"}], instead of urls (docs/pipeline.md, "Mixing data sets")', "streams",
           "streams", own=True),
    Option("epoch_size", "int", NATIVE,
           "Weighted streams: samples per epoch over all streams; 0: their total", "epoch_size",
           "epoch_size"),
    Option("mode", "str", "train",
           '"train", or "eval": manifest order, every sample once, no drop or pad', "mode",
           "mode", own=True),
    Option("rank", "int", NATIVE, "This rank (ShardDataset: from torch.distributed or RANK)", "rank",
           "rank"),
    Option("world_size", "int", NATIVE, "Ranks (ShardDataset: from torch.distributed or WORLD_SIZE)",
           "world_size", "world_size"),
    Option("worker", "int", NATIVE, "This DataLoader worker (ShardDataset: from get_worker_info)",
           "worker", "worker"),
    Option("num_workers", "int", NATIVE, "DataLoader workers per rank (ShardDataset: from the DataLoader)",
           "num_workers", "num_workers"),
    Option("node_local", "bool", NATIVE,
           "Assign shards to nodes once for all epochs, so each node's cache keeps its part",
           "node_local", "node_local"),
    Option("local_world_size", "int", NATIVE,
           "Ranks per node for node_local (ShardDataset: LOCAL_WORLD_SIZE or SLURM's)",
           "local_world_size", "local_world_size"),
    Option("drop_last", "bool", NATIVE, "Drop an epoch's last, smaller batch", "drop_last",
           "drop_last"),
    Option("pad_remainder", "bool", NATIVE,
           "Pad the samples left over by an uneven split instead of dropping them",
           "pad_remainder", "pad_remainder"),
    Option("prefetch", "int", NATIVE, "Batches ready ahead of the caller", "prefetch", "prefetch"),
    Option("reader_threads", "int", NATIVE, "Worker threads (one core each at full speed)",
           "reader_threads", "reader_threads"),
    Option("reader_cpus", "cpus", NATIVE,
           'CPUs the worker threads may run on, a list or text such as "1-15" (docs/python.md, '
           '"CPU controls"); empty: the process\'s', "reader_cpus", "reader_cpus"),
    Option("reader_nice", "int", NATIVE,
           "Niceness the worker threads add (0-19), so the training thread wins a contended core",
           "reader_nice", "reader_nice"),
    Option("open_shards", "int", NATIVE, "Shards open at once, interleaved", "open_shards",
           "open_shards"),
    Option("cache_dir", "path", None, "Node-local shard cache directory (default: no cache)",
           cpp="cache"),
    Option("cache_limit", "size", None, 'Bytes the cache may hold, e.g. "500GB"; required with cache_dir',
           cpp="cache"),
    Option("cache_mode", "str", "rw", '"rw", "ro" or "off"', cpp="cache"),
    Option("pinned", "bool", True, "CUDA pinned batch memory when a GPU is present", "pinned",
           "allocator", own=True),
    Option("error_policy", "str", "raise", '"raise", "skip_shard" or "skip_sample"',
           "error_policy", "error_policy", own=True),
    Option("memory_budget", "size", NATIVE, "Refuse options needing more resident memory; 0: no check",
           "memory_budget", "memory_budget"),
    Option("variable_bytes", "size", NATIVE, "Bytes per batch for bytes/str fields and keys",
           "variable_bytes", "variable_bytes"),
    Option("read_chunk", "size", NATIVE, "Read-buffer size per open shard", "read_chunk",
           "read_chunk"),
    Option("shard_queue", "int", NATIVE, "Samples buffered per open shard", "shard_queue",
           "shard_queue"),
    Option("engine", "str", "fast", '"fast" or "libarchive" tar reader', "engine", "engine", own=True),
    Option("log_interval_s", "float", NATIVE, "Seconds between progress log lines; 0: none",
           "log_interval_s", "log_interval_s"),
    Option("watchdog_s", "float", NATIVE,
           "Seconds next() waits for a batch before it logs what each reader lane is at (shard, "
           "URL, sample, byte) and the connections, again at each multiple; 0: off",
           "watchdog_s", "watchdog_s"),
    Option("watchdog_error", "bool", NATIVE,
           "The watchdog's first report is next()'s error (retryable) instead of waiting on",
           "watchdog_error", "watchdog_error"),
    Option("direct_reads", "bool", NATIVE,
           "Token documents of indexed local shards read straight into the batch", "direct_reads",
           "direct_reads"),
    Option("mapped_keep_bytes", "size", NATIVE,
           "With a sample shuffle, local token shards stay mapped across epochs up to this many "
           "bytes (their pages are not faulted in again); 0: off", "mapped_keep_bytes",
           "mapped_keep_bytes"),
    Option("learn_sample_counts", "bool", NATIVE,
           "Without a manifest, learn sample counts from .idx sidecars (building them locally)",
           "learn_sample_counts", "learn_sample_counts"),
    Option("index_dir", "path", None,
           "Local folder for the indexes the loader builds, instead of beside the shards",
           "index_dir", "index_dir", own=True),
)



def _with_native_defaults(rows: Tuple[Option, ...]) -> Tuple[Option, ...]:
    from . import _core
    native = _core.loader_option_defaults()
    # A row whose field the native module lacks yet (it is being added: the
    # binding's rows are generated before it is rebuilt) keeps NATIVE.
    return tuple(dataclasses.replace(o, default=native.get(o.native, NATIVE))
                 if o.default is NATIVE else o for o in rows)


OPTIONS = _with_native_defaults(OPTIONS)
BY_NAME = {o.name: o for o in OPTIONS}
# Native keys Python builds itself rather than taking as a keyword.
NATIVE_ONLY = ("manifest", "inputs", "cache")


def markdown() -> str:
    """docs/options.md: the table of options."""
    def fmt(v: Any) -> str:
        if v is None:
            return "none"
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, bool):
            return str(v)
        if isinstance(v, int) and v >= 1024 and v % 1024 == 0:
            return f"{v >> 10} KiB" if v < (1 << 20) else f"{v >> 20} MiB"
        return str(v)

    lines = [
        "# Loader options",
        "",
        "Generated from the option table, `python/shardstream/options.py` (`python -m",
        "shardstream.options`), which also makes `loader_options`' keywords and the binding's rows for",
        "plain options; a plain option's default is its C++ field's initializer. The same options are",
        "the keyword arguments of `shardstream.Loader` and `shardstream.torch.ShardDataset`, and the",
        "fields of the C++ `LoaderOptions` (`include/shardstream/options.h`). Sizes take `KB`/`MB`/`GB`",
        "(powers of 1000) or `KiB`/`MiB`/`GiB` (powers of 1024).",
        "",
        "| option | type | default | C++ | what |",
        "|---|---|---|---|---|",
    ]
    for o in OPTIONS:
        cpp = f"`{o.cpp}`" if o.cpp else "(Python only)"
        lines.append(f"| `{o.name}` | {o.type} | {fmt(o.default)} | {cpp} | {o.help} |")
    return "\n".join(lines) + "\n"


def binding_rows() -> str:
    """python/src/loader_option_rows.inc: the binding's rows for plain options."""
    lines = ["// Generated from python/shardstream/options.py (python -m shardstream.options --binding",
             "// > python/src/loader_option_rows.inc); do not edit. The rows of the plain options:",
             "// the Python value cast to the LoaderOptions field's own type."]
    lines += [f"SS_PLAIN({o.native})," for o in OPTIONS if o.plain]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(binding_rows() if sys.argv[1:] == ["--binding"] else markdown(), end="")
