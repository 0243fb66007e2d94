"""The file of a model's CPU reference, named by everything that changes the reference.

A run computes its CPU reference once and keeps it in the file the plugin names for it (see
:mod:`pytest_neuronsupport.runners.lib.reference`). The name is a hash of everything that changes
the reference: the checkpoint's files (each file's content, for a local folder; the commit, for a
Hub snapshot); the run's parameters but those that only concern the device
(:func:`~pytest_neuronsupport.runners.lib.protocol.reference_key`: the dtype, whose eager run the
reference holds; the revision, the prefill chunk, whether float64 fits the host...); the runner,
its entry and its run code (the source of the run-side modules); the packages the run adds; and
the torch and transformers versions. A second sweep of the same models pays only for the device,
and a sweep in another dtype never reuses the reference of the one before it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path

from pytest_neuronsupport.pipeline.plan import Plan
from pytest_neuronsupport.pipeline.render import RunParams, ScriptPlan
from pytest_neuronsupport.pipeline.runcode import module_source
from pytest_neuronsupport.runners.lib.protocol import reference_key

#: Bump when what a reference file holds changes.
#: 3: float64 and eager outputs; 4: encoders' at every position; 5: its key; 6: a half dtype's
#: eager run rounded at each operation, and what computed the reference (``info``).
REFERENCE_FORMAT = 6


def reference_file(
    folder: Path,
    planned: Plan,
    stack: Mapping[str, str | None],
    params: RunParams,
    code: ScriptPlan,
) -> Path | None:
    """Where the run of ``planned`` (with ``params``, made of ``code``) keeps its CPU
    reference; None when nothing identifies the checkpoint's files (a Hub id not yet in the
    cache): then it is computed every time."""
    found = fingerprint(planned.checkpoint, planned.config_path)
    if found is None:
        return None
    material = {
        "format": REFERENCE_FORMAT,
        "checkpoint": found,
        "params": reference_key(params.to_dict()),
        "entry": [code.runner_module, code.runner_entry],
        "packages": list(code.packages),
        "code": run_code_digest(code.runner_module),
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
