"""Step 5, isolate: run one ``run.py`` in a process of its own, and watch it.

Each model runs in a process of its own, in a session of its own (so a hang is stopped with
everything it started), and dies with the process that watches it (``PR_SET_PDEATHSIG``), so a
killed worker leaves no run behind. Two ways to get that process:

* :class:`ForkServerExecutor` (the default, ``--neuron-isolation fork``): runs are forked from a
  ``multiprocessing`` fork server that has already imported torch and transformers, so a run
  costs tens of milliseconds instead of a fresh interpreter's seconds of imports. The server
  imports no device runtime (no ``torch_neuronx``, no CUDA initialisation): each run pins its
  cores and starts its runtime itself, after the fork.
* :class:`SubprocessExecutor` (``--neuron-isolation fresh``): ``python3 run.py`` in a fresh
  interpreter, exactly as a user reruns it.

A run that needs packages beyond the environment (an overlay of
:mod:`~pytest_neuronsupport.pipeline.packages`) imports them from folders put first on its
``PYTHONPATH``, and runs in a fresh interpreter under either isolation: the fork server's
transformers decided when it was imported which optional libraries are missing (its cached
``is_sentencepiece_available()``..., its tokenizer tables), and a forked run inherits those
decisions, whatever its ``sys.path``.

Both watch the run: past the timeout, or past the memory limit (the resident memory of every
process in its session), it is stopped. Whatever the process does, the executor returns an
:class:`Outcome`: how the process ended, the tail of its output, the verdict it wrote if any
(:mod:`~pytest_neuronsupport.pipeline.classify` turns it into the fields of a row).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_neuronsupport.pipeline import stopping
from pytest_neuronsupport.runners.lib.backend import compile_imports
from pytest_neuronsupport.runners.lib.processes import (
    COMPILE_THREADS_ENV,
    STACKS_SIGNAL,
    die_with_parent,
    signal_name,
)
from pytest_neuronsupport.runners.lib.protocol import PHASE_MARK, read_verdict

TAIL_CHARS = 4000
#: Seconds between SIGTERM and SIGKILL when a run is stopped.
GRACE_S = 5.0
#: How often a run's time and memory are checked.
POLL_S = 0.05
#: How long each process of a run that timed out gets to write its stacks (:func:`stacks`).
STACKS_WAIT_S = 0.5
#: The innermost frames kept of each thread's stack.
STACK_FRAMES = 4
#: A frame as faulthandler writes it.
FRAME = re.compile(r'^\s*File "(?P<path>.*)", line (?P<line>\d+) in (?P<name>.+)$')
#: What the fork server imports once, before any run: torch, transformers, and what every
#: load imports on first use, then what compiling under the sweep's backend imports
#: (:func:`executor_for`; about 0.6 s a run otherwise). No device runtime
#: starts here (importing torch starts no CUDA context; torch_neuronx is not imported), and no
#: thread: the server must stay safe to fork. ``__main__`` (pytest's entry script) is imported
#: once here rather than in every run.
PRELOAD = (
    "__main__",
    "torch",
    "torch._dynamo",
    "transformers",
    "transformers.modeling_utils",
    "transformers.generation.utils",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.processing_utils",
)


@dataclass(frozen=True)
class Outcome:
    """What became of one run's process."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    verdict: dict[str, Any] | None
    log_tail: str
    timeout_s: float | None = None
    #: Set when the watcher stopped the run for another reason (memory).
    reason: str | None = None
    #: The run's peak resident memory, watched only under a memory limit.
    peak_rss_gb: float | None = None
    #: The device's cores it held times its seconds (set on the model's path, for its row).
    core_s: float | None = None
    #: Where a run that timed out hung: each of its processes' threads, a line each
    #: (:func:`stacks`); None when it did not time out, or wrote none.
    stacks: str | None = None

    @property
    def signal_name(self) -> str | None:
        return signal_name(self.returncode)

    @property
    def phase(self) -> str | None:
        """The last phase the run announced (load, gen, forward, reference)."""
        marks = [ln for ln in self.log_tail.splitlines() if ln.startswith(PHASE_MARK)]
        return marks[-1].removeprefix(PHASE_MARK).strip() if marks else None


