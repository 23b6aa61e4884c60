"""shardstream vs WebDataset, MosaicML Streaming, LitData, Grain, SPDL and Megatron-Energon, each
feeding a training loop the same samples.

    python benchmarks/torch_vs_webdataset.py [--dir /tmp/ss-bench] [--runs 3] [--epochs 3]
    bash scripts/bench_env.sh [--peers]      # Streaming's environment; LitData, Grain, SPDL

Data sets, written once into --dir with shardstream.ShardWriter (64 MiB tar
shards, each sample one int32 .npy) and reused while their parameters match:
"tokens" (--token-samples samples of 2048 tokens, batches [256, 2048] int32),
"tokens-b" (--mix-samples samples of 2048 other tokens, the second data set of
the mix) and "1k" (--small-samples samples of 256 int32 = 1 KiB, batches
[256, 256]). For Streaming the same tokens, read back from the tar shards, are
written once with MDSWriter(columns={"tokens": "ndarray:int32"}) (as
llm-foundry writes pre-tokenized text) into --dir/NAME-mds; for LitData with
its optimize(..., item_loader=TokensLoader(), chunk_size=16M tokens) (its
pretraining recipe) into --dir/NAME-litdata; for Grain as ArrayRecord files
(a record per sample, group_size:1 for random access) into --dir/NAME-grain;
for SPDL, which has no format of its own, as one [samples, seq] .npy array per
shard into --dir/NAME-spdl.

Configurations, each for every library:
- tokens, shuffle on: each library's usual shuffle. shardstream: ShardDataset's
  defaults (shuffle=True, a 1000-sample buffer). WebDataset:
  shardshuffle=len(urls) and .shuffle(1000) (its documented training setup).
  Streaming: StreamingDataset(shuffle=True) with its defaults (py1e).
- tokens, shuffle off: shuffle=False / shardshuffle=False and no .shuffle().
- mix: "tokens" and "tokens-b" mixed 0.7 / 0.3 by sample, epochs of
  --token-samples samples, shuffle on. shardstream:
  ShardDataset(streams=[{"inputs": a, "weight": 0.7}, {"inputs": b,
  "weight": 0.3}], epoch_size=N). Streaming: StreamingDataset(streams=
  [Stream(local=a, proportion=0.7), Stream(local=b, proportion=0.3)],
  epoch_size=N, shuffle=True). WebDataset: wds.RandomMix of two
  WebDataset(urls, resampled=True).shuffle(1000) sources with probs
  [0.7, 0.3], batched, .with_epoch(nbatches=N / 256 / workers) (its
  documented recipe: RandomMix stops at the first exhausted source, so the
  sources resample shards and the epoch is set by length).
- 1k, shuffle on and off, as for tokens.

How each library is driven (its recommended setup):
- shardstream: ShardDataset(..., fields=["tokens.npy"], batch_size=256) under
  DataLoader(batch_size=None, num_workers=0, collate_fn=passthrough)
  (= ds.dataloader(); C++ threads do the work), set_epoch(e) every epoch.
  With the environment variable SS_DEFAULT_COLLATE=1 the DataLoader keeps its
  default collate_fn instead.
- WebDataset: .decode().to_tuple("tokens.npy").batched(256) under
  DataLoader(batch_size=None, num_workers=2, pin_memory=True).
- Streaming (mosaicml-streaming, in its own virtual environment made by
  scripts/bench_env.sh, since it pins numpy<2.2): StreamingDataset(...,
  batch_size=256) under DataLoader(batch_size=256, num_workers=2,
  pin_memory=True); the default collate_fn stacks the rows.

- LitData: StreamingDataset(dir, item_loader=TokensLoader(block_size=seq),
  shuffle=...) under its StreamingDataLoader(batch_size=256, num_workers=2,
  pin_memory=True). Not in the mix configuration.
- Grain: its Dataset API, MapDataset.source(ArrayRecordDataSource(files))
  .shuffle(seed).repeat(epochs).map(parse).batch(256).to_iter_dataset()
  .mp_prefetch(num_workers=2); NumPy batches, taken as tensors with
  torch.from_numpy. One pipeline gives every epoch. Not in the mix.
- SPDL: its thread pipeline, PipelineBuilder().add_source(batches of indices,
  shuffled per epoch).pipe(load_batch, concurrency=2).add_sink(3)
  .build(num_threads=2), load_batch gathering a batch's rows from the
  memory-mapped arrays with NumPy (a call per batch: its per-item dispatch
  costs far more than a row's copy). Not in the mix.
- Megatron-Energon (in .venv-peers, made by scripts/bench_env.sh --peers-venv,
  with DALI): the tar shards after `energon prepare` as a CrudeWebdataset, a
  task encoder whose cooker takes the decoded tokens.npy and whose batch()
  stacks them; get_train_dataset(batch_size=256, shuffle_buffer_size=100,
  max_samples_per_sequence=100) (its documented set-up; both None with shuffle
  off), WorkerConfig(num_workers=2), get_loader. Its training sets repeat, so
  an epoch is the data set's count of samples. Not in the mix.

Each configuration runs --epochs epochs in a fresh process; the runs are
interleaved (run 1 of every configuration, then run 2, ...). The driver
samples the RSS (and its anonymous part) of that process and all its children
every 5 ms (/proc) for the peak memory of the whole process tree, and compares
it with a process that only imports torch. Reported, medians of --runs:
batches/s over all epochs counted from the first batch on (its time excluded),
time to the first batch (from just after `import torch`: library import, set-up,
worker start, first batch), peak tree RSS, rows per CPU second (rows after the
first batch over the CPU seconds of the process and its joined workers in that
time), and the ratio of shardstream to each peer. The last stdout line is one JSON object.
"""

