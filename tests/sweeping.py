"""Running sweeps in subprocesses and reading back what they wrote (rows, junit).

A :class:`SweepRunner` works in one folder: a test's pytester folder (the ``sweep`` fixture), or
a folder of its own that several tests share (the ``sweep_folder`` fixture: a sweep run once,
in a session- or module-scoped fixture, whose rows each test reads).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow.parquet as pq
import pytest

from pytest_neuronsupport.dataset.layout import run_dirname

HERE = Path(__file__).parent
#: What tests set (monkeypatch) for their own sweeps: never passed on to a shared folder's.
TEST_SET = ("NEURONSUPPORT_TEST_MISBEHAVIOUR", "JOB_COMPLETION_INDEX", "HF_ENDPOINT")


def toml_list(entries: Iterable[Mapping[str, Any]]) -> str:
    """A model list's text."""
    import tomlkit

    return tomlkit.dumps({"model": [dict(entry) for entry in entries]})


@dataclass
class Sweep:
    """A finished sweep: pytest's result, the dataset's rows and the junit properties."""

    result: pytest.RunResult
    rows: dict[str, dict[str, Any]]
    junit: dict[str, dict[str, str]]
    testcases: dict[str, ET.Element]
    #: The runner it ran in (its folder, its results).
    runner: SweepRunner | None = None

    def row(self, model_id: str) -> dict[str, Any]:
        return self.rows[model_id]

    def lease_files(self, model_id: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The model's CPU reference pass's verdict (``run-reference.json``, None where it had
        none) and its leased run's (``verdict.json``), as its run folder holds them."""
        assert self.runner is not None
        folder = next(self.runner.results.glob(f"runs/*/*/{run_dirname(model_id)}"))
        before = folder / "run-reference.json"
        read = json.loads(before.read_text(encoding="utf-8")) if before.is_file() else None
        return read, json.loads((folder / "verdict.json").read_text(encoding="utf-8"))

    def outcome(self, model_id: str) -> str:
        """The model's test outcome as junit says it: passed, failed, skipped or error (an
        xfail is a skip there, an xpass a pass): what ``assert_outcomes`` counts, for one
        model of a sweep shared by several tests."""
        case = self.testcases[model_id]
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                return {"failure": "failed"}.get(tag, tag)
        return "passed"


#: Runs the command after the file's name, then writes its exit status into that file, whole.
MARK_DONE = (
    "import os, subprocess, sys; code = subprocess.call(sys.argv[2:]); "
    "done = sys.argv[1]; open(done + '.tmp', 'w').write(str(code)); "
    "os.replace(done + '.tmp', done)"
)


class PendingSweep:
    """A sweep started in the background: :meth:`wait` for its :class:`Sweep`."""

    def __init__(self, runner: SweepRunner, proc: subprocess.Popen[bytes], files: list[IO[bytes]]):
        self.runner, self.proc, self.files = runner, proc, files
        self.started = time.monotonic()

    def stop(self) -> None:
        """Kill the sweep and all it started, unless it has ended (or been waited for)."""
        if self.runner.pending is self:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.wait()

    def wait(self, timeout: float | None = None) -> Sweep:
        try:
            ret = self.proc.wait(timeout=timeout)
        finally:
            for f in self.files:
                f.close()
            self.runner.pending = None
        return self.runner.finished(ret, time.monotonic() - self.started)


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test run's folder, shared by its processes (above each xdist worker's own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@dataclass
class SharedSweep:
    """A sweep that one process of the test run started in the background, in ``folder``
    (:meth:`SweepRunner.start` with ``done``), and any process may wait for."""

    folder: Path

    @property
    def done(self) -> Path:
        return self.folder / "sweep.done"

    def wait(self, timeout_s: float = 1800) -> Sweep:
        """Its :class:`Sweep`, once it has ended."""
        started, deadline = time.monotonic(), time.monotonic() + timeout_s
        while not self.done.exists():
            assert time.monotonic() < deadline, f"{self.folder.name}: not done in {timeout_s} s"
            time.sleep(0.2)
        runner = SweepRunner(self.folder, self.folder / "cache", set_up=False)
        runner.runs = 1
        return runner.finished(int(self.done.read_text()), time.monotonic() - started)


def session_leases(cache: Path) -> Path:
    """The test session's one leases folder, beside the shared zoo of ``cache`` (the
    session's cache, or a folder's whose zoo links to it)."""
    return (cache / "zoo").resolve().parent / "leases"


class SweepRunner:
    """Runs ``pytest --neuron-sweep`` in a subprocess, in one folder, with the shared zoo.

    ``pytester``: the folder is a test's pytester folder (kept for the tests that write files
    there through it). ``env``: set for every sweep of this runner, over the environment at
    the time the sweep starts (a test's ``monkeypatch`` changes count). ``own_cache`` false:
    the sweeps use ``cache`` itself (CPU references), not a cache of the folder's.
    ``own_leases``: the folder leases its cores alone (a sweep whose runs hang, in the
    background, holding a core for minutes), not in the test session's one leases folder; and
    keeps its CPU references apart (its misbehaving runs touch no file another sweep reads).
    ``set_up`` false: the folder is set up already (by another process of the test run, whose
    sweep this one reads).
    """

    def __init__(
        self,
        path: Path,
        cache: Path,
        *,
        pytester: pytest.Pytester | None = None,
        env: Mapping[str, str] | None = None,
        own_cache: bool = True,
        own_leases: bool = False,
        set_up: bool = True,
    ) -> None:
        self.path = path
        self.pytester = pytester
        self.env = dict(env or {})
        self.pending: PendingSweep | None = None
        self.runs = 0
        # Each folder has its cache but shares the built zoo and CPU references. (Not
        # ``own_cache``: ``cache`` itself, as the sweep whose results were copied here.)
        self.cache = path / "cache" if own_cache else cache
        if not set_up:
            return
        # The cores are leased in one folder for the whole test session, as on a user's
        # machine: runs of sweeps in parallel (xdist workers, folders) are pinned to CPUs
        # apart, not all to the first.
        leases = self.cache / "leases" if own_leases else session_leases(cache)
        if own_cache:
            self.cache.mkdir()
            (self.cache / "zoo").symlink_to(cache / "zoo", target_is_directory=True)
            # CPU references too: each is named by all it depends on (pipeline/reference.py)
            if not own_leases:
                (cache / "references").mkdir(exist_ok=True)
                shared = cache / "references"
                (self.cache / "references").symlink_to(shared, target_is_directory=True)
        # an ini file makes the folder the rootdir, and sets the cache through its key
        (path / "tox.ini").write_text(
            f"[pytest]\nneuron_cache = {self.cache}\nneuron_leases = {leases}\n",
            encoding="utf-8",
        )
        shutil.copy(HERE / "backends_for_tests.py", path / "backends_for_tests.py")

    @property
    def results(self) -> Path:
        return self.path / "results"

    def makeconftest(self, source: str) -> Path:
        path = self.path / "conftest.py"
        path.write_text(textwrap.dedent(source).strip() + "\n", encoding="utf-8")
        return path

    def write_list(self, entries: Iterable[Mapping[str, Any]], name: str = "models.toml") -> Path:
        path = self.path / name
        path.write_text(toml_list(entries), encoding="utf-8")
        return path

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """What a sweep's process gets, as pytester's subprocess would: the folder first on
        the path, no outer pytest options, no colours, this folder as HOME."""
        outer = dict(os.environ)
        if self.pytester is None:  # shared: what one test set for its own sweeps is not here
            for name in TEST_SET:
                outer.pop(name, None)
        merged = {**outer, "PY_COLORS": "0", "HOME": str(self.path), **self.env}
        merged.update(env or {})
        merged.pop("PYTEST_ADDOPTS", None)
        merged["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(self.path), merged.get("PYTHONPATH", "")])
        )
        return merged

    def command(
        self,
        models: Iterable[str | Mapping[str, Any]],
        backend: str,
        args: Iterable[str],
        list_name: str,
    ) -> list[str]:
        """The sweep's pytest arguments (the list written, junit at the folder's root)."""
        entries = [{"id": m} if isinstance(m, str) else m for m in models]
        path = self.write_list(entries, list_name)
        self.runs += 1
        (self.path / "junit.xml").unlink(missing_ok=True)
        return [
            f"--basetemp={self.path / f'runpytest-{self.runs}'}",
            "--neuron-sweep",
            "--neuron-models",
            str(path),
            "--neuron-backend",
            backend,
            "--junitxml",
            "junit.xml",
            "-p",
            "no:cacheprovider",
            "-rA",
            *args,
        ]

    def start(
        self,
        *models: str | Mapping[str, Any],
        backend: str = "aot_eager",
        args: Iterable[str] = (),
        list_name: str = "models.toml",
        env: Mapping[str, str] | None = None,
        done: Path | None = None,
    ) -> PendingSweep:
        """Start a sweep of ``models`` in a subprocess and return at once (one sweep at a time
        per folder). ``done``: a file that gets the sweep's exit status when it ends, for
        another process to wait for (:class:`SharedSweep`)."""
        assert self.pending is None, "one sweep at a time in a folder"
        command = [sys.executable, "-mpytest", *self.command(models, backend, args, list_name)]
        if done is not None:
            command = [sys.executable, "-c", MARK_DONE, str(done), *command]
        files: list[IO[bytes]] = [
            (self.path / f"sweep-{self.runs}.{s}").open("wb") for s in ("out", "err")
        ]
        proc = subprocess.Popen(
            command,
            cwd=self.path,
            env=self.environment(env),
            stdin=subprocess.DEVNULL,
            stdout=files[0],
            stderr=files[1],
            start_new_session=True,  # so that stop() can kill what it started
        )
        self.pending = PendingSweep(self, proc, files)
        return self.pending

    def run(
        self,
        *models: str | Mapping[str, Any],
        backend: str = "aot_eager",
        args: Iterable[str] = (),
        list_name: str = "models.toml",
        env: Mapping[str, str] | None = None,
        isolated: bool = False,
    ) -> Sweep:
        """Sweep ``models`` and wait for it: in this process (the worker's torch,
        transformers and fork server are warm: seconds saved per sweep), or in a subprocess
        when ``isolated``, under xdist (``-n``), or when the sweep's environment changes what
        a library read at import (``HF_*``, ``TRANSFORMERS_*``)."""
        args = list(args)
        environment = self.environment(env)
        if (
            isolated
            or any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in args)
            or (changes_imported(environment))
        ):
            return self.start(
                *models, backend=backend, args=args, list_name=list_name, env=env
            ).wait()
        command = self.command(models, backend, args, list_name)
        started = time.monotonic()
        with in_this_process(self.path, environment) as (out, err):
            ret = pytest.main(command)
        result = pytest.RunResult(
            int(ret),
            out.getvalue().splitlines(),
            err.getvalue().splitlines(),
            time.monotonic() - started,
        )
        return Sweep(result, self.read_rows(), *self.read_junit(), self)

    def finished(self, code: int, duration: float) -> Sweep:
        """The sweep this folder ran last, which ended with ``code``: its output, rows, junit."""
        out, err = (
            (self.path / f"sweep-{self.runs}.{s}").read_text(encoding="utf-8", errors="replace")
            for s in ("out", "err")
        )
        result = pytest.RunResult(code, out.splitlines(), err.splitlines(), duration)
        return Sweep(result, self.read_rows(), *self.read_junit(), self)

    def read_rows(self) -> dict[str, dict[str, Any]]:
        """The rows of the pair written last (a sweep writes one pair), by model id."""
        data = self.results / "data"
        files = sorted(data.glob("*/*.parquet"), key=lambda p: p.stat().st_mtime)
        rows: dict[str, dict[str, Any]] = {}
        try:
            table = pq.read_table(files[-1]).to_pylist() if files else []
        except Exception:  # a test may damage the file on purpose
            return rows
        for row in table:
            assert row["model_id"] not in rows, f"{row['model_id']} twice in {files[-1]}"
            rows[row["model_id"]] = row
        return rows

    def read_junit(self) -> tuple[dict[str, dict[str, str]], dict[str, ET.Element]]:
        path = self.path / "junit.xml"
        props: dict[str, dict[str, str]] = {}
        cases: dict[str, ET.Element] = {}
        if not path.exists():
            return props, cases
        for case in ET.parse(path).getroot().iter("testcase"):
            values = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
            key = values.get("model_id", case.get("name", ""))
            props[key] = values
            cases[key] = case
        return props, cases