@dataclass(frozen=True)
class RunRequest:
    """One run: the script, where and how it runs, and its limits."""

    script: Path
    cwd: Path
    env: Mapping[str, str]
    verdict_path: Path
    log_path: Path
    timeout_s: float
    max_memory_gb: float | None = None
    #: CPU cores the run may use (its affinity and thread count), or None for no pinning.
    cpus: Sequence[int] | None = None
    #: Folders the run imports from before the environment (an overlay of packages): first on
    #: its ``PYTHONPATH``; a run with any starts a fresh interpreter under either isolation.
    python_path: Sequence[Path] = ()
    #: Set when the sweep stops (:mod:`.stopping`): the run is stopped and
    #: :class:`~.stopping.Stopped` raised, whatever it came to.
    stop: threading.Event | None = field(default=None, compare=False)

    def environment(self) -> dict[str, str]:
        """The run's environment variables, with :attr:`python_path` first on ``PYTHONPATH``."""
        env = dict(self.env)
        if self.python_path:
            inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
            env["PYTHONPATH"] = os.pathsep.join([*map(str, self.python_path), *inherited])
        return env


class Executor(Protocol):
    def run(self, request: RunRequest, started: Callable[[int], None] | None = None) -> Outcome:
        """Run ``request`` and wait for it; ``started(pid)`` is called once the run exists."""
        ...

    def ready(self) -> None:
        """Return once a run would start at once (a fork server that has imported what it
        preloads): called before a lease, so that no core waits for the executor's start."""
        ...


def tail(path: Path, chars: int = TAIL_CHARS, end: int | None = None) -> str:
    """The last ``chars`` characters of the file (of its first ``end`` bytes)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END) if end is None else end
            f.seek(max(0, size - chars * 4))
            return f.read(size - f.tell()).decode("utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def session_pids(sid: int) -> list[int]:
    """The processes of session ``sid`` (a run and all it started), the run's first."""
    return sorted((pid for pid, _ in _session(sid)), key=lambda pid: (pid != sid, pid))


def stacks(sid: int, log: Path) -> str | None:
    """Where a run hung: each process of its session asked in turn for its threads' stacks
    (:data:`STACKS_SIGNAL`; the script's entry has them written to the run's output), a line
    a thread, its innermost frames first. A process that does not answer (one the run
    started, a compiler's worker) is stopped by the signal, as it would be a moment later."""
    lines = []
    for pid in session_pids(sid):
        start = _size(log)
        try:
            os.kill(pid, STACKS_SIGNAL)
        except ProcessLookupError:
            continue
        _written(pid, log, start)
        try:
            with log.open("rb") as f:
                f.seek(start)
                written = f.read(max(0, _size(log) - start)).decode("utf-8", errors="replace")
        except OSError:
            continue
        lines += [f"process {pid}, {thread}" for thread in threads(written)]
    return "\n".join(lines) or None


def _written(pid: int, log: Path, start: int) -> None:
    """Wait (at most :data:`STACKS_WAIT_S`) until the process wrote its stacks (the output
    grew, then stayed), or ended."""
    deadline, seen = time.monotonic() + STACKS_WAIT_S, start
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        size = _size(log)
        if (size > start and size == seen) or not _alive(pid):
            return
        seen = size


def _alive(pid: int) -> bool:
    """Whether the process is there and not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command's name (``fields[0]`` is field 3 of
    proc(5), the state); None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def threads(dump: str) -> list[str]:
    """faulthandler's dump, a line a thread: ``thread 0x7f..: sleep (x.py:3) < run (y.py:9)``."""
    found: list[list[str]] = []
    for line in dump.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            found.append([line.split(" (most recent call first)")[0].lower()])
        elif found and (frame := FRAME.match(line)):
            name = os.path.basename(frame["path"])
            found[-1].append(f"{frame['name']} ({name}:{frame['line']})")
    return [f"{t[0]}: {' < '.join(t[1 : STACK_FRAMES + 1])}" for t in found if len(t) > 1]


def session_rss_bytes(sid: int) -> int:
    """Resident memory of every process in session ``sid`` (a run and all it started)."""
    page = os.sysconf("SC_PAGE_SIZE")
    return sum(int(fields[21]) * page for _, fields in _session(sid))  # rss: field 24


def _session(sid: int) -> Iterator[tuple[int, list[str]]]:
    """Each process of session ``sid``: its pid and its :func:`_stat` fields."""
    for entry in os.scandir("/proc"):
        fields = _stat(entry.name) if entry.name.isdigit() else None
        if fields is not None and int(fields[3]) == sid:  # the session: field 6
            yield int(entry.name), fields


