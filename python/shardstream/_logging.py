"""Routes the native library's log records into Python's ``logging``.

Library threads never call into Python: they queue records in C++, and this
module drains the queue on the Python side (after each batch, when a loader
closes, and at exit) and re-emits each record on the ``shardstream`` logger.
The library's level follows that logger's effective level when a Loader is
created (``logging.getLogger("shardstream").setLevel(logging.INFO)``).
"""

from __future__ import annotations

import atexit
import logging
import os

from . import _core

logger = logging.getLogger("shardstream")


def drain() -> None:
    """Re-emits the records the library logged since the last call."""
    for level, message, created in _core._drain_logs():
        if logger.isEnabledFor(level):
            record = logger.makeRecord(logger.name, level, "(native)", 0, message, None, None)
            if created:
                record.created = created
                record.msecs = (created - int(created)) * 1000
            logger.handle(record)


def sync_level() -> None:
    """Sets the native level from the ``shardstream`` logger's effective level
    (unless SHARDSTREAM_LOG_LEVEL is set in the environment, which wins)."""
    if not os.environ.get("SHARDSTREAM_LOG_LEVEL"):
        _core._set_log_level(logger.getEffectiveLevel())


atexit.register(drain)
