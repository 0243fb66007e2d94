"""Bisecting a model across a package's releases: which release broke it.

From its :class:`~pytest_neuronsupport.bisect.ends.Ends` (the versions, the model's script),
the releases between them come from pip's index (:mod:`.versions`); each candidate's
environment is made once (:mod:`.environments`) and the model's script runs there as a sweep
runs it (:mod:`.trial`); the search (:mod:`.search`) picks the candidates, the bad end first (its
failure is the one bisected: a later run is *bad* only when it fails the same way). Progress is
said as it goes (``say``: a line each): the candidate, its place in the search, the steps left,
what it came to. The answer is a :class:`~pytest_neuronsupport.bisect.report.Report`, also
written as JSON beside the candidates' folders (``bisect.json``).

Plugin side: no torch (the runs import it in their own processes).
"""

from __future__ import annotations

import ast
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_neuronsupport.bisect import environments, versions
from pytest_neuronsupport.bisect.ends import Ends, column_of
from pytest_neuronsupport.bisect.outcomes import Outcome, Signature, signature
from pytest_neuronsupport.bisect.report import REPORT, Report, flags_of
from pytest_neuronsupport.bisect.search import Place, most_runs, search
from pytest_neuronsupport.bisect.trial import Trial, candidate_script, run_trial, with_checkpoint
from pytest_neuronsupport.dataset import layout
from pytest_neuronsupport.dataset.durable import atomic_write_text
from pytest_neuronsupport.dataset.table import STACK_COLUMNS
from pytest_neuronsupport.pipeline import packages
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.stack import LIBRARY

#: Says a line of progress.
Say = Callable[[str], None]
#: Where a bisection's candidates run, under the model's run folder.
FOLDER = "bisect"
#: What a bisection row takes from the row of the failure it bisects.
BASE_COLUMNS = ("library", "device", "backend", "compiler", "compiler_version")


@dataclass(frozen=True)
class Search:
    """How to search: failures of another kind counted as bad, the most runs, the boundary
    run again."""

    otherwise_bad: bool = False
    max_runs: int | None = None
    confirm: bool = True


def folder_of(results: Path, ends: Ends) -> Path:
    """Where the candidates of a bisection run: ``runs/<pair>/<model>/bisect/<package>/``."""
    run_dir = layout.run_dir(results, ends.pair, ends.model_id)
    return run_dir / FOLDER / packages.canonical(ends.package)


class _Candidates:
    """Tries the candidates the search asks for (the module's docstring): each one's
    environment, its script run there, its trial kept, its progress said."""

    def __init__(self, sweep: Sweep, ends: Ends, candidates: tuple[str, ...], say: Say) -> None:
        self.sweep, self.ends, self.candidates, self.say = sweep, ends, candidates, say
        self.folder = folder_of(sweep.settings.results, ends)
        self.text = with_checkpoint(ends.script, ends.model_id, sweep.settings.cache)
        column = column_of(ends.package)
        self.column = column if column in STACK_COLUMNS else None
        self.trials: list[Trial] = []
        self.target: list[Signature] = []  # the bad end's failure, once it has run

    def __call__(self, index: int, place: Place) -> Outcome:
        ends, version = self.ends, self.candidates[index]
        self.say(progress(ends.package, version, place, self.candidates))
        cache = self.sweep.settings.cache
        environment = environments.candidate(ends.package, version, cache, ends.pins)
        self.say(f"    its environment: {environment.said}")
        if environment.skip is not None:
            tried = Trial(version, Outcome.SKIP, environment=environment, why=environment.skip)
        else:
            script = self.folder / version / "run.py"
            wanted = self.target[0] if self.target else None
            text = candidate_script(self.text, ends.package, version, self.column)
            tried = run_trial(self.sweep, script, text, ends.cores, environment, wanted)
            if place.kind == "bad end" and tried.signature is not None:
                self.target.append(tried.signature)
        self.trials.append(tried)
        self.say(f"    {tried.outcome}: {came_to(tried)}")
        return tried.outcome