def _signal_group(pid: int, sig: int) -> bool:
    """Signal the run's session (its process group); False when nothing is left."""
    try:
        os.killpg(pid, sig)
        return True
    except ProcessLookupError:
        try:
            os.kill(pid, sig)  # not yet in its own session
            return True
        except ProcessLookupError:
            return False


def _watch(
    request: RunRequest,
    pid: int,
    finished: Callable[[float], bool],
    returncode: Callable[[], int | None],
    started_at: float,
) -> Outcome:
    """Wait for a run, stopping it past its timeout or memory limit."""
    timed_out = False
    reason: str | None = None
    peak = 0
    where: tuple[int, str | None] | None = None  # a run that timed out: its output, its stacks
    limit = None if request.max_memory_gb is None else request.max_memory_gb * 1e9
    try:
        while not finished(POLL_S):
            stopping.check(request.stop, f"{request.script} was running")
            # reading every process's /proc/*/stat costs: only when a limit asks for it
            rss = session_rss_bytes(pid) if limit is not None else 0
            peak = max(peak, rss)
            if limit is not None and rss > limit:
                reason = (
                    f"exceeded the memory limit of {request.max_memory_gb:g} GB "
                    f"(resident {rss / 1e9:.2f} GB)"
                )
            elif time.monotonic() - started_at > request.timeout_s:
                timed_out = True
                where = (_size(request.log_path), stacks(pid, request.log_path))
            else:
                continue
            _stop(pid, finished)
            break
    except BaseException:
        _stop(pid, finished)
        raise
    finally:
        _signal_group(pid, signal.SIGKILL)  # whatever the run left in its session goes too
    return Outcome(
        returncode=returncode(),
        timed_out=timed_out,
        wall_s=round(time.monotonic() - started_at, 3),
        verdict=None if timed_out or reason else read_verdict(str(request.verdict_path)),
        log_tail=tail(request.log_path, end=where and where[0]),  # what it wrote, not its stacks
        timeout_s=request.timeout_s,
        reason=reason,
        peak_rss_gb=round(peak / 1e9, 3) if peak else None,
        stacks=where and where[1],
    )


def _stop(pid: int, finished: Callable[[float], bool]) -> None:
    """SIGTERM the run's session, then SIGKILL what is left after a grace period."""
    if _signal_group(pid, signal.SIGTERM) and not finished(GRACE_S):
        _signal_group(pid, signal.SIGKILL)
    finished(GRACE_S)


class SubprocessExecutor:
    """``python3 run.py`` in a fresh interpreter."""

    def ready(self) -> None:
        """Nothing to start: each run is a new interpreter."""

    def run(self, request: RunRequest, started: Callable[[int], None] | None = None) -> Outcome:
        request.verdict_path.unlink(missing_ok=True)
        cpus = list(request.cpus) if request.cpus is not None else None

        def prepare() -> None:  # in the child, between fork and exec
            die_with_parent()
            if cpus is not None:
                os.sched_setaffinity(0, cpus)

        t0 = time.monotonic()
        with request.log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, str(request.script), "--result", str(request.verdict_path)],
                cwd=request.cwd,
                env=request.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=prepare,  # only async-signal-safe calls: prctl, affinity
            )
        if started:
            started(proc.pid)

        def finished(timeout: float) -> bool:
            try:
                proc.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False

        return _watch(request, proc.pid, finished, lambda: proc.returncode, t0)


def _forked_run(
    script: str, argv: list[str], env: dict[str, str], cwd: str, log: str, cpus: list[int] | None
) -> None:
    """The body of a forked run: become ``python3 run.py`` without paying for the imports."""
    # The server's objects (torch's, transformers') are left out of garbage collection: a
    # collection would write to each one (a page copied on write for every page of them)
    gc.freeze()
    os.setsid()
    die_with_parent()
    _let_go_of_the_server()
    _own_resource_tracker()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    hub: Any = sys.modules.get("huggingface_hub.constants")
    if hub is not None:  # read when the server imported it: the run's is offline (prefetched)
        hub.HF_HUB_OFFLINE = hub._is_true(
            env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE")
        )
    if cpus is not None:
        import torch

        os.sched_setaffinity(0, cpus)
        torch.set_num_threads(len(cpus))
    elif env.get("OMP_NUM_THREADS", "").isdigit() and "torch" in sys.modules:
        # the server's torch sized its pool before the run's environment was known
        sys.modules["torch"].set_num_threads(int(env["OMP_NUM_THREADS"]))
    inductor: Any = sys.modules.get("torch._inductor.config")
    if inductor is not None and env.get(COMPILE_THREADS_ENV, "").isdigit():
        # read from the server's environment when it imported inductor; its pool is made later
        inductor.compile_threads = int(env[COMPILE_THREADS_ENV])
    code = _run_as_main(script, argv, env)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _warm_up() -> None:
    """A process forked from the fork server that does nothing: its start proves the server
    ready (:meth:`ForkServerExecutor.ready`)."""