import argparse
import io
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time

from bench_common import (cpu_seconds, energon_prepare, ensure_mds, finish_dir,
                          import_torch_rss, interleave, log, peer_missing, prepare_dir, read_json,
                          shard_paths, warm_cache, write_array_records)

BATCH = 256
WORKERS = 2  # DataLoader workers of WebDataset and Streaming
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ME = os.path.abspath(__file__)
LIBS = ("shardstream", "webdataset", "streaming", "litdata", "grain", "spdl", "energon")
# Peers measured on one data set at a time (their mixes are not set up here).
NO_MIX = ("litdata", "grain", "spdl", "energon")
# Each peer's own format, written by its own writer from the same tar shards (SPDL has none:
# it gets .npy arrays, memory-mapped; Energon reads the tars after `energon prepare`).
COPIES = {"litdata": "--write-litdata", "grain": "--write-grain", "spdl": "--write-npy",
          "energon": "--write-energon"}
# Peers that live in the peers' venv (scripts/bench_env.sh --peers-venv).
PEERS_PYTHON = ("energon",)
LITDATA_CHUNK_TOKENS = 16 << 20  # 64 MiB of int32 per chunk, as our shards
MIX_WEIGHTS = (0.7, 0.3)
# Data set name -> (tokens per sample, generator seed).
DATASETS = {"tokens": (2048, 0), "tokens-b": (2048, 1), "1k": (256, 0)}
# (configuration, data sets, shuffle): a mix has two data sets.
CONFIGS = (
    ("tokens", ("tokens",), True),
    ("tokens", ("tokens",), False),
    ("mix", ("tokens", "tokens-b"), True),
    ("1k", ("1k",), True),
    ("1k", ("1k",), False),
)


# -- the data sets ---------------------------------------------------------------------------

def make_data(root: str, name: str, samples: int) -> str:
    """Writes data set `name` into root/name unless it is there with these parameters;
    returns its manifest."""
    import numpy as np
    import shardstream
    seq, seed = DATASETS[name]
    params = {"version": 2, "samples": samples, "seq": seq, "seed": seed, "max_bytes": "64MiB"}
    out = os.path.join(root, name)
    manifest = os.path.join(out, "manifest.jsonl")
    if prepare_dir(out, params) is not None:
        return manifest
    log(f"data: writing {name} ({samples} samples of {seq} int32) into {out}")
    rng = np.random.default_rng(seed)
    with shardstream.ShardWriter(out, max_bytes=params["max_bytes"]) as w:
        for i in range(samples):
            w.write({"__key__": f"s{i:08d}",
                     "tokens.npy": rng.integers(0, 50000, size=seq, dtype=np.int32)})
    finish_dir(out, params)
    return manifest


def tar_tokens(paths: list):
    """The tokens.npy arrays of every sample of the tar shards, in order (stdlib + numpy)."""
    import tarfile
    import numpy as np
    for path in paths:
        with tarfile.open(path, "r:") as tar:
            for m in tar:
                if m.isfile() and m.name.endswith(".tokens.npy"):
                    yield np.load(io.BytesIO(tar.extractfile(m).read()))


