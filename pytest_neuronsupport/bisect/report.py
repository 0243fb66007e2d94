"""What a bisection found, said three ways: the one-screen answer, a JSON report, and a row of
the ``bisect/`` table (:data:`~pytest_neuronsupport.dataset.bisect.BISECT`).

The answer names the first failing release and the last passing one, the error at each, their
two ``run.py`` and the pip lines that make each environment; then every run in the order it
ran, how many runs binary search needed, what the model is (its architecture and its config's
flags: a flag the failure depends on is read there), and what the search leaves open (skips on
the boundary, a flaky boundary, a budget spent).

Plugin side: no torch.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport.bisect.search import ANSWERED, Found, Status, most_runs
from pytest_neuronsupport.bisect.trial import Trial
from pytest_neuronsupport.dataset.bisect import BISECT
from pytest_neuronsupport.runners.lib.protocol import Result, first_line

#: The report's file, beside the candidates' folders.
REPORT: Final = "bisect.json"


@dataclass
class Report:
    """One bisection across a package's releases."""

    model_id: str
    package: str
    good: str
    bad: str
    #: The releases tried for, oldest first (the ends included).
    candidates: tuple[str, ...]
    found: Found
    #: Each run, in the order it ran (its candidate's trial).
    trials: list[Trial]
    started: datetime
    wall_s: float = 0.0
    #: The pair of the failure bisected (where its row goes) and its folder of runs.
    pair: str = ""
    folder: Path | None = None
    #: The model's architecture, model type and config flags; how the ends were chosen.
    context: dict[str, Any] = field(default_factory=dict)
    #: The bad end's recorded result (the row's result where no run says one).
    recorded: str | None = None

    # --- the answer ---------------------------------------------------------------------------

    def at(self, index: int | None) -> Trial | None:
        """The first trial of a candidate (None: not run)."""
        if index is None:
            return None
        wanted = self.candidates[index]
        return next((t for t in self.trials if t.version == wanted and t.script), None)

    @property
    def first_bad(self) -> str | None:
        return None if self.found.first_bad is None else self.candidates[self.found.first_bad]

    @property
    def last_good(self) -> str | None:
        return None if self.found.last_good is None else self.candidates[self.found.last_good]

    @property
    def first_bad_range(self) -> list[str]:
        """The releases the first failing one is among, where some between could not be
        decided; empty when it is known."""
        between = self.found.between
        if not between or self.found.first_bad is None:
            return []
        return [self.candidates[i] for i in [*between, self.found.first_bad]]

    @property
    def answer(self) -> str:
        """The answer in one line: ``broke in transformers 5.25.0``."""
        p, status = self.package, self.found.status
        if status is Status.FOUND:
            return f"broke in {p} {self.first_bad}"
        if status is Status.RANGE:
            return f"broke in {p} {self.first_bad_range[0]}..{self.first_bad}"
        if status is Status.FLAKY:
            return f"flaky around {p} {self.last_good}..{self.first_bad}: not decided"
        if status is Status.BAD_END_PASSES:
            return f"{p} {self.bad} (the bad end) passes here: nothing to bisect"
        if status is Status.GOOD_END_FAILS:
            return f"{p} {self.good} (the good end) fails here too"
        if status is Status.END_SKIPPED:
            return f"{p}: {'; '.join(self.found.notes)}"
        runs = len(self.trials)
        return f"not decided in {runs} runs: between {p} {self.last_good} and {self.first_bad}"

    def lines(self) -> list[str]:
        """The one-screen answer."""
        first, last = self.at(self.found.first_bad), self.at(self.found.last_good)
        head = f"{self.model_id}: {self.answer}"
        if self.found.status in ANSWERED and self.last_good:
            head += f"; last passing {self.package} {self.last_good}"
        between = max(0, len(self.candidates) - 2)
        f = self.found
        lines = [
            head,
            f"  searched {len(self.candidates)} releases of {self.package} from {self.good} "
            f"(good) to {self.bad} (bad), {between} between: {_count(f.runs, 'run')} (binary "
            f"search needs the 2 ends and at most {_count(most_runs(between), 'step')}), "
            f"{_count(f.skips, 'skip')}, {_count(f.confirm_runs, 're-run')} of the boundary",
        ]
        if self.first_bad_range:
            among, undecided = self.first_bad_range, ", ".join(self.first_bad_range[:-1])
            lines.append(f"  the first failing is one of {', '.join(among)}: {undecided} undecided")
        for label, trial in (("first failing", first), ("last passing", last)):
            if trial is not None:
                lines.extend(_end_lines(label, trial))
        for flaky in self.found.flaky:
            index, was, again = flaky
            lines.append(
                f"  flaky: {self.candidates[index]} was {was}, then {again} when run again"
            )
        lines.extend(f"  note: {note}" for note in self.found.notes)
        lines.append("  runs: " + ", ".join(f"{t.version} {t.outcome}" for t in self.trials))
        lines.extend(f"  {line}" for line in context_lines(self.context))
        if self.folder is not None:
            lines.append(f"  report: {self.folder / REPORT}")
        return lines

    # --- as data ------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The JSON report: the answer, the ends, every run."""
        first, last = self.at(self.found.first_bad), self.at(self.found.last_good)
        return {
            "kind": "release",
            "model_id": self.model_id,
            "package": self.package,
            "answer": self.answer,
            "status": str(self.found.status),
            "good": self.good,
            "bad": self.bad,
            "first_bad": self.first_bad,
            "last_good": self.last_good,
            "first_bad_range": self.first_bad_range,
            "first_bad_run": None if first is None else first.to_dict(),
            "last_good_run": None if last is None else last.to_dict(),
            "pip": {"first_bad": pip_line(first), "last_good": pip_line(last)},
            "candidates": list(self.candidates),
            "runs": self.found.runs,
            "confirm_runs": self.found.confirm_runs,
            "most_steps": most_runs(max(0, len(self.candidates) - 2)),
            "flaky": [
                {"version": self.candidates[i], "first": str(a), "again": str(b)}
                for i, a, b in self.found.flaky
            ],
            "notes": list(self.found.notes),
            "trials": [
                {**t.to_dict(), "place": place}
                for t, place in zip(self.trials, self.places(), strict=True)
            ],
            "context": self.context,
            "pair": self.pair,
            "started": self.started.isoformat(),
            "wall_s": round(self.wall_s, 3),
        }

    @property
    def result(self) -> str:
        """The result of the failure bisected: the first failing's run, else the bad end's,
        else its recorded row's."""
        bad_end = next((t for t in self.trials if t.version == self.bad and t.script), None)
        for trial in (self.at(self.found.first_bad), bad_end):
            if trial is not None and trial.fields.get("result"):
                return str(trial.fields["result"])
        return self.recorded or Result.FAIL_OTHER

    def places(self) -> list[str]:
        """Each trial's place in the search (``bad end``, ``step``...), in order."""
        return [t.place.kind for t in self.found.tried]

    def row(self, stack: Mapping[str, str | None], base: Mapping[str, Any]) -> dict[str, Any]:
        """The ``bisect/`` table's row (``base``: the run fields of the failure's row)."""
        first, last = self.at(self.found.first_bad), self.at(self.found.last_good)
        signature = next((t.signature for t in self.trials if t.signature is not None), None)
        return {
            **{k: v for k, v in base.items() if k in BISECT.schema.names},
            **{k: v for k, v in stack.items() if k in BISECT.schema.names},
            "model_id": self.model_id,
            "kind": "release",
            "package": self.package,
            "status": str(self.found.status),
            "answer": self.answer,
            "good": self.good,
            "bad": self.bad,
            "first_bad": self.first_bad if self.found.status in ANSWERED else None,
            "last_good": self.last_good if self.found.status in ANSWERED else None,
            "first_bad_range": self.first_bad_range or None,
            "flaky": bool(self.found.flaky),
            "candidates": len(self.candidates),
            "runs": self.found.runs,
            "confirm_runs": self.found.confirm_runs,
            "tried": [f"{t.version} {t.outcome}" for t in self.trials],
            "result": self.result,
            "error_bad": None if first is None else first.error or None,
            "signature": None if signature is None else signature.text,
            "result_good": None if last is None else last.fields.get("result"),
            "run_py": _text(first),
            "run_py_good": _text(last),
            "pip_bad": pip_line(first),
            "pip_good": pip_line(last),
            "context": json.dumps(self.context, sort_keys=True, default=str),
            "report": json.dumps(self.to_json(), sort_keys=True, default=str),
            "wall_s": round(self.wall_s, 3),
            "tested_at": self.started,
        }


