"""Packages a model needs beyond the sweep's environment: real pip, offline, installing wheels
built here from a local folder (``PIP_NO_INDEX=1``, ``PIP_FIND_LINKS``) into overlays."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import threading
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import zoo
from pytest_neuronsupport.pipeline import classify, packages
from pytest_neuronsupport.pipeline.isolate import ISOLATIONS, RunRequest
from pytest_neuronsupport.pipeline.render import RunParams, ScriptPlan, render, sha256
from tests.sweeping import SweepRunner

BACKENDS = "backends_for_tests"
SENTENCEPIECE_ERROR = "requires the SentencePiece library but it was not found"
PROTOBUF_ERROR = "requires the protobuf library but it was not found"


def wheel(
    folder: Path,
    name: str,
    version: str,
    files: Mapping[str, str],
    requires: Sequence[str] = (),
) -> Path:
    """A pure-Python wheel written by hand: a zip of the files, METADATA, WHEEL and RECORD."""
    dist = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    content = {
        **files,
        f"{dist}/METADATA": metadata,
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for member, text in content.items():
        data = text.encode("utf-8")
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{member},sha256={digest},{len(data)}\n")
    content[f"{dist}/RECORD"] = "".join(record) + f"{dist}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in content.items():
            archive.writestr(member, text)
    return path


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of wheels pip installs from, and nothing else: no index (a sweep's subprocess
    inherits the settings). ``nsdemo`` needs ``nsdep`` (the environment lacks it) and
    ``filelock`` (the environment has it); ``nsold`` needs a filelock older than the
    environment's, which the folder has."""
    folder = tmp_path / "wheels"
    wheel(folder, "nsdemo", "1.0", {"nsdemo/__init__.py": "VALUE = 1\n"}, ["nsdep", "filelock"])
    wheel(folder, "nsdep", "1.0", {"nsdep/__init__.py": "VALUE = 2\n"})
    wheel(folder, "nsold", "1.0", {"nsold/__init__.py": ""}, ["filelock<1"])
    wheel(folder, "filelock", "0.1", {"filelock/__init__.py": "OLD = True\n"})
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


