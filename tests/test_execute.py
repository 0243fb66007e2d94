"""Running scripts isolated and classifying how they ended: real processes, real signals."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

from pytest_neuronsupport.execute import Outcome, classify, run_script

PHASE = "[neuronsupport] phase:"


def run(tmp_path: Path, body: str, timeout_s: float = 30.0) -> Outcome:
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(body))
    return run_script(
        script,
        cwd=tmp_path,
        env=dict(os.environ),
        timeout_s=timeout_s,
        verdict_path=tmp_path / "verdict.json",
        log_path=tmp_path / "output.log",
    )


VERDICT = """
    import json, sys
    print("{phase} load", flush=True)
    path = sys.argv[sys.argv.index("--result") + 1]
    verdict = {{"result": "FAIL(output)", "cpu_match": "N at token 3", "runner": "dense",
               "first_divergence": 3, "tokens": [1, 2], "check": {{"rule": "tokens"}}}}
    open(path, "w").write(json.dumps(verdict))
"""


def test_a_verdict_becomes_row_fields_and_extra_numbers_go_to_check(tmp_path: Path) -> None:
    outcome = run(tmp_path, VERDICT.format(phase=PHASE))
    assert outcome.returncode == 0 and outcome.phase == "load"
    fields = classify(outcome)
    assert fields["result"] == "FAIL(output)"
    assert fields["first_divergence"] == 3 and fields["cpu_match"] == "N at token 3"
    assert json.loads(fields["check"]) == {"rule": "tokens", "tokens": [1, 2]}
    assert "tokens" not in fields


def test_a_verdict_followed_by_a_crash_at_exit_stands(tmp_path: Path) -> None:
    body = VERDICT.format(phase=PHASE) + "\n    import os; os.abort()\n"
    fields = classify(run(tmp_path, body))
    assert fields["result"] == "FAIL(output)"
    assert json.loads(fields["check"])["exit_after_verdict"] == "killed by SIGABRT during load"


def test_an_uncaught_exception_is_fail_other_with_its_last_line(tmp_path: Path) -> None:
    body = f"""
        print("{PHASE} gen", flush=True)
        raise ValueError("boom in the runner")
    """
    fields = classify(run(tmp_path, body))
    assert fields["result"] == "FAIL(other)"
    assert fields["notes"] == "exited with status 1 during gen: ValueError: boom in the runner"
    assert "Traceback (most recent call last)" in fields["error"]


def test_a_segfault_is_fail_other_naming_the_signal_and_phase(tmp_path: Path) -> None:
    body = f"""
        import os, signal
        print("{PHASE} forward", flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    """
    fields = classify(run(tmp_path, body))
    assert fields["notes"] == "killed by SIGSEGV during forward"


def test_a_sigkill_is_reported_as_a_likely_out_of_memory(tmp_path: Path) -> None:
    body = """
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
    """
    assert classify(run(tmp_path, body))["notes"] == "killed by SIGKILL (out of memory?)"


def test_a_hang_is_stopped_with_everything_it_started(tmp_path: Path) -> None:
    body = f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open("child.pid", "w").write(str(child.pid))
        print("{PHASE} gen", flush=True)
        time.sleep(600)
    """
    started = time.monotonic()
    outcome = run(tmp_path, body, timeout_s=2)
    assert time.monotonic() - started < 20
    fields = classify(outcome)
    assert fields["result"] == "FAIL(other)"
    assert fields["notes"] == "timed out after 2 s during gen"
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists():
        time.sleep(0.05)  # reaped by init once killed
    status = Path(f"/proc/{child}/status")
    assert not status.exists() or "zombie" in status.read_text()


def test_a_stale_verdict_from_an_earlier_run_is_not_reused(tmp_path: Path) -> None:
    (tmp_path / "verdict.json").write_text(json.dumps({"result": "PASS"}))
    fields = classify(run(tmp_path, "raise SystemExit(3)\n"))
    assert fields["result"] == "FAIL(other)"
    assert fields["notes"] == "exited with status 3"
