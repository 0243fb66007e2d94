"""The documentation: README.md (the newcomer's page) and docs/ (MkDocs), held to the code.

- The package layout page names every module of the package, and no module that does not exist.
- Every page under docs/ is in mkdocs.yml's nav; the README links to every page, and only to
  files that exist.
- The README is at most 200 lines, and its "Set up" section holds the two set-up commands as
  they are: the sweep (:data:`SWEEP_COMMAND`) and the test command that ``.ci/run`` runs.
- ``mkdocs build --strict`` succeeds. It skips when MkDocs is not installed, unless
  ``NEURONSUPPORT_REQUIRE_DOCS=1`` (``.ci/run`` sets it, and installs MkDocs through the test
  extra): then a missing MkDocs fails.
- Every fenced block of README.md and docs/ is checked by the language of its fence (the
  convention is written for people in docs/developing.md, "The documentation"):
  ``bash``/``sh`` blocks run with ``bash -e -x`` and ``python`` blocks with the clone's
  ``.venv/bin/python``, as written; ``toml`` blocks parse with tomllib; ``console`` blocks show
  commands that need what this machine lacks (a Neuron machine, an S3 bucket, the Hub, a
  cluster) and say so on their first line, a ``#`` comment, which is their skip reason here;
  ``text`` blocks are output and never run. Any other fence fails.

The runnable blocks of a page run in order, in a copy of the repository prepared like a fresh
clone after the README's first set-up command, whose ``results/`` holds the rows of that
command's sweep of the bundled tiny list (tests/fresh_clone.py: run once per test run, and
read by the tiny list's tests too), so a page's sweep of a few models mostly skips them as
unchanged. Each page gets its own copy of that clone; the
selected pages run two at a time in the background (a page's blocks run one after the
other, so two pages keep two cores busy), each once per test run, and each page's test
reports its own page's first failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from filelock import FileLock

from pytest_neuronsupport.devices import CpuDevice
from pytest_neuronsupport.runners.lib.processes import COMPILE_THREADS_ENV
from tests.fresh_clone import ROOT, SWEEP_COMMAND, Scratch, prepared, run_command
from tests.sweeping import run_folder

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PACKAGE = ROOT / "pytest_neuronsupport"
LAYOUT = DOCS / "layout.md"
MKDOCS_YML = ROOT / "mkdocs.yml"
CI_RUN = ROOT / ".ci" / "run"
README_MAX_LINES = 200
#: What a fence's language means here (docs/developing.md has the same table for people).
RUN = ("bash", "sh", "python")
PARSE = ("toml",)
NOT_RUN = ("console", "text")
#: Seconds one block may take: a runnable block must be cheap.
BLOCK_TIMEOUT = 300


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: str  # relative to the repository, e.g. "docs/results.md"
    line: int  # of its opening fence, 1-based
    lang: str
    text: str
    section: str  # the heading it is under

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")


def blocks_of(path: Path) -> Iterator[Block]:
    """The fenced blocks of one Markdown file, in order, each dedented by its fence's indent."""
    page = path.relative_to(ROOT).as_posix()
    section = ""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        heading = _HEADING.match(lines[i])
        if heading:
            section = heading["title"]
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence = len(match["indent"]), match["fence"]
        info = match["info"].strip().split()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            line = lines[j]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            j += 1
        yield Block(page, i + 1, info[0] if info else "", "\n".join(body) + "\n", section)
        i = j + 1


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def ci_test_command() -> str:
    """The test command ``.ci/run`` runs: its last line."""
    lines = [line for line in CI_RUN.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[-1]


BLOCKS = [block for path in pages() for block in blocks_of(path)]
#: The README's set-up commands: CI runs the second, the scratch clone stands for the first.
SET_UP = {
    b
    for b in BLOCKS
    if b.page == "README.md" and b.text.strip() in (SWEEP_COMMAND, ci_test_command())
}


def runnable(block: Block) -> bool:
    return block.lang in RUN and block not in SET_UP


RUN_PAGES = sorted({block.page for block in BLOCKS if runnable(block)})


def reason_not_run(block: Block) -> str | None:
    """Why a block is not run, from its first line (``# on a Neuron machine``)."""
    first = block.text.splitlines()[0].strip() if block.text.strip() else ""
    return first[1:].strip() or None if first.startswith("#") else None


# --- the layout page, the nav and the README ------------------------------------------------

_MODULE_PATH = re.compile(r"pytest_neuronsupport/[\w/]+\.py")
_DOTTED = re.compile(r"(?<![\w/.])pytest_neuronsupport(?:\.\w+)+")


def named_modules(text: str) -> list[str]:
    """Module files named in ``text``: paths, or dotted names (a package's ``__init__.py``)."""
    names = _MODULE_PATH.findall(text)
    for dotted in _DOTTED.findall(text):
        path = dotted.replace(".", "/")
        names.append(f"{path}/__init__.py" if (ROOT / path).is_dir() else f"{path}.py")
    return names


def test_the_layout_page_names_every_module_once_and_no_other() -> None:
    modules = {p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py")}
    lines = LAYOUT.read_text(encoding="utf-8").splitlines()
    where: dict[str, list[int]] = {}
    for number, line in enumerate(lines, 1):
        for name in set(named_modules(line)):
            where.setdefault(name, []).append(number)
    assert not sorted(modules - set(where)), "modules docs/layout.md does not name"
    assert not sorted(set(where) - modules), "docs/layout.md names modules that do not exist"
    twice = {name: numbers for name, numbers in where.items() if len(numbers) > 1}
    assert not twice, f"docs/layout.md names these on several lines (one line each): {twice}"


def nav_pages(nav: Any) -> list[str]:
    """The pages of a MkDocs nav: strings, lists and one-key mappings, nested."""
    if isinstance(nav, str):
        return [nav] if nav.endswith(".md") else []
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


def mkdocs_config() -> dict[str, Any]:
    config = yaml.safe_load(MKDOCS_YML.read_text(encoding="utf-8"))
    assert isinstance(config, dict)
    return config


def test_every_page_is_in_the_nav_and_the_nav_names_only_pages() -> None:
    config = mkdocs_config()
    assert config["docs_dir"] == "docs"
    assert config["theme"] == {"name": "mkdocs"}  # the default theme: no packages beyond MkDocs
    assert "plugins" not in config
    in_nav = nav_pages(config["nav"])
    on_disk = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(set(in_nav)) == on_disk
    assert len(in_nav) == len(set(in_nav)), "a page is in the nav twice"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_links_to_every_page_and_to_files_that_exist() -> None:
    links = _LINK.findall(README.read_text(encoding="utf-8"))
    local = [link.split("#")[0] for link in links if not re.match(r"[a-z]+:|#", link)]
    assert not [link for link in local if not (ROOT / link).exists()], "broken links"
    linked = {link.removeprefix("docs/") for link in local if link.startswith("docs/")}
    linked = {"index.md" if link in ("", "/") else link for link in linked}
    missing = sorted(set(nav_pages(mkdocs_config()["nav"])) - linked)
    assert not missing, f"README.md's 'Read on' should link to every page: {missing}"


def test_the_readme_is_short() -> None:
    count = len(README.read_text(encoding="utf-8").splitlines())
    assert count <= README_MAX_LINES, f"README.md has {count} lines; move some into docs/"


def test_the_readme_set_up_holds_the_two_commands_as_they_are() -> None:
    commands = [b.text.strip() for b in BLOCKS if b.page == "README.md" and b.section == "Set up"]
    assert commands[:2] == [SWEEP_COMMAND, ci_test_command()]
    assert ci_test_command() in README.read_text(encoding="utf-8")  # CI greps it verbatim


# --- MkDocs ----------------------------------------------------------------------------------


def test_mkdocs_builds_the_pages_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        if os.environ.get("NEURONSUPPORT_REQUIRE_DOCS") == "1":
            pytest.fail("MkDocs is not installed, and NEURONSUPPORT_REQUIRE_DOCS=1 requires it")
        pytest.skip("MkDocs is not installed (the test extra installs it)")
    site = tmp_path / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(MKDOCS_YML),
            "-d",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for page in nav_pages(mkdocs_config()["nav"]):
        built = "index.html" if page == "index.md" else f"{page.removesuffix('.md')}/index.html"
        assert (site / built).is_file(), built


# --- fenced blocks ---------------------------------------------------------------------------


def test_every_fence_says_what_it_is() -> None:
    known = RUN + PARSE + NOT_RUN
    unknown = [f"{b.where}: ```{b.lang}" for b in BLOCKS if b.lang not in known]
    assert not unknown, f"fences must be one of {known}"
    silent = [b.where for b in BLOCKS if b.lang == "console" and reason_not_run(b) is None]
    assert not silent, "a ```console block starts with a # comment saying what it needs"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang in PARSE], ids=lambda b: b.where)
