"""Runs the cookbook at the top of docs/python.md, recipe by recipe, as a
user would paste it: Python blocks with this venv's python, shell blocks with
bash, in one folder, in order, each in a fresh process.

A recipe is a fenced block right after an HTML comment:
  <!-- cookbook: run -->                 run it
  <!-- cookbook: run expect="TEXT" -->   run it; its output must contain TEXT
  <!-- cookbook: write NAME -->          save it as NAME (for a later run)
  <!-- cookbook: run env="eks,ec2,ecs" -->  run it once per platform, with no keys in the
                                        environment: EKS web identity, EC2 instance metadata, ECS
                                        container credentials (loopback servers minting moto's
                                        temporary credentials); the log must name that source
The folder starts with raw/ (files <key>.<field>), captions.jsonl and mds-set/ (an MDS set
written by MosaicML Streaming's MDSWriter); s3://my-bucket
is moto's S3 (signing enforced), with shards/captions/ uploaded before the
first recipe that reads it.
"""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import aws_metadata_server, cli_dir, moto_s3_server

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOC = os.environ.get("SHARDSTREAM_COOKBOOK", os.path.join(ROOT, "docs", "python.md"))
RECIPE = re.compile(r"<!-- cookbook: (run|write)(?: env=\"([^\"]*)\")?(?: ([^\s>]+))?"
                    r"(?: expect=\"([^\"]*)\")? -->\s*\n"
                    r"```(python|sh)\n(.*?)```", re.S)
SAMPLES = 1000


def recipes():
    with open(DOC) as f:
        text = f.read()
    return [m.groups() for m in RECIPE.finditer(text)]


PLATFORM_SOURCE = {"eks": "AWS credentials from web identity",
                   "ec2": "AWS credentials from instance metadata",
                   "ecs": "AWS credentials from container credentials"}


@contextlib.contextmanager
def platform_env(platform, env, work):
    """The environment a platform gives a process: no keys; EKS's web identity variables, or an
    instance metadata endpoint, or container credentials variables, served on loopback with
    moto's role. Yields (environment, the log text that names the source)."""
    if platform is None:
        yield env, None
        return
    keys = {"access_key": env["AWS_ACCESS_KEY_ID"], "secret_key": env["AWS_SECRET_ACCESS_KEY"],
            "role_arn": env["SHARDSTREAM_TEST_ROLE_ARN"]}
    endpoint = env["AWS_ENDPOINT_URL_S3"]
    base = {k: v for k, v in env.items() if not k.startswith("AWS_")}
    base.update({"AWS_ENDPOINT_URL_S3": endpoint, "AWS_REGION": "us-east-1",
                 "AWS_CONFIG_FILE": os.path.join(work, "no-aws-config"),
                 "AWS_SHARED_CREDENTIALS_FILE": os.path.join(work, "no-aws-credentials"),
                 "AWS_EC2_METADATA_DISABLED": "true"})
    if platform == "eks":
        token = os.path.join(work, "eks-token")
        with open(token, "w") as f:
            f.write("service-account-token")
        base.update({"AWS_ROLE_ARN": keys["role_arn"], "AWS_WEB_IDENTITY_TOKEN_FILE": token,
                     "AWS_ENDPOINT_URL_STS": endpoint})
        yield base, PLATFORM_SOURCE[platform]
        return
    args = ("--container-token", "task-token") if platform == "ecs" else ("--require-token",)
    with aws_metadata_server(endpoint, keys, 3600, *args) as url:
        if platform == "ec2":
            base.update({"AWS_EC2_METADATA_SERVICE_ENDPOINT": url})
            del base["AWS_EC2_METADATA_DISABLED"]
        else:
            base.update({"AWS_CONTAINER_CREDENTIALS_FULL_URI": url + "/container/v2/credentials",
                         "AWS_CONTAINER_AUTHORIZATION_TOKEN": "task-token"})
        yield base, PLATFORM_SOURCE[platform]


@pytest.fixture(scope="module")
def s3_env():
    import boto3
    with moto_s3_server() as (endpoint, keys):
        env = {"AWS_ACCESS_KEY_ID": keys["access_key"], "AWS_SECRET_ACCESS_KEY": keys["secret_key"],
               "AWS_ENDPOINT_URL_S3": endpoint, "AWS_REGION": "us-east-1",
               "SHARDSTREAM_TEST_ROLE_ARN": keys["role_arn"]}
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
        s3.create_bucket(Bucket="my-bucket")
        yield env, s3


def make_inputs(work):
    os.makedirs(os.path.join(work, "raw"))
    for i in range(40):
        with open(os.path.join(work, "raw", f"{i:06d}.bin"), "wb") as f:
            f.write(bytes([i % 256]) * (100 + i))
        with open(os.path.join(work, "raw", f"{i:06d}.cls"), "w") as f:
            f.write(str(i % 10))
    with open(os.path.join(work, "captions.jsonl"), "w") as f:
        for i in range(SAMPLES):
            f.write(json.dumps({"text": f"caption number {i}", "label": i % 10}) + "\n")
    # An MDS set as MosaicML Streaming writes it: 300 documents of 101..300 tokens.
    import numpy as np
    from streaming_import import import_streaming
    with import_streaming().MDSWriter(out=os.path.join(work, "mds-set"), compression="zstd",
                                      columns={"tokens": "ndarray:int32"}, size_limit=1 << 16) as w:
        for i in range(300):
            w.write({"tokens": np.full(101 + i % 200, i % 1000, dtype=np.int32)})


def test_cookbook_recipes_run_as_written(tmp_path, s3_env):
    found = recipes()
    assert len(found) >= 8, f"the cookbook in {DOC} has {len(found)} recipes"
    work = str(tmp_path)
    make_inputs(work)
    env_s3, s3 = s3_env
    env = {**os.environ, **env_s3,
           "PATH": os.pathsep.join([os.path.dirname(sys.executable), cli_dir(), os.environ["PATH"]]),
           "HF_HOME": os.path.join(work, "hf"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONUNBUFFERED": "1"}
    uploaded = False
    for kind, platforms, name, expect, lang, code in found:
        if kind == "write":
            with open(os.path.join(work, name), "w") as f:
                f.write(code)
            continue
        if "s3://my-bucket/captions/" in code and not uploaded:
            src = os.path.join(work, "shards", "captions")
            for fname in sorted(os.listdir(src)):
                s3.upload_file(os.path.join(src, fname), "my-bucket", f"captions/{fname}")
            uploaded = True
        cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
        for platform in (platforms.split(",") if platforms else [None]):
            with platform_env(platform, env, work) as (run_env, source):
                r = subprocess.run(cmd, cwd=work, env=run_env, capture_output=True, text=True,
                                   timeout=300)
            out = r.stdout + r.stderr
            assert r.returncode == 0, f"recipe failed ({lang}, {platform}):\n{code}\n--- output:\n{out[-3000:]}"
            for want in filter(None, (expect, source)):
                assert want in out, f"recipe output lacks {want!r}:\n{code}\n--- output:\n{out[-3000:]}"
    # What the conversions wrote is what they read.
    for d in ("folder", "captions", "hf"):
        assert os.listdir(os.path.join(work, "shards", d)), d
    shutil.rmtree(os.path.join(work, "hf"), ignore_errors=True)
