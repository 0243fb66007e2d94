"""A sweep's progress: one line per finished model, and a status with an estimate of the time left.

Plain state and text, no pytest: :class:`~pytest_neuronsupport.display.ProgressDisplay` writes
the lines through pytest's terminal reporter (on a terminal the status stays on one line; in a
log it is a plain line now and then).

The time left is estimated from costs: a model's cost is its recorded ``wall_s`` for this pair
when the dataset has one, else the mean of the costs known (recorded, or measured in this
sweep). The elapsed time per unit of cost so far (which folds in parallel workers, process
start-up and compile caches) times the cost of the models left is the estimate; a model running
now counts with what its cost has left (its cost against the time its run has taken, both
measured from the run's start), and the estimate is never lower than what a running model's run
already took (one that ran this long may well run as long again).

What runs now: the process that runs a model (the only one, or an xdist worker) keeps a small
*phase file* per model it runs (:class:`PhaseMarks`, under the sweep's folder named by
:func:`~pytest_neuronsupport.dataset.layout.phase_file`): the model, since when, its step (the
plan, a benchmark's configuration...) and the log of the run it waits for, whose last phase mark
(``[neuronsupport] phase: gen``) is the run's phase. The controller reads the folder
(:func:`read_running`) and a :class:`Ticker` shows the status: on a terminal it ticks each
second on the last line; in a log it is plain lines (a line when a model starts, the status now
and then).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_neuronsupport.runners.lib.protocol import PHASE_MARK, Result

#: What a model that was not run again (its run.py unchanged) counts as.
UNCHANGED = "unchanged"


def duration(seconds: float) -> str:
    """``"42s"``, ``"3m05s"``, ``"2h07m"``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def row_line(row: Mapping[str, Any], more: Iterable[str] = ()) -> str:
    """A finished model: result, id, cores and wall time (and ``more`` facts of its table)."""
    cores = row.get("neuron_cores")
    facts = [f"{cores} core{'s' if cores != 1 else ''}" if cores else None]
    if row.get("wall_s") is not None:
        facts.append(f"{row['wall_s']:.1f}s")
    facts.extend(more)
    details = ", ".join(fact for fact in facts if fact)
    return f"{row['result']:<13} {row['model_id']}" + (f"  ({details})" if details else "")


@dataclass
class Progress:
    """Which models are done, how they ended, and how long the rest should take."""

    #: The models of the sweep (collected, after deselection), in order.
    models: list[str]
    #: Recorded ``wall_s`` of models of this pair (models without one are absent).
    recorded: dict[str, float] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    started: float = 0.0
    #: model → its result, or :data:`UNCHANGED`.
    done: dict[str, str] = field(default_factory=dict)
    #: Wall times measured in this sweep.
    measured: dict[str, float] = field(default_factory=dict)
    #: The models running now (:func:`read_running`), as last read.
    running: list[Running] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.started = self.started or self.clock()

    def finished(self, model_id: str, result: str, wall_s: float | None = None) -> None:
        """A model ended with ``result`` (or :data:`UNCHANGED`: not run again)."""
        self.done[model_id] = result
        if wall_s is not None:
            self.measured[model_id] = wall_s

    def _cost(self, model_id: str, mean: float) -> float:
        if self.done.get(model_id) == UNCHANGED:
            return 0.0  # not run again: no time spent
        return self.measured.get(model_id, self.recorded.get(model_id, mean))

    def running_now(self) -> list[Running]:
        """The models running now that have not finished."""
        return [r for r in self.running if r.model_id not in self.done]

    def seconds_left(self) -> float | None:
        """The estimate of the time left (None until a cost is known)."""
        known = list({**self.recorded, **self.measured}.values())
        running = {r.model_id: r.run_elapsed or 0.0 for r in self.running_now()}
        if not known:
            return None
        mean = sum(known) / len(known)
        spent = sum(self._cost(m, mean) for m in self.done)
        if spent <= 0 and not running:
            return None
        # sweep time per unit of cost: measured once something ran, else the workers running
        rate = (self.clock() - self.started) / spent if spent > 0 else 1 / max(1, len(running))
        waiting = [m for m in self.models if m not in self.done and m not in running]
        left = sum(self._cost(m, mean) for m in waiting)
        left += sum(max(self._cost(m, mean) - took, 0.0) for m, took in running.items())
        return max(rate * left, *running.values(), 0.0)

    def counts(self) -> str:
        """``"3 PASS, 1 FAIL(gen), 2 unchanged"`` in the order of :class:`Result`."""
        counts = Counter(self.done.values())
        order = [*(r.value for r in Result), UNCHANGED]
        order += sorted(set(counts) - set(order))
        return ", ".join(f"{counts[r]} {r}" for r in order if counts[r])

    def status_line(self) -> str:
        """``"[4/14] 3 PASS, 1 FAIL(gen) | 1m02s elapsed | ~3m10s left | running: zoo:llama
        gen 12s"``."""
        total = max(len(self.models), len(self.done))
        parts = [f"[{len(self.done)}/{total}] {self.counts() or 'starting'}"]
        parts.append(f"{duration(self.clock() - self.started)} elapsed")
        left = self.seconds_left()
        if left is not None and len(self.done) < total:
            parts.append(f"~{duration(left)} left")
        running = self.running_now()
        if running:
            parts.append("running: " + ", ".join(r.text() for r in running))
        return " | ".join(parts)

    def milestone(self) -> bool:
        """Whether the last model finished crossed a tenth of the sweep (or ended it)."""
        total, done = max(len(self.models), 1), len(self.done)
        return done * 10 // total != (done - 1) * 10 // total or done == total


