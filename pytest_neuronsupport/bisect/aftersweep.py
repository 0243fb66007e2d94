"""``--neuron-bisect``: after a sweep, which release broke each model that newly fails.

A model *newly fails* when it PASSed where the sweep is compared (the baseline, with
``--neuron-baseline``; else the dataset's previous pair: the same compiler at the newest older
library version, or the same library at the newest older compiler version) and fails now. The
package bisected is the one that moved between that pair and the sweep's: the library
(``transformers``) where its version differs, else the compiler's package (``torch`` under
inductor, ``neuronx-cc`` on Neuron); ``--neuron-bisect-package NAME==GOOD`` names another (a
package of the environment), and its good version. The bad end is the version installed here.
Each model is bisected in turn (:func:`~pytest_neuronsupport.bisect.release.bisect_release`,
its ``run.py`` as the sweep just ran it) within ``--neuron-bisect-max-runs`` runs in all; a
model the budget does not reach is said, not bisected. Rows go to the ``bisect/`` table of the
sweep's pair; the lines go to the sweep's summary.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from pytest_neuronsupport import faults
from pytest_neuronsupport.baseline import Baseline
from pytest_neuronsupport.bisect.ends import Ends
from pytest_neuronsupport.bisect.release import Search, base_of, bisect_release
from pytest_neuronsupport.bisect.report import summary_line
from pytest_neuronsupport.bisect.versions import VersionsError
from pytest_neuronsupport.dataset.layout import run_py_path
from pytest_neuronsupport.pipeline import packages
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.lookup import latest_rows, pairs

#: The package of each compiler's version (a pair's ``<compiler>-<version>``); any other
#: compiler (inductor, aot_eager, a backend of one's own) is versioned by torch's.
COMPILER_PACKAGES = {"neuronxcc": "neuronx-cc"}
_PART = re.compile(r"^(?P<name>.*?)-(?P<version>\d.*)$")


@dataclass
class Bisected:
    """What the bisections after a sweep made: their rows, and the summary's lines."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Against:
    """Where the sweep is compared: the pair, each model's result there, its rows (if any)."""

    pair: str
    results: Mapping[str, str]
    rows: Mapping[str, dict[str, Any]] = field(default_factory=dict)


def _split(part: str) -> tuple[str, str]:
    found = _PART.match(part)
    return (found["name"], found["version"]) if found else (part, "")


