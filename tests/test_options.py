"""The options, declared once: their defaults, their help (pytest's and the command's), the
reference page generated from them, and which of a flag, an ini key and a default wins."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronsupport import cli, options, xdist
from pytest_neuronsupport.modellist import default_lists, parse
from pytest_neuronsupport.options import BY_NAME, OPTIONS
from pytest_neuronsupport.settings import SETTING_OF, Settings, settings_from

ROOT = Path(__file__).resolve().parents[1]
EXE = Path(sys.executable).parent / "neuronsupport"
#: reStructuredText markup, which a --help prints as it is.
RST = ("``", ":func:", ":mod:", ":class:", ":data:", ":meth:")
#: The environment variables that name a shard or default a path.
ENGINE = ("JOB_COMPLETION_INDEX", "AWS_BATCH_JOB_ARRAY_INDEX", "AWS_BATCH_JOB_ARRAY_SIZE")


def flat(text: str) -> str:
    """Whitespace folded: a help text wrapped over lines reads as one line."""
    return " ".join(text.split())


def setting(option: options.Option) -> str:
    return SETTING_OF.get(option.name, option.dest)


@pytest.fixture
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No shard from an engine, and wide help: a line never wraps inside a help text."""
    for name in ENGINE:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "400")


def test_the_reference_page_is_generated_from_the_declarations() -> None:
    page = ROOT / options.REFERENCE_PAGE
    assert page.is_file() and page.read_text(encoding="utf-8") == options.reference_markdown(), (
        f"{options.REFERENCE_PAGE} is out of date: run `{options.REFERENCE_COMMAND}`"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest_neuronsupport.options"],
        capture_output=True,
        text=True,
        cwd=ROOT,  # the package of this checkout, whatever is installed
        timeout=120,
        check=True,
    )
    assert done.stdout == options.reference_markdown() and not done.stderr


def test_the_reference_has_one_row_of_four_cells_per_option() -> None:
    markdown = pytest.importorskip("markdown")
    html = markdown.markdown(options.reference_markdown(), extensions=["tables"])
    assert html.count("<tr>") == len(OPTIONS) + 1 and html.count("<td>") == 4 * len(OPTIONS)
    for option in OPTIONS:
        assert f"<code>--neuron-{option.name}</code>" in html
        if option.default_text is not None and option.described is None:
            assert f"<code>{option.default_text}</code>" in html
    # the intro says which wins and what paths are relative to
    intro = flat(options.reference_markdown().split("\n|", 1)[0])
    assert "A flag wins over the ini key, which wins over the default." in intro
    assert "relative to the folder pytest runs in; as ini keys, to the ini file's folder" in intro