def bisect_release(sweep: Sweep, ends: Ends, how: Search = Search(), say: Say = print) -> Report:
    """Bisect ``ends``'s model over its package's releases (the module's docstring).

    Raises:
        ~pytest_neuronsupport.bisect.versions.VersionsError: the ends are no versions, or in
            the wrong order, or the index has no release of the package.
        ~pytest_neuronsupport.faults.Fault: pip's index could not be reached.
    """
    started, t0 = datetime.now(UTC), time.monotonic()
    candidates = versions.releases(ends.package, ends.good, ends.bad).versions
    between = len(candidates) - 2
    say(
        f"bisect {ends.model_id} over {ends.package}: {len(candidates)} releases from "
        f"{ends.good} (good) to {ends.bad} (bad), {between} between: at most "
        f"{2 + most_runs(between)} runs, then the boundary again"
    )
    tried = _Candidates(sweep, ends, candidates, say)
    found = search(
        len(candidates),
        tried,
        otherwise_bad=how.otherwise_bad,
        max_runs=how.max_runs,
        confirm=how.confirm,
    )
    report = Report(
        model_id=ends.model_id,
        package=ends.package,
        good=ends.good,
        bad=ends.bad,
        candidates=tuple(candidates),
        found=found,
        trials=tried.trials,
        started=started,
        wall_s=time.monotonic() - t0,
        pair=ends.pair,
        folder=tried.folder,
        context=context(ends, tried.text, tried.target),
        recorded=(ends.bad_row or {}).get("result"),
    )
    tried.folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report.to_json(), indent=1, default=str) + "\n"
    atomic_write_text(tried.folder / REPORT, text)
    return report


def progress(package: str, version: str, place: Place, candidates: tuple[str, ...]) -> str:
    """A run's progress line: its number, its place in the search, what is left."""
    line = f"  run {place.run}, {place.kind}: {package} {version}"
    if place.kind == "step":
        low, high = candidates[place.low], candidates[place.high]
        line += (
            f" ({place.left} other release{'s' if place.left != 1 else ''} undecided between "
            f"{low} and {high}; at most {place.most} more step{'s' if place.most != 1 else ''})"
        )
    return line


def came_to(tried: Trial) -> str:
    """What a trial came to, in a few words."""
    if tried.why is not None:
        return tried.why
    said = tried.fields.get("result") or "no result"
    if tried.signature is not None:
        said = tried.signature.text
    wall = tried.fields.get("wall_s")
    return f"{said}" + (f" ({wall:.1f} s)" if isinstance(wall, int | float) else "")


def context(ends: Ends, script: str, target: list[Signature]) -> dict[str, Any]:
    """What a reader needs beside the answer: the model (its architecture, model type and the
    flags of its checkpoint's config), how the ends were chosen, whether the bad end failed
    the way its row recorded."""
    row = ends.bad_row or ends.good_row or ends.source or {}
    said = list(ends.said)
    recorded = signature(ends.bad_row) if ends.bad_row else None
    if recorded is not None and target and recorded != target[0]:
        said.append(f"the bad end's row recorded {recorded.text}; here it fails {target[0].text}")
    return {
        "architecture": row.get("architecture"),
        "model_type": row.get("model_type"),
        "config_flags": flags_of(checkpoint_config(script)),
        "ends": said,
    }


def checkpoint_config(script: str) -> dict[str, Any]:
    """The ``config.json`` of a script's checkpoint, where it is a local folder ({} else)."""
    found = re.search(r"'checkpoint': ('(?:[^'\\]|\\.)*')", script)
    if found is None:
        return {}
    path = Path(ast.literal_eval(found[1])) / "config.json"
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def base_of(row: Mapping[str, Any] | None, sweep: Sweep) -> dict[str, Any]:
    """The run fields of a bisection's row: its failure's row's, else this sweep's."""
    if row is not None:
        return {k: row.get(k) for k in BASE_COLUMNS}
    compiler_name, version = sweep.compiler
    s = sweep.settings
    return {
        "library": LIBRARY,
        "device": s.device.name,
        "backend": s.backend,
        "compiler": compiler_name,
        "compiler_version": version,
    }
