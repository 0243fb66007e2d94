"""Running one ``run.py`` isolated, and classifying what happened to it.

Each model runs in a process of its own (its own session, so a hang is killed with everything
it started). Whatever the process does (exits, crashes on a signal, hangs past the timeout),
:func:`run_script` returns an :class:`Outcome` and :func:`classify` turns it into the verdict
fields of a row: the script's own verdict when it wrote one, FAIL(other) with the reason when
it did not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_neuronsupport.results import COLUMNS

PHASE_MARK = "[neuronsupport] phase:"
TAIL_CHARS = 4000
#: Seconds between SIGTERM and SIGKILL when a run is stopped.
GRACE_S = 5.0


@dataclass(frozen=True)
class Outcome:
    """What became of one run's process."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    verdict: dict[str, Any] | None
    log_tail: str
    timeout_s: float | None = None
    reason: str | None = None  # set by executors that stop a run for their own reasons

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    @property
    def phase(self) -> str | None:
        """The last phase the run announced (load, gen, forward, reference)."""
        marks = [ln for ln in self.log_tail.splitlines() if ln.startswith(PHASE_MARK)]
        return marks[-1].removeprefix(PHASE_MARK).strip() if marks else None


def tail(path: Path, chars: int = TAIL_CHARS) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - chars * 4))
            return f.read().decode("utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def read_verdict(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the run's whole process group, then SIGKILL what is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def run_script(
    script: Path,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    verdict_path: Path,
    log_path: Path,
) -> Outcome:
    """Run ``python3 script --result verdict_path`` in a fresh interpreter and wait for it."""
    verdict_path.unlink(missing_ok=True)
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(script), "--result", str(verdict_path)],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(proc)
        except BaseException:
            _stop(proc)
            raise
        finally:
            # Whatever the run left behind in its session (ranks, compiler workers) goes too.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    return Outcome(
        returncode=proc.returncode,
        timed_out=timed_out,
        wall_s=round(time.monotonic() - started, 3),
        verdict=None if timed_out else read_verdict(verdict_path),
        log_tail=tail(log_path),
        timeout_s=timeout_s,
    )


def _traceback_line(text: str) -> str | None:
    """The exception line of the last Python traceback in ``text``, if any."""
    lines = text.strip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback (most recent call last)"):
            after = [ln for ln in lines[i + 1 :] if ln and not ln.startswith((" ", "\t"))]
            return after[-1] if after else None
    return None


def verdict_fields(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """Row fields from a script's verdict: columns as they are, everything else (the numbers
    that decided it, the tokens...) folded into the ``check`` column's JSON object."""
    fields = {k: v for k, v in verdict.items() if k in COLUMNS and k != "check"}
    details = dict(verdict.get("check") or {})
    details.update({k: v for k, v in verdict.items() if k not in COLUMNS})
    fields["check"] = json.dumps(details, sort_keys=True, default=str) if details else None
    return fields


def _reason(outcome: Outcome) -> str:
    """Why a run ended without a verdict (or how its process ended after one)."""
    where = f" during {outcome.phase}" if outcome.phase else ""
    if outcome.reason:
        return outcome.reason + where
    if outcome.timed_out:
        return f"timed out after {outcome.timeout_s:g} s{where}"
    if outcome.signal_name:
        oom = " (out of memory?)" if outcome.signal_name == "SIGKILL" else ""
        return f"killed by {outcome.signal_name}{where}{oom}"
    reason = f"exited with status {outcome.returncode}{where}"
    line = _traceback_line(outcome.log_tail)
    return f"{reason}: {line}" if line else reason


def classify(outcome: Outcome) -> dict[str, Any]:
    """Row fields for an outcome: the script's verdict, or FAIL(other) with the reason.

    A verdict the script wrote stands even if its process then died on the way out (some
    runtimes crash at exit); that death is noted in ``check``.
    """
    if outcome.verdict is not None and not outcome.timed_out and not outcome.reason:
        fields = verdict_fields(outcome.verdict)
        if outcome.returncode != 0:
            details = json.loads(fields["check"] or "{}")
            details["exit_after_verdict"] = _reason(outcome)
            fields["check"] = json.dumps(details, sort_keys=True)
        return fields
    reason = _reason(outcome)
    return {
        "result": "FAIL(other)",
        "notes": reason,
        "error": f"{reason}\n--- output tail ---\n{outcome.log_tail}",
        "wall_s": outcome.wall_s,
    }
