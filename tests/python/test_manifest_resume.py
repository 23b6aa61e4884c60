"""`shardstream manifest` and `shardstream index` over many shards: progress on stderr, and a
rerun after an interruption that does only what is left. The shards are served over loopback
HTTP with every GET stalled, so that a run lasts long enough to be killed part way, and the
server's request log shows which shards a rerun read."""

import json
import os
import signal
import struct
import subprocess
import sys
import time

import xxhash

from conftest import cli_dir, line_server, make_shards

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "servers", "http_server.py")
NSHARDS = 16


def cli():
    return os.path.join(cli_dir(), "shardstream")


def shard_names(root):
    return sorted(f for f in os.listdir(root) if f.endswith(".tar"))


def gets(log):
    """Shard names GET-requested so far, in order, from the server's log."""
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [os.path.basename(r["path"]) for r in map(json.loads, f)
                if r["method"] == "GET" and r["path"].endswith(".tar")]


def journal_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f.read().splitlines()[1:] if line.strip()]


def serve(root, log, stall_s):
    fault = json.dumps({"kind": "stall", "after": 0, "seconds": stall_s, "count": -1})
    return line_server([sys.executable, SERVER, "--root", str(root), "--log", str(log),
                        "--fault", fault])


def test_a_killed_manifest_run_resumes_reading_only_the_shards_not_done(tmp_path):
    root = tmp_path / "www"
    make_shards(str(root), nshards=NSHARDS, per_shard=5)
    names = shard_names(root)
    assert len(names) == NSHARDS
    log = tmp_path / "requests.jsonl"
    out = tmp_path / "out" / "manifest.jsonl"
    out.parent.mkdir()
    journal = str(out) + ".partial"
    with serve(root, log, 0.15) as (_, (port,)):
        urls = [f"http://127.0.0.1:{port}/{n}" for n in names]
        argv = [cli(), "manifest", *urls, "--out", str(out), "--threads", "1",
                "--progress", "0.3"]
        # Each shard is read twice (its digest, then its samples), 0.3 s or more: the first run
        # is killed once a few shards are noted.
        first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while len(journal_lines(journal)) < 4 and first.poll() is None:
            assert time.monotonic() < deadline, "no shard finished in 60 s"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        _, err = first.communicate(timeout=30)
        assert first.returncode == -signal.SIGKILL, "the run ended before it could be killed"
        assert not out.exists()
        # Progress on stderr while it ran.
        assert "manifest: " in err and f"/{NSHARDS} shards (" in err, err
        noted = journal_lines(journal)
        done = {os.path.basename(e["url"]) for e in noted}
        assert 4 <= len(done) < NSHARDS
        before = len(gets(log))

        again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert f"resuming: {len(noted)} of {NSHARDS} shards done by an earlier run" in again.stderr
        reread = gets(log)[before:]
        # Every shard not noted read (twice); none of the noted ones read again.
        assert sorted(set(reread)) == sorted(set(names) - done), (reread, done)
        assert not os.path.exists(journal)
        resumed = out.read_text()

        # The same manifest as a run that was never interrupted.
        whole = tmp_path / "whole.jsonl"
        clean = subprocess.run([cli(), "manifest", *urls, "--out", str(whole), "--progress", "0"],
                               capture_output=True, text=True, timeout=120)
        assert clean.returncode == 0, clean.stderr
        assert "resuming" not in clean.stderr
    rows = [json.loads(line) for line in resumed.splitlines()]
    assert [r["url"] for r in rows] == urls
    assert all(r["size"] > 0 and r["nsamples"] == 5 and r["checksum"] for r in rows)
    assert resumed == whole.read_text()


