"""shardstream against the loaders users pick: one table, three workloads, every peer.

    bash scripts/bench_env.sh             # MosaicML Streaming's venv (.venv-bench)
    bash scripts/bench_env.sh --peers     # LitData, Grain and SPDL in .venv
    bash scripts/bench_env.sh --peers-venv   # DALI and Megatron-Energon in .venv-peers
    python benchmarks/peers_benchmark.py [--runs 3] [--json]

The workloads, each measured by its own benchmark in the same invocation, every contender in a
fresh process, the runs interleaved, medians of --runs:

- tokens: [256, 2048] int32 batches, shuffle on (benchmarks/torch_vs_webdataset.py
  --configs tokens --shuffle on; --epochs 10 of 32,768 samples);
- 1k: 1 KiB samples ([256, 256] int32 batches), shuffle on (the same script, --configs 1k;
  --epochs 10 of 65,536 samples);
- images: LitData's ImageNet recipe, JPEG q90 with the long side 256, RandomResizedCrop(224) and
  a random flip, batches of 256, shuffle on (benchmarks/vision_benchmark.py --long-side 256
  --libs all; 20,000 images).

Each peer runs in its own recommended configuration with 2 workers or threads (the cores here)
and reads its own format written by its own writer from the same data; the two scripts' headers
say how each is driven. Reported per contender: items/s after the first batch, items per CPU
second of the process tree (tokens and 1k: the rows after the first batch over the CPU seconds
the process and its joined workers spent in that time; images: every image over the tree's CPU
seconds from just after `import torch`, set-up included, since Grain's workers decode thousands
of images before its first batch), peak RSS of the tree, time to the first batch, and
shardstream's ratio to it. A peer that cannot run is a row with the reason. The goals of the comparison are
checked at the end: tokens and 1 KiB samples >= 4x the fastest peer, images >= 2x the fastest
peer per CPU second and >= 0.9x the decode limit. The last stdout line is one JSON object with
--json.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from bench_common import last_json

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN_PEERS = ("webdataset", "streaming", "litdata", "grain", "spdl", "energon")
NAMES = {"shardstream": "shardstream", "webdataset": "WebDataset", "streaming": "Streaming",
         "litdata": "LitData", "grain": "Grain", "spdl": "SPDL", "energon": "Megatron-Energon",
         "dali": "DALI (CPU)", "decode_limit": "decode limit (TurboJPEG)"}
# The token workloads have no DALI contender: why, for the table.
NOT_SET_UP = {
    "dali": "not set up for token batches: DALI's array reader (fn.readers.numpy) reads one "
            "array per file, and its webdataset reader gives a sample's raw bytes",
}


def run(cmd: list) -> dict:
    """The last JSON line of cmd's stdout; stderr (progress) passes through."""
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{os.path.basename(cmd[1])} exited {r.returncode}")
    out = last_json(r.stdout)
    if not out:
        raise RuntimeError(f"{os.path.basename(cmd[1])} printed no JSON")
    return out


def token_rows(out: dict, kind: str) -> list:
    """[(contender, row)] of torch_vs_webdataset's shuffle-on configuration `kind`."""
    entry = next(e for e in out["results"] if e["kind"] == kind and e["shuffle"])
    rows = []
    for lib in ("shardstream",) + TOKEN_PEERS:
        res = entry.get(lib) or {"batches_per_s": None,
                                 "reason": out["skipped"].get(lib, "not run")}
        if res["batches_per_s"] is None:
            rows.append((lib, {"reason": res.get("reason")}))
            continue
        rows.append((lib, {"items_per_s": res["batches_per_s"] * 256,
                           "items_per_cpu_s": res["rows_per_cpu_s"],
                           "peak_rss": res["peak_rss"], "first_batch_s": res["first_batch_s"]}))
    rows.append(("dali", {"reason": NOT_SET_UP["dali"]}))
    return rows


