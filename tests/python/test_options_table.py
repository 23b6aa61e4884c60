"""The option table (shardstream/options.py) is the one list of loader
options: the binding's plain rows, loader_options' signature and
docs/options.md are made from it, and the native defaults and ShardDataset's
keywords must agree with it."""

import inspect
import os
import pathlib

import shardstream
from shardstream import _core
from shardstream.loader import loader_options
import pytest

from shardstream.options import BY_NAME, NATIVE_ONLY, OPTIONS, binding_rows, markdown

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_native_option_is_in_the_table_with_the_native_default():
    native = _core.loader_option_defaults()
    covered = {o.native for o in OPTIONS if o.native}
    assert set(native) - covered == set(NATIVE_ONLY), "native options missing from the table"
    assert covered <= set(native), "table rows naming no native option"
    for o in OPTIONS:
        if o.native and native[o.native] is not None:
            assert o.default == native[o.native], (o.name, o.default, native[o.native])


def test_loader_options_takes_exactly_the_table():
    params = inspect.signature(loader_options).parameters
    names = [p for p in params if p != "urls"]
    assert set(names) == set(BY_NAME) | {"shuffle_size"}, set(names) ^ set(BY_NAME)
    for name, p in params.items():
        if name in BY_NAME and p.default is not None:
            assert p.default == BY_NAME[name].default, name
    # And every row reaches the native loader when given.
    opts = loader_options("m.jsonl", **{o.name: o.default for o in OPTIONS
                                       if o.default is not None and o.native})
    for o in OPTIONS:
        if o.native and o.default is not None and o.name != "shuffle_buffer":
            assert opts[o.native] == o.default, o.name


def test_shard_dataset_keywords_come_from_the_table():
    from shardstream.torch import ShardDataset
    params = inspect.signature(ShardDataset.__init__).parameters
    for name, p in params.items():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY or name == "shuffle_size":
            continue
        assert name in BY_NAME or name in ("map", "batch_map"), f"{name} is not in the option table"
        if p.default is not None and name in BY_NAME:
            assert p.default == BY_NAME[name].default, name


def test_docs_are_generated_from_the_table():
    with open(os.path.join(ROOT, "docs", "options.md")) as f:
        assert f.read() == markdown(), "regenerate: python -m shardstream.options > docs/options.md"
    import shardstream.options as table
    assert table.OPTIONS is OPTIONS


def test_the_binding_rows_are_generated_from_the_table():
    with open(os.path.join(ROOT, "python", "src", "loader_option_rows.inc")) as f:
        assert f.read() == binding_rows(), (
            "regenerate: python -m shardstream.options --binding > python/src/loader_option_rows.inc")
    # Every plain row's declared type is its native field's: the default the binding reads
    # back from LoaderOptions has the Python type the row promises (a "size" is bytes, an
    # int; "cpus" a list of ints), so the docs and the signature cannot drift from the field.
    native = _core.loader_option_defaults()
    declared = {"int": int, "bool": bool, "float": float, "size": int, "cpus": list}
    for o in OPTIONS:
        if o.plain:
            assert o.type in declared, f"{o.name}: plain rows take {sorted(declared)}, not {o.type}"
            assert type(native[o.native]) is declared[o.type], (o.name, o.type, native[o.native])


def test_a_keyword_not_in_the_table_is_refused_with_the_nearest():
    with pytest.raises(TypeError, match="'prefech'.*did you mean 'prefetch'"):
        loader_options("m.jsonl", prefech=2)
    with pytest.raises(TypeError, match="'prefech'"):
        shardstream.Loader("m.jsonl", prefech=2)
    opts = loader_options("m.jsonl", memory_budget="2GB", index_dir=pathlib.Path("/tmp/ix"),
                          shuffle=False, cache_dir=pathlib.Path("/tmp/c"), cache_limit="1GiB")
    assert opts["memory_budget"] == 2_000_000_000 and opts["index_dir"] == "/tmp/ix"
    assert opts["shuffle_buffer"] == 0 and opts["prefetch"] is None  # None: the native default
    assert opts["cache"] == {"dir": "/tmp/c", "limit_bytes": 1 << 30, "mode": "rw"}
