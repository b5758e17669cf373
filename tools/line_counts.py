"""Line counts of the code and docs folders: `python tools/line_counts.py [--rev REV]` prints each
folder's files and lines (Python in the code folders, Markdown in docs/, YAML in recipes/), the
pipeline/ modules over 400 lines and the training loop's length: in the working tree (the files git
tracks or does not ignore), or at the commit REV."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {  # folder: the files counted in it
    "pipeline": "*.py",
    "bench": "*.py",
    "checks": "*.py",
    "study": "*.py",
    "stages": "*.py",
    "tests": "*.py",
    "docs": "*.md",
    "recipes": "*.yaml",
}
LONG = 400  # lines: a pipeline/ module longer than this is listed
LOOP = "pipeline/training/loop.py"


def line_counts(rev: str | None) -> dict[str, int]:
    """{path: lines} of the folders' files, in the working tree or at `rev`."""
    where = ["", rev] if rev else ["--untracked", ""]  # the empty pattern matches every line
    specs = [f"{folder}/{pattern}" for folder, pattern in FOLDERS.items()]  # `*` spans folders too
    done = subprocess.run(
        ["git", "grep", "-c", *where, "--", *specs], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode > 1:  # 1: no file matched
        sys.exit(f"error: git grep: {done.stderr.strip()}")
    counts = {}
    for row in done.stdout.splitlines():
        path, lines = row.removeprefix(f"{rev}:" if rev else "").rsplit(":", 1)
        counts[path] = int(lines)
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", help="a commit to count instead of the working tree")
    counts = line_counts(p.parse_args().rev)
    print(f"{'folder':<10} {'files':>5} {'lines':>7}")
    for folder, pattern in FOLDERS.items():
        sizes = [n for path, n in counts.items() if path.startswith(f"{folder}/")]
        print(f"{folder + '/':<10} {len(sizes):>5} {sum(sizes):>7}   ({pattern})")
    long = sorted((n, path) for path, n in counts.items() if path.startswith("pipeline/") and n > LONG)
    print(f"pipeline/ modules over {LONG} lines: {len(long)}")
    for n, path in reversed(long):
        print(f"  {path} {n}")
    print(f"{LOOP}: {counts.get(LOOP, 0)} lines")


if __name__ == "__main__":
    main()