def recorded_costs(models: Iterable[str], find: Callable[[str], Any]) -> dict[str, float]:
    """The recorded ``wall_s`` of each model that has one (``find`` gives its row or None)."""
    costs: dict[str, float] = {}
    for model_id in models:
        row = find(model_id)
        if row is not None and row.get("wall_s") is not None and row["result"] != Result.EXCLUDED:
            costs[model_id] = float(row["wall_s"])
    return costs


@dataclass(frozen=True)
class Running:
    """A model running now: what it does, and for how long it has run."""

    model_id: str
    phase: str
    #: Since the model's test started.
    elapsed: float
    #: Since the run it waits for started (None: no run yet), comparable to its cost.
    run_elapsed: float | None = None

    def text(self) -> str:
        """``"zoo:llama gen 12s"``."""
        return f"{self.model_id} {self.phase} {duration(self.elapsed)}"


def last_phase(log: Path, chars: int = 65536) -> str | None:
    """The last phase a run announced in its log (``[neuronsupport] phase: gen``), or None."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - chars))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    marks = [ln for ln in text.splitlines() if ln.startswith(PHASE_MARK)]
    return marks[-1].removeprefix(PHASE_MARK).strip() if marks else None


@dataclass
class Marked:
    """The model a thread runs now, since when, and since when its run."""

    model_id: str
    since: float
    run_since: float | None = None


@dataclass
class PhaseMarks:
    """The phase files of the models this process runs: one at a time in each thread that runs
    models (a process of several ``--neuron-lanes``, one a lane), each its model, since when,
    its step, and the log of the run it waits for."""

    #: A model's phase file (:func:`~pytest_neuronsupport.dataset.layout.phase_file`).
    path_of: Callable[[str], Path]
    clock: Callable[[], float] = time.time
    _threads: threading.local = field(default_factory=threading.local, repr=False)

    @property
    def current(self) -> Marked | None:
        """The model this thread runs now (None: none)."""
        marked: Marked | None = getattr(self._threads, "marked", None)
        return marked

    @contextmanager
    def running(self, model_id: str) -> Iterator[None]:
        """While ``model_id`` runs in this thread: its file says so; gone when it ends."""
        self._threads.marked = Marked(model_id, self.clock())
        self.mark("starting")
        try:
            yield
        finally:
            with suppress(OSError):  # a file left behind goes with the sweep's folder
                self.path_of(model_id).unlink(missing_ok=True)
            self._threads.marked = None

    def mark(self, step: str, log: Path | None = None) -> None:
        """The step now of the model this thread runs (``log``: the run's, whose phase marks
        follow)."""
        marked = self.current
        if marked is None:
            return
        path = self.path_of(marked.model_id)
        marked.run_since = None if log is None else self.clock()
        data: dict[str, Any] = {"model_id": marked.model_id, "since": marked.since, "step": step}
        data.update(log=None if log is None else str(log), run_since=marked.run_since)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{os.getpid()}")
            temporary.write_text(json.dumps(data), encoding="utf-8")
            temporary.replace(path)  # a reader never sees half a file
        except OSError:
            pass  # the status misses a step; the sweep goes on


def read_running(folder: Path, now: float | None = None) -> list[Running]:
    """The models running now, from the phase files in ``folder`` (as :class:`PhaseMarks`
    writes them), oldest first: each its step, and its run's last phase mark."""
    now = time.time() if now is None else now
    found: list[Running] = []
    try:
        names = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    except OSError:
        return found
    for path in names:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            model_id, since, step = str(data["model_id"]), float(data["since"]), str(data["step"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # gone meanwhile, or not one of ours
        mark = last_phase(Path(data["log"])) if data.get("log") else None
        if step == "run":  # the support run: its own phases
            step = "starting" if mark is None else ""
        phase = f"{step} {mark or ''}".strip()
        run_since = data.get("run_since")
        run = None if run_since is None else max(0.0, now - float(run_since))
        found.append(Running(model_id, phase, max(0.0, now - since), run))
    return sorted(found, key=lambda r: -r.elapsed)


def terminal_writer(file: Any) -> Callable[[str], None]:
    """Writes to where ``file`` (the terminal reporter's) goes, through a file descriptor of its
    own: pytest points fd 1 elsewhere while a test runs (output capture), not this one; a file
    without a descriptor (pytest run in-process) is written as it is."""
    try:
        fd = os.dup(file.fileno())
    except (AttributeError, OSError, ValueError):

        def write_file(text: str) -> None:
            file.write(text)
            file.flush()

        return write_file

    def write(text: str) -> None:
        os.write(fd, text.encode("utf-8", errors="replace"))

    return write


#: Clears a terminal's line before the status is written again.
CLEAR_LINE = "\r\x1b[K"


@dataclass
class Ticker:
    """Shows a sweep's progress as it goes: a finished model's line (:meth:`finished`) and the
    status (:meth:`tick`). On a terminal the status is the last line, written again each tick
    (a thread ticks every ``every`` seconds, :meth:`start`); in a log (``tty`` false) nothing
    is written again: a line when a model starts running, the status each ``plain_every``
    seconds and at each tenth of the sweep."""

    progress: Progress
    #: The models running now (:func:`read_running` of the sweep's folder).
    running: Callable[[], list[Running]]
    #: Writes text where the person looks (the terminal's own file descriptor).
    write: Callable[[str], None]
    tty: bool
    #: The terminal's width: a status wider would wrap, and could not be written again.
    width: int = 80
    every: float = 1.0
    plain_every: float = 60.0
    clock: Callable[[], float] = time.monotonic
    announced: set[str] = field(default_factory=set)
    last_status: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def status(self) -> str:
        line = self.progress.status_line()
        return line if len(line) < self.width else line[: self.width - 4] + "..."

    def tick(self) -> None:
        """Read what runs now; on a terminal, write the status again; in a log, a line for each
        model that started since, and the status when it has not been written for a while."""
        with self._lock:
            self.progress.running = self.running()
            if self.tty:
                self.write(CLEAR_LINE + self.status())
                return
            lines = []
            for running in self.progress.running_now():
                if running.model_id not in self.announced:
                    self.announced.add(running.model_id)
                    lines.append(f"{'running':<13} {running.model_id}  ({running.phase})")
            now = self.clock()
            if self.last_status is None:
                self.last_status = now
            elif now - self.last_status >= self.plain_every:
                lines.append(self.progress.status_line())
                self.last_status = now
            if lines:
                self.write("".join(f"{line}\n" for line in lines))

    def finished(self, line: str) -> None:
        """A model's line (after :meth:`Progress.finished`), and the status after it."""
        with self._lock:
            self.progress.running = self.running()
            if self.tty:
                self.write(f"{CLEAR_LINE}{line}\n{self.status()}")
            elif self.progress.milestone():
                self.write(f"{line}\n{self.progress.status_line()}\n")
                self.last_status = self.clock()
            else:
                self.write(f"{line}\n")

    def start(self) -> None:
        """Tick every :attr:`every` seconds in a thread of its own, until :meth:`stop`."""
        self.tick()
        self._thread = threading.Thread(target=self._loop, name="neuronsupport-status")
        self._thread.daemon = True
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.tick()
            except Exception:  # a status that cannot be shown must not end a sweep
                pass

    def stop(self) -> None:
        """Stop ticking; on a terminal, the status ends its line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self.tty:
                with self._lock:
                    self.write("\n")
