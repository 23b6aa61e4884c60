#!/usr/bin/env python3
"""Issue 4/7 remote benchmarks, driven through the `shardstream` CLI.

Reading (nginx on loopback, `sendfile on`, access log with bytes sent):
  * `curl -s -o /dev/null` of a shard                      (the reference)
  * `shardstream bench URL` with the cache off             (TarReader over HttpSource)
  * `shardstream bench URL --cache-dir D`, first run        (TarReader while the cache fills)
  * the same through a manifest with the shard's size and checksum (the download verifies it)
  * `benchmarks/fill_reference_benchmark URL FILE`          (libcurl into a file in 1 MiB writes:
                                                             what filling alone can reach here)
  * the same, later runs                                   (second epoch, from the cache)
  * `shardstream bench ENTRY` on the cached file itself     (the reference for the above)
  * a further epoch with `shardstream ls --cache-dir D`; the nginx log must not grow
  * peak RSS of `bench` with the cache off, for two shard sizes
Upload (moto S3 on loopback, auth enforced): build/benchmarks/s3_upload_benchmark.

Every figure is the median of --runs runs. Usage (from the repository root,
after building shardstream_cli and s3_upload_benchmark in build/):
  python3 benchmarks/remote_benchmark.py --build build --size-mib 256 --runs 5
"""
import argparse
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

from bench_common import last_json


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listens on port %d" % port)


def make_shard(path, size_mib, sample_kib=256):
    n = size_mib * 1024 // sample_kib
    with tarfile.open(path, "w") as tar:
        for i in range(n):
            data = os.urandom(sample_kib * 1024 - 64)
            info = tarfile.TarInfo("%08d.bin" % i)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            cls = str(i % 10).encode()
            info = tarfile.TarInfo("%08d.cls" % i)
            info.size = len(cls)
            tar.addfile(info, io.BytesIO(cls))


def start_nginx(work, root):
    port = free_port()
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write("daemon off;\nmaster_process off;\nworker_processes 1;\npid %s/nginx.pid;\n"
                "error_log %s/error.log warn;\nevents { worker_connections 256; }\n"
                "http {\n log_format bytes '$request $status $body_bytes_sent';\n"
                " access_log %s/access.log bytes;\n sendfile on;\n tcp_nopush on;\n"
                " client_body_temp_path %s/body;\n default_type application/octet-stream;\n"
                " server { listen 127.0.0.1:%d; root %s; }\n}\n"
                % (work, work, work, work, port, root))
    proc = subprocess.Popen(["/usr/sbin/nginx", "-p", work, "-e", work + "/error.log", "-c", conf])
    wait_port(port)
    return proc, port, os.path.join(work, "access.log")


def log_bytes(log):
    total = 0
    with open(log) as f:
        for line in f:
            total += int(line.split()[-1])
    return total


BENCH_ARGS = []  # --chunk-size, passed to every `shardstream bench`


def bench(cli, args):
    out = subprocess.run([cli, "bench", "--json", "--no-external"] + BENCH_ARGS + args, check=True,
                         capture_output=True, text=True).stdout
    return last_json(out)


def curl_gbps(url, size):
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{time_total} %{time_starttransfer}", url],
                         check=True, capture_output=True, text=True).stdout.split()
    return size / 1e9 / float(out[0]), 1000 * float(out[1])


def med(values):
    return round(statistics.median(values), 3)