@pytest.fixture
def pip_runs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The pip commands run (each still runs, for real)."""
    runs: list[list[str]] = []
    real = packages.pip

    def counted(args: list[str], *rest: Any) -> str:
        runs.append(args)
        return real(args, *rest)

    monkeypatch.setattr(packages, "pip", counted)
    return runs


def installs(runs: list[list[str]]) -> int:
    return sum("--target" in args for args in runs)


def imports(overlay: Path, code: str) -> str:
    """What ``code`` prints in a fresh interpreter importing from the overlay first."""
    env = {**os.environ, "PYTHONPATH": str(overlay)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


# --- overlays -------------------------------------------------------------------------------------


@pytest.mark.slow  # pip, twice: seconds
def test_an_overlay_holds_the_set_and_what_it_lacks_and_is_reused(
    wheels: Path, tmp_path: Path, pip_runs: list[list[str]]
) -> None:
    cache = tmp_path / "cache"
    overlay = packages.overlay(["nsdemo"], cache)
    assert overlay.parent == cache / "packages"
    assert installs(pip_runs) == 1
    # the set and what the environment lacks, not what it has
    assert (overlay / "nsdemo").is_dir() and (overlay / "nsdep").is_dir()
    assert not (overlay / "filelock").exists()
    manifest = json.loads((overlay / packages.MANIFEST).read_text())
    assert manifest["packages"] == ["nsdemo"]
    assert sorted(manifest["installed"]) == ["nsdemo==1.0", "nsdep==1.0"]
    where = imports(overlay, "import nsdemo, nsdep, filelock; print(filelock.__file__)")
    assert where.startswith(sysconfig.get_paths()["purelib"])  # the environment's filelock
    # nothing entered the sweep's environment
    assert importlib.util.find_spec("nsdemo") is None
    assert not (Path(sysconfig.get_paths()["purelib"]) / "nsdemo").exists()
    # reused: no pip, the same folder; another set is another overlay
    mtime = overlay.stat().st_mtime_ns
    assert packages.overlay(["nsdemo"], cache) == overlay
    assert len(pip_runs) == 2 and overlay.stat().st_mtime_ns == mtime
    other = packages.overlay(["nsdemo", "nsdep"], cache)
    assert other != overlay and installs(pip_runs) == 2
    assert sorted(p.name for p in (cache / "packages").iterdir() if p.is_dir()) == sorted(
        [overlay.name, other.name]
    )  # no temporary folder is left


def test_a_package_pip_cannot_find_raises_with_pips_reason(wheels: Path, tmp_path: Path) -> None:
    with pytest.raises(packages.PackageError) as raised:
        packages.overlay(["nsdemo", "nsnothing"], tmp_path / "cache")
    assert "No matching distribution found for nsnothing" in raised.value.reason
    assert str(raised.value).startswith("could not install nsdemo nsnothing: ")
    fields = classify.not_installed(raised.value)
    assert fields["result"] == "FAIL(other)"
    assert "No matching distribution found for nsnothing" in fields["notes"]
    assert "--- pip's output ---" in fields["error"]
    assert [p for p in (tmp_path / "cache" / "packages").iterdir() if p.is_dir()] == []


def test_a_package_that_would_replace_one_of_the_environment_is_refused(
    wheels: Path, tmp_path: Path
) -> None:
    """``pip install --prefix`` would uninstall the environment's filelock here; the overlay
    refuses the set instead, and the environment is as it was."""
    before = importlib.metadata.version("filelock")
    with pytest.raises(packages.PackageError, match=f"filelock 0.1 .the environment has {before}"):
        packages.overlay(["nsold"], tmp_path / "cache")
    assert importlib.metadata.version("filelock") == before
    assert not hasattr(__import__("filelock"), "OLD")


@pytest.mark.slow  # pip, twice: seconds
def test_concurrent_calls_install_once(
    wheels: Path, tmp_path: Path, pip_runs: list[list[str]]
) -> None:
    cache, start = tmp_path / "cache", threading.Barrier(4)
    found: list[Path] = []

    def one() -> None:
        start.wait()
        found.append(packages.overlay(["nsdemo"], cache))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 4 and len(set(found)) == 1
    assert installs(pip_runs) == 1


@pytest.mark.slow  # pip, twice: seconds
@pytest.mark.parametrize("isolation", sorted(ISOLATIONS))
def test_a_run_imports_the_overlay_first_in_a_fresh_interpreter(
    isolation: str, wheels: Path, tmp_path: Path
) -> None:
    """Under either isolation: a fork of the warm server would inherit its transformers'
    decisions about which libraries are missing."""
    overlay = packages.overlay(["nsdemo"], tmp_path / "cache")
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys
            import nsdemo
            verdict = {"result": "PASS", "notes": json.dumps(
                {"fresh": "torch" not in sys.modules, "nsdemo": nsdemo.__file__})}
            open(sys.argv[sys.argv.index("--result") + 1], "w").write(json.dumps(verdict))
            """
        )
    )
    request = RunRequest(
        script=script,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH="/somewhere/else"),
        verdict_path=tmp_path / "verdict.json",
        log_path=tmp_path / "output.log",
        timeout_s=60,
        python_path=(overlay,),
    )
    assert request.environment()["PYTHONPATH"] == f"{overlay}{os.pathsep}/somewhere/else"
    outcome = ISOLATIONS[isolation]().run(request)
    assert outcome.verdict is not None, outcome.log_tail
    seen = json.loads(outcome.verdict["notes"])
    assert seen == {"fresh": True, "nsdemo": str(overlay / "nsdemo" / "__init__.py")}


# --- the library a failed load asks for -----------------------------------------------------------


