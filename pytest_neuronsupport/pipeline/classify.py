"""Step 6, classify: what a model's test came to, decided in one place.

A row's ``result`` is a :class:`~pytest_neuronsupport.runners.lib.protocol.Result`, decided here
from what happened to the model:

* the plan excluded it: EXCLUDED, with its category in ``exclusion`` and the reason in ``notes``;
* its checkpoint cannot be found: FAIL(load), without a run;
* the packages it needs cannot be installed: FAIL(other) with pip's reason, without a run;
* its run wrote a verdict: the run's own (PASS, or FAIL(load|gen|forward|output), decided in
  ``run.py``), which stands even if the process then died on its way out;
* its run ended without one (a signal, a timeout, too much memory, an exception that escaped):
  FAIL(other), saying how it ended and in which phase;
* the plugin's own code failed, or the xdist worker running it died: FAIL(other);

a run whose load failed for a library transformers says is missing is retried once with it: the
second run decides, and ``notes`` says so. A support row's ``checked_by`` (what its output was
held against: ``cpu``, ``near-tie``, ``judge`` or ``none``) is decided here too, from its
verdict's ``cpu_match``, ``english`` and ``check`` (:func:`checked_by`); an unchecked PASS says
why at the end of ``notes``. A PASS whose run compiled no graph (``compiled`` false) is not a
compiler PASS: every count of rows counts it apart (:func:`compiled_nothing`); the operators a
row ran on the CPU (``cpu_ops``) are said with its result (:func:`cpu_ops_text`). Then the
``pytest_neuronsupport_verdict`` hook may
replace the result (the replaced one is kept in ``check``). In pytest, PASS passes, FAIL(...)
fails and EXCLUDED is skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pytest_neuronsupport.dataset.support import COLUMNS, SUPPORT
from pytest_neuronsupport.dataset.table import Table, row_to_json, validate_row
from pytest_neuronsupport.pipeline.isolate import Outcome
from pytest_neuronsupport.pipeline.packages import PackageError
from pytest_neuronsupport.pipeline.plan import Exclusion
from pytest_neuronsupport.runners.lib.protocol import RANK_PREFIX, Result, first_line

#: How a run's ``check`` says that no judge was in its script
#: (:func:`pytest_neuronsupport.runners.lib.generation.unchecked`).
NO_JUDGE = "none configured"
#: The pytest outcome of each result.
PYTEST_OUTCOMES = {result: "passed" if result is Result.PASS else "failed" for result in Result}
PYTEST_OUTCOMES[Result.EXCLUDED] = "skipped"


def excluded(exclusion: Exclusion) -> dict[str, Any]:
    return {"result": Result.EXCLUDED, "exclusion": exclusion.category, "notes": exclusion.reason}


def load_failed(error: str) -> dict[str, Any]:
    """The checkpoint cannot be found (or its config read): no run."""
    return {"result": Result.FAIL_LOAD, "error": error, "notes": error}


def not_installed(error: PackageError) -> dict[str, Any]:
    """The packages the run needs cannot be installed: FAIL(other) with pip's reason; no run."""
    return {"result": Result.FAIL_OTHER, "notes": first_line(str(error)), "error": error.error}


def retried(fields: Mapping[str, Any], package: str, first: Mapping[str, Any]) -> dict[str, Any]:
    """The row fields of a run retried with ``package``, which its first run's load said was
    missing: the retry's (``fields``), ``notes`` saying so, and a failure's ``error`` followed
    by the first run's."""
    done = dict(fields)
    said = f"retried with {package}"
    done["notes"] = f"{said}: {fields['notes']}" if fields.get("notes") else said
    if done.get("result") != Result.PASS and first.get("error"):
        before = (
            f"--- the first run, without {package}: {first.get('result')} ---\n{first['error']}"
        )
        done["error"] = f"{done.get('error') or ''}\n{before}".lstrip("\n")
    return done


def left_to_a_judge(fields: Mapping[str, Any]) -> bool:
    """Whether a generating run's output went unchecked for want of a judge: a PASS whose CPU
    comparison did not run (its CPU run failed, or did not reproduce itself) and no judge ran."""
    check = fields.get("check")
    details = json.loads(check) if isinstance(check, str) else dict(check or {})
    judge = details.get("judge")
    unjudged = isinstance(judge, str) and judge.startswith(NO_JUDGE)
    return fields.get("result") == Result.PASS and bool(details.get("cpu_comparison")) and unjudged


