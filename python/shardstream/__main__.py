"""The command-line tool: ``shardstream ...`` (the console script pip
installs) and ``python -m shardstream ...``.

The tool is the C++ program the CMake build makes, bundled in the package as
``shardstream/bin/shardstream``; this runs it in place of the Python process
(``execv``), so its output, exit status and signals are the program's own.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional


def binary() -> str:
    """The bundled program's path."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "shardstream")


def main(argv: Optional[List[str]] = None) -> int:
    exe = binary()
    if not os.path.exists(exe):
        print(f"shardstream: the command-line tool is not part of this installation ({exe} is "
              "missing): it was built with SHARDSTREAM_BUILD_TOOLS=OFF. Reinstall the wheel, or "
              "build it with CMake (docs/building.md).", file=sys.stderr)
        return 127
    if not os.access(exe, os.X_OK):
        print(f"shardstream: {exe} is there but cannot be run (no execute permission, or a "
              "file system mounted noexec)", file=sys.stderr)
        return 126
    args = sys.argv[1:] if argv is None else list(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["shardstream", *args])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