def image_rows(out: dict) -> list:
    rows = []
    for lib in ("shardstream", "webdataset", "streaming", "litdata", "grain", "spdl", "energon",
                "dali", "decode_limit"):
        res = out["contenders"][lib]
        if res["images_per_s"] is None:
            rows.append((lib, {"reason": res.get("reason")}))
            continue
        rows.append((lib, {"items_per_s": res["images_per_s"],
                           "items_per_cpu_s": res.get("images_per_cpu_s"),
                           "peak_rss": res["peak_rss_bytes"],
                           "first_batch_s": res.get("first_batch_s")}))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each contender; medians [3]")
    ap.add_argument("--workloads", default="tokens,1k,images",
                    help="comma-separated, from tokens, 1k, images [all three]")
    ap.add_argument("--images", type=int, default=20000, help="images in the image set [20000]")
    ap.add_argument("--epochs", type=int, default=10,
                    help="epochs of the token and 1 KiB sets per run [10]: shardstream reads 3 "
                         "in about 0.2 s, too short a run to time on two busy cores")
    ap.add_argument("--json", action="store_true", help="print one JSON object last")
    args = ap.parse_args()
    want = [w for w in args.workloads.split(",") if w]
    py = sys.executable
    t0 = time.time()
    load_before = os.getloadavg()

    table = {}  # workload -> [(contender, row)]
    errors = {}
    kinds = [k for k in ("tokens", "1k") if k in want]
    if kinds:
        try:
            out = run([py, os.path.join(HERE, "torch_vs_webdataset.py"), "--runs", str(args.runs),
                       "--libs", ",".join(("shardstream",) + TOKEN_PEERS),
                       "--configs", ",".join(kinds), "--shuffle", "on",
                       "--epochs", str(args.epochs)])
            for k in kinds:
                table[k] = token_rows(out, k)
        except RuntimeError as e:
            errors.update({k: str(e) for k in kinds})
    if "images" in want:
        try:
            out = run([py, os.path.join(HERE, "vision_benchmark.py"), "--long-side", "256",
                       "--images", str(args.images), "--libs", "all", "--runs", str(args.runs),
                       "--json"])
            table["images"] = image_rows(out)
        except RuntimeError as e:
            errors["images"] = str(e)

    goals = []
    for w, rows in table.items():
        got = dict(rows)
        ss = got["shardstream"]
        peers = [(n, r) for n, r in rows
                 if n not in ("shardstream", "decode_limit") and r.get("items_per_s")]
        for n, r in rows:
            if r.get("items_per_s") and ss.get("items_per_s"):
                r["ratio"] = ss["items_per_s"] / r["items_per_s"]
                if r.get("items_per_cpu_s") and ss.get("items_per_cpu_s"):
                    r["ratio_per_cpu_s"] = ss["items_per_cpu_s"] / r["items_per_cpu_s"]
        if not peers or not ss.get("items_per_s"):
            goals.append({"workload": w, "goal": "a peer and shardstream measured", "met": False})
            continue
        fastest, fr = max(peers, key=lambda p: p[1]["items_per_s"])
        if w in ("tokens", "1k"):
            goals.append({"workload": w, "goal": ">= 4x the fastest peer", "peer": fastest,
                          "value": fr["ratio"], "met": fr["ratio"] >= 4})
        else:
            cpu_peers = [(n, r) for n, r in peers if r.get("items_per_cpu_s")]
            fc, fcr = max(cpu_peers, key=lambda p: p[1]["items_per_cpu_s"])
            goals.append({"workload": w, "goal": ">= 2x the fastest peer per CPU second",
                          "peer": fc, "value": fcr.get("ratio_per_cpu_s"),
                          "met": (fcr.get("ratio_per_cpu_s") or 0) >= 2})
            goals.append({"workload": w, "goal": "the fastest peer by images/s", "peer": fastest,
                          "value": fr["ratio"], "met": fr["ratio"] > 1})
            lim = got.get("decode_limit", {})
            if lim.get("items_per_s"):
                goals.append({"workload": w, "goal": ">= 0.9x the decode limit",
                              "value": lim["ratio"], "met": lim["ratio"] >= 0.9})

    mib = 2 ** 20
    print(f"medians of {args.runs} runs, 2 cores, shuffle on; load average before "
          f"{load_before[0]:.2f}; {time.time() - t0:.0f} s in all")
    print(f"{'workload':9s} {'contender':25s} {'items/s':>10s} {'per CPU s':>10s} "
          f"{'peak RSS':>9s} {'1st batch':>10s} {'ss / it':>8s} {'per CPU s':>9s}")
    for w in ("tokens", "1k", "images"):
        if w in errors:
            print(f"{w:9s} (failed: {errors[w]})")
        for n, r in table.get(w, []):
            name = NAMES[n]
            if not r.get("items_per_s"):
                print(f"{w:9s} {name:25s} {'-':>10s}  ({r.get('reason')})")
                continue
            fb = r.get("first_batch_s")
            pc = r.get("items_per_cpu_s")
            x = r.get("ratio") if n != "shardstream" else None
            xc = r.get("ratio_per_cpu_s") if n != "shardstream" else None
            cells = [f"{r['items_per_s']:10,.0f}",
                     f"{pc:10,.0f}" if pc else f"{'-':>10s}",
                     f"{r['peak_rss'] / mib:5.0f} MiB",
                     f"{fb * 1000:7.0f} ms" if fb is not None else f"{'-':>10s}",
                     f"{x:7.2f}x" if x else f"{'':8s}",
                     f"{xc:8.2f}x" if xc else f"{'':9s}"]
            print(f"{w:9s} {name:25s} " + " ".join(cells))
    for g in goals:
        val = f"{g['value']:.2f}x" if g.get("value") is not None else "-"
        print(f"goal  {g['workload']:7s} {g['goal']:40s} {val:>8s}"
              + (f" ({NAMES.get(g.get('peer'), g.get('peer'))})" if g.get("peer") else "")
              + ("  met" if g["met"] else "  NOT met"))
    if args.json:
        print(json.dumps({"table": table, "goals": goals, "errors": errors,
                          "runs": args.runs, "load_average_before": load_before}))


if __name__ == "__main__":
    main()