def parts(pair: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """``inductor-2.13.0/transformers-5.24.0`` → ((inductor, 2.13.0), (transformers, 5.24.0))."""
    compiler, _, library = pair.removesuffix(".parquet").partition("/")
    return _split(compiler), _split(library)


def _older(a: str, b: str) -> bool:
    try:
        return Version(a) < Version(b)
    except InvalidVersion:
        return False


def previous_pair(results: Path, pair: str) -> str | None:
    """The pair the sweep's is compared with without a baseline: the same compiler at the
    newest older library version, else the same library at the newest older compiler
    version; None when the dataset has neither."""
    (compiler, cv), (library, lv) = parts(pair)
    older_library, older_compiler = [], []
    for known in pairs(results):
        (c, v), (lib, libv) = parts(known)
        if (c, v, lib) == (compiler, cv, library) and _older(libv, lv):
            older_library.append((Version(libv), known))
        elif (c, lib, libv) == (compiler, library, lv) and _older(v, cv):
            older_compiler.append((Version(v), known))
    for found in (older_library, older_compiler):
        if found:
            return max(found)[1]
    return None


def against(results: Path, pair: str, expected: Baseline | None) -> Against | None:
    """Where the sweep of ``pair`` is compared (the module's docstring); None: nowhere."""
    name = expected.pair if expected is not None else previous_pair(results, pair)
    if name is None:
        return None
    known = f"{name}.parquet" if name in pairs(results) else None
    rows = latest_rows(results, known) if known else {}
    if expected is not None:
        return Against(name, {m: e.result for m, e in expected.expected.items()}, rows)
    return Against(name, {m: str(r.get("result")) for m, r in rows.items()}, rows)


def package_and_good(asked: str | None, then: str, now: str) -> tuple[str, str]:
    """The package bisected and its good version (the module's docstring).

    Raises:
        ValueError: nothing says which package moved, or a package named without its version
            is not one the pairs name.
    """
    (compiler, cv0), (library, lv0) = parts(then)
    (_, cv1), (_, lv1) = parts(now)
    compiler_package = COMPILER_PACKAGES.get(compiler, "torch")
    name, _, good = (asked or "").partition("==")
    named = {packages.canonical(library): lv0, packages.canonical(compiler_package): cv0}
    if name and good:
        return name.strip(), good.strip()
    if name:
        if packages.canonical(name) not in named:
            raise ValueError(f"--neuron-bisect-package {name}: give its good version, {name}==V")
        return name.strip(), named[packages.canonical(name)]
    if lv0 != lv1:
        return library, lv0
    if cv0 != cv1:
        return compiler_package, cv0
    raise ValueError(
        f"nothing moved between {then} and {now}: say what to bisect with "
        "--neuron-bisect-package NAME==GOOD"
    )


def newly_failing(rows: Iterable[Mapping[str, Any]], where: Against) -> list[Mapping[str, Any]]:
    """The rows that fail where the model PASSed in ``where``, by model id."""
    return sorted(
        (
            row
            for row in rows
            if str(row.get("result") or "").startswith("FAIL")
            and where.results.get(str(row["model_id"])) == Result.PASS
        ),
        key=lambda row: str(row["model_id"]),
    )


def bisect_new_failures(
    sweep: Sweep,
    rows: Iterable[Mapping[str, Any]],
    expected: Baseline | None,
    say: Callable[[str], None],
) -> Bisected:
    """Bisect each model of ``rows`` (the sweep's) that newly fails (the module's docstring)."""
    s, done = sweep.settings, Bisected()
    where = against(s.results, sweep.pair, expected)
    if where is None:
        done.lines.append("bisect: no baseline and no previous pair to find new failures against")
        return done
    failing = newly_failing(rows, where)
    if not failing:
        done.lines.append(f"bisect: no model newly fails against {where.pair}")
        return done
    try:
        package, good = package_and_good(s.bisect_package, where.pair, sweep.pair)
    except ValueError as exc:
        done.lines.append(f"bisect: {exc}")
        return done
    bad = packages.environment().get(packages.canonical(package))
    if bad is None:
        done.lines.append(f"bisect: {package} is not installed here: nothing to bisect")
        return done
    _each(sweep, failing, where, (package, good, bad), done, say)
    return done


def _each(
    sweep: Sweep,
    failing: list[Mapping[str, Any]],
    where: Against,
    versions: tuple[str, str, str],
    done: Bisected,
    say: Callable[[str], None],
) -> None:
    """Bisect the failing models in turn, within the sweep's budget of runs."""
    s, (package, good, bad) = sweep.settings, versions
    spent = 0
    for row in failing:
        model_id, left = str(row["model_id"]), s.bisect_max_runs - spent
        if left < 2:
            spent_all = f"the {s.bisect_max_runs} runs of --neuron-bisect-max-runs are spent"
            done.lines.append(f"bisect: {model_id}: not bisected ({spent_all})")
            continue
        script = run_py_path(s.results, sweep.pair, model_id)
        text = script.read_text("utf-8") if script.is_file() else str(row.get("run_py") or "")
        said = (f"newly failing against {where.pair}",)
        ends = Ends(
            model_id=model_id,
            package=package,
            good=good,
            bad=bad,
            good_row=where.rows.get(model_id),
            bad_row=dict(row),
            script=text,
            pair=sweep.pair,
            cores=int(row.get("neuron_cores") or 1),
            said=said,
            source=dict(row),
        )
        try:
            report = bisect_release(sweep, ends, Search(max_runs=left), say)
        except VersionsError as exc:
            done.lines.append(f"bisect: {model_id}: {exc}")
            return
        except faults.Fault as exc:
            done.lines.append(f"bisect: stopped: {exc}")
            return
        spent += report.found.runs + report.found.confirm_runs
        done.rows.append(report.row(sweep.stack, base_of(row, sweep)))
        done.lines.append(f"bisect: {summary_line(report)}")