def judged_again(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The row fields of a run run again with the English judge (its first run's CPU
    comparison did not run): the second run's, ``notes`` saying why."""
    done = dict(fields)
    said = "run again with the judge (the CPU comparison did not run)"
    done["notes"] = f"{said}: {fields['notes']}" if fields.get("notes") else said
    return done


def fail_other(why: str, error: str | None = None) -> dict[str, Any]:
    """The fields of a FAIL(other) row: the run ended without a verdict, or our side failed
    around it (our code, the xdist worker); ``why`` in its notes."""
    return {"result": Result.FAIL_OTHER, "notes": why, "error": error or why}


def ran(outcome: Outcome) -> dict[str, Any]:
    """Row fields for a run's outcome: its verdict, or FAIL(other) saying how it ended; the
    core-seconds it held, whichever."""
    held = {} if outcome.core_s is None else {"core_s": outcome.core_s}
    return {**_ran(outcome), **held}


def _ran(outcome: Outcome) -> dict[str, Any]:
    if outcome.verdict is not None and not outcome.timed_out and not outcome.reason:
        fields = verdict_fields(outcome.verdict)
        if fields.get("result") == Result.FAIL_OTHER and outcome.log_tail:  # e.g. a rank died
            fields["error"] = f"{fields.get('error')}\n--- output tail ---\n{outcome.log_tail}"
        if fields.get("wall_s") is None:
            fields["wall_s"] = outcome.wall_s
        if outcome.returncode != 0:  # some runtimes crash at exit: the verdict stands
            details = json.loads(fields["check"] or "{}")
            details["exit_after_verdict"] = ending(outcome)
            fields["check"] = json.dumps(details, sort_keys=True)
        return fields
    why = ending(outcome)
    hung = f"\n--- where it hung ---\n{outcome.stacks}" if outcome.stacks else ""
    fields = fail_other(why, f"{why}\n--- output tail ---\n{outcome.log_tail}{hung}")
    return {**fields, "wall_s": outcome.wall_s}


def verdict_fields(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """Row fields from a script's verdict: columns as they are, everything else (the numbers
    that decided it, the tokens...) folded into the ``check`` column's JSON object."""
    fields = {k: v for k, v in verdict.items() if k in COLUMNS and k != "check"}
    if fields.get("notes") is None and fields.get("error"):
        fields["notes"] = first_line(fields["error"])
    details = dict(verdict.get("check") or {})
    details.update({k: v for k, v in verdict.items() if k not in COLUMNS})
    fields["check"] = json.dumps(details, sort_keys=True, default=str) if details else None
    if isinstance(numbers := details.get("fp64"), dict):  # float64 decided: its numbers
        fields.update({f"fp64_{k}": numbers.get(k) for k in ("error_device", "error_eager")})
        fields["fp64_tolerance"] = numbers.get("tolerance")
    return fields


#: The results whose output was (or should have been) checked: only they have a ``checked_by``.
CHECKED_RESULTS = (Result.PASS, Result.FAIL_OUTPUT)


def checked_by(fields: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """What a row's output was held against, and, when nothing, why.

    ``cpu_match`` set: the CPU reference (``near-tie`` when it starts with ``~``, else
    ``cpu``); else ``english`` set: the ``judge``; else ``none``, with the reason from
    ``check`` (:func:`unchecked_reason`). Null for results other than PASS and FAIL(output).
    """
    if fields.get("result") not in CHECKED_RESULTS:
        return None, None
    cpu_match, english = fields.get("cpu_match"), fields.get("english")
    if cpu_match:
        return ("near-tie" if str(cpu_match).startswith("~") else "cpu"), None
    if english:
        return "judge", None
    check = fields.get("check")
    details = json.loads(check) if isinstance(check, str) else dict(check or {})
    return "none", unchecked_reason(details)[1]


def unchecked_reason(check: Mapping[str, Any]) -> tuple[str, str]:
    """Why a run's output was not compared, from its ``check``: a short kind the summaries
    group by (``judge unavailable``, ``no judge``, ``CPU reference failed``...) and the whole
    reason."""
    skipped, cpu, judge = check.get("skipped"), check.get("cpu_comparison"), check.get("judge")
    if skipped:  # an encoder whose CPU reference could not run
        kind = "CPU reference failed" if "failed" in str(skipped) else "CPU reference unusable"
        return kind, str(skipped)
    if cpu and isinstance(judge, str):  # a decoder: no CPU comparison, and no judge's answer
        kind = "no judge" if judge.startswith(NO_JUDGE) else "judge unavailable"
        return kind, f"no CPU comparison ({cpu}), {'no judge' if kind == 'no judge' else judge}"
    if cpu:
        return "no CPU comparison", str(cpu)
    return "no output check", "the run compared no output"


def with_checked_by(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with ``checked_by`` set (:func:`checked_by`), an unchecked row's reason at
    the end of ``notes``."""
    value, why = checked_by(fields)
    done = {**fields, "checked_by": value}
    if why is not None:
        said = f"unchecked: {why}"
        done["notes"] = f"{fields['notes']} | {said}" if fields.get("notes") else said
    return done


def unchecked_kind(row: Mapping[str, Any]) -> str | None:
    """A row's short reason for being unchecked (``checked_by`` = ``none``), else None."""
    if row.get("checked_by") != "none":
        return None
    check = row.get("check")
    try:
        details = json.loads(check) if isinstance(check, str) else dict(check or {})
    except ValueError:
        details = {}
    return unchecked_reason(details if isinstance(details, dict) else {})[0]


#: How a PASS whose run compiled no graph is counted, apart from every other PASS.
COMPILED_NOTHING = "PASS compiled nothing"


def compiled_nothing(row: Mapping[str, Any]) -> bool:
    """Whether a row is a PASS whose run compiled no graph (``compiled`` false): the model ran
    as it is, which says nothing of the compiler."""
    return row.get("result") == Result.PASS and row.get("compiled") is False


def cpu_ops_text(row: Mapping[str, Any]) -> str | None:
    """``3 operators on the CPU``: what a row's ``cpu_ops`` adds to its result (None: none ran
    there, or the runtime cannot tell)."""
    ops = row.get("cpu_ops")
    if not ops:
        return None
    return f"{len(ops)} operator{'s' if len(ops) != 1 else ''} on the CPU"


def result_text(row: Mapping[str, Any]) -> str:
    """A row's result as people read it: ``PASS compiled nothing``, ``PASS unchecked``, and
    ``, 3 operators on the CPU`` after it where some ran there."""
    result = str(row.get("result"))
    if compiled_nothing(row):
        result = COMPILED_NOTHING
    elif result == Result.PASS and unchecked_kind(row) is not None:
        result = f"{result} unchecked"
    ops = cpu_ops_text(row)
    return f"{result}, {ops}" if ops else result


def ending(outcome: Outcome) -> str:
    """How a run ended without a verdict (or its process after one), with its last phase."""
    where = f" during {outcome.phase}" if outcome.phase else ""
    if outcome.reason:
        return outcome.reason + where
    if outcome.timed_out:
        return f"timed out after {outcome.timeout_s:g} s{where}"
    if outcome.signal_name:
        oom = " (out of memory?)" if outcome.signal_name == "SIGKILL" else ""
        return f"killed by {outcome.signal_name}{where}{oom}"
    reason = f"exited with status {outcome.returncode}{where}"
    line = last_exception(outcome.log_tail)
    return f"{reason}: {line}" if line else reason


def last_exception(text: str) -> str | None:
    """The exception line of the last Python traceback in ``text``, if any."""
    lines = text.strip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback (most recent call last)"):
            after = [ln for ln in lines[i + 1 :] if ln and not ln.startswith((" ", "\t"))]
            return after[-1] if after else None
    return None


#: dynamo's wrapper of a backend's error: ``BackendCompilerFailed: backend='x' raised:``, then
#: on the next line the backend's own exception.
WRAPPED = re.compile(
    rf"(?P<rank>{RANK_PREFIX.pattern})?"  # a several-core run's failing rank
    r"(?P<wrapper>\w+): (?P<backend>backend=\S+) raised:[ \t]*\n\s*(?P<own>\S.*)"
)


def own_error(error: str | None) -> str | None:
    """``error`` with the backend's own exception first where dynamo wrapped it (the wrapper
    after it, in parentheses), what a reader needs first in pytest's failure text, ``diff``,
    ``lookup`` and the page; the row keeps the text whole, as it was raised."""
    found = WRAPPED.match(error or "")
    if found is None:
        return error
    own = f"{found['rank'] or ''}{found['own']}"
    return f"{own} (through {found['wrapper']} {found['backend']})\n{error}"


def why_failed(row: Mapping[str, Any]) -> str | None:
    """What a reader is told of a failed row: its error, the backend's own first
    (:func:`own_error`); for a FAIL(output), what its check said (how far off, in the check's
    own terms: ``cpu_match``, or the judge's ``english``)."""
    if row.get("result") == Result.FAIL_OUTPUT and not row.get("error"):
        return row.get("cpu_match") or row.get("english")
    return own_error(row.get("error"))


#: What a row that cannot be recorded keeps of itself: not its script's hash, so that the next
#: sweep runs it again (the failure was ours, not the model's).
KEPT = ("model_id", "library", "tested_at", "run_py")


def unrecordable(row: Mapping[str, Any], why: str, table: Table = SUPPORT) -> dict[str, Any]:
    """A row that does not fit its table's schema (a bug of ours, a hook's bad value):
    FAIL(other), keeping what names the model, its key in the table and its run."""
    kept = {key: row.get(key) for key in (*KEPT, *table.key)}
    return row_to_json(validate_row({**kept, **fail_other(why)}, table), table)


def overridden(row: dict[str, Any], result: str | Result, by: str, table: Table = SUPPORT) -> None:
    """Replace the row's result with one a hook decided; the replaced one stays in ``check``
    (and a support row's ``checked_by`` follows the new result)."""
    new = Result(result)  # a ValueError names a result that does not exist
    if new == row["result"]:
        return
    details = json.loads(row.get("check") or "{}")
    details["overridden"] = {"result": str(row["result"]), "by": by}
    row.update(result=new, check=json.dumps(details, sort_keys=True))
    if table is SUPPORT and row.get("checked_by") != checked_by(row)[0]:
        row.update(with_checked_by(row))
