"""Fixtures for the plugin's tests: a shared zoo cache, sweeps (one test's, in its pytester
folder, or shared by several tests), and the order tests are handed to xdist workers in."""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from pytest_neuronsupport import zoo
from pytest_neuronsupport.devices import host_threads
from tests.shared_sweeps import (  # noqa: F401  (fixtures: the sweeps tests of several files read)
    arrive,
    failing_backend_sweep,
    leave,
    perturbed_sweep,
    plain_sweep,
    reruns,
    standin_sweep,
    timeouts,
    tiny_sweep,
    two_core_llama,
)
from tests.sweeping import SweepRunner, run_folder


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before any test: :func:`import_first`; the process is counted among those running
    tests (:func:`~tests.shared_sweeps.arrive`). Not in xdist's controller, which runs none."""
    if runs_tests(session.config):
        share_the_host(session.config)
        import_first()
        arrive(run_folder(session.config._tmp_path_factory))  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The last process of the test run to end kills the background sweeps still running."""
    if runs_tests(session.config):
        leave(run_folder(session.config._tmp_path_factory))  # type: ignore[attr-defined]


def share_the_host(config: pytest.Config) -> None:
    """The test workers share the host's CPUs as a sweep's xdist workers do
    (:func:`~pytest_neuronsupport.devices.host_threads`): each worker's processes compute with
    its share of them, unless the environment sets a thread count. A sweep run by a test does
    not know the other worker computes too: its CPU references, and the tests' own runs in this
    process, would each take every CPU, and OpenMP's threads spin waiting for a CPU the other
    worker holds (measured: a tiny model's forward passes, two such processes on two CPUs,
    take 2.6 times the CPU time of one thread each). Before torch is imported here. Without
    xdist, nothing is set: a sweep shares the CPUs among its own workers."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers > 1:
        os.environ.update(host_threads(workers))


def runs_tests(config: pytest.Config) -> bool:
    """Whether this process runs the suite's tests: not a sweep, nor xdist's controller."""
    controller = bool(config.getoption("numprocesses", None)) and not hasattr(config, "workerinput")
    return not_a_sweep(config) and not controller


def import_first() -> None:
    """Import torch, transformers, pandas and the plugin in every process of the test session,
    outside any test: a module first imported inside a test that uses pytester is dropped from
    ``sys.modules`` when that test ends (pytester restores its snapshot), and a second import
    of torch.distributed's functional collectives registers their operators again (a warning,
    then a RuntimeError). So with pandas' arrow extension types, registered with pyarrow by
    pandas' first read of a parquet file: registered again, they raise ``ArrowKeyError``, or
    a later read builds arrays of the first copy's classes (tests read the dataset with
    ``pd.read_parquet``, some inside a pytester test)."""
    import io

    import pandas as pd
    import transformers.modeling_utils  # noqa: F401  (torch, torch.distributed.tensor)

    parquet = io.BytesIO()
    pd.DataFrame({"a": [1]}).to_parquet(parquet)
    pd.read_parquet(parquet)
    import_the_plugin()
    # What is imported by now lives as long as the process: left out of garbage collection,
    # each full collection (every sweep run in this process ends with one: pytest's
    # unraisable-exception check) no longer walks torch's and transformers' objects (0.25 s each)
    gc.freeze()


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the whole test run, shared by xdist workers (the zoo builds under a lock)."""
    cache = run_folder(tmp_path_factory) / "neuronsupport-cache"
    cache.mkdir(exist_ok=True)
    for name in zoo.names():
        zoo.ensure_built(name, cache)
    return cache


def import_the_plugin() -> None:
    """Every module of the plugin, imported now: the sweeps run in this process
    (tests/sweeping.py) would otherwise import some inside a pytester test, which forgets them
    when it ends, and the next import would make a second copy of their classes. (The
    run-side library, ``runners/lib``, is copied into each run.py and never imported here.)
    So with what the tests' own backends, judges and modes import (torch's inductor: a second
    copy registers its artifacts again, and raises), the sweeps import them by name."""
    import importlib
    import pkgutil

    import pytest_neuronsupport
    import tests.backends_for_tests
    import tests.judges_for_tests
    import tests.modes_for_tests  # noqa: F401

    for module in pkgutil.walk_packages(pytest_neuronsupport.__path__, "pytest_neuronsupport."):
        if ".runners.lib" not in module.name and not module.name.endswith("__main__"):
            importlib.import_module(module.name)


@pytest.fixture
def sweep(
    pytester: pytest.Pytester, zoo_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> SweepRunner:
    """One test's sweeps, in its pytester folder."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return SweepRunner(pytester.path, zoo_cache, pytester=pytester)


@pytest.fixture(scope="session")
def sweep_folder(
    tmp_path_factory: pytest.TempPathFactory, zoo_cache: Path
) -> Callable[..., SweepRunner]:
    """A runner in a new folder of its own, for a sweep that several tests read: made in a
    session-scoped fixture, whose tests share an ``xdist_group`` so that one worker runs it."""

    def folder(name: str, *, own_leases: bool = False, **env: str) -> SweepRunner:
        path = tmp_path_factory.mktemp(name)
        return SweepRunner(
            path, zoo_cache, env={"HF_HUB_OFFLINE": "1", **env}, own_leases=own_leases
        )

    return folder


