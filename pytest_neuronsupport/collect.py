"""Collection: a model list file collects one item per model, in list order.

The shape of pytest's own non-Python test example: a file collector yielding custom items with
``runtest``, ``repr_failure`` and ``reportinfo``. An item's test runs the entry's modes in order
(:func:`pytest_neuronsupport.modes.test_entry`), each seeing the outcomes before it; the first
mode's row decides whether the test passes, fails or is skipped
(:func:`pytest_neuronsupport.outcomes.pytest_outcome`), and every outcome goes on the item for
the report.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NoReturn

import pytest

from pytest_neuronsupport import modes as modes_
from pytest_neuronsupport import outcomes
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.modes import Mode
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.records import ModeOutcome


class ModelFailure(Exception):
    """A model's test failed; the message is the whole failure text."""


def skip_model(reason: str) -> NoReturn:
    """Skip a model's test; its report is then named by the test, at no line
    (:func:`.outcomes.attach`), not at this line: pytest's own item location would need the
    entry's line, which an entry of an inline list (``model = [{...}]``) has not."""
    raise pytest.skip.Exception(reason)


class ModelListFile(pytest.File):
    """A model list (``*.toml``) named by ``--neuron-models`` or the ``neuron_models`` ini key."""

    def __init__(
        self,
        *,
        sweep: Sweep,
        modes: Sequence[Mode],
        specs: Sequence[ModelSpec],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sweep = sweep
        self.modes = modes
        #: Its entries, parsed and checked as the sweep was configured
        #: (:func:`~pytest_neuronsupport.modellist.parse_lists`).
        self.specs = specs

    @classmethod
    def of(
        cls,
        parent: pytest.Collector,
        path: Path,
        sweep: Sweep,
        modes: Sequence[Mode],
        specs: Sequence[ModelSpec],
    ) -> ModelListFile:
        """The collector of the list at ``path``, its node id from :func:`list_nodeid`."""
        nodeid = list_nodeid(path, parent.config.rootpath)
        found: ModelListFile = cls.from_parent(
            parent, path=path, nodeid=nodeid, sweep=sweep, modes=modes, specs=specs
        )
        return found

    def collect(self) -> Iterator[ModelItem]:
        for spec in self.specs:
            wanted = modes_.modes_for(spec, self.modes, self.sweep.settings)
            yield ModelItem.from_parent(
                self, name=spec.id, spec=spec, sweep=self.sweep, modes=wanted
            )


def list_nodeid(path: Path, rootpath: Path) -> str:
    """A list file's node id: its path from pytest's rootdir, else (a list outside it, such
    as a bundled one when pytest runs outside the clone) its absolute path; never the empty
    id pytest gives a file that is itself a command-line argument outside the rootdir."""
    try:
        return path.resolve().relative_to(rootpath.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


class ModelItem(pytest.Item):
    """One model's test: its modes in order, then passed, failed or skipped by the first."""

    def __init__(
        self, *, spec: ModelSpec, sweep: Sweep, modes: Sequence[Mode], **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.sweep = sweep
        self.modes = list(modes)
        #: What each mode came to, in order (the report carries them to the session).
        self.outcomes: list[ModeOutcome] = []
        #: Its modes' run, started in a lane before pytest reached the item (``--neuron-lanes``:
        #: :mod:`.lanes`); None: they run in :meth:`runtest`.
        self.ahead: Future[None] | None = None
        self.add_marker("neuronsupport")

    def run_modes(self) -> None:
        """Its modes in order, each outcome kept as its mode ends (the report carries them);
        its phase file says what it does meanwhile (for the status)."""
        with self.sweep.phases.running(self.name):
            for outcome in modes_.test_entry(self.modes, self.sweep, self.spec):
                self.outcomes.append(outcome)

    def runtest(self) -> None:
        if self.ahead is None:
            self.run_modes()
        else:
            self.ahead.result()  # what went wrong in its lane is raised here
        decided = outcomes.pytest_outcome(self.outcomes)
        self.user_properties.extend(decided.properties)
        if decided.outcome == "failed":
            raise ModelFailure(decided.text)
        if decided.outcome == "skipped":
            skip_model(decided.text)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:  # type: ignore[override]
        if isinstance(excinfo.value, ModelFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, self.spec.line - 1 if self.spec.line else None, f"model {self.spec.id}"


def deselect(config: pytest.Config, items: list[pytest.Item], keep: set[str]) -> None:
    """Keep the model items of ``keep`` (and every other item); deselect the rest."""
    kept = [i for i in items if not isinstance(i, ModelItem) or i.spec.id in keep]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


def model_ids(items: Sequence[pytest.Item]) -> list[str]:
    """The models of the collected items, in order."""
    return [item.spec.id for item in items if isinstance(item, ModelItem)]