def write_mds(manifest: str, out: str) -> None:
    """Child (Streaming environment): the data set's tokens as MDS, as llm-foundry writes
    pre-tokenized text."""
    from vision_benchmark import import_streaming
    streaming = import_streaming()
    if os.path.exists(out):
        shutil.rmtree(out)
    n = 0
    with streaming.MDSWriter(out=out, columns={"tokens": "ndarray:int32"}) as w:
        for tokens in tar_tokens(shard_paths(manifest)):
            w.write({"tokens": tokens})
            n += 1
    print(json.dumps({"samples": n, "streaming_version": streaming.__version__}))


def litdata_shard_tokens(path: str):
    """LitData's optimize fn: a shard's samples as token tensors (its pretraining recipe)."""
    import torch
    for tokens in tar_tokens([path]):
        yield torch.from_numpy(tokens)


def write_litdata(manifest: str, out: str) -> None:
    """Child: the tokens as LitData chunks (optimize with TokensLoader, as LitData's
    pretraining recipe writes them)."""
    import litdata
    from litdata.streaming.item_loader import TokensLoader
    if os.path.exists(out):
        shutil.rmtree(out)
    litdata.optimize(fn=litdata_shard_tokens, inputs=shard_paths(manifest), output_dir=out,
                     chunk_size=LITDATA_CHUNK_TOKENS, item_loader=TokensLoader(),
                     num_workers=WORKERS, verbose=False)
    print(json.dumps({"litdata_version": litdata.__version__}))


def write_grain(manifest: str, out: str) -> None:
    """Child: the tokens as ArrayRecord files, a record per sample (its int32 bytes), read by
    Grain's ArrayRecordDataSource."""
    n = write_array_records(manifest, out,
                            lambda path: (tokens.tobytes() for tokens in tar_tokens([path])))
    print(json.dumps({"samples": n}))


def write_npy(manifest: str, out: str) -> None:
    """Child: the tokens as one [samples, seq] int32 .npy array per shard (for SPDL, which
    has no format of its own: a map-style source over memory-mapped arrays)."""
    import numpy as np
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    for i, path in enumerate(shard_paths(manifest)):
        np.save(os.path.join(out, f"part-{i:05d}.npy"), np.stack(list(tar_tokens([path]))))
    print(json.dumps({"shards": i + 1}))


def write_energon(manifest: str, out: str) -> None:
    """Child (peers' venv): an Energon data set over the same tar shards: links to them, then
    `energon prepare` as a CrudeWebdataset (samples cooked in the task encoder)."""
    energon_prepare(manifest, out, ["--sample-type", "CrudeWebdataset"])
    print(json.dumps({"prepared": out}))


def npy_files(out: str) -> list:
    return sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".npy"))


def grain_files(out: str) -> list:
    return sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".array_record"))


def grain_tokens(record):
    """Grain's map: a record's bytes to the int32 tokens (module level: its workers import it)."""
    import numpy as np
    return np.frombuffer(record, dtype=np.int32)


# -- one configuration of one library, in its own process -----------------------------------