#: The slow tests' xdist groups and tests (by function), heaviest first (CPU-seconds
#: measured, on the right): handed to the workers in this order (see :class:`GroupScheduling`),
#: then the other slow tests, then the fast ones, so that no long test is left alone at the end.
HEAVIEST_FIRST = (
    "support",  # 300: the tiny list (the README's sweep), the fleet; it starts the timeouts' sweeps
    "real",  # ~250: SmolLM2 dequantized from its GGUF file, its bf16 reference and runs; MiniLM
    "neuron-parity",  # ~230: the bundled lists through the stand-in TorchNeuron, and on the CPU
    "train-search",  # 190: the searches, then twice the cap
    "test_the_commands_of_a_page_run_as_written",  # 150: the pages, two at a time
    "reruns",  # ~120: 75 measured, then llama's eager sweep became inductor's, cold and warm
    "bisect",  # ~95: a sweep that bisects its new failure (5 runs of a tiny encoder), the command
    "test_a_sweep_held_against_its_baseline_names_regressions_and_improvements",  # 90
    "test_a_sample_of_the_architectures_gives_the_expected_results",  # 80: 12 built, swept
    "two-core-llama",  # 75
    "standin",  # ~70: the stand-in TorchNeuron's sweep, then a run.py again
    "raising",  # 62
    "perturbed",  # 56
    "test_a_sweep_of_a_selection_downloads_and_records_the_pinned_revisions",  # 47
    "test_a_miscompiled_op_gives_an_output_failure_whose_repro_shows_the_mismatch",  # 48
    "test_several_cores_are_judged_by_the_english_judge",  # 37
    "test_two_instances_share_one_bucket",  # 29: two stand-in sweeps, one compile cache bucket
    "test_a_hook_adds_a_runner_whose_run_py_stands_alone",  # 30
    "test_the_default_judge_comes_from_the_hub_pinned",  # 25
    "test_one_core_runs_again_with_the_judge_when_its_cpu_run_fails",  # 20
    "test_a_zoo_model_can_judge_and_its_word_is_the_verdict",  # 20
)


#: The group handed out last: the tests waiting for the ``timeouts`` sweeps, started in the
#: background with the first sweep of the ``support`` group (tests/shared_sweeps.py).
LAST = "timeouts"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("neuron_sweep", False):
        return  # a sweep run from the repository: its order is the plugin's

    def rank(item: pytest.Item) -> int:
        marker = item.get_closest_marker("xdist_group")
        names = {getattr(item, "originalname", item.name)}
        if marker is not None:
            names.add(marker.args[0] if marker.args else marker.kwargs.get("name", ""))
        for index, name in enumerate(HEAVIEST_FIRST):
            if name in names:
                return index
        if LAST in names:
            return len(HEAVIEST_FIRST) + 2
        return len(HEAVIEST_FIRST) + (item.get_closest_marker("slow") is None)

    items.sort(key=rank)  # stable: in each rank, the collection's order


class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's ``loadgroup`` as its documentation says it: the tests of one ``xdist_group``
    (those sharing a session-scoped sweep) on one worker, each other test on its own; and the
    work handed out in the collection's order (which puts the heaviest first), not by group
    size. (xdist's own ``loadgroup`` names the group in each test's node id, which pytest 9
    no longer lets it change: its groups are split.) The workers write down each grouped
    test's group (``pytest_collection_finish``), in the file ``GROUPS`` names."""

    def __init__(self, config: pytest.Config, log: Any, groups: Path) -> None:
        super().__init__(config, log)
        self.groups_path = groups
        self.groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self.groups is None:  # the workers have all collected: the file is written
            path = self.groups_path
            self.groups = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        return self.groups.get(nodeid, nodeid)

    def schedule(self) -> None:
        self.config.option.loadscopereorder = False
        super().schedule()


#: The key of ``workerinput`` naming the file of the tests' groups.
GROUPS = "neuronsupport_tests_groups"


def not_a_sweep(config: pytest.Config) -> bool:
    """Not a sweep run from the repository (README): this file is loaded then too, and how a
    sweep's models are spread over workers is the plugin's concern."""
    return not config.getoption("neuron_sweep", False)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n`` (``--dist load``, its default): :class:`GroupScheduling`."""
    if config.getoption("dist") != "load" or not not_a_sweep(config):
        return None
    return GroupScheduling(config, log, groups_file(config))


def groups_file(config: pytest.Config) -> Path:
    basetemp = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return Path(basetemp) / "xdist-groups.json"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Each worker writes the tests' groups where the controller's scheduler reads them."""
    if not_a_sweep(node.config):
        node.workerinput[GROUPS] = str(groups_file(node.config))


@pytest.hookimpl(tryfirst=True)  # before the worker reports its collection
def pytest_collection_finish(session: pytest.Session) -> None:
    path = getattr(session.config, "workerinput", {}).get(GROUPS)
    if path is None:
        return
    groups = {}
    for item in session.items:
        marker = item.get_closest_marker("xdist_group")
        if marker is not None:
            groups[item.nodeid] = str(marker.args[0] if marker.args else marker.kwargs["name"])
    written = Path(f"{path}.{os.getpid()}")
    written.write_text(json.dumps(groups), encoding="utf-8")
    os.replace(written, path)  # each worker writes the same: the last one's is whole
