"""shardstream: stream WebDataset-style tar shards into training.

The native core lives in ``shardstream._core``; this package adds the Pythonic
layer. Importing it starts no threads, so DataLoader workers may fork safely.
"""

from __future__ import annotations

from . import _core
from .errors import (AuthError, CancelledError, ChecksumError, ConfigError, CorruptError, Error,
                     IoError, NotFoundError, UnavailableError)

__version__ = _core.__version__

__all__ = [
    "__version__", "Error", "IoError", "CorruptError", "ChecksumError", "UnavailableError",
    "NotFoundError", "AuthError", "ConfigError", "CancelledError",
]
