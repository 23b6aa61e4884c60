"""The command line from pip: the `shardstream` console script and `python -m
shardstream` run the tool bundled in the package, with the CMake-built tool's
output and exit statuses."""

import os
import shutil
import subprocess
import sys

import shardstream.__main__ as entry
from conftest import cli_dir, read_manifest


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def ways():
    script = os.path.join(os.path.dirname(sys.executable), "shardstream")
    assert os.access(script, os.X_OK), f"no console script beside {sys.executable}"
    return {"console script": [script], "python -m": [sys.executable, "-m", "shardstream"]}


def test_help_lists_every_command():
    assert os.access(entry.binary(), os.X_OK)
    for name, argv in ways().items():
        r = run(argv + ["--help"])
        assert r.returncode == 0, (name, r.stderr)
        for cmd in ("pack", "ls", "verify", "index", "manifest", "plan", "cache", "ckpt",
                    "bench-loader"):
            assert f"\n  {cmd} " in r.stdout, (name, cmd, r.stdout)


def test_the_bundled_tool_behaves_as_the_cmake_built_one(manifest, tmp_path):
    built = [os.path.join(cli_dir(), "shardstream")]
    shard = read_manifest(manifest)[0]["url"]
    shard = shard[len("file://"):] if shard.startswith("file://") else shard
    if not os.path.isabs(shard):
        shard = os.path.join(os.path.dirname(manifest), shard)
    # A copy of the set with one shard's bytes changed: verify must fail, naming it.
    bad = tmp_path / "bad"
    shutil.copytree(os.path.dirname(manifest), bad)
    victim = bad / os.path.basename(shard)
    data = bytearray(victim.read_bytes())
    data[1000] ^= 0xFF
    victim.write_bytes(bytes(data))
    cases = [["ls", shard], ["verify", manifest], ["plan", manifest, "--world-size", "2"],
             ["verify", str(bad / "manifest.jsonl")]]
    for args in cases:
        want = run(built + args)
        for name, argv in ways().items():
            got = run(argv + args)
            assert (got.returncode, got.stdout) == (want.returncode, want.stdout), (name, args,
                                                                                    got.stderr)
    assert run(built + ["verify", str(bad / "manifest.jsonl")]).returncode == 1


def test_without_the_tool_the_entry_point_says_how_to_get_it(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(entry, "binary", lambda: str(tmp_path / "bin" / "shardstream"))
    assert entry.main(["--help"]) == 127
    err = capsys.readouterr().err
    assert "the command-line tool is not part of this installation" in err
    assert "SHARDSTREAM_BUILD_TOOLS=OFF" in err