def test_the_reference_builds_with_mkdocs_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Docs\n\n[The options](options.md)\n", encoding="utf-8")
    (docs / "options.md").write_text(options.reference_markdown(), encoding="utf-8")
    (tmp_path / "mkdocs.yml").write_text("site_name: test\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "site" / "options" / "index.html").read_text(encoding="utf-8")
    table = html[html.index("<table>") : html.index("</table>")]
    assert table.count("<td>") == 4 * len(OPTIONS) and "&lt;tmp&gt;" in table


def test_every_default_is_declared_once_and_said_in_the_help() -> None:
    for option in OPTIONS:
        assert option.kind in options.KINDS, option.name
        if callable(option.default) or option.kind == "paths":
            assert option.described, f"{option.name}: a computed default is described in words"
        help = option.help_text()
        assert "default" not in option.help or option.name == "train", option.name
        if option.default_text is None:
            assert help == option.help
        else:
            assert help.endswith(f" {option.default_text})") and "(default" in help
        assert not any(markup in help for markup in RST), option.name
    assert BY_NAME["timeout"].help_text() == "seconds one model may run (default 1800)"
    assert (
        BY_NAME["leases"]
        .help_text()
        .endswith("(default: $NEURONSUPPORT_LEASES, else <tmp>/pytest-neuronsupport-leases)")
    )


def test_each_settings_default_is_its_options_default(
    pytester: pytest.Pytester, plain_environment: None
) -> None:
    resolved = settings_from(pytester.parseconfig())
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    fieldless = set()
    for option in OPTIONS:
        name = setting(option)
        if name not in fields:
            fieldless.add(option.name)
            continue
        if option.name == "device":  # a Device, from "auto"
            continue
        value = getattr(resolved, name)
        declared = option.default_value()
        if option.kind == "path" and declared is not None:
            base = Path() if callable(option.default) else pytester.path
            declared = (base / declared).resolve()
        if option.name == "models":
            assert list(value) == default_lists(), "the bundled list"
        elif option.name in ("backend", "dtype"):
            assert value == getattr(resolved.device, f"default_{name}"), "the device's"
        else:
            assert value == declared, option.name
        field = fields[name]
        if field.default is not dataclasses.MISSING:
            assert field.default == declared, f"Settings.{name}"
        elif field.default_factory is not dataclasses.MISSING:
            assert Path(field.default_factory()).resolve() == declared, f"Settings.{name}"
    assert fieldless == {"sweep", "shards"}  # the switch; the count a shard is read with
    assert resolved.judge == options.DEFAULT_JUDGE and resolved.shard is None
    assert resolved.results == pytester.path / "results"
    assert resolved.leases == options.default_leases().resolve()
    assert resolved.cache == options.default_cache().resolve()
    assert resolved.core_capacity_gb == resolved.device.core_capacity_gb()  # the device's


def test_a_workers_settings_count_the_sweeps_workers(
    pytester: pytest.Pytester, plain_environment: None
) -> None:
    """Under xdist a worker's settings say how many workers share the host (xdist's
    ``workercount``): their runs' threads are shared out by it; one without xdist."""
    config = pytester.parseconfig()
    assert settings_from(config).workers == 1
    config.workerinput = {"workerid": "gw3", "workercount": 16}  # type: ignore[attr-defined]
    assert settings_from(config).workers == 16


def test_a_worker_runs_on_the_device_its_controller_resolved(
    pytester: pytest.Pytester, plain_environment: None
) -> None:
    """One sweep is one device: a worker is handed the controller's device (``auto``, resolved
    once there) and does not resolve it again, so no worker's rows are of another device."""
    config = pytester.parseconfig("--neuron-device", "auto")
    assert settings_from(config).device.name == "cpu"  # here, auto is the CPU
    handed = xdist.handed(config, "sweep", "cuda")
    assert handed[xdist.DEVICE_KEY] == "cuda"
    config.workerinput = {"workerid": "gw0", "workercount": 2, **handed}  # type: ignore[attr-defined]
    assert settings_from(config).device.name == "cuda"


def subparsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """The command's parser and every subcommand's, with the words that name it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from subparsers(sub, (*path, name))


def test_the_commands_take_their_defaults_and_help_from_the_declarations(
    plain_environment: None,
) -> None:
    shared = {"results", "cache", "device", "max-cores", "core-memory"}  # the sweep's options
    seen = set()
    for path, parser in subparsers(cli.parser()):
        for action in parser._actions:
            name = action.option_strings[0].removeprefix("--") if action.option_strings else ""
            if name not in shared:
                continue
            option = BY_NAME[name]
            seen.add(name)
            assert action.help == option.help_text(), (path, name)
            assert action.choices == option.choices
            default = option.default() if callable(option.default) else option.default
            assert action.default == default, (path, name)
            assert flat(option.help_text()) in flat(parser.format_help()), (path, name)
    assert seen == shared
    args = cli.parser().parse_args(["select", "--out", "x.toml"])
    assert (args.device, args.max_cores, args.core_memory, args.top) == ("auto", 16, None, 100)
    assert cli.parser().parse_args(["lookup", "m"]).results == "results"
    assert cli.parser().parse_args(["zoo", "build"]).cache == options.default_cache()


def test_no_help_of_the_command_is_restructured_text(plain_environment: None) -> None:
    helps = {" ".join(path): parser.format_help() for path, parser in subparsers(cli.parser())}
    assert len(helps) > 15 and "select" in helps and "baseline update" in helps
    for path, help in helps.items():
        assert not any(markup in help for markup in RST), f"neuronsupport {path} --help:\n{help}"
    assert "take --results DIR (default results)." in helps[""]
    # as a user sees it: the installed console script
    for args, shown in [
        ("--help", "take --results DIR (default results)."),
        ("select --help", "largest number of cores a model may get (default 16)"),
        ("zoo build --help", "compile caches (default: $NEURONSUPPORT_CACHE, else"),
    ]:
        done = subprocess.run(
            [str(EXE), *args.split()], capture_output=True, text=True, timeout=120, check=True
        )
        assert not any(markup in done.stdout for markup in RST), args
        assert shown in flat(done.stdout), args


def test_pytests_help_shows_the_generated_defaults(
    pytester: pytest.Pytester, plain_environment: None
) -> None:
    result = pytester.runpytest("--help")
    assert result.ret == 0
    out = flat(result.stdout.str())
    for option in OPTIONS:
        help = flat(option.help_text().replace("%", "%%"))
        assert f"--neuron-{option.name}" in out and help in out, option.name
        if option.kind not in ("flag", "paths"):
            assert f"neuron_{option.dest} (string): {help}" in out, option.name
    assert "--neuron-timeout=SECONDS seconds one model may run (default 1800)" in out


@pytest.mark.parametrize(
    ("name", "ini", "flag", "expected"),
    [
        ("timeout", "60", "30", (60.0, 30.0, 1800.0)),
        ("max-cores", "4", "2", (4, 2, 16)),
        ("prefill-chunk", "0", "8", (None, 8, 32)),
        ("isolation", "fresh", "fork", ("fresh", "fork", "fork")),
        ("perf-io", "64/64", "32/8,16/4", (((64, 64),), ((32, 8), (16, 4)), ((128, 128),))),
        ("perf-warmup", "0", "5", (0, 5, 2)),
        ("judge", "none", "zoo:llama", (None, "zoo:llama", options.DEFAULT_JUDGE)),
        ("limit", "3", "1", (3, 1, None)),
    ],
)
def test_a_flag_beats_an_ini_key_beats_the_default(
    pytester: pytest.Pytester,
    plain_environment: None,
    name: str,
    ini: str,
    flag: str,
    expected: tuple[Any, Any, Any],
) -> None:
    option = BY_NAME[name]

    def resolved(*args: str) -> Any:
        return getattr(settings_from(pytester.parseconfig(*args)), setting(option))

    assert resolved() == expected[2]
    pytester.makeini(f"[pytest]\nneuron_{option.dest} = {ini}\n")
    assert resolved() == expected[0]
    assert resolved(f"--neuron-{name}", flag) == expected[1]


def test_paths_are_relative_to_the_invocation_folder_or_the_ini_files(
    pytester: pytest.Pytester, plain_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\nneuron_results = from-ini\nneuron_baseline = ci/expected.toml\n")
    below = pytester.mkdir("below")
    monkeypatch.chdir(below)
    from_ini = settings_from(pytester.parseconfig())
    assert from_ini.results == pytester.path / "from-ini"
    assert from_ini.baseline == pytester.path / "ci" / "expected.toml"
    flagged = settings_from(pytester.parseconfig("--neuron-results", "here"))
    assert flagged.results == below / "here" and flagged.baseline == from_ini.baseline


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--neuron-timeout", "soon"], "--neuron-timeout 'soon' is not a number"),
        (["--neuron-max-cores", "0"], "--neuron-max-cores must be positive, not 0"),
        (["--neuron-perf-batch", "1,x"], "'1,x': expected positive integers like 1,16"),
    ],
)
def test_a_bad_value_is_a_usage_error(
    pytester: pytest.Pytester, plain_environment: None, args: list[str], message: str
) -> None:
    with pytest.raises(pytest.UsageError, match=message):
        settings_from(pytester.parseconfig(*args))


def test_a_bad_ini_choice_is_a_usage_error(
    pytester: pytest.Pytester, plain_environment: None
) -> None:
    pytester.makeini("[pytest]\nneuron_isolation = thread\n")
    with pytest.raises(pytest.UsageError, match="neuron_isolation = 'thread': choose from fork"):
        settings_from(pytester.parseconfig())


def test_the_former_bench_spellings_are_still_taken(
    pytester: pytest.Pytester, plain_environment: None, tmp_path: Path
) -> None:
    """The performance mode's options were ``--neuron-bench*``: scripts and ini files that
    say so keep working (the new key wins where both are given); so do a list's
    ``bench_*`` keys."""
    assert settings_from(pytester.parseconfig("--neuron-bench")).perf is True
    former = settings_from(pytester.parseconfig("--neuron-bench-rounds", "3"))
    assert former.perf_rounds == 3
    pytester.makeini("[pytest]\nneuron_bench_rounds = 4\nneuron_bench_io = 64/8\n")
    from_ini = settings_from(pytester.parseconfig())
    assert (from_ini.perf_rounds, from_ini.perf_io) == (4, ((64, 8),))
    pytester.makeini("[pytest]\nneuron_bench_rounds = 4\nneuron_perf_rounds = 5\n")
    assert settings_from(pytester.parseconfig()).perf_rounds == 5
    listed = tmp_path / "list.toml"
    listed.write_text('[[model]]\nid = "zoo:llama"\nbench_batch = [1, 8]\n', encoding="utf-8")
    (spec,) = parse(listed)
    assert spec.perf_batch == (1, 8)
