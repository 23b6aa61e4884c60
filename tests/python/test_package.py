import pytest

import shardstream
from shardstream import errors


def test_version_matches_native_core():
    assert shardstream.__version__ == shardstream._core.__version__
    assert shardstream.__version__.count(".") == 2


@pytest.mark.parametrize("kind,cls,builtin", [
    ("io", shardstream.IoError, OSError),
    ("corrupt", shardstream.CorruptError, None),
    ("checksum", shardstream.ChecksumError, None),
    ("unavailable", shardstream.UnavailableError, ConnectionError),
    ("not-found", shardstream.NotFoundError, FileNotFoundError),
    ("auth", shardstream.AuthError, PermissionError),
    ("config", shardstream.ConfigError, ValueError),
    ("cancelled", shardstream.CancelledError, None),
])
def test_status_kinds_map_to_exception_classes(kind, cls, builtin):
    with pytest.raises(cls) as info:
        shardstream._core._raise_status(kind, "bad header", "s3://b/shard-1.tar", 1536)
    e = info.value
    assert isinstance(e, shardstream.Error)
    if builtin is not None:
        assert isinstance(e, builtin)
    assert e.kind == kind
    assert e.url == "s3://b/shard-1.tar"
    assert e.offset == 1536
    assert "bad header" in str(e)
    assert e.retryable == (kind == "unavailable")


def test_unknown_offset_is_none():
    with pytest.raises(errors.CorruptError) as info:
        shardstream._core._raise_status("corrupt", "x", "", -1)
    assert info.value.offset is None and info.value.url is None


def test_without_torch_the_package_imports_and_its_torch_part_names_the_extra():
    """A pip install without the torch extra: `import shardstream` works (the Loader, the
    writer, headspace), and `import shardstream.torch` says what to install."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['torch'] = None\n"
            "import shardstream\n"
            "assert shardstream.Loader and shardstream.measure_headspace\n"
            "print('base ok', flush=True)\n"
            "import shardstream.torch\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout == "base ok\n", r.stderr
    assert r.returncode == 1
    assert 'shardstream.torch needs PyTorch, which is not installed: pip install "shardstream[torch]"' \
        in r.stderr, r.stderr