def _count(number: int, what: str) -> str:
    return f"{number} {what}{'' if number == 1 else 's'}"


def _text(trial: Trial | None) -> str | None:
    if trial is None or trial.script is None or not trial.script.is_file():
        return None
    return trial.script.read_text(encoding="utf-8")


def pip_line(trial: Trial | None) -> str | None:
    """How a person reproduces a trial: its environment made beside theirs, then its script."""
    if trial is None or trial.environment is None or trial.script is None:
        return None
    env = trial.environment
    wanted = " ".join(shlex.quote(r) for r in env.requirements)
    script = shlex.quote(str(trial.script))
    return f"pip install --no-deps {wanted} && python3 {script}"


def _end_lines(label: str, trial: Trial) -> list[str]:
    result = trial.fields.get("result", trial.outcome)
    error = f"  {first_line(trial.error, 160)}" if trial.error else ""
    lines = [f"  {label} {trial.version}: {result}{error}"]
    if trial.signature is not None:
        lines.append(f"    failure: {trial.signature.text}")
    if trial.script is not None:
        lines.append(f"    run.py: {trial.script}")
    if (line := pip_line(trial)) is not None:
        lines.append(f"    reproduce: {line}")
    if trial.environment is not None and trial.environment.folder is not None:
        overlay = shlex.quote(str(trial.environment.folder))
        script = shlex.quote(str(trial.script))
        lines.append(f"    or as the bisection ran it: PYTHONPATH={overlay} python3 {script}")
    return lines


def context_lines(context: Mapping[str, Any]) -> list[str]:
    """The report's context, a line each: the model, its config's flags, how the ends were
    chosen."""
    lines = []
    model = " ".join(str(context[k]) for k in ("architecture", "model_type") if context.get(k))
    if model:
        lines.append(f"model: {model}")
    flags = context.get("config_flags") or {}
    if flags:
        lines.append("config flags: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in flags.items()))
    lines.extend(str(line) for line in context.get("ends", []))
    return lines


def summary_line(report: Report | Mapping[str, Any]) -> str:
    """One line of a sweep's summary for a bisection (a report, or its row)."""
    if isinstance(report, Report):
        runs = report.found.runs + report.found.confirm_runs
        return f"{report.model_id}: {report.answer} ({runs} runs)"
    runs = int(report.get("runs") or 0) + int(report.get("confirm_runs") or 0)
    return f"{report.get('model_id')}: {report.get('answer')} ({runs} runs)"


def flags_of(config: Mapping[str, Any], names: Sequence[str] = ()) -> dict[str, Any]:
    """A config's flags: its top-level booleans (``is_decoder``, ``tie_word_embeddings``...),
    and the values of ``names``."""
    return {
        k: v
        for k, v in sorted(config.items())
        if isinstance(v, bool) or (k in names and isinstance(v, str | int | float))
    }