def fill_reference(build, url, path):
    """GB/s of receiving the shard with libcurl and writing it to a file in 1 MiB blocks, its
    space reserved first (no hash, no reader): what filling a cache entry can reach here. None
    without the binary."""
    exe = os.path.join(build, "benchmarks", "fill_reference_benchmark")
    if not os.access(exe, os.X_OK):
        return None
    # The median of 3: the first write into memory the VM had handed back to its host while the
    # machine sat idle runs at a third of the speed (a host fault per page), the next ones not.
    out = subprocess.run([exe, url, path, "--runs", "3"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)["median_gbps"]


def checksummed_manifest(cli, work, shard, url):
    """A manifest of the served shard with its size and checksum, at its http url."""
    out = subprocess.run([cli, "manifest", shard], check=True, capture_output=True,
                         text=True).stdout
    entry = json.loads(out.strip().splitlines()[0])
    entry["url"] = url
    path = os.path.join(work, "manifest.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(entry) + "\n")
    return path


def reading(cli, work, size_mib, runs):
    root = os.path.join(work, "www")
    os.makedirs(root)
    shard = os.path.join(root, "shard.tar")
    make_shard(shard, size_mib)
    small = os.path.join(root, "small.tar")
    make_shard(small, max(16, size_mib // 8))
    size = os.path.getsize(shard)
    proc, port, log = start_nginx(work, root)
    url = "http://127.0.0.1:%d/shard.tar" % port
    manifest = checksummed_manifest(cli, work, shard, url)
    r = {k: [] for k in ("curl", "curl_ttfb_ms", "off", "off_first_ms", "fill", "fill_first_ms",
                         "fill_reference", "fill_checksum", "epoch2", "direct", "direct_plain", "later_source_bytes",
                         "ls_epoch_network_bytes")}
    try:
        for i in range(runs):
            g, ttfb = curl_gbps(url, size)
            r["curl"].append(g)
            r["curl_ttfb_ms"].append(ttfb)
            # Before the cache's runs: its fdatasync'ed entry would otherwise still be written
            # back while the reference writes (the reference's own file is unlinked unsynced).
            ref = fill_reference(os.path.dirname(cli), url, os.path.join(work, "reference.tar"))
            if ref is not None:
                r["fill_reference"].append(ref)
            off = bench(cli, [url, "--runs", "1"])
            r["off"].append(off["reader_gbps"])
            r["off_first_ms"].append(off["first_sample_ms"])
            cache = os.path.join(work, "cache%d" % i)
            filled = bench(cli, [url, "--runs", "3", "--cache-dir", cache, "--cache-limit", "64G"])
            r["fill"].append(filled["cache_fill_gbps"])
            r["fill_first_ms"].append(filled["first_run_first_sample_ms"])

            checked = bench(cli, [manifest, "--runs", "2", "--cache-dir", cache + "-sum",
                                  "--cache-limit", "64G"])
            r["fill_checksum"].append(checked["cache_fill_gbps"])
            subprocess.run(["rm", "-rf", cache + "-sum"], check=True)
            r["epoch2"].append(filled["reader_gbps"])
            r["later_source_bytes"].append(filled["later_runs_source_bytes"])
            entry = [os.path.join(cache, f) for f in os.listdir(cache) if f.endswith(".shard")][0]
            direct = bench(cli, [entry, "--runs", "3"])
            r["direct"].append(direct["reader_gbps"])
            r["direct_plain"].append(direct["plain_read_gbps"])
            before = log_bytes(log)
            subprocess.run([cli, "ls", url, "--cache-dir", cache], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            r["ls_epoch_network_bytes"].append(log_bytes(log) - before)
            subprocess.run(["rm", "-rf", cache], check=True)
        rss_small = bench(cli, ["http://127.0.0.1:%d/small.tar" % port, "--runs", "1"])["peak_rss_mib"]
        rss_big = bench(cli, [url, "--runs", "1"])["peak_rss_mib"]
    finally:
        proc.terminate()
        proc.wait()
    curl = med(r["curl"])
    return {
        "shard_mib": size_mib, "runs": runs,
        "curl_gbps": curl, "curl_ttfb_ms": med(r["curl_ttfb_ms"]),
        "cache_off_gbps": med(r["off"]), "cache_off_vs_curl": round(med(r["off"]) / curl, 3),
        "cache_off_first_sample_ms": med(r["off_first_ms"]),
        "cache_fill_gbps": med(r["fill"]), "cache_fill_vs_curl": round(med(r["fill"]) / curl, 3),
        "cache_fill_first_sample_ms": med(r["fill_first_ms"]),
        "cache_fill_checksum_gbps": med(r["fill_checksum"]),
        "cache_fill_checksum_vs_curl": round(med(r["fill_checksum"]) / curl, 3),
        "fill_reference_gbps": med(r["fill_reference"]) if r["fill_reference"] else None,
        "fill_reference_vs_curl": (round(med(r["fill_reference"]) / curl, 3)
                                   if r["fill_reference"] else None),
        "epoch2_from_cache_gbps": med(r["epoch2"]),
        "direct_cached_file_reader_gbps": med(r["direct"]),
        "direct_cached_file_plain_gbps": med(r["direct_plain"]),
        "epoch2_vs_direct_reader": round(med(r["epoch2"]) / med(r["direct"]), 3),
        "epoch2_source_bytes": max(r["later_source_bytes"]),
        "ls_epoch_nginx_bytes": max(r["ls_epoch_network_bytes"]),
        "peak_rss_mib": {"%d MiB shard" % max(16, size_mib // 8): rss_small,
                         "%d MiB shard" % size_mib: rss_big},
        "all": r,
    }


def upload(build, work, size_mib, runs, python):
    port = free_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0")
    moto = subprocess.Popen([python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        endpoint = "http://127.0.0.1:%d" % port
        here = os.path.dirname(os.path.abspath(__file__))
        keys = subprocess.run([python, os.path.join(here, "..", "tests", "servers", "moto_setup.py"),
                               endpoint], check=True, capture_output=True, text=True).stdout
        kv = dict(line.split() for line in keys.splitlines() if line.strip())
        env = dict(os.environ, AWS_ACCESS_KEY_ID=kv["access_key"],
                   AWS_SECRET_ACCESS_KEY=kv["secret_key"], AWS_ENDPOINT_URL_S3=endpoint,
                   AWS_REGION="us-east-1")
        out = subprocess.run([os.path.join(build, "benchmarks", "s3_upload_benchmark"), "--size-mib",
                              str(size_mib), "--runs", str(runs)], env=env, check=True,
                             capture_output=True, text=True).stdout
        return last_json(out)
    finally:
        moto.terminate()
        moto.wait()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--upload-mib", type=int, default=128)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--python", default=os.environ.get("SHARDSTREAM_PYTHON", sys.executable))
    p.add_argument("--skip-upload", action="store_true")
    p.add_argument("--skip-read", action="store_true")
    p.add_argument("--chunk-size", help="the reader's read size for every `shardstream bench`")
    a = p.parse_args()
    if a.chunk_size:
        BENCH_ARGS.extend(["--chunk-size", a.chunk_size])
    cli = os.path.join(a.build, "shardstream")
    result = {}
    with tempfile.TemporaryDirectory() as work:
        if not a.skip_read:
            result["read"] = reading(cli, work, a.size_mib, a.runs)
        if not a.skip_upload:
            result["upload"] = upload(a.build, work, a.upload_mib, a.runs, a.python)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
