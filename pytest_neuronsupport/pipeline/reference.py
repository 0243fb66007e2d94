"""The file of a model's CPU reference, named by everything that changes the reference.

A run computes its CPU reference once and keeps it in the file the plugin names for it (see
:mod:`pytest_neuronsupport.runners.lib.reference`). The name is a hash of: the checkpoint's files
(each file's content, for a local folder; the commit, for a Hub snapshot), the runner and its run
code (the source of the run-side modules), the revision, and the torch and transformers
versions. A second sweep of the same models pays only for the device.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path

from pytest_neuronsupport.pipeline.plan import Plan
from pytest_neuronsupport.pipeline.runcode import module_source

#: Bump when what a reference file holds changes.
REFERENCE_FORMAT = 4  # 3: the float64 and eager outputs too; 4: encoders' at every position


def reference_file(folder: Path, planned: Plan, stack: Mapping[str, str | None]) -> Path | None:
    """Where the run of ``planned`` keeps its CPU reference; None when nothing identifies the
    checkpoint's files (a Hub id not yet in the cache): then it is computed every time."""
    found = fingerprint(planned.checkpoint, planned.config_path)
    if found is None or planned.runner is None:
        return None
    material = {
        "format": REFERENCE_FORMAT,
        "checkpoint": found,
        "revision": planned.spec.revision,
        "runner": planned.runner.name,
        "code": run_code_digest(planned.runner.module),
        "torch": stack.get("torch"),
        "transformers": stack.get("transformers"),
    }
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
    return folder / f"{digest}.pt"


def fingerprint(checkpoint: str, config_path: Path | None) -> dict[str, str] | None:
    """Each file's hash in a local folder; the commit of a Hub snapshot."""
    folder = Path(checkpoint)
    if folder.is_dir():
        return {
            str(p.relative_to(folder)): file_digest(p)
            for p in sorted(folder.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
        }
    if config_path is not None and config_path.parent.parent.name == "snapshots":
        return {"commit": config_path.parent.name}
    return None


def file_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@functools.cache
def run_code_digest(runner_module: str) -> str:
    """A hash of the runner's module and of the run-side library it is made of."""
    digest = hashlib.sha256(module_source(runner_module).encode())
    library = files("pytest_neuronsupport.runners.lib")
    for entry in sorted(library.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".py"):
            digest.update(entry.read_bytes())
    return digest.hexdigest()
