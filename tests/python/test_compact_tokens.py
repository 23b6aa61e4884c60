"""The compact token layout (document groups, docs/shards.md), which
shardstream.convert writes by default: at least 95% of the shard bytes are
tokens for 200-token documents, the shards are plain tars that tarfile and
WebDataset list, and the Loader gives exactly what it gives for the same
documents one per sample: the same packed batches with their doc_ids and
positions (shuffled or not), the same equal-batch counts on every consumer,
and an exact resume."""

import io
import json
import os
import tarfile

import numpy as np
import pytest

import shardstream
from shardstream import convert

SEQ = 256


def ids_tokenize(text):
    return [int(x) for x in text.split()]


def corpus(n, mean, seed=0):
    """n documents of mean +- mean/2 token ids (1..60000), as text of their ids."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(mean // 2, mean + mean // 2 + 1))
        out.append(" ".join(str(v) for v in rng.integers(1, 60000, k)))
    return out


def tar_bytes(out):
    return sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".tar"))


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """The same 1,200 documents (two inputs) in both layouts, one shard per input."""
    texts = corpus(1200, 200, seed=1)
    inputs = [texts[:700], texts[700:]]
    d = tmp_path_factory.mktemp("layouts")
    out = {}
    for layout in ("compact", "documents"):
        o = str(d / layout)
        os.makedirs(o)
        for i, part in enumerate(inputs):  # one conversion per input: one shard each
            convert.text_to_shards(iter(part), os.path.join(o, f"in{i}"), ids_tokenize,
                                   processes=1, layout=layout, max_bytes="64MB")
        with open(os.path.join(o, "manifest.jsonl"), "w") as f:
            for i in range(len(inputs)):
                with open(os.path.join(o, f"in{i}", "manifest.jsonl")) as m:
                    for line in m:
                        entry = json.loads(line)
                        entry["url"] = f"in{i}/" + entry["url"]
                        f.write(json.dumps(entry) + "\n")
        out[layout] = os.path.join(o, "manifest.jsonl")
    return texts, out


@pytest.mark.parametrize("dtype,itemsize", [("uint16", 2), ("int32", 4)])
def test_two_hundred_token_documents_are_at_least_95_percent_tokens(tmp_path, dtype, itemsize):
    texts = corpus(3000, 200, seed=2)
    sizes = {}
    for layout in ("compact", "documents"):
        out = str(tmp_path / layout)
        s = convert.text_to_shards(iter(texts), out, ids_tokenize, processes=1, dtype=dtype,
                                   layout=layout)
        sizes[layout] = tar_bytes(out)
        tokens = s["tokens"]
    payload = tokens * itemsize
    assert payload / sizes["compact"] >= 0.95, (payload, sizes)
    assert payload / sizes["documents"] < 0.6  # what the compact layout saves
    print(f"{dtype}: {sizes['compact'] / tokens:.3f} bytes/token compact, "
          f"{sizes['documents'] / tokens:.3f} one document per sample")


def test_a_plain_tar_that_tarfile_and_webdataset_list(layouts):
    texts, manifests = layouts
    root = os.path.dirname(manifests["compact"])
    shard = os.path.join(root, "in0", "part-00000-000000.tar")
    with tarfile.open(shard) as tf:
        names = tf.getnames()
    assert names and all(n.endswith((".tokens.npy", ".doc_offsets.npy")) for n in names)
    wds = pytest.importorskip("webdataset")
    groups = list(wds.WebDataset(shard, shardshuffle=False))
    assert len(groups) == len(names) // 2
    docs = []
    for g in groups:
        tokens = np.load(io.BytesIO(g["tokens.npy"]))
        bounds = np.load(io.BytesIO(g["doc_offsets.npy"]))
        docs += [tokens[bounds[i]:bounds[i + 1]].tolist() for i in range(bounds.size - 1)]
    assert docs == [ids_tokenize(t) for t in texts[:700]]


def batches(manifest, **kw):
    args = dict(tokens={"field": "tokens.npy", "seq_len": SEQ, "eod_token": 0}, batch_size=4,
                seed=5)
    args.update(kw)
    out = []
    with shardstream.Loader(manifest, **args) as lo:
        for b in lo:
            out.append({k: np.array(b[k]) for k in ("tokens", "doc_ids", "positions")})
    return out


def same(a, b):
    return len(a) == len(b) and all(
        all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


@pytest.mark.parametrize("shuffle", [True, False])
def test_the_same_packed_batches_and_document_metadata(layouts, shuffle):
    texts, m = layouts
    compact = batches(m["compact"], shuffle=shuffle)
    assert len(compact) > 50
    assert same(compact, batches(m["documents"], shuffle=shuffle))
    # every document exactly once (one consumer: the equal-batches cut takes nothing)
    got = np.concatenate([b["tokens"][b["doc_ids"] >= 0] for b in compact])
    want = sum(len(t.split()) + 1 for t in texts)
    assert got.size == want


def test_equal_batches_on_every_consumer(layouts):
    _, m = layouts
    for layout in ("compact", "documents"):
        counts = []
        for rank in range(2):
            for worker in range(2):
                counts.append(len(batches(m[layout], rank=rank, world_size=2, worker=worker,
                                          num_workers=2)))
        assert len(set(counts)) == 1, (layout, counts)
        if layout == "compact":
            first = counts
    assert first == counts


def resumed(manifest, k):
    """The batches after a restore from the state taken after k batches, and the
    restored loader's direct_samples."""
    args = dict(tokens={"field": "tokens.npy", "seq_len": SEQ, "eod_token": 0}, batch_size=4,
                seed=5)
    with shardstream.Loader(manifest, **args) as lo:
        for _ in range(k):
            lo.next()
        state = lo.state()
    rest = []
    with shardstream.Loader(manifest, **args) as lo:
        lo.restore(state)
        for b in lo:
            rest.append({x: np.array(b[x]) for x in ("tokens", "doc_ids", "positions")})
        return rest, lo.stats()["direct_samples"]


def test_an_exact_resume_inside_a_group(layouts):
    _, m = layouts
    full = batches(m["compact"])
    for k in (3, 17, 40):  # states taken inside groups of about 160 documents
        rest, direct = resumed(m["compact"], k)
        # what the documents one per sample give after the same restore, batch for batch
        assert same(rest, resumed(m["documents"], k)[0]), k
        # every token not delivered before the state, once (the shuffle buffer refills in
        # another order than the uninterrupted epoch's)
        got = np.sort(np.concatenate([b["tokens"][b["doc_ids"] >= 0] for b in rest]))
        want = np.sort(np.concatenate([b["tokens"][b["doc_ids"] >= 0] for b in full[k:]]))
        assert np.array_equal(got, want), k
        assert direct > 0  # the groups' documents are read straight into the batches
