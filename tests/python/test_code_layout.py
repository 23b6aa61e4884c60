"""The code's layout (docs/layout.md) is the one the code has: every folder of
src/ is on the map, and every include of another folder's header points to a
lower row of it (or the same row)."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")


def layers():
    """{folder: row} from the map in docs/layout.md; row 0 is the top."""
    with open(os.path.join(ROOT, "docs", "layout.md")) as f:
        text = f.read()
    diagram = text.split("```", 2)[1]
    rows = {}
    row = 0
    for line in diagram.splitlines():
        m = re.match(r"^((?:[a-z0-9_]+/ ?)+)\s", line)
        if not m:
            continue
        for folder in m.group(1).split():
            rows[folder.rstrip("/")] = row
        row += 1
    return rows


def includes():
    """(folder of the including file, included folder, file) for src/'s own headers."""
    for dirpath, _, files in os.walk(SRC):
        rel = os.path.relpath(dirpath, SRC)
        folder = "" if rel == "." else rel.split(os.sep)[0]
        for name in files:
            if not name.endswith((".h", ".cc")):
                continue
            path = os.path.join(dirpath, name)
            with open(path) as f:
                for line in f:
                    m = re.match(r'#include "([a-z0-9_]+)/', line)
                    if m and m.group(1) != "shardstream":
                        yield folder, m.group(1), os.path.relpath(path, ROOT)


def test_the_map_names_every_folder():
    rows = layers()
    assert {"pipeline", "plan", "tar", "format", "common"} <= set(rows)  # the parse found the map
    folders = {d for d in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, d))}
    assert folders - set(rows) == set(), "folders of src/ missing from docs/layout.md's map"


def test_no_include_points_up():
    rows = layers()
    bottom = max(rows.values()) + 1  # src/'s own files: the seam and the vocabulary
    up = []
    for folder, target, path in includes():
        assert target in rows, f"{path} includes from {target}/, which the map does not name"
        if rows[target] < (rows[folder] if folder else bottom):
            up.append(f"{path}: {folder or 'src'}/ -> {target}/")
    assert up == [], "includes pointing up the map:\n" + "\n".join(up)


def test_the_check_sees_an_arrow_up():
    # The walk above reads real includes: pipeline/ includes plan/, a lower row.
    rows = layers()
    seen = {(f, t) for f, t, _ in includes()}
    assert ("pipeline", "plan") in seen and rows["plan"] > rows["pipeline"]