#: Environment variables huggingface_hub and transformers read once, at import (the Hub's
#: endpoint, token, cache): a sweep that changes one runs in a subprocess, where the change is
#: seen. (Not torch's: the plugin itself sets ``PYTORCH_NVML_BASED_CUDA_CHECK`` in the worker.)
READ_AT_IMPORT = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_")


#: The environment as the libraries read it, at import (before any test's monkeypatch).
IMPORTED_WITH = dict(os.environ)


#: Read at import too, but set here for the sweep's time (see :func:`offline_as`).
OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def changes_imported(environment: Mapping[str, str]) -> bool:
    names = {*environment, *IMPORTED_WITH} - set(OFFLINE)
    return any(
        environment.get(name) != IMPORTED_WITH.get(name)
        for name in names
        if name.startswith(READ_AT_IMPORT)
    )


@contextlib.contextmanager
def offline_as(environment: Mapping[str, str]) -> Iterator[None]:
    """huggingface_hub's offline switch as ``environment`` sets it, for a sweep in this
    process: the client reads ``constants.HF_HUB_OFFLINE`` on every request, set once from the
    environment at import (the tests' ``sweep`` fixture sets ``HF_HUB_OFFLINE=1`` later)."""
    import huggingface_hub.constants as constants

    saved = constants.HF_HUB_OFFLINE
    words = (environment.get(name, "") for name in OFFLINE)
    constants.HF_HUB_OFFLINE = any(w.upper() in {"1", "ON", "YES", "TRUE"} for w in words)
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = saved


@contextlib.contextmanager
def in_this_process(
    folder: Path, environment: Mapping[str, str]
) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """Run a sweep in this process as its subprocess would run: in ``folder``, with
    ``environment`` (its ``PYTHONPATH`` first on ``sys.path``), its output captured; then
    everything put back, and the modules imported from ``folder`` (its conftest, the test
    backends) forgotten, so that the next folder's are imported afresh. Nothing else is
    dropped: the plugin, torch and transformers stay the worker's (imported by conftest.py
    first), one copy of each class."""
    saved_environ, saved_cwd, saved_path = dict(os.environ), os.getcwd(), list(sys.path)
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(environment)
    extra = [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [p for p in extra if p not in sys.path]
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            with offline_as(environment):
                yield out, err
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        os.environ.clear()
        os.environ.update(saved_environ)
        root = str(folder.resolve())
        for name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None) or ""
            if path and os.path.realpath(path).startswith(root + os.sep):
                del sys.modules[name]
