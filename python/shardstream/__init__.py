"""shardstream: stream WebDataset-style tar shards into training.

The native core lives in ``shardstream._core``; this package adds the Pythonic
layer: :class:`Loader` (NumPy batches), :class:`ShardWriter`, metrics and, in
``shardstream.torch``, the PyTorch ``ShardDataset``. Importing it starts no
threads, so DataLoader workers may fork safely.
"""

from __future__ import annotations

from . import _core, _logging, convert, image, metrics
from .errors import (AuthError, CancelledError, ChecksumError, ConfigError, CorruptError, Error,
                     IoError, NotFoundError, UnavailableError)
from .loader import Loader, merge_own_states, merge_states, parse_size
from .writer import ShardWriter, encode_field
from .checkpoint import CheckpointManager
from .headspace import Headspace, ReplayLoader, measure_headspace
from .image import crop_box, decode_image
from .transfer import set_transfer_options, transfer_options, transfer_stats

__version__ = _core.__version__

__all__ = [
    "__version__", "Error", "IoError", "CorruptError", "ChecksumError", "UnavailableError",
    "NotFoundError", "AuthError", "ConfigError", "CancelledError", "Loader", "merge_states", "merge_own_states",
    "parse_size", "ShardWriter", "encode_field", "metrics", "CheckpointManager", "decode_image",
    "crop_box", "image", "set_transfer_options", "transfer_options", "transfer_stats",
    "Headspace", "ReplayLoader", "measure_headspace",
]