def run_one(cfg: dict) -> dict:
    """Child: iterates cfg["epochs"] epochs, returns timings."""
    import torch
    t_start = time.perf_counter()
    lib, shuffle, epochs, seq = cfg["lib"], cfg["shuffle"], cfg["epochs"], cfg["seq"]
    weights, epoch_size = cfg.get("weights"), cfg.get("epoch_size")
    versions = {"torch": torch.__version__}
    set_epoch = make_epoch = dl = None
    if lib == "shardstream":
        import shardstream
        from shardstream.torch import ShardDataset, passthrough
        versions["shardstream"] = getattr(shardstream, "__version__", None)
        opts = {"fields": ["tokens.npy"], "batch_size": BATCH, "shuffle": shuffle, "seed": 0}
        if weights:
            ds = ShardDataset(streams=[{"inputs": m, "weight": w, "name": f"s{i}"} for i, (m, w)
                                       in enumerate(zip(cfg["manifests"], weights))],
                              epoch_size=epoch_size, **opts)
        else:
            ds = ShardDataset(cfg["manifests"][0], **opts)
        collate = {} if os.environ.get("SS_DEFAULT_COLLATE") else {"collate_fn": passthrough}
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0, **collate)
        set_epoch = ds.set_epoch
    elif lib == "webdataset":
        import webdataset as wds
        versions["webdataset"] = wds.__version__

        def source(manifest: str, resampled: bool):
            urls = shard_paths(manifest)
            if resampled:
                d = wds.WebDataset(urls, resampled=True, shardshuffle=False, empty_check=False)
            else:
                d = wds.WebDataset(urls, shardshuffle=len(urls) if shuffle else False,
                                   empty_check=False)
            if shuffle:
                d = d.shuffle(1000)
            return d.decode().to_tuple("tokens.npy")

        if weights:
            mix = wds.RandomMix([source(m, True) for m in cfg["manifests"]], probs=list(weights))
            per_worker = math.ceil(epoch_size / BATCH / WORKERS)
            ds = wds.DataPipeline(mix, wds.batched(BATCH, partial=True)).with_epoch(
                nbatches=per_worker)
        else:
            ds = source(cfg["manifests"][0], False).batched(BATCH, partial=True)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=WORKERS,
                                         pin_memory=True)
    elif lib == "streaming":
        from vision_benchmark import import_streaming
        streaming = import_streaming()
        from streaming.base.util import clean_stale_shared_memory
        clean_stale_shared_memory()
        versions["streaming"] = streaming.__version__
        if weights:
            streams = [streaming.Stream(local=d, proportion=w)
                       for d, w in zip(cfg["mds"], weights)]
            ds = streaming.StreamingDataset(streams=streams, epoch_size=epoch_size,
                                            shuffle=shuffle, batch_size=BATCH)
        else:
            ds = streaming.StreamingDataset(local=cfg["mds"][0], shuffle=shuffle,
                                            batch_size=BATCH)
        dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=WORKERS,
                                         pin_memory=True)
    elif lib == "litdata":
        import litdata
        from litdata import StreamingDataLoader, StreamingDataset
        from litdata.streaming.item_loader import TokensLoader
        versions["litdata"] = litdata.__version__
        ds = StreamingDataset(cfg["copies"]["litdata"][0], item_loader=TokensLoader(block_size=seq),
                              shuffle=shuffle, seed=0)
        # StreamingDataLoader moves to the next epoch (its shuffle) on each iteration.
        dl = StreamingDataLoader(ds, batch_size=BATCH, num_workers=WORKERS, pin_memory=True)
    elif lib == "grain":
        import grain
        from importlib.metadata import version
        versions["grain"] = version("grain")
        source = grain.sources.ArrayRecordDataSource(grain_files(cfg["copies"]["grain"][0]))

        # Its Dataset API as its docs build it: a global shuffle of the records (reshuffled
        # each epoch after repeat), parse, batch, and worker processes (mp_prefetch). One
        # pipeline gives every epoch, so its rows are counted once for all of them.
        d = grain.MapDataset.source(source)
        if shuffle:
            d = d.shuffle(seed=0)
        d = d.repeat(epochs).map(grain_tokens).batch(BATCH)
        dl = d.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=WORKERS))
        epochs = 1
    elif lib == "spdl":
        import numpy as np
        from importlib.metadata import version
        from spdl.pipeline import PipelineBuilder
        versions["spdl"] = version("spdl")
        arrays = [np.load(f, mmap_mode="r") for f in npy_files(cfg["copies"]["spdl"][0])]
        first_row = np.cumsum([0] + [a.shape[0] for a in arrays])

        def load_batch(rows):
            # A batch's rows gathered from the mapped arrays (one call per batch: SPDL's
            # per-item dispatch costs far more than a 1-8 KiB copy).
            out = np.empty((len(rows), seq), np.int32)
            files = np.searchsorted(first_row, rows, side="right") - 1
            for f in np.unique(files):  # NumPy's gather, a file at a time
                mine = files == f
                out[mine] = arrays[f][rows[mine] - first_row[f]]
            return torch.from_numpy(out)

        def make_epoch(epoch: int):
            # Its thread pipeline: batches of indices (shuffled per epoch) as the source,
            # loaded on its threads, batches in completion order as its default.
            n = int(first_row[-1])
            order = np.random.default_rng(epoch).permutation(n) if shuffle else np.arange(n)
            pipeline = (PipelineBuilder()
                        .add_source([order[i:i + BATCH] for i in range(0, n, BATCH)])
                        .pipe(load_batch, concurrency=WORKERS)
                        .add_sink(3)
                        .build(num_threads=WORKERS))

            def batches():
                with pipeline.auto_stop():
                    yield from pipeline.get_iterator()
            return batches()
    elif lib == "energon":
        import dataclasses
        import numpy as np
        from importlib.metadata import version
        from megatron.energon import (Cooker, DefaultTaskEncoder, Sample, WorkerConfig,
                                      basic_sample_keys, get_loader, get_train_dataset, stateless)
        versions["megatron-energon"] = version("megatron-energon")

        @dataclasses.dataclass
        class Tokens(Sample):
            tokens: np.ndarray

        @stateless
        def cook(raw: dict) -> Tokens:
            return Tokens(**basic_sample_keys(raw), tokens=raw["tokens.npy"])

        class Encoder(DefaultTaskEncoder):
            cookers = [Cooker(cook)]

            def batch(self, samples):
                return torch.from_numpy(np.stack([s.tokens for s in samples]))

        # Its documented training set-up (a shuffle buffer of 100, sequences of at most 100
        # samples of a shard); shuffle off: neither. A training set repeats forever, so an
        # epoch is the data set's count of samples.
        ds = get_train_dataset(cfg["copies"]["energon"][0], batch_size=BATCH,
                               shuffle_buffer_size=100 if shuffle else None,
                               max_samples_per_sequence=100 if shuffle else None,
                               worker_config=WorkerConfig(rank=0, world_size=1,
                                                          num_workers=WORKERS),
                               task_encoder=Encoder())
        energon_it = iter(get_loader(ds))

        def make_epoch(epoch: int):
            n = 0
            while n < cfg["samples"]:
                b = next(energon_it)
                n += int(b.shape[0])
                yield b
    else:
        raise SystemExit(f"unknown library {lib}")

    import numpy as np
    first = t_first = None
    batches = rows = 0
    rows_per_epoch = []
    for epoch in range(epochs):
        if set_epoch is not None:
            set_epoch(epoch)
        epoch_rows = 0
        for b in (make_epoch(epoch) if make_epoch is not None else dl):
            x = (b if isinstance(b, (np.ndarray, torch.Tensor))
                 else b[0] if isinstance(b, (tuple, list))
                 else b["tokens"] if "tokens" in b else b["tokens.npy"])
            if isinstance(x, np.ndarray):
                x = torch.from_numpy(x)  # Grain gives NumPy batches
            epoch_rows += int(x.shape[0])
            if first is None:
                first = time.perf_counter() - t_start
                t_first = time.perf_counter()
                cpu_first = cpu_seconds()
                assert x.shape[1] == seq and x.dtype == torch.int32, (lib, x.shape, x.dtype)
            else:
                batches += 1
            del b, x
        rows_per_epoch.append(epoch_rows)
    seconds = time.perf_counter() - t_first
    # Worker processes count once they are joined: drop the loader first.
    dl = make_epoch = energon_it = None
    import gc
    gc.collect()
    cpu = cpu_seconds() - cpu_first
    return {"first_batch_s": first, "batches": batches, "seconds": seconds,
            "cpu_s": cpu, "rows_per_cpu_s": batches * BATCH / cpu if cpu > 0 else None,
            "batches_per_s": batches / seconds, "rows_per_epoch": rows_per_epoch,
            "versions": versions}


