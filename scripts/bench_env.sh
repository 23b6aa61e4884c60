#!/usr/bin/env bash
# A separate virtual environment, .venv-bench, for the MosaicML Streaming
# contender of benchmarks/vision_benchmark.py.
#
# mosaicml-streaming 0.13.0 pins numpy<2.2 and pulls torchvision, transformers,
# boto3, azure, google-cloud, oci, paramiko, matplotlib, ... so it cannot live
# in the project's .venv (numpy 2.4.6). Here it is installed with --no-deps,
# plus only what `import streaming` and MDSWriter/StreamingDataset on local
# directories import (found by trying). Idempotent; safe to run again.
#
#   bash scripts/bench_env.sh            # then: python benchmarks/vision_benchmark.py
#   bash scripts/bench_env.sh --peers    # LitData, Grain and SPDL into .venv (see below)
#   bash scripts/bench_env.sh --peers-venv   # DALI and Megatron-Energon into .venv-peers
#
# PYTHON picks the interpreter (default python3; it must match the torch wheel,
# cp311 for the CPU build of torch 2.13). TORCH_SPEC overrides the torch requirement.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# --peers: the loaders that live beside shardstream in the project's .venv, for
# benchmarks/torch_vs_webdataset.py and benchmarks/convert_benchmark.py:
# - LitData with --no-deps: its requirements ask for a newer torch (a CUDA build);
#   `import litdata`, optimize and StreamingDataset need only lightning-utilities
#   beside what .venv has (found by trying);
# - Grain (with array_record) and SPDL as they come: they change nothing .venv has.
if [ "${1:-}" = "--peers" ]; then
  py=("$root/.venv/bin/python")
  "${py[@]}" -m pip install -q --disable-pip-version-check --no-deps "litdata==0.2.76" \
    "lightning-utilities==0.15.3"
  "${py[@]}" -m pip install -q --disable-pip-version-check "grain==0.2.18" "spdl==0.8.0"
  "${py[@]}" -c "import litdata, grain, array_record, spdl.dataloader; print('bench_env: ok:',
'litdata', litdata.__version__, ', grain and spdl in .venv')"
  exit 0
fi
# --peers-venv: DALI's CPU pipeline and Megatron-Energon, for vision_benchmark.py, in a venv of
# their own, .venv-peers: Energon brings s3fs, multi-storage-client and webdataset, DALI
# nvImageCodec and nvCOMP (about 2 GB; the CUDA parts stay unused with device_id=None).
if [ "${1:-}" = "--peers-venv" ]; then
  pv="$root/.venv-peers"
  [ -x "$pv/bin/python" ] || { echo "bench_env: creating $pv"; "${PYTHON:-python3}" -m venv "$pv"; }
  [ -f "$pv/.gitignore" ] || printf '# created by scripts/bench_env.sh\n*\n' > "$pv/.gitignore"
  "$pv/bin/python" -m pip install -q --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}" \
    "pillow==13.0.0" "nvidia-dali-cuda120==2.4.0" "megatron-energon==7.4.1"
  "$pv/bin/python" -c "import torch, nvidia.dali, megatron.energon
print('bench_env: ok: dali', nvidia.dali.__version__, ', megatron-energon, torch', torch.__version__)"
  exit 0
fi
venv="$root/.venv-bench"
py=${PYTHON:-python3}
torch_spec=${TORCH_SPEC:-torch==2.13.0+cpu}

# What mosaicml-streaming imports on the MDSWriter/StreamingDataset local path
# (found by trying `from streaming import MDSWriter, StreamingDataset`):
# - streaming.base: xxhash (hashing), zstd, Brotli, python-snappy (compression),
#   catalogue (registry), typing_extensions, tqdm, filelock, numpy, torch.
# - transformers: streaming/base/dataloader.py and streaming/text import it at
#   `import streaming` time (BatchFeature, BatchEncoding, AutoTokenizer names
#   only); it installs with its own dependencies (huggingface_hub, tokenizers,
#   safetensors, regex, pyyaml, requests, ...).
# - torchvision: streaming/vision/base.py imports VisionDataset and to_tensor at
#   `import streaming` time. Not installed: PyPI's torchvision 0.28.0 (torch
#   2.13's) is a CUDA build whose _C.so needs libc10_cuda.so, so with the CPU
#   torch `import torchvision` fails ("RuntimeError: operator torchvision::nms
#   does not exist"). vision_benchmark.py puts stubs of those two names in
#   sys.modules before `import streaming` (stub_torchvision); MDSWriter and
#   StreamingDataset never call them.
deps=(
  "numpy<2.2"
  "pillow==13.0.0"
  "xxhash<4,>=3.0.0"
  "zstd<2,>=1.5.2.5"
  "Brotli>=1.0.9"
  "python-snappy<1,>=0.6.1"
  "tqdm<5,>=4.64.0"
  "catalogue<3,>=2"
  "typing_extensions"
  "filelock"
  "transformers<5,>=4.21.3"
)

if [ ! -x "$venv/bin/python" ]; then
  echo "bench_env: creating $venv"
  "$py" -m venv "$venv"
fi
# Keep the environment out of git whatever .gitignore says (Python >= 3.13's
# venv writes the same file).
[ -f "$venv/.gitignore" ] || printf '# created by scripts/bench_env.sh\n*\n' > "$venv/.gitignore"

pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" "$torch_spec" "${deps[@]}"
"${pip[@]}" --no-deps "mosaicml-streaming==0.13.0"
# An earlier version of this script installed the CUDA torchvision, which breaks imports.
if "$venv/bin/python" -m pip show -q torchvision >/dev/null 2>&1; then
  "$venv/bin/python" -m pip uninstall -q -y torchvision
fi

"$venv/bin/python" - "$root/benchmarks" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import numpy, PIL, torch
import vision_benchmark
streaming = vision_benchmark.import_streaming()  # with the torchvision stub
from streaming import MDSWriter, StreamingDataset  # noqa: F401
print(f"bench_env: ok: streaming {streaming.__version__}, torch {torch.__version__}, "
      f"numpy {numpy.__version__}, pillow {PIL.__version__}")
EOF
