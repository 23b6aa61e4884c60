"""S3 without keys in the environment, as on EKS, EC2, ECS and SageMaker: ShardDataset (also
in DataLoader worker processes) and CheckpointManager find credentials through the AWS SDKs'
chain and keep them fresh. Real servers on loopback: moto's STS and S3 with signing and expiry
enforced, a metadata server handing out real credentials that expire after a few seconds, and a
TCP proxy that slows and breaks a multi-GiB download."""

import io
import json
import os
import tarfile
import threading
import time
import urllib.request

import numpy as np
import pytest

import shardstream
from conftest import aws_metadata_server, clean_aws_env, fault_proxy, moto_s3_server
from shardstream.torch import ShardDataset

SAMPLES = 300


@pytest.fixture(scope="module")
def moto():
    """moto with a bucket "data" holding shards/ (SAMPLES samples with a cls field)."""
    import boto3
    with moto_s3_server() as (endpoint, keys):
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=keys["access_key"],
                          aws_secret_access_key=keys["secret_key"])
        s3.create_bucket(Bucket="data")
        yield endpoint, keys, s3


@pytest.fixture(scope="module")
def shards(moto, tmp_path_factory):
    _, _, s3 = moto
    out = tmp_path_factory.mktemp("shards")
    with shardstream.ShardWriter(str(out), max_samples=75) as w:  # 4 shards: 2 per worker
        for i in range(SAMPLES):
            w.write({"__key__": f"{i:06d}", "cls": i})
    for name in sorted(os.listdir(out)):
        s3.upload_file(str(out / name), "data", f"shards/{name}")
    return "s3://data/shards/"


def metadata_log(url):
    with urllib.request.urlopen(url + "/_control/log") as r:
        return json.load(r)


def issued_keys(url):
    return {r["access_key_id"] for r in metadata_log(url) if r["access_key_id"]}


def test_web_identity_as_on_eks_in_two_dataloader_workers(moto, shards, tmp_path, monkeypatch):
    endpoint, keys, _ = moto
    token = tmp_path / "token"
    token.write_text("eks-service-account-token\n")
    clean_aws_env(monkeypatch, AWS_WEB_IDENTITY_TOKEN_FILE=str(token),
                  AWS_ROLE_ARN=keys["role_arn"], AWS_ENDPOINT_URL=endpoint)
    ds = ShardDataset(shards, fields=["cls"], batch_size=10, seed=0)
    seen = []
    for batch in ds.dataloader(num_workers=2):
        seen += batch["cls"].tolist()
    assert sorted(seen) == list(range(SAMPLES))


def test_instance_metadata_uploads_checkpoints_across_expiries(moto, tmp_path, monkeypatch):
    import torch
    endpoint, keys, _ = moto
    with aws_metadata_server(endpoint, keys, 4, "--require-token") as imds:
        clean_aws_env(monkeypatch, AWS_EC2_METADATA_DISABLED=None,
                      AWS_EC2_METADATA_SERVICE_ENDPOINT=imds, AWS_ENDPOINT_URL_S3=endpoint)
        remote = "s3://data/run1/ckpt"
        with shardstream.CheckpointManager(tmp_path / "a", remote=remote, keep_last=2) as mgr:
            for step in (1, 2, 3):
                mgr.save(step, {"w": torch.full((512, 512), float(step))})
                time.sleep(2.5)  # each save's credentials expire before the next
            mgr.wait()
            assert all(u["state"] == "done" for u in mgr.status()["uploads"]), mgr.status()
        assert len(issued_keys(imds)) >= 3
        # Restore from the remote alone, on a "new instance".
        with shardstream.CheckpointManager(tmp_path / "b", remote=remote) as mgr:
            got = mgr.load_latest()
            assert torch.equal(got["w"], torch.full((512, 512), 3.0))
            assert mgr.last_restored["from_remote"]


