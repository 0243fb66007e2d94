"""Regenerates the architecture table (:mod:`.table`) under the installed transformers::

    python -m pytest_neuronsupport.zoo.measure > model_lists/architectures-built.toml

Every class of :func:`.architectures.mapped` is built (:func:`.architectures.build`: its shrunk
config, seeded random weights, an image-text-to-text family's processor too) in a worker
process, one after another; a build that raises is listed with its exception's first line, one
that takes over :data:`~.table.TIME_LIMIT_S` or whose shrunk model still has over
:data:`~.table.MOST_PARAMETERS` parameters with that. Naming classes (``--classes A B``)
measures only those and prints their part of the table. Nothing imports this module.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from pytest_neuronsupport.zoo import architectures
from pytest_neuronsupport.zoo.table import MOST_PARAMETERS, TIME_LIMIT_S, table_text


def measure(classes: Sequence[str], limit_s: float = TIME_LIMIT_S) -> dict[str, str | None]:
    """Build each of ``classes`` in a worker process: None where it builds, else why not."""
    measured: dict[str, str | None] = {}
    left = list(classes)
    with tempfile.TemporaryDirectory(prefix="neuronsupport-table-") as scratch:
        while left:
            for cls, why in _worker_results(left, Path(scratch), limit_s):
                measured[cls] = why
                left.remove(cls)
    return measured


def _worker_results(
    classes: list[str], scratch: Path, limit_s: float
) -> Iterator[tuple[str, str | None]]:
    """One worker builds ``classes`` in turn, a line each; one that overruns is killed, its
    class listed as too slow, and the caller starts a new worker for the rest."""
    command = [
        sys.executable,
        "-m",
        "pytest_neuronsupport.zoo.measure",
        "--worker",
        str(scratch),
        *classes,
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as worker:
        assert worker.stdout is not None
        for cls in classes:
            started = time.monotonic()
            line = _read_line(worker, limit_s)
            if line is None:  # overran, or died (a crash of the build: its status says how)
                worker.kill()
                code = worker.wait()
                late = time.monotonic() - started >= limit_s
                yield cls, f"TO: took over {limit_s:g} s" if late else f"the build died ({code})"
                return
            found = json.loads(line)
            assert found["class"] == cls, (found, cls)
            late = time.monotonic() - started > limit_s
            yield cls, f"TO: took over {limit_s:g} s" if late else found["why"]


def _read_line(worker: subprocess.Popen[str], limit_s: float) -> str | None:
    """The worker's next line, or None if it writes none within ``limit_s`` (or died)."""
    import selectors

    assert worker.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(worker.stdout, selectors.EVENT_READ)
        if not selector.select(limit_s):
            return None
    return worker.stdout.readline() or None


def _build_one(cls: str, scratch: Path) -> str | None:
    """Build ``cls`` into ``scratch``: None, or why it is not buildable."""
    from safetensors import safe_open

    found = {c: (t, k) for t, c, k in architectures.mapped()}
    dest = scratch / cls
    try:
        architectures.build(cls, *found[cls], dest)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{type(exc).__name__}: {first}".rstrip(": ")
    count = 0
    for path in dest.glob("*.safetensors"):
        with safe_open(str(path), "pt") as tensors:
            for name in tensors.keys():
                size = 1
                for dim in tensors.get_slice(name).get_shape():
                    size *= dim
                count += size
    if count > MOST_PARAMETERS:
        return (
            f"its shrunk config still has {count:,} parameters (over {MOST_PARAMETERS // 10**6}M)"
        )
    return None


def _worker(scratch: Path, classes: Sequence[str]) -> None:
    for cls in classes:
        why = _build_one(cls, scratch)
        print(json.dumps({"class": cls, "why": why}), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the classes (all mapped ones by default) and print the table."""
    parser = argparse.ArgumentParser(prog="python -m pytest_neuronsupport.zoo.measure")
    parser.add_argument("--classes", nargs="+", metavar="CLASS", help="only these (a part)")
    parser.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("names", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(Path(args.worker), args.names)
        return 0
    classes = args.classes or [cls for _, cls, _ in architectures.mapped()]
    sys.stdout.write(table_text(measure(classes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
