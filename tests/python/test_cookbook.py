"""Runs the cookbook at the top of docs/python.md, recipe by recipe, as a
user would paste it: Python blocks with this venv's python, shell blocks with
bash, in one folder, in order, each in a fresh process.

A recipe is a fenced block right after an HTML comment:
  <!-- cookbook: run -->                 run it
  <!-- cookbook: run expect="TEXT" -->   run it; its output must contain TEXT
  <!-- cookbook: write NAME -->          save it as NAME (for a later run)
The folder starts with raw/ (files <key>.<field>) and captions.jsonl; s3://my-bucket
is moto's S3 (signing enforced), with shards/captions/ uploaded before the
first recipe that reads it.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import moto_s3_server

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOC = os.environ.get("SHARDSTREAM_COOKBOOK", os.path.join(ROOT, "docs", "python.md"))
RECIPE = re.compile(r"<!-- cookbook: (run|write)(?: ([^\s>]+))?(?: expect=\"([^\"]*)\")? -->\s*\n"
                    r"```(python|sh)\n(.*?)```", re.S)
SAMPLES = 1000


def recipes():
    with open(DOC) as f:
        text = f.read()
    return [m.groups() for m in RECIPE.finditer(text)]


def cli_dir():
    """The directory of the `shardstream` command (the CMake build)."""
    for d in (os.environ.get("SHARDSTREAM_BUILD", ""), os.path.join(ROOT, "build")):
        if d and os.access(os.path.join(d, "shardstream"), os.X_OK):
            return d
    pytest.fail("the shardstream command is not built (build/shardstream)")


@pytest.fixture(scope="module")
def s3_env():
    import boto3
    with moto_s3_server() as (endpoint, keys):
        env = {"AWS_ACCESS_KEY_ID": keys["access_key"], "AWS_SECRET_ACCESS_KEY": keys["secret_key"],
               "AWS_ENDPOINT_URL_S3": endpoint, "AWS_REGION": "us-east-1"}
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
    for kind, name, expect, lang, code in found:
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
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
        out = r.stdout + r.stderr
        assert r.returncode == 0, f"recipe failed ({lang}):\n{code}\n--- output:\n{out[-3000:]}"
        if expect:
            assert expect in out, f"recipe output lacks {expect!r}:\n{code}\n--- output:\n{out[-3000:]}"
    # What the conversions wrote is what they read.
    for d in ("folder", "captions", "hf"):
        assert os.listdir(os.path.join(work, "shards", d)), d
    shutil.rmtree(os.path.join(work, "hf"), ignore_errors=True)