def test_a_failed_shard_a_changed_shard_and_a_journal_of_other_shards(tmp_path):
    root = tmp_path / "www"
    make_shards(str(root), nshards=6, per_shard=5)
    names = shard_names(root)
    log = tmp_path / "requests.jsonl"
    out = tmp_path / "manifest.jsonl"
    journal = str(out) + ".partial"

    def run(urls):
        return subprocess.run([cli(), "manifest", *urls, "--out", str(out)], capture_output=True,
                              text=True, timeout=120)

    with serve(root, log, 0.0) as (_, (port,)):
        urls = [f"http://127.0.0.1:{port}/{n}" for n in names]
        # A shard that cannot be read (cut short) fails the run; the others stay noted.
        victim = root / names[2]
        good = victim.read_bytes()
        victim.write_bytes(good[:len(good) // 2 + 7])
        r = run(urls)
        assert r.returncode == 1
        assert names[2] in r.stderr, r.stderr
        assert "the same command again does only what is left" in r.stderr
        assert not out.exists()
        assert len(journal_lines(journal)) == 5

        # Mended; and shard 1 rewritten since (one more zero block): both are read again,
        # nothing else.
        victim.write_bytes(good)
        shard1 = root / names[1]
        grown = shard1.read_bytes() + b"\0" * 512
        shard1.write_bytes(grown)
        before = len(gets(log))
        r = run(urls)
        assert r.returncode == 0, r.stderr
        assert "resuming: 5 of 6 shards" in r.stderr, r.stderr
        assert "1 of the shards done earlier changed in size since" in r.stderr
        assert set(gets(log)[before:]) == {names[1], names[2]}
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert rows[1]["size"] == len(grown) and rows[2]["size"] == len(good)
        assert all(row["nsamples"] == 5 for row in rows)
        assert not os.path.exists(journal)

        # A journal that a run over other shards left is dropped, with a word: all read.
        with open(journal, "w") as f:
            f.write(json.dumps({"shardstream_manifest_journal": 1, "shards": 6,
                                "list": "xxh3_128:00"}) + "\n")
            f.write(json.dumps({"i": 0, "url": urls[0], "size": 1, "nsamples": 1,
                                "checksum": "xxh3_128:00"}) + "\n")
        before = len(gets(log))
        r = run(urls)
        assert r.returncode == 0, r.stderr
        assert "is from a run over other shards, or damaged; starting over" in r.stderr
        assert set(gets(log)[before:]) == set(names)
        assert [json.loads(line) for line in out.read_text().splitlines()] == rows

        # Damaged journals: fields of the wrong types, a line cut short, bytes that are not
        # JSON. Nothing crashes; what does not parse is read again.
        for header, lines in (
                ({"shardstream_manifest_journal": 1, "shards": "six", "list": 7}, []),
                (None, []),
                ("take", [{"i": 0, "url": urls[0], "size": "big", "nsamples": 5,
                           "checksum": rows[0]["checksum"]},
                          {"i": -1, "url": urls[1]}, {"i": 1, "url": 5},
                          "not json", '{"i": 3, "url": "' + urls[3][:10]])):
            if header == "take":  # the header of this very list, from a journal kept on failure
                victim.write_bytes(good[:100])
                r = run(urls)
                assert r.returncode == 1
                victim.write_bytes(good)
                with open(journal) as f:
                    kept = f.read()  # its header and the five shards it did
                damaged = [json.dumps(x) if isinstance(x, dict) else x for x in lines]
                body = kept + "\n".join(damaged)  # the last one cut short, no newline
            else:
                body = ("\x00\xff garbage\n" if header is None else json.dumps(header) + "\n")
            with open(journal, "w") as f:
                f.write(body)
            before = len(gets(log))
            r = run(urls)
            assert r.returncode == 0, (header, r.stderr)
            assert "Traceback" not in r.stderr and "terminate" not in r.stderr
            if header == "take":
                # The five shards the failed run noted are taken; the damaged lines after
                # them neither add nor take away anything: only shard 2 is read.
                assert "resuming: 5 of 6 shards" in r.stderr, r.stderr
                assert set(gets(log)[before:]) == {names[2]}
            else:
                assert "starting over" in r.stderr
                assert set(gets(log)[before:]) == set(names)
            assert [json.loads(line) for line in out.read_text().splitlines()] == rows


def test_index_keeps_indexes_that_describe_their_shard_and_rebuilds_the_rest(tmp_path):
    root = tmp_path / "shards"
    make_shards(str(root), nshards=4, per_shard=5)
    shards = [str(root / n) for n in shard_names(root)]
    r = subprocess.run([cli(), "index", *shards, "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    first = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted(x["shard"] for x in first) == shards
    assert not any(x["up_to_date"] for x in first)
    # One shard rewritten with other samples: its index is stale (another size).
    changed = tmp_path / "other"
    make_shards(str(changed), nshards=1, per_shard=9)
    os.replace(changed / shard_names(changed)[0], shards[2])
    r = subprocess.run([cli(), "index", *shards, "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    again = {x["shard"]: x for x in map(json.loads, r.stdout.splitlines())}
    assert [again[s]["up_to_date"] for s in shards] == [True, True, False, True]
    assert again[shards[2]]["samples"] == 9
    r = subprocess.run([cli(), "index", *shards], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    assert r.stdout.count("(up to date, kept)") == 4
    assert "4 of 4 indexes were up to date and kept" in r.stderr
    # An index of version 1 (no field records; still read, but the loader's direct reads need
    # version 2) is rebuilt, as docs/shards.md tells users to rerun the command for.
    with open(shards[0] + ".idx", "rb") as f:
        v2 = f.read()
    with open(shards[0] + ".idx", "wb") as f:
        f.write(version1_of(v2))
    r = subprocess.run([cli(), "index", *shards, "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    got = {x["shard"]: x["up_to_date"] for x in map(json.loads, r.stdout.splitlines())}
    assert got == {shards[0]: False, shards[1]: True, shards[2]: True, shards[3]: True}
    with open(shards[0] + ".idx", "rb") as f:
        assert f.read() == v2
    r = subprocess.run([cli(), "index", *shards, "--force", "--json"], capture_output=True,
                       text=True, timeout=120)
    assert not any(json.loads(line)["up_to_date"] for line in r.stdout.splitlines())


def version1_of(v2: bytes) -> bytes:
    """The same sample index in version 1 (docs/sample_index_format.md): the samples without
    their field records."""
    magic, version, flags, size, n = struct.unpack_from("<8sIIQQ", v2, 0)
    assert magic == b"SSTARIDX" and version == 2
    pos, out = 32, [struct.pack("<8sIIQQ", magic, 1, flags, size, n)]
    for _ in range(n):
        offset, length, nfields, keylen = struct.unpack_from("<QQII", v2, pos)
        pos += 24
        out.append(struct.pack("<QQII", offset, length, nfields, keylen) + v2[pos:pos + keylen])
        pos += keylen
        for _ in range(nfields):
            (namelen,) = struct.unpack_from("<I", v2, pos)
            pos += 4 + namelen + 8 + 8 + 1 + 1 + 2 + 8 + 8 + 8
    assert pos == len(v2) - 8
    body = b"".join(out)
    return body + struct.pack("<Q", xxhash.xxh3_64_intdigest(body))
