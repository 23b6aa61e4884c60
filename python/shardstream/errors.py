"""Exceptions raised by shardstream.

Every error carries the kind of the C++ Status it came from, and where known
the url (credentials redacted) and byte offset it concerns. The hierarchy
mirrors the error kinds; some kinds also derive from the matching builtin so
that ordinary ``except`` clauses keep working.
"""

from __future__ import annotations

from typing import Optional


class Error(Exception):
    """Base class of every shardstream error."""

    kind = "unknown"

    def __init__(self, message: str, url: Optional[str] = None, offset: Optional[int] = None):
        super().__init__(message)
        self.message = message
        self.url = url or None
        self.offset = offset if offset is not None and offset >= 0 else None

    @property
    def retryable(self) -> bool:
        """True where trying again may succeed."""
        return self.kind == "unavailable"


class IoError(Error, OSError):
    """Local I/O failed (EIO, ENOSPC, ...)."""
    kind = "io"


class CorruptError(Error):
    """The bytes are not what the format says (bad tar header, truncated shard)."""
    kind = "corrupt"


class ChecksumError(Error):
    """The bytes differ from the manifest's size or checksum."""
    kind = "checksum"


class UnavailableError(Error, ConnectionError):
    """A transient failure (server down, 5xx, connection reset) outlasted the retries."""
    kind = "unavailable"


class NotFoundError(Error, FileNotFoundError):
    """No such file, key or object."""
    kind = "not-found"


class AuthError(Error, PermissionError):
    """Credentials are missing or were rejected."""
    kind = "auth"


class ConfigError(Error, ValueError):
    """An invalid option, argument or manifest."""
    kind = "config"


class CancelledError(Error):
    """The operation was stopped (shutdown or interrupt)."""
    kind = "cancelled"


BY_KIND = {cls.kind: cls for cls in (IoError, CorruptError, ChecksumError, UnavailableError,
                                     NotFoundError, AuthError, ConfigError, CancelledError)}


def _from_status(kind: str, message: str, url: str, offset: int) -> Error:
    """Called by the extension module to build the exception for a Status."""
    cls = BY_KIND.get(kind, Error)
    return cls(f"{kind}: {message}", url, offset)
