"""Records written as JSONL with their environment first (the lab's runners: dist_run, fsdp_hooks,
generate_run, dist_memtracker): one reader for all of them."""

from __future__ import annotations

import glob
import json
import os


def env_records(pattern: str, kind: str, root: str) -> list[tuple[dict | None, dict, str]]:
    """``(environment, record, path relative to root)`` for every line whose ``kind`` is ``kind`` in the
    files matching ``pattern`` (sorted), each with the last environment line before it (None: none yet)."""
    out = []
    for path in sorted(glob.glob(pattern)):
        env = None
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("kind") == "environment":
                    env = r
                elif r.get("kind") == kind:
                    out.append((env, r, os.path.relpath(path, root)))
    return out