def test_toml_blocks_parse(block: Block) -> None:
    try:
        tomllib.loads(block.text)
    except tomllib.TOMLDecodeError as exc:
        pytest.fail(f"{block.where}: ```toml block does not parse: {exc}\n{block.text}")


NOT_RUN_HERE = sorted(
    (b for b in BLOCKS if b in SET_UP or b.lang == "console"), key=lambda b: (b.page, b.line)
)


@pytest.mark.parametrize("block", NOT_RUN_HERE, ids=lambda b: b.where)
def test_blocks_not_run_here_say_why(block: Block) -> None:
    if block in SET_UP:
        pytest.skip(
            f"{block.where}: a set-up command (.ci/run runs it, or the scratch clone stands for it)"
        )
    reason = reason_not_run(block)
    if reason is None:
        pytest.fail(f"{block.where}: a ```console block must say on its first line what it needs")
    pytest.skip(f"{block.where}: {reason}")


@pytest.fixture(scope="session")
def fresh_clone(zoo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Scratch:
    """The repository copied as a fresh clone, after the first set-up command's sweep."""
    return prepared(zoo_cache, tmp_path_factory)


def run_block(block: Block, clone: Path, env: dict[str, str]) -> str | None:
    """Run one block as written. If it fails: a message naming its page and line, the command
    that failed (``bash -x`` prints each command, ``+ ...``, before it runs) and the output."""
    if block.lang == "python":
        argv = [str(clone / ".venv" / "bin" / "python"), "-c", block.text]
    else:
        argv = ["bash", "-e", "-x", "-c", block.text]
    code, output = run_command(argv, clone, env, BLOCK_TIMEOUT)
    if code == 0:
        return None
    lines = output.splitlines()
    traced = [line for line in lines if line.startswith("+ ")]
    failed = f" at `{traced[-1][2:]}`" if traced else ""
    tail = "\n".join(lines[-60:])
    return (
        f"{block.where}: its ```{block.lang} block exited with {code}{failed}\n"
        f"{textwrap.indent(block.text, '    ')}\n"
        f"--- its output (the last 60 lines) ---\n{tail}"
    )


def run_page(page: str, scratch: Scratch, folder: Path) -> str | None:
    """Run a page's blocks in order, in its own copy of the clone; the first failure, if any."""
    clone = folder / "clone"
    shutil.rmtree(clone, ignore_errors=True)
    shutil.copytree(scratch.clone, clone, symlinks=True)
    env = scratch.env(clone)
    # A run.py run alone (docs/runners.md) compiles as the set-up sweep's one-core runs did,
    # into its inductor cache: read, not compiled again (with other compile threads inductor
    # misses it: measured). Sweeps set both themselves, the user's compile threads kept.
    env.update(CpuDevice().run_env(scratch.cache), **{COMPILE_THREADS_ENV: "1"})
    for block in (b for b in BLOCKS if b.page == page and runnable(b)):
        failure = run_block(block, clone, env)
        if failure:
            return failure
    return None


class PageRuns:
    """Every selected page run, two at a time (their blocks run one after the other, so two
    pages keep two cores busy), each page once per test run: under xdist the workers share
    the results through files, each page under a lock."""

    def __init__(self, scratch: Scratch, folder: Path, pages: list[str]) -> None:
        self.scratch = scratch
        self.folder = folder
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="docs-page")
        self.runs = {page: self.pool.submit(self.run, page) for page in pages}

    def run(self, page: str) -> str | None:
        name = re.sub(r"[^\w.-]", "_", page)
        done = self.folder / f"{name}.json"
        with FileLock(str(self.folder / f"{name}.lock")):
            if done.exists():
                failure: str | None = json.loads(done.read_text(encoding="utf-8"))["failure"]
                return failure
            failure = run_page(page, self.scratch, self.folder / name)
            done.write_text(json.dumps({"failure": failure}), encoding="utf-8")
            return failure

    def failure(self, page: str) -> str | None:
        if page not in self.runs:  # not among the selected items: run it now
            self.runs[page] = self.pool.submit(self.run, page)
        return self.runs[page].result()


@pytest.fixture(scope="session")
def page_runs(
    request: pytest.FixtureRequest, fresh_clone: Scratch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PageRuns]:
    folder = run_folder(tmp_path_factory) / "docs-pages"
    folder.mkdir(exist_ok=True)
    selected = [
        str(item.callspec.params["page"])
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.originalname == "test_the_commands_of_a_page_run_as_written"
    ]
    runs = PageRuns(fresh_clone, folder, selected)
    yield runs
    runs.pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES)
def test_the_commands_of_a_page_run_as_written(page: str, page_runs: PageRuns) -> None:
    failure = page_runs.failure(page)
    if failure:
        pytest.fail(failure, pytrace=False)
