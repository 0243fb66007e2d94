"""The repository copied as a fresh clone after the README's first set-up command: its sweep of
the bundled tiny list, run once per test run (shared by xdist workers under a lock).

Two kinds of test read it: the documentation's (tests/test_docs.py runs every page's commands
in a copy of the clone) and the tests of the tiny list's sweep (tests/shared_sweeps.py's
``tiny_sweep``: its rows, its junit, its output), so the list is swept once for both.

The clone is prepared as the README's first command leaves one: ``.venv`` links to the virtual
environment running these tests (``Path(sys.executable).parent.parent``), ``HF_HUB_OFFLINE=1``,
the clone's own package first on ``PYTHONPATH`` (as its editable install would be). Its sweep
and every command of the pages run as written, with the backend a user gets (``inductor`` on
this CPU: the README's sweep is the suite's one inductor sweep of the whole tiny list, and a
page's ``pytest --neuron-sweep -k llama`` after it finds llama unchanged), with the session's
shared zoo cache (``NEURONSUPPORT_CACHE``), so the zoo is built once and CPU references are
computed once. Only ``--junitxml`` is added to the set-up sweep, for ``tiny_sweep``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from tests.sweeping import run_folder, session_leases

ROOT = Path(__file__).resolve().parent.parent
#: The virtual environment running the tests: the clone's ``.venv``.
VENV = Path(sys.executable).parent.parent
#: The README's first set-up command, byte for byte: the sweep of the bundled tiny list.
SWEEP_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 -e . && "
    "HF_HUB_OFFLINE=1 .venv/bin/pytest --neuron-sweep -n 2"
)
#: Names never copied into the clone: what git ignores, and git itself.
NOT_CLONED_ANYWHERE = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
NOT_CLONED_AT_TOP = {".venv", "results", "site", "page", ".benchmarks", ".neuronsupport-cache"}
NOT_CLONED_AT_TOP |= {"build", "dist"}
#: Seconds the set-up command's sweep may take.
SWEEP_TIMEOUT = 1200


def _not_cloned(folder: str, names: list[str]) -> set[str]:
    top = Path(folder).resolve() == ROOT
    return {
        name
        for name in names
        if name in NOT_CLONED_ANYWHERE
        or (top and name in NOT_CLONED_AT_TOP)
        or name.endswith(".egg-info")
    }


@dataclass(frozen=True)
class Scratch:
    """The prepared clone, what every command run in a copy of it shares, and what its
    set-up sweep printed and wrote (its exit status, its output, its junit file)."""

    clone: Path
    cache: Path
    leases: Path
    sweep_output: Path
    sweep_junit: Path

    def env(self, clone: Path) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "NEURONSUPPORT_"))
        }
        env.update(
            HF_HUB_OFFLINE="1",
            PYTHONPATH=str(clone),
            NEURONSUPPORT_CACHE=str(self.cache),
            NEURONSUPPORT_LEASES=str(self.leases),
        )
        return env


def run_command(
    argv: list[str], clone: Path, env: dict[str, str], timeout: float
) -> tuple[int, str]:
    """Run ``argv`` in ``clone``: its exit status and its output (stdout and stderr)."""
    try:
        done = subprocess.run(
            argv,
            cwd=clone,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.output or ""
        text = output.decode(errors="replace") if isinstance(output, bytes) else output
        return 124, f"{text}\n[timed out after {timeout} s]"
    return done.returncode, done.stdout


def prepared(zoo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Scratch:
    """The clone after the first set-up command's sweep: made by the first worker to ask."""
    base = run_folder(tmp_path_factory)  # one sweep for all the run's processes
    scratch = Scratch(
        base / "docs-clone",
        zoo_cache,
        session_leases(zoo_cache),
        base / "docs-clone.out",
        base / "docs-clone.junit.xml",
    )
    with FileLock(str(base / "docs-clone.lock")):
        if not (base / "docs-clone.done").exists():
            shutil.rmtree(scratch.clone, ignore_errors=True)
            shutil.copytree(ROOT, scratch.clone, ignore=_not_cloned, symlinks=True)
            (scratch.clone / ".venv").symlink_to(VENV, target_is_directory=True)
            sweep = SWEEP_COMMAND.split(" && ")[-1]
            assert sweep.startswith("HF_HUB_OFFLINE=1 .venv/bin/pytest --neuron-sweep")
            env = scratch.env(scratch.clone)
            env["PYTEST_ADDOPTS"] = f"--junitxml={scratch.sweep_junit}"  # for tiny_sweep
            argv = ["bash", "-e", "-c", sweep]
            code, output = run_command(argv, scratch.clone, env, SWEEP_TIMEOUT)
            scratch.sweep_output.write_text(f"{code}\n{output}", encoding="utf-8")
            assert code == 0, f"the first set-up command's sweep failed ({code}):\n{output}"
            assert list((scratch.clone / "results" / "data").glob("*/*.parquet")), output
            (base / "docs-clone.done").touch()
    return scratch