def test_a_bad_source_raises_auth_error_naming_it_never_the_secret(moto, shards, tmp_path,
                                                                 monkeypatch):
    endpoint, keys, _ = moto
    empty = tmp_path / "token"
    empty.write_text("")
    clean_aws_env(monkeypatch, AWS_WEB_IDENTITY_TOKEN_FILE=str(empty),
                  AWS_ROLE_ARN=keys["role_arn"], AWS_ENDPOINT_URL=endpoint)
    with pytest.raises(shardstream.AuthError, match="web identity .*the token file is empty"):
        next(iter(ShardDataset(shards, fields=["cls"], batch_size=10)))
    with aws_metadata_server(endpoint, keys, 900, "--container-token", "pod-token-secret") as srv:
        tok = tmp_path / "pod-token"
        tok.write_text("a-wrong-token-value")
        clean_aws_env(monkeypatch, AWS_CONTAINER_CREDENTIALS_FULL_URI=srv + "/container/creds",
                      AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=str(tok),
                      AWS_METADATA_SERVICE_NUM_ATTEMPTS="1", AWS_ENDPOINT_URL_S3=endpoint)
        with pytest.raises(shardstream.AuthError) as e:
            next(iter(ShardDataset(shards, fields=["cls"], batch_size=10)))
        assert f"container credentials at {srv}/container/creds" in str(e.value)
        assert "a-wrong-token-value" not in str(e.value) and "pod-token-secret" not in str(e.value)


MiB = 1 << 20


def sample_bytes(i):
    return np.random.default_rng(i).bytes(MiB)


def test_a_multi_gib_shard_streams_across_credential_expiries(moto, tmp_path, monkeypatch):
    """A 2 GiB shard downloaded through the cache at 160 MB/s (about 13 s) with credentials that
    live 4 s: the connection is reset after the first ones expired, and the download resumes
    with a request signed by fresh ones (moto refuses expired ones), to the last byte."""
    endpoint, keys, s3 = moto
    from boto3.s3.transfer import TransferConfig
    n = 2048
    path = tmp_path / "big.tar"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(n):
            info = tarfile.TarInfo(f"{i:06d}.bin")
            info.size = MiB
            tar.addfile(info, io.BytesIO(sample_bytes(i)))
    assert path.stat().st_size > 2 * 1024 * MiB
    # One PUT: moto needs four times the object in memory to complete a multipart upload.
    s3.upload_file(str(path), "data", "big/big.tar",
                   Config=TransferConfig(multipart_threshold=8 << 30))
    path.unlink()
    port = int(endpoint.rsplit(":", 1)[1])
    with aws_metadata_server(endpoint, keys, 4) as imds, fault_proxy(port) as (proxy, control):
        def post(path, body):
            req = urllib.request.Request(control + path, data=json.dumps(body).encode(),
                                         method="POST")
            with urllib.request.urlopen(req) as r:
                return json.load(r)
        post("/rate", {"bytes_per_s": 160 * 1000 * 1000})
        # The test's metadata server mints each answer with an STS call to moto, which is busy
        # serving the 2 GiB GET: on 2 loaded cores an answer can take longer than the 1 s a real
        # instance's gets (the default timeout), so this test allows more.
        clean_aws_env(monkeypatch, AWS_EC2_METADATA_DISABLED=None,
                      AWS_EC2_METADATA_SERVICE_ENDPOINT=imds, AWS_ENDPOINT_URL_S3=proxy,
                      AWS_METADATA_SERVICE_TIMEOUT="10", AWS_METADATA_SERVICE_NUM_ATTEMPTS="3")
        # 6 s in, the download's first credentials have expired: break it 300 MB later.
        timer = threading.Timer(6.0, post, args=("/reset_after", {"bytes": 300 * 1000 * 1000}))
        # One GET, so that its own connection is the one reset after the expiry (ranged parts
        # are signed one by one as they go; moto also copies the whole object for each range).
        saved = shardstream.transfer_options()
        shardstream.set_transfer_options(part_size=0)
        ds = ShardDataset("s3://data/big/big.tar", fields=["bin"], batch_size=None,
                          shuffle=False, cache_dir=str(tmp_path / "cache"), cache_limit="4GiB")
        t0 = time.monotonic()
        timer.start()
        count = 0
        try:
            for sample in ds.dataloader():
                i = int(sample["__key__"])
                assert sample["bin"] == sample_bytes(i), f"sample {i}"
                count += 1
        finally:
            timer.cancel()
            shardstream._core.set_transfer_options(saved)  # as it was, not marked as set
        took = time.monotonic() - t0
        stats = json.load(urllib.request.urlopen(control + "/stats"))
        assert count == n
        assert took > 8, f"the download took {took:.1f} s: too fast to cross an expiry"
        assert stats["resets"] >= 1, stats
        # The first keys signed the GET; the resume after the reset needed (and got) new ones.
        assert len(issued_keys(imds)) >= 2