# -- the driver -----------------------------------------------------------------------------

def config_name(kind: str, shuffle: bool) -> str:
    return f"{kind}, {'shuffle' if shuffle else 'no shuffle'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/ss-bench", help="data directory [/tmp/ss-bench]")
    ap.add_argument("--runs", type=int, default=3, help="runs of each configuration; medians [3]")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run [3]")
    ap.add_argument("--token-samples", type=int, default=32768,
                    help="samples of the token set, and of each mixed epoch [32768]")
    ap.add_argument("--mix-samples", type=int, default=16384,
                    help="samples of the second token set of the mix [16384]")
    ap.add_argument("--small-samples", type=int, default=65536,
                    help="samples of the 1 KiB set [65536]")
    ap.add_argument("--libs", default=",".join(LIBS), help=f"libraries to run [{','.join(LIBS)}]")
    ap.add_argument("--configs", default="tokens,mix,1k",
                    help="configurations to run: tokens, mix, 1k [all]")
    ap.add_argument("--shuffle", choices=("on", "off", "both"), default="both",
                    help="the tokens and 1k configurations with shuffle on, off or both [both]")
    ap.add_argument("--streaming-python",
                    default=os.path.join(ROOT, ".venv-bench", "bin", "python"),
                    help="Python of the Streaming environment (scripts/bench_env.sh) "
                         "[.venv-bench/bin/python]")
    ap.add_argument("--peers-python",
                    default=os.path.join(ROOT, ".venv-peers", "bin", "python"),
                    help="Python with Megatron-Energon (scripts/bench_env.sh --peers-venv) "
                         "[.venv-peers/bin/python]")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--write-mds", nargs=2, metavar=("MANIFEST", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--write-energon", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--write-litdata", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--write-grain", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--write-npy", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_one(json.loads(args.child))))
        return
    for flag, fn in (("write_mds", write_mds), ("write_litdata", write_litdata),
                     ("write_grain", write_grain), ("write_npy", write_npy),
                     ("write_energon", write_energon)):
        if getattr(args, flag):
            fn(*getattr(args, flag))
            return

    load_before = os.getloadavg()
    root = os.path.abspath(args.dir)
    os.makedirs(root, exist_ok=True)
    libs = [x for x in args.libs.split(",") if x]
    kinds = [x for x in args.configs.split(",") if x]
    shuffles = {"on": (True,), "off": (False,), "both": (True, False)}[args.shuffle]
    configs = [c for c in CONFIGS if c[0] in kinds and c[2] in shuffles]
    sizes = {"tokens": args.token_samples, "tokens-b": args.mix_samples,
             "1k": args.small_samples}
    names = sorted({n for _, sets, _ in configs for n in sets})
    manifests = {n: make_data(root, n, sizes[n]) for n in names}

    skipped = {}  # library -> why it has no figures
    mds = {}
    streaming_python = os.path.abspath(args.streaming_python)
    peers_python = os.path.abspath(args.peers_python)

    def python_of(lib: str) -> str:
        return (streaming_python if lib == "streaming" else
                peers_python if lib in PEERS_PYTHON else sys.executable)

    if "streaming" in libs:
        if not os.path.exists(streaming_python):
            skipped["streaming"] = (f"no Streaming environment at {streaming_python}: run "
                                    "scripts/bench_env.sh, or pass --streaming-python")
        else:
            try:
                mds = {n: ensure_mds(streaming_python, ME, manifests[n],
                                     os.path.join(root, n + "-mds"),
                                     read_json(os.path.join(root, n, "params.json")))
                       for n in names}
            except RuntimeError as e:
                skipped["streaming"] = str(e)
    copies = {}  # peer -> data set name -> its copy's directory
    for lib, flag in COPIES.items():
        if lib not in libs:
            continue
        module = {"litdata": "litdata", "grain": "array_record", "spdl": "spdl",
                  "energon": "megatron.energon"}[lib]
        python = python_of(lib)
        why = peer_missing(python, module, "bash scripts/bench_env.sh " +
                           ("--peers-venv" if lib in PEERS_PYTHON else "--peers"))
        if why:
            skipped[lib] = why
            continue
        try:
            copies[lib] = {n: ensure_mds(python, ME, manifests[n],
                                         os.path.join(root, f"{n}-{lib}"),
                                         read_json(os.path.join(root, n, "params.json")),
                                         flag=flag, what=f"{lib} copy")
                           for n in names}
        except RuntimeError as e:
            skipped[lib] = str(e)
    files = [u for n in names for u in shard_paths(manifests[n])]
    for by_name in copies.values():
        for d in by_name.values():
            files += [os.path.join(d, f) for f in sorted(os.listdir(d))
                      if os.path.isfile(os.path.join(d, f))]
    for d in mds.values():
        files += [os.path.join(d, f) for f in sorted(os.listdir(d))]
    warm_cache(files)

    torch_rss = import_torch_rss(args.runs)

    def command(lib: str, kind: str, sets: tuple, shuffle: bool) -> list:
        cfg = {"lib": lib, "shuffle": shuffle, "epochs": args.epochs,
               "seq": DATASETS[sets[0]][0], "manifests": [manifests[n] for n in sets],
               "mds": [mds.get(n) for n in sets],
               "copies": {lib: [c.get(n) for n in sets] for lib, c in copies.items()}}
        if kind == "mix":
            cfg.update(weights=MIX_WEIGHTS, epoch_size=args.token_samples)
        cfg["samples"] = sizes[sets[0]]
        return [python_of(lib), ME, "--child", json.dumps(cfg)]

    def report(r: int, key: tuple, res):
        cname, lib = key
        if isinstance(res, RuntimeError):
            why = f"failed ({cname}): {res}"
            log(f"run {r + 1}/{args.runs} {cname} {lib}: {why}")
            return why
        log(f"run {r + 1}/{args.runs} {cname:19s} {lib:11s} "
            f"{res['batches_per_s']:8.1f} batches/s  first batch "
            f"{res['first_batch_s'] * 1000:6.0f} ms  peak RSS {res['peak_rss'] / 2**20:5.0f} MiB "
            f"(anon {res['peak_rss_anon'] / 2**20:.0f})  rows/epoch {res['rows_per_epoch']}")

    contenders = [((config_name(kind, shuffle), lib), lib, command(lib, kind, sets, shuffle))
                  for kind, sets, shuffle in configs for lib in libs
                  if not (kind == "mix" and lib in NO_MIX)]
    runs = interleave(args.runs, contenders, skipped, report)  # (config name, lib) -> results

    results = []
    mib = 2 ** 20
    print(f"{args.epochs} epoch(s) per run, medians of {args.runs} runs; import torch alone: "
          f"{torch_rss / mib:.0f} MiB; load average before {load_before[0]:.2f}")
    for kind, sets, shuffle in configs:
        cname = config_name(kind, shuffle)
        entry = {"config": cname, "kind": kind, "shuffle": shuffle, "data_sets": list(sets),
                 "weights": list(MIX_WEIGHTS) if kind == "mix" else None}
        for lib in libs:
            rs = runs.get((cname, lib))
            if not rs:
                why = ("its mix is not set up here" if kind == "mix" and lib in NO_MIX
                       else skipped.get(lib, "no runs"))
                entry[lib] = {"batches_per_s": None, "reason": why}
                continue
            entry[lib] = {
                "batches_per_s": statistics.median(x["batches_per_s"] for x in rs),
                "first_batch_s": statistics.median(x["first_batch_s"] for x in rs),
                "peak_rss": statistics.median(x["peak_rss"] for x in rs),
                "peak_rss_anon": statistics.median(x["peak_rss_anon"] for x in rs),
                "runs_batches_per_s": [x["batches_per_s"] for x in rs],
                # rows delivered after the first batch per CPU second of the process and
                # its joined workers over that time
                "rows_per_cpu_s": statistics.median(x["rows_per_cpu_s"] for x in rs),
                "rows_per_epoch": rs[-1]["rows_per_epoch"],
                "versions": rs[-1].get("versions")}

        def rate(lib):
            return (entry.get(lib) or {}).get("batches_per_s")

        for other in LIBS[1:]:
            entry[f"ratio_to_{other}"] = (rate("shardstream") / rate(other)
                                          if rate("shardstream") and rate(other) else None)
        results.append(entry)
        for lib in libs:
            res = entry[lib]
            if res["batches_per_s"] is None:
                print(f"{cname:19s} {lib:11s} -  ({res['reason']})")
                continue
            x = entry.get(f"ratio_to_{lib}")
            print(f"{cname:19s} {lib:11s} {res['batches_per_s']:8.1f} batches/s  first batch "
                  f"{res['first_batch_s'] * 1000:6.0f} ms  peak tree RSS "
                  f"{res['peak_rss'] / mib:5.0f} MiB (+{(res['peak_rss'] - torch_rss) / mib:.0f} "
                  f"over import torch; anon {res['peak_rss_anon'] / mib:.0f})  "
                  f"{res['rows_per_cpu_s']:9,.0f} rows/CPU s"
                  + (f"  shardstream {x:.1f}x" if x else "")
                  + "  [runs: " + ", ".join(f"{v:.0f}" for v in res["runs_batches_per_s"]) + "]",
                  flush=True)
    print(json.dumps({
        "import_torch_rss": torch_rss,
        "results": results,
        "skipped": skipped,
        "settings": {"dir": root, "runs": args.runs, "epochs": args.epochs,
                     "token_samples": args.token_samples, "mix_samples": args.mix_samples,
                     "small_samples": args.small_samples, "batch_size": BATCH,
                     "workers": WORKERS, "mix_weights": list(MIX_WEIGHTS),
                     "default_collate": bool(os.environ.get("SS_DEFAULT_COLLATE")),
                     "python": platform.python_version(), "cpus": os.cpu_count(),
                     "load_average_before": load_before,
                     "load_average_after": os.getloadavg()},
    }))


if __name__ == "__main__":
    main()
