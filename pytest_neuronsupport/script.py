"""Rendering ``run.py``: the standalone script that is the test of one model.

The script is the text of :mod:`compare` and ``runners/common.py`` followed by the runner's
module, with the run's parameters as a literal ``PARAMS`` dict and a header that lists the stack.
It imports only the standard library, torch and transformers (and the backend's module when the
backend is an import path). Its SHA-256 decides whether a model must run again.

Untrusted text (model ids, paths, backend names) reaches the script only as data: inside the
``PARAMS`` literal (``pprint`` of plain values, which ``ast.literal_eval`` reads back) and, in
the header comments, JSON-escaped so that it cannot end a comment line.
"""

from __future__ import annotations

import hashlib
import json
import pprint
from dataclasses import asdict, dataclass
from importlib.resources import files
from typing import Any

#: Modules pasted, in this order, before the runner's own modules.
COMMON_MODULES = ("compare.py", "runners/common.py")
_GENERATING = ("runners/judge.py", "runners/generation.py")
#: Each runner's modules, after the common ones.
RUNNER_MODULES: dict[str, tuple[str, ...]] = {
    "dense": (*_GENERATING, "runners/dense.py"),
    "dense_ep": (*_GENERATING, "runners/dense.py", "runners/dense_ep.py"),
    "seq2seq": (*_GENERATING, "runners/seq2seq.py"),
    "multimodal": (*_GENERATING, "runners/multimodal.py"),
    "encoder": ("runners/encoder.py",),
}
DROP_BEGIN = "# script: drop-begin"
DROP_END = "# script: drop-end"
FUTURE = "from __future__ import annotations"


@dataclass(frozen=True)
class RunParams:
    """Everything a run needs to know; becomes ``PARAMS`` in the script."""

    model_id: str
    checkpoint: str  # a local directory, or the Hub id
    runner: str  # "dense", "encoder", ...
    device: str
    backend: str
    dtype: str
    fullgraph: bool
    cores: int = 1
    revision: str | None = None
    task: str | None = None
    #: Generating runners: prefill in chunks of this many tokens (None: one pass).
    prefill_chunk: int | None = None
    #: Generating runners: the English judge's checkpoint (None: no judge).
    judge: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def standalone_source(relpath: str) -> str:
    """A module's text as it goes into the script (package-only import blocks removed)."""
    text = (files("pytest_neuronsupport") / relpath).read_text(encoding="utf-8")
    kept: list[str] = []
    dropping = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(DROP_BEGIN):
            dropping = True
        elif stripped.startswith(DROP_END):
            dropping = False
        elif not dropping and stripped != FUTURE:
            kept.append(line)
    if dropping:
        raise ValueError(f"{relpath}: '{DROP_BEGIN}' without '{DROP_END}'")
    return "\n".join(kept).strip("\n") + "\n"


def _safe(value: object) -> str:
    """A value for a header comment: JSON, so a newline or quote cannot escape the comment."""
    return json.dumps(value, ensure_ascii=True)


def header(params: RunParams, stack: dict[str, str | None]) -> str:
    present = {k: v for k, v in stack.items() if v and k not in ("library_version",)}
    stack_words = ", ".join(f"{k} {_safe(v)}" for k, v in sorted(present.items()))
    on_top = [
        f"{dist}=={stack[key]}"
        for key, dist in (("transformers", "transformers"), ("accelerate", "accelerate"))
        if stack.get(key)
    ]
    lines = [
        "#!/usr/bin/env python3",
        "# run.py: one model's run for pytest-neuronsupport. Standalone: it does not import the",
        "# plugin. `python3 run.py` on a machine with the same stack repeats the run and prints",
        "# the verdict; `python3 run.py --result verdict.json` also writes it as JSON.",
        "#",
        f"# model: {_safe(params.model_id)}",
        f"# runner: {_safe('run_' + params.runner)}  device: {_safe(params.device)}  "
        f"backend: {_safe(params.backend)}  dtype: {_safe(params.dtype)}  cores: {params.cores}",
        f"# stack: {stack_words}",
        f"# pip install {' '.join(json.dumps(p) for p in on_top) or '(nothing beyond the stack)'}",
    ]
    if params.model_id.startswith("zoo:"):
        lines.append(
            "# checkpoint: a pytest-neuronsupport tiny model; `neuronsupport zoo build` rebuilds"
            " it byte for byte"
        )
    return "\n".join(lines) + "\n"


def render(params: RunParams, stack: dict[str, str | None]) -> str:
    """The complete text of ``run.py`` for one run."""
    parts = [
        header(params, stack),
        f"{FUTURE}\n",
        "PARAMS = " + pprint.pformat(params.to_dict(), sort_dicts=True, width=88) + "\n",
    ]
    for relpath in (*COMMON_MODULES, *RUNNER_MODULES[params.runner]):
        parts.append(f"# ---- pytest_neuronsupport/{relpath} " + "-" * 40 + "\n")
        parts.append(standalone_source(relpath))
    parts.append('\nif __name__ == "__main__":\n    raise SystemExit(main(PARAMS, run))\n')
    return "\n".join(parts)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
