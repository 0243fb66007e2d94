"""The sweep's shared services, one object every mode receives: its settings and runners, the
stack and the pair it records into, the ``--neuron-limit`` budget, the core allocator, the
executor (the warm fork server), the English judge, the recorded rows, and how a script runs
isolated on leased cores.

Nothing here knows pytest or a mode: :mod:`pytest_neuronsupport.modes` decides what runs and
what its rows say; this module only provides what every mode shares.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from pytest_neuronsupport.dataset import layout
from pytest_neuronsupport.dataset.files import find_row
from pytest_neuronsupport.dataset.table import Table
from pytest_neuronsupport.hookcalls import Hooks
from pytest_neuronsupport.modellist import ZOO_PREFIX, ModelSpec
from pytest_neuronsupport.pipeline import prefetch, stopping
from pytest_neuronsupport.pipeline.budget import Budget
from pytest_neuronsupport.pipeline.isolate import Executor, Outcome, RunRequest, executor_for
from pytest_neuronsupport.pipeline.leases import CoreAllocator, HostMemoryGate
from pytest_neuronsupport.pipeline.plan import Plan, plan, resolve_checkpoint
from pytest_neuronsupport.pipeline.sizing import size
from pytest_neuronsupport.progress import PhaseMarks
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.runners.lib.protocol import (
    REFERENCE_ENV,
    REFERENCE_FAILED_ENV,
    REFERENCE_ONLY_ENV,
)
from pytest_neuronsupport.runners.lib.warned import library_warnings
from pytest_neuronsupport.settings import Settings
from pytest_neuronsupport.stack import LIBRARY
from pytest_neuronsupport.units import GIB

#: What every run's environment has unless the sweep's says otherwise.
RUN_ENV: dict[str, str] = {
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


class Sweep:
    """One sweep's shared services (created once per process: the controller's, each
    worker's)."""

    def __init__(
        self,
        settings: Settings,
        runners: Runners,
        stack: dict[str, str | None],
        sweep_id: str,
        hooks: Hooks | None = None,
    ) -> None:
        self.settings = settings
        self.runners = runners
        self.stack = stack
        self.sweep_id = sweep_id
        self.hooks = hooks or Hooks()
        self._executor: Executor | None = None
        self._judge: tuple[str | None] | None = None  # (the judge,) once found
        #: One model's plan (and sizing) at a time in this process, and one start of its
        #: executor and its judge: models run at once in its lanes (``--neuron-lanes``), and a
        #: zoo model's build (seeded), a model built on the meta device and a cached value are
        #: the process's.
        self.one_at_a_time = threading.RLock()
        #: Set when the sweep stops (an interrupt, ``-x``): no run starts, those going stop
        #: (:mod:`~pytest_neuronsupport.pipeline.stopping`).
        self.stopping = threading.Event()

    # --- where rows go ------------------------------------------------------------------------

    @cached_property
    def compiler(self) -> tuple[str, str]:
        """The pair's compiler and its version, read from package metadata once a sweep (every
        row and lookup asks for it)."""
        return self.settings.device.compiler(self.settings.backend)

    @property
    def library_version(self) -> str:
        return self.stack.get("library_version") or "unknown"

    @property
    def pair(self) -> str:
        """The pair file this sweep writes, relative to each table's folder."""
        return layout.pair_relpath(*self.compiler, LIBRARY, self.library_version)

    def run_fields(
        self, model_id: str, checkpoint: str, revision: str | None, runner: str
    ) -> dict[str, Any]:
        """What every mode's script is told of the model and the stack it runs on (the
        fields every :class:`~pytest_neuronsupport.pipeline.render.RunParams` has)."""
        s = self.settings
        return {
            "model_id": model_id,
            "checkpoint": checkpoint,
            "runner": runner,
            "device": s.device.name,
            "backend": s.backend,
            "dtype": s.dtype,
            "fullgraph": s.device.fullgraph,
            "revision": revision,
        }

    def recorded(self, table: Table, key: Any) -> dict[str, Any] | None:
        """The row recorded for ``key`` in this sweep's pair of ``table``."""
        return find_row(self.settings.results, self.pair, key, table)

    def run_dir(self, model_id: str) -> Path:
        """Where a model's scripts and their outputs go."""
        return layout.run_dir(self.settings.results, self.pair, model_id)

    # --- shared state -------------------------------------------------------------------------

    @cached_property
    def budget(self) -> Budget:
        """``--neuron-limit``, counted across the sweep's processes."""
        folder = layout.sweeps_dir(self.settings.results)
        return Budget(self.settings.limit, folder, self.sweep_id)

    @cached_property
    def phases(self) -> PhaseMarks:
        """The phase file of the model this process runs, for the controller's status."""
        results, sweep_id = self.settings.results, self.sweep_id
        return PhaseMarks(lambda model_id: layout.phase_file(results, sweep_id, model_id))

    @cached_property
    def allocator(self) -> CoreAllocator:
        """Leases of this machine's cores of the device, shared by every sweep on it."""
        device = self.settings.device
        path = self.settings.leases / f"{device.name}.json"
        return CoreAllocator(path, device.core_count(), stop=self.stopping)

    @cached_property
    def host_memory(self) -> HostMemoryGate:
        """The host memory runs hold, shared by every sweep on this machine."""
        return HostMemoryGate(self.settings.leases / "host-memory.json", stop=self.stopping)

    @property
    def executor(self) -> Executor:
        """The fork server starts with the first run: a sweep that runs nothing never pays."""
        with self.one_at_a_time:
            if self._executor is None:
                self._executor = executor_for(self.settings.isolation, self.settings.backend)
            return self._executor

    @property
    def judge(self) -> str | None:
        """The English judge's checkpoint (a zoo model is built on first use)."""
        with self.one_at_a_time:
            if self._judge is None:
                self._judge = (self.find_judge(),)
            return self._judge[0]

    def find_judge(self) -> str | None:
        """The judge's checkpoint, found (built, fetched) now."""
        value = self.settings.judge
        if value is None:
            return None
        folder = self.settings.workdir / value
        if not value.startswith(ZOO_PREFIX) and folder.is_dir():
            return str(folder.resolve())
        self.phases.mark("judge checkpoint")  # a zoo judge is built here on first use
        with library_warnings():
            judge = resolve_checkpoint(value, None, self.settings.cache)[0]
        prefetch.fetch_judge(judge)  # a Hub judge's files: runs are offline
        return judge

    # --- what every mode does -----------------------------------------------------------------

    def plan(self, spec: ModelSpec, sized: bool = True) -> Plan:
        """The entry's checkpoint, config and runner (or an exclusion), and with ``sized`` the
        cores it gets (or ``too-large``)."""
        s = self.settings
        self.phases.mark("plan")  # a zoo model is built here on first use
        with self.one_at_a_time:  # building models (on the meta device too) is not for threads
            with library_warnings():  # the user's -W error is not the model's FAIL(load)
                planned = plan(spec, s.cache, self.runners)
            self.phases.mark("preparing")  # the script is next
            if not sized:
                return planned
            return size(
                planned,
                max_cores=s.max_cores,
                device_cores=s.device.core_count(),
                core_capacity_gb=s.core_capacity_gb,
            )

    def environment(self, defaults: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
        """A run's environment: the sweep's over ``defaults``, the device's, then ``env``."""
        environment = {**defaults, **os.environ}
        environment.update(self.settings.device.run_env(self.settings.cache))
        environment.update(prefetch.RUN_ENV)  # its files were fetched before: nothing asks the Hub
        for name in (REFERENCE_ENV, REFERENCE_ONLY_ENV, REFERENCE_FAILED_ENV):
            environment.pop(name, None)  # the model's own, in ``env``, or none
        environment.update(env)
        return environment

    def run_isolated(
        self,
        script: Path,
        cores: int,
        overlays: Sequence[Path] = (),
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        names: tuple[str, str] = ("verdict.json", "output.log"),
        defaults: Mapping[str, str] = RUN_ENV,
        step: str = "run",
        host_bytes: int | None = None,
    ) -> Outcome:
        """Lease ``cores``, run ``script`` isolated and pinned, and wait for it: the sweep's
        environment over ``defaults``, the device's, then ``env``; its verdict and log in
        ``names`` beside it; ``timeout_s``: the sweep's own unless given; ``overlays``:
        folders of packages imported before the environment's, the first first; ``step``: what
        the status says it runs (a benchmark's configuration...), before the run's own phase;
        ``host_bytes``: the host memory it needs (:func:`.leases.host_bytes`), held first
        (None: not gated). Only
        :func:`~pytest_neuronsupport.pipeline.modelrun.run_script` calls it."""
        s = self.settings
        environment = self.environment(defaults, env or {})
        self.executor.ready()  # a fork server's start (seconds of imports) holds no core
        with self.memory_held(host_bytes, step) as held:
            waiting = f"waiting for {cores} core{'s' if cores > 1 else ''}"
            self.phases.mark(waiting if step == "run" else f"{step} {waiting}")
            with self.allocator.lease(cores) as lease:
                log = script.parent / names[1]
                log.unlink(missing_ok=True)  # the last run's: its phase marks are not this one's
                self.phases.mark(step, log=log)
                environment.update(s.device.lease_env(lease.cores, s.at_once))
                request = self.request(script, environment, names, timeout_s, overlays)
                request = replace(request, cpus=s.device.cpus(lease.cores))

                def started(pid: int) -> None:
                    self.allocator.add_pid(lease, pid)  # the run holds the lease too
                    self.holds_memory(held, pid)

                return self.executor.run(request, started=started)

    def run_unleased(
        self,
        script: Path,
        overlays: Sequence[Path],
        env: Mapping[str, str],
        names: tuple[str, str],
        host_bytes: int | None = None,
        step: str = "reference",
    ) -> Outcome:
        """Run ``script`` isolated on the host, holding no core (a CPU reference's pass): the
        sweep's environment and ``env``, the sweep's timeout; ``host_bytes`` of host memory
        held (None: not gated); ``step``: what the status says it runs."""
        environment = self.environment(RUN_ENV, env)
        (script.parent / names[1]).unlink(missing_ok=True)
        with self.memory_held(host_bytes, step) as held:
            self.phases.mark(step)
            request = self.request(script, environment, names, None, overlays)
            return self.executor.run(request, started=partial(self.holds_memory, held))

    @contextmanager
    def memory_held(self, host_bytes: int | None, step: str) -> Iterator[Any]:
        """``host_bytes`` of host memory held (None: not gated), the status saying so while
        the run waits for it (``step``: what it runs)."""
        if host_bytes:
            waiting = f"waiting for {host_bytes / GIB:.1f} GiB of host memory"
            self.phases.mark(waiting if step == "run" else f"{step} {waiting}")
        with self.host_memory.hold(host_bytes) as held:
            yield held

    def holds_memory(self, held: Any, pid: int) -> None:
        """A run started under a host-memory hold (None: none): its memory is the hold's use."""
        if held is not None:
            self.host_memory.add_pid(held, pid)

    def request(
        self,
        script: Path,
        environment: dict[str, str],
        names: tuple[str, str],
        timeout_s: float | None,
        overlays: Sequence[Path],
    ) -> RunRequest:
        """The isolated run of ``script`` (not pinned), its verdict and log in ``names``."""
        s = self.settings
        stopping.check(self.stopping, f"{script} was to run")
        return RunRequest(
            script=script,
            cwd=s.workdir,
            env=environment,
            verdict_path=script.parent / names[0],
            log_path=script.parent / names[1],
            timeout_s=timeout_s or s.timeout_s,
            max_memory_gb=s.max_memory_gb,
            python_path=tuple(overlays),
            stop=self.stopping,
        )
