"""Environment faults (:mod:`pytest_neuronsupport.faults`): told apart from a model's own
failures, against the loopback Hub told to fail or stall, a closed port and pip with an index
that does not answer."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from pytest_neuronsupport import faults, hub
from pytest_neuronsupport.minihub import MiniHub
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.pipeline import packages
from pytest_neuronsupport.pipeline.plan import plan
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.units import GB
from tests.sweeping import SweepRunner
from tests.test_hub import free_port

CONFIG = {"config.json": json.dumps({"model_type": "gpt2"}).encode()}


def disk_full_for_tests(path: str) -> OSError:
    """The error a write to ``path`` raises on a full disk (no test fills the machine's)."""
    return OSError(errno.ENOSPC, "No space left on device", path)


def test_a_full_disk_is_a_fault_naming_the_file_and_other_errors_are_not() -> None:
    fault = faults.of(disk_full_for_tests("/results/journal/x.jsonl"))
    assert (
        str(fault) == "the disk is full writing /results/journal/x.jsonl: No space left on device"
    )
    assert faults.of(OSError(errno.EACCES, "Permission denied")) is None
    assert faults.of(ValueError("a bug")) is None
    same = hub.HubFault("the Hub at x is unreachable")
    assert faults.of(same) is same


def test_a_runs_traceback_naming_a_full_disk_or_the_hub_failing_its_load_is_a_fault() -> None:
    full = "Traceback ...\nOSError: [Errno 28] No space left on device: '/cache/blobs/ab'\n"
    fault = faults.in_run({"result": "FAIL(compile)", "error": full})
    assert str(fault) == (
        "the disk is full (in the run): [Errno 28] No space left on device: '/cache/blobs/ab'"
    )
    served = "HfHubHTTPError: Server error '503 Service Unavailable' for url 'http://h/o/m'\n"
    fault = faults.in_run({"result": "FAIL(load)", "error": served})
    assert str(fault) == (
        "the Hub failed the run's download: "
        "Server error '503 Service Unavailable' for url 'http://h/o/m'"
    )
    timed_out = "Traceback ...\nhttpx2.ReadTimeout: timed out\n"
    assert faults.in_run({"result": "FAIL(load)", "error": timed_out}) is not None
    # the model's own failures are not faults
    missing = "RepositoryNotFoundError: 404 Client Error. Repository Not Found for url: x"
    assert faults.in_run({"result": "FAIL(load)", "error": missing}) is None
    assert faults.in_run({"result": "FAIL(compile)", "error": served}) is None  # not a load
    assert faults.in_run({"result": "FAIL(compile)", "error": "RuntimeError: shapes"}) is None
    assert faults.in_run({"result": "PASS", "error": None}) is None


def test_the_hub_answering_5xx_is_a_fault_and_a_missing_repo_is_the_models(
    minihub: MiniHub,
) -> None:
    minihub.add_model("org/gpt2", files=CONFIG)
    hub.check_checkpoint("org/gpt2", url=minihub.url)  # answers: nothing raised
    hub.check_checkpoint("org/missing", url=minihub.url)  # the model's failure, for its load
    minihub.fail_with(503, paths="/org/gpt2/")
    with pytest.raises(hub.HubFault, match=rf"the Hub at {minihub.url} answered 503 for org/gpt2"):
        hub.check_checkpoint("org/gpt2", url=minihub.url)
    minihub.heal()
    hub.check_checkpoint("org/gpt2", url=minihub.url)


def test_the_hub_not_answering_in_time_or_at_all_is_a_fault(minihub: MiniHub) -> None:
    minihub.add_model("org/gpt2", files=CONFIG)
    minihub.stall(1.0)
    with pytest.raises(
        hub.HubFault, match=r"did not answer within 0.2 s \(config.json of org/gpt2\)"
    ):
        hub.check_checkpoint("org/gpt2", url=minihub.url, timeout_s=0.2)
    closed = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(hub.HubFault, match=rf"the Hub at {closed} is unreachable: ConnectError"):
        hub.check_checkpoint("org/gpt2", url=closed)


def test_a_plan_meeting_a_hub_fault_has_the_fault_not_a_load_error(
    minihub: MiniHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from huggingface_hub import constants

    # what the client reads from HF_ENDPOINT at its import (the first loopback Hub's, in-process)
    monkeypatch.setattr(constants, "ENDPOINT", minihub.url)
    template = f"{minihub.url}/{{repo_id}}/resolve/{{revision}}/{{filename}}"
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    minihub.add_model("org/gpt2", files=CONFIG)
    minihub.fail_with(500)
    planned = plan(ModelSpec("org/gpt2", tmp_path / "models.toml", 1), tmp_path, Runners.builtin())
    assert planned.load_error is None
    assert planned.fault and f"the Hub at {minihub.url} answered 500 for org/gpt2" in planned.fault
    minihub.heal()
    missing = plan(
        ModelSpec("org/missing", tmp_path / "models.toml", 2), tmp_path, Runners.builtin()
    )
    assert missing.fault is None and missing.load_error is not None
    assert "RepositoryNotFoundError" in missing.load_error
    assert "repo_type" not in missing.load_error  # huggingface_hub's hint, irrelevant here


def test_the_hint_about_repo_type_is_taken_out_of_hub_errors() -> None:
    text = "404 Client Error. Repository Not Found for url: x. Use `repo_type` argument if needed."
    assert hub.without_hints(text) == "404 Client Error. Repository Not Found for url: x."
    text = "Please make sure you specified the correct `repo_id` and `repo_type`."
    assert hub.without_hints(text) == "Please make sure you specified the correct `repo_id`."


@pytest.mark.slow  # pip: seconds
@pytest.mark.parametrize("retries", ["0", "1"])  # without a retry pip's output says nothing of it
def test_a_pip_index_that_does_not_answer_is_a_fault_naming_it(
    retries: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/simple"  # a loopback port refusing connections
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", closed)
    monkeypatch.setenv("PIP_RETRIES", retries)
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    for name in ("PIP_NO_INDEX", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(faults.Fault, match=rf"the package index {closed} is unreachable \(pip\)"):
        packages.overlay(["nsnothing"], tmp_path / "cache")


def test_a_pip_failure_with_an_answering_index_is_not_a_fault() -> None:
    said = "ERROR: No matching distribution found for nsnothing\n"
    assert packages.index_unreachable(said) is None
    retried = (
        "Looking in indexes: http://x/simple\nWARNING: Retrying (Retry(total=0)) after connection "
        "broken by 'NewConnectionError(...)': /simple/nsnothing/\n" + said
    )
    assert packages.index_unreachable(retried) == (
        "the package index http://x/simple is unreachable (pip): WARNING: Retrying "
        "(Retry(total=0)) after connection broken by 'NewConnectionError(...)': /simple/nsnothing/"
    )
    # with no retry only pip's debug log says it: the index page not fetched, for no answer
    log = "2026-12-03T07:41:08,549 Looking in indexes: http://x/simple\n2026-12-03T07:41:08,561 "
    refused = "Could not fetch URL http://x/simple/nsnothing/: connection error: "
    assert packages.index_unreachable(said, log + refused + "... Connection refused')) - skipping")
    answered = "Could not fetch URL http://x/simple/nsnothing/: 404 Client Error: Not Found"
    assert packages.index_unreachable(said, log + answered) is None


@pytest.mark.slow  # a one-model sweep, its compile refused at once
def test_a_run_whose_disk_filled_up_is_an_error_and_records_no_row(sweep: SweepRunner) -> None:
    full = sweep.run("zoo:bert-mlm", backend="backends_for_tests:disk_full_backend_for_tests")
    assert full.result.ret == 1
    full.result.stdout.fnmatch_lines(
        [
            "zoo:bert-mlm: not tested, no row recorded: the disk is full (in the run): "
            "[[]Errno 28[]] No space left on device: '/cache/compiler/graph.neff'*",
            "*1 error*",
        ]
    )
    assert "zoo:bert-mlm" not in full.rows


def test_the_hub_cache_is_bounded_by_evicting_models_done_least_recently_used_first(
    minihub: MiniHub, tmp_path: Path
) -> None:
    """Repos of known sizes downloaded from the loopback Hub into a cache of their own."""
    from huggingface_hub import hf_hub_download, scan_cache_dir

    cache = tmp_path / "hub"
    sizes = {"org/a": 2_000_000, "org/b": 1_000_000, "org/still-to-run": 3_000_000}
    for repo_id, size in sizes.items():
        minihub.add_model(repo_id, files={**CONFIG, "model.safetensors": b"\0" * size})
        for name in ("config.json", "model.safetensors"):
            hf_hub_download(repo_id, name, cache_dir=cache, endpoint=minihub.url)
    total = scan_cache_dir(cache).size_on_disk
    assert total >= sum(sizes.values())
    assert hub.bound_cache(total, ["org/a", "org/b"], cache) == []  # within the bound
    # org/a alone is done: evicting it is enough
    evicted = hub.bound_cache(total - 1_500_000, ["org/a"], cache)
    assert [repo_id for repo_id, _ in evicted] == ["org/a"] and evicted[0][1] >= 2_000_000
    # over the bound with every model done evicted: the one still to run stays all the same
    evicted += hub.bound_cache(1_000, ["org/a", "org/b"], cache)
    assert [repo_id for repo_id, _ in evicted] == ["org/a", "org/b"]
    assert [r.repo_id for r in scan_cache_dir(cache).repos] == ["org/still-to-run"]
    line = hub.eviction_line(evicted, 4 * GB)
    assert line is not None and line.startswith(
        "hub cache: evicted 2 checkpoints, 3.0 MB, after their runs"
    )
    assert line.endswith("--neuron-hub-cache-max 4 GB: org/a, org/b")
    assert hub.eviction_line([], 4 * GB) is None
    # over a sweep: each model done in turn, never the judge's checkpoint
    for repo_id in sizes:
        hf_hub_download(repo_id, "model.safetensors", cache_dir=cache, endpoint=minihub.url)
    bound = hub.CacheBound(max_gb=3_500_000 / GB, judge="org/b@main", cache_dir=cache)
    bound.done("org/b")  # the judge: kept although it is done
    assert bound.evicted == [] and bound.notes() == []
    bound.done("org/a")
    assert [repo_id for repo_id, _ in bound.evicted] == ["org/a"]
    assert bound.notes()[0].endswith("--neuron-hub-cache-max 0.0035 GB: org/a")


def test_without_a_bound_the_disk_keeps_a_free_floor() -> None:
    """``--neuron-hub-cache-max`` not given: the cache may grow while the disk has a quarter
    of itself free (at most 25 GB); below that floor it is bounded to leave the floor."""
    gb = GB
    assert hub.free_floor(64 * gb) == 16 * gb  # a small disk: a quarter
    assert hub.free_floor(2000 * gb) == 25 * gb  # a large one: 25 GB
    # 64 GB disk, 10 GB free, cache holds 40 GB: it may hold 40 - (16 - 10) = 34 GB
    assert hub.bound_for(40 * gb, 10 * gb, 64 * gb) == 34 * gb
    assert hub.bound_for(2 * gb, 1 * gb, 64 * gb) == 0  # the floor cannot be met: evict all done
    line = hub.eviction_line([("org/a", 3 * gb)], None)
    assert line is not None and line.endswith("a quarter of the disk)): org/a")


def test_default_bound_scans_nothing_while_the_disk_has_its_floor_free(tmp_path: Path) -> None:
    import shutil

    usage = shutil.disk_usage(tmp_path)
    expected = None if usage.free >= hub.free_floor(usage.total) else 0
    assert hub.default_bound(tmp_path) == expected  # an empty cache: nothing held
    assert hub.default_bound(tmp_path / "absent") is None