def _let_go_of_the_server() -> None:
    """Close this process's copy of the fork server's "alive" pipe.

    The server stops when its client's end of that pipe closes; every process it forks
    inherits a copy of that end, which would keep it open (and the server, and so this run,
    running) after the sweep's process died."""
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver
    if server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None


def _own_resource_tracker() -> None:
    """Semaphores the run creates are its own business: give it its own resource tracker (a
    process in its session, stopped with it), not the sweep's, which would report them."""
    import multiprocessing.resource_tracker as tracker

    own = tracker.ResourceTracker()
    tracker._resource_tracker = own
    tracker.ensure_running, tracker.register = own.ensure_running, own.register
    tracker.unregister, tracker.getfd = own.unregister, own.getfd


def _run_as_main(script: str, argv: list[str], env: dict[str, str]) -> int:
    """Run *script* as ``__main__`` with *argv*, as ``python3 script`` would; its exit status
    (a traceback or a ``SystemExit`` message on stderr: 1)."""
    import runpy
    import traceback

    sys.argv = [script, *argv]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    # as in a subprocess, the run's PYTHONPATH next: the server's own path is the one it
    # started with, in another sweep's environment perhaps
    sys.path[1:1] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if isinstance(exc.code, int):
            code = exc.code
        elif exc.code is not None:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    return code


class ForkServerExecutor:
    """Runs forked from a warm fork server (torch and transformers already imported)."""

    def __init__(self, preload: Sequence[str] = (*PRELOAD, *compile_imports("inductor"))) -> None:
        self.context = multiprocessing.get_context("forkserver")
        # A CUDA check through NVML does not initialise CUDA in the server (fork-safe).
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        self.preload = tuple(preload)
        self.context.set_forkserver_preload(list(preload))
        self._ready = False

    def ready(self) -> None:
        """The server started (on first use) and its imports done: a no-op process forked from
        it and waited for, once (its start is seconds of imports, never inside a lease)."""
        if not self._ready:
            proc = self.context.Process(target=_warm_up, name="neuronsupport-warm-up")
            proc.start()
            proc.join()
            proc.close()
            self._ready = True

    def run(self, request: RunRequest, started: Callable[[int], None] | None = None) -> Outcome:
        if request.python_path:  # the server's transformers would not see the packages
            return SubprocessExecutor().run(request, started)
        request.verdict_path.unlink(missing_ok=True)
        argv = ["--result", str(request.verdict_path)]
        cpus = list(request.cpus) if request.cpus is not None else None
        args = (
            str(request.script),
            argv,
            dict(request.env),
            str(request.cwd),
            str(request.log_path),
            cpus,
        )
        t0 = time.monotonic()
        proc = self.context.Process(target=_forked_run, args=args, name="neuronsupport-run")
        proc.start()
        assert proc.pid is not None
        if started:
            started(proc.pid)

        def finished(timeout: float) -> bool:
            proc.join(timeout)
            return proc.exitcode is not None

        try:
            return _watch(request, proc.pid, finished, lambda: proc.exitcode, t0)
        finally:
            if proc.exitcode is not None:
                proc.close()


ISOLATIONS: dict[str, type[SubprocessExecutor] | type[ForkServerExecutor]] = {
    "fork": ForkServerExecutor,
    "fresh": SubprocessExecutor,
}


def executor_for(isolation: str, backend: str) -> Executor:
    """The executor ``--neuron-isolation`` names; a fork server also preloads what compiling
    under ``backend`` imports (inductor only where the backend may use it)."""
    if ISOLATIONS[isolation] is SubprocessExecutor:
        return SubprocessExecutor()
    return ForkServerExecutor((*PRELOAD, *compile_imports(backend)))