def test_transformers_table_of_libraries_is_read_from_its_source() -> None:
    table = dict((name, phrase) for phrase, name in packages.transformers_libraries())
    assert SENTENCEPIECE_ERROR in table["sentencepiece"]
    assert PROTOBUF_ERROR in table["protobuf"]
    assert table["pillow"].startswith("requires the PIL library")  # "pip install pillow"
    assert "transformers" not in table and "audio" not in table  # "pip install transformers[...]"
    code = (
        "import sys\n"
        "from pytest_neuronsupport.pipeline import packages\n"
        "assert packages.transformers_libraries()\n"
        "print('transformers' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"  # read from its source, not imported


@pytest.mark.parametrize(
    ("error", "have", "wanted"),
    [
        (
            f"ImportError: \nSiglipTokenizer {SENTENCEPIECE_ERROR} in your environment.",
            (),
            "sentencepiece",
        ),
        (f"ImportError: \nX {PROTOBUF_ERROR} in your\nenvironment. Check", (), "protobuf"),
        (
            "ValueError: `tiktoken` is required to read a `tiktoken` file. Install it with "
            "`pip install tiktoken`.",
            (),
            "tiktoken",
        ),
        (f"X {SENTENCEPIECE_ERROR}", ("sentencepiece>=0.2",), None),  # already had it
        ("X requires the PIL library but it was not found in your environment", (), None),
        ("upgrade with `pip install --upgrade transformers`", (), None),  # the stack
        ("pip install git+https://github.com/huggingface/transformers", (), None),
        ("OSError: no file named config.json", (), None),
        (None, (), None),
    ],
)
def test_the_missing_library_a_failed_load_names(
    error: str | None, have: tuple[str, ...], wanted: str | None
) -> None:
    assert packages.missing_library(error, have) == wanted


def test_a_retried_run_says_so_and_keeps_the_first_runs_error() -> None:
    first = {"result": "FAIL(load)", "error": f"ImportError: X {SENTENCEPIECE_ERROR}"}
    passed = classify.retried({"result": "PASS", "notes": None}, "sentencepiece", first)
    assert passed == {"result": "PASS", "notes": "retried with sentencepiece"}
    failed = classify.retried(
        {"result": "FAIL(gen)", "notes": "RuntimeError: x", "error": "RuntimeError: x"},
        "sentencepiece",
        first,
    )
    assert failed["notes"] == "retried with sentencepiece: RuntimeError: x"
    assert failed["error"].startswith("RuntimeError: x\n--- the first run, without sentencepiece")
    assert SENTENCEPIECE_ERROR in failed["error"]


def test_the_header_names_the_packages_and_the_hash_changes_with_them() -> None:
    params = RunParams("zoo:llama", "/zoo/llama", "dense", "cpu", "inductor", "float32", False)
    stack = {"torch": "2.13.0", "transformers": "5.24.0", "python": "3.11.7"}

    def text(needs: tuple[str, ...]) -> str:
        plan = ScriptPlan(
            "pytest_neuronsupport.runners.dense", "run", "main", "CpuOps", "run_dense", False,
            False, needs,
        )  # fmt: skip
        return render(params, plan, stack)

    assert '# pip install "transformers==5.24.0"\n' in text(())
    with_them = text(("tiktoken>=0.7", "sentencepiece"))
    assert '# pip install "transformers==5.24.0" "sentencepiece" "tiktoken>=0.7"\n' in with_them
    assert len({sha256(text(())), sha256(with_them), sha256(text(("sentencepiece",)))}) == 3
    assert text(()).count("\n") == with_them.count("\n")  # the header's line, no more


# --- sweeps ---------------------------------------------------------------------------------------


def header_packages(run_py: str) -> list[str]:
    line = next(ln for ln in run_py.splitlines() if ln.startswith("# pip install "))
    return [json.loads(word) for word in line.removeprefix("# pip install ").split()]


@pytest.mark.slow
def test_a_sweep_installs_a_models_packages_for_its_run_only(
    sweep: SweepRunner, wheels: Path
) -> None:
    done = sweep.run(
        {"id": "zoo:llama", "packages": ["nsdemo"]},
        {"id": "zoo:bert"},  # the same compiler, without the package
        {"id": "zoo:qwen3", "packages": ["nsnothing"]},
        backend=f"{BACKENDS}:needs_package_backend_for_tests",
    )
    llama, bert, qwen3 = (done.row(m) for m in ("zoo:llama", "zoo:bert", "zoo:qwen3"))
    assert llama["result"] == "PASS", llama["error"]
    assert llama["cpu_match"] == "Y" and "retried" not in (llama["notes"] or "")
    assert header_packages(llama["run_py"])[-1] == "nsdemo"
    assert len(list((sweep.cache / "packages").glob("*/nsdemo"))) == 1
    assert bert["result"] != "PASS" and "cannot import nsdemo" in bert["error"]
    assert "nsdemo" not in bert["run_py"]
    assert qwen3["result"] == "FAIL(other)"
    assert "No matching distribution found for nsnothing" in qwen3["notes"]
    assert qwen3["error"].startswith("could not install nsnothing: ")
    assert header_packages(qwen3["run_py"])[-1] == "nsnothing"
    run_dirs = {p.parent.name: p.parent for p in sweep.results.glob("runs/*/*/*/run.py")}
    assert not any((d / "output.log").exists() for n, d in run_dirs.items() if "qwen3" in n)
    assert importlib.util.find_spec("nsdemo") is None


def checkpoint_needing(
    zoo_cache: Path, folder: Path, change: Callable[[dict[str, Any]], None]
) -> Path:
    """A copy of the tiny Llama whose tokenizer config is changed by ``change``."""
    shutil.copytree(zoo.ensure_built("llama", zoo_cache), folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    change(config)
    config_path.write_text(json.dumps(config))
    return folder


@pytest.mark.slow
def test_a_load_missing_a_library_transformers_names_is_retried_once_with_it(
    sweep: SweepRunner, wheels: Path, zoo_cache: Path, tmp_path: Path
) -> None:
    """Siglip's tokenizer needs sentencepiece: the run is retried with it (here a test double
    that transformers then takes for sentencepiece: it goes on to ask for protobuf, which shows
    the retried run saw the package, and is not retried again). A checkpoint whose
    ``tokenizer.model`` only tiktoken reads is retried with tiktoken, which pip cannot find."""
    double = '"""A test double of sentencepiece."""\n__version__ = "0.0.1"\n'
    wheel(wheels, "sentencepiece", "0.0.1+testdouble", {"sentencepiece/__init__.py": double})
    siglip = checkpoint_needing(
        zoo_cache, tmp_path / "siglip", lambda c: c.update(tokenizer_class="SiglipTokenizer")
    )
    tiktoken = checkpoint_needing(
        zoo_cache, tmp_path / "tiktoken", lambda c: c.update(backend="sentencepiece")
    )
    (tiktoken / "tokenizer.json").unlink()
    (tiktoken / "tokenizer.model").write_bytes(b"not a sentencepiece model")
    done = sweep.run(
        {"id": "local/llama-siglip", "path": str(siglip)},
        {"id": "local/llama-tiktoken", "path": str(tiktoken)},
    )
    row = done.row("local/llama-siglip")
    assert row["result"] == "FAIL(load)"
    assert row["notes"].startswith("retried with sentencepiece: ImportError")
    first = row["error"].split("\n--- the first run, without sentencepiece: FAIL(load) ---\n")
    assert len(first) == 2 and PROTOBUF_ERROR in first[0] and SENTENCEPIECE_ERROR in first[1]
    assert header_packages(row["run_py"])[-1] == "sentencepiece"
    row = done.row("local/llama-tiktoken")
    assert row["result"] == "FAIL(other)"
    assert row["notes"].startswith("retried with tiktoken: could not install tiktoken: ")
    assert "No matching distribution found for tiktoken" in row["error"]
    assert "`tiktoken` is required to read a `tiktoken` file" in row["error"]
    assert header_packages(row["run_py"])[-1] == "tiktoken"
