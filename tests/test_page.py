"""The static results page (``write_page``), checked in a real headless Chromium over file://."""

from __future__ import annotations

import importlib
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.merge import merge_journals
from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.dataset.train import TRAIN
from pytest_neuronsupport.runners.lib.protocol import Result
from pytest_neuronsupport.views.coverage import coverage
from pytest_neuronsupport.views.dashboard import dashboard, grid, history
from pytest_neuronsupport.views.failures import pair_failures
from pytest_neuronsupport.views.page import write_page
from pytest_neuronsupport.views.perf import FAILED_HEADER, perf_tables
from pytest_neuronsupport.views.train import train_tables
from tests.results_for_tests import pair_of, result_row, write_results

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page

REQUIRE_BROWSER = os.environ.get("NEURONSUPPORT_REQUIRE_BROWSER") == "1"
"""Set in CI: a missing browser (or playwright) fails the tests instead of skipping them."""
sync_api: Any = (
    importlib.import_module("playwright.sync_api")
    if REQUIRE_BROWSER
    else pytest.importorskip("playwright.sync_api")
)

EVIL_ID = "evil/<script>alert(1)</script>&amp;-model"
EVIL_ERROR = 'ValueError: <script>alert(2)</script> &amp; &lt;b&gt; <img src=x onerror="alert(3)">'
MID_RUN_PY = "import torch\nprint('mid-t5 <run>')  # the full script & more\n"
A = "inductor-2.13.0 / transformers-5.24.0"
B = "inductor-2.9.1 / transformers-5.23.0"
C = "aot_eager-2.13.0 / transformers-5.24.0"
ZETA_REPRO = "import torch\n# repro.py of org/zeta-lm: <linear> & nothing else\n"
ZETA_CLASS: dict[str, Any] = {"architecture": "LlamaForCausalLM", "model_type": "llama"}
ZETA_BREAKS = ["Data-dependent branching (modeling.py:12 in forward)", "print() (x.py:3 in f)"]
#: zeta-lm's CPU references: in A from one kind of host, in B (A's previous pair) another's.
XEON: dict[str, Any] = {"reference_cpu": "Intel Xeon", "reference_isa": "Intel AVX10.1 and AMX"}
EPYC: dict[str, Any] = {"reference_cpu": "AMD EPYC", "reference_isa": "Intel AVX2"}


def _rows() -> list[dict[str, Any]]:
    b: dict[str, Any] = {"compiler_version": "2.9.1", "library_version": "5.23.0"}
    c: dict[str, Any] = {"compiler": "aot_eager"}
    return [
        result_row(
            "org/zeta-lm",
            "PASS",
            selection_rank=1,
            neuron_cores=2,
            wall_s=75.0,
            **ZETA_CLASS,
            **XEON,
        ),
        result_row(
            "org/zeta-lm",
            "FAIL(gen)",
            selection_rank=1,
            error="BackendCompilerFailed: backend='neuron' raised:\nNotImplementedError: linear",
            error_site="torch_neuronx.lowering:linear",
            graph_count=3,
            graph_breaks=2,
            graph_break_reasons=ZETA_BREAKS,
            repro_py=ZETA_REPRO,
            repro_ops_before=40,
            repro_ops_after=1,
            repro_ops=["torch._C._nn.linear"],
            **ZETA_CLASS,
            **EPYC,
            **b,
        ),
        result_row(
            "org/alpha-bert",
            "PASS",
            task="fill-mask",
            selection_rank=2,
            checked_by="none",
            architecture="BertForMaskedLM",
            model_type="bert",
        ),
        result_row(
            "org/mid-t5",
            "FAIL(load)",
            task="text2text-generation",
            selection_rank=3,
            error="OSError: no weights & no <config>\nline 2 of the traceback",
            run_py=MID_RUN_PY,
            notes="needs a newer tokenizer",
        ),
        result_row(
            "org/vit-small",
            "EXCLUDED",
            task="image-classification",
            exclusion="remote code",
            hbm_peak_gb=None,
        ),
        result_row(
            "org/Llama-Tiny", "PASS", hbm_peak_gb=15.5, wall_s=float("nan"), **ZETA_CLASS, **b
        ),
        result_row("org/llama-tiny-chat", "FAIL(forward)", check='{"tokens": 32}', **c),
        result_row("org/whisper", "FAIL(output)", task="automatic-speech-recognition", **b),
        result_row(EVIL_ID, "FAIL(other)", error=EVIL_ERROR, notes="<b>not bold</b>", **c),
    ]


ROWS = _rows()
PERF_PAIR = "aot_eager-2.13.0/transformers-5.24.0.parquet"


def _perf_and_train_rows(results: Path) -> None:
    """A few performance and training rows, through their tables' journal and merge."""
    now = datetime.now(UTC)
    common: dict[str, Any] = {"tested_at": now, "dtype": "float32", "dp_degree": 1, "batch": 1}
    perf = [
        {
            **common,
            "model_id": "zoo:bert",
            "configuration": "b1-s128-dp1",
            "kind": "encoder",
            "result": "PASS",
            "seq_len": 128,
            "throughput": 123.456,
            "throughput_round_stdev": 1.5,
            "latency_ms_p50": 8.1,
            "latency_ms_p99": 20.0,
            "noisy": True,
            "cost_per_million": 0.0123,
            "speedup_vs_eager": 1.5,
            "roofline_fraction": 0.01234,
        },
        {
            **common,
            "model_id": "zoo:gpt2",
            "configuration": "b1-i8-o4-dp1",
            "kind": "decoder",
            "result": "PASS",
            "throughput": 50.0,
            "ttft_ms_p50": 3.0,
            "tpot_ms_p99": 4.0,
            "input_len": 8,
            "output_len": 4,
        },
        {
            **common,
            "model_id": "zoo:t5",
            "configuration": "b1-i8-o4-dp1",
            "kind": "encoder-decoder",
            "result": "FAIL(gen)",
            "notes": "<b>it raised</b>",
        },
    ]
    train = [
        {
            "model_id": "zoo:gpt2",
            "seq_len": 128,
            "objective": "causal-lm",
            "precision": "fp32",
            "result": "PASS",
            "batch_native": 8,
            "batch_compiled": 16,
            "batch_compiled_capped": True,
            "batch_ratio": 2.0,
            "samples_per_s_native": 10.0,
            "samples_per_s_compiled": 20.0,
            "peak_gb_native": 1.5,
            "peak_gb_compiled": 2.25,
            "memory_cap_gb": 4.0,
            "tested_at": now,
        },
        {"model_id": "zoo:bert-mlm", "seq_len": 128, "result": "FAIL(train)", "tested_at": now},
    ]
    with Journal(results) as journal:
        for row in perf:
            journal.append(PERF_PAIR, row, PERF)
        for row in train:
            journal.append(PERF_PAIR, row, TRAIN)
        path = journal.path
    assert merge_journals(results, include=[path]).ok


@dataclass
class Watched:
    """A page and what it did: console errors, page errors, requests, dialogs."""

    page: Page
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def models(self) -> list[str]:
        """The model ids of the table's rows, top to bottom."""
        return self.page.locator("tr.row button.model").all_text_contents()

    def cells(self, name: str) -> list[str]:
        """The texts of the table's cells of class ``name``, top to bottom."""
        return self.page.locator(f"tr.row td.{name}").all_text_contents()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        message = "no chromium on PATH (apt-get install -y chromium)"
        if REQUIRE_BROWSER:
            pytest.fail(message)
        pytest.skip(message)
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = write_results(tmp_path_factory.mktemp("results"), ROWS)
    _perf_and_train_rows(results)
    return results


@pytest.fixture(scope="module")
def site(results: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_page(results, tmp_path_factory.mktemp("site") / "out")


@contextmanager
def _open(browser: Browser, index: Path) -> Iterator[Watched]:
    """``index`` opened in a fresh context; afterwards, check that nothing went wrong."""
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    watched = Watched(page)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            watched.errors.append(message.text)

    def on_dialog(dialog: Dialog) -> None:
        watched.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("console", on_console)
    page.on("pageerror", lambda error: watched.errors.append(str(error)))
    page.on("request", lambda request: watched.requests.append(request.url))
    page.on("dialog", on_dialog)
    try:
        page.goto(index.as_uri())
        yield watched
    finally:
        context.close()
    assert watched.errors == []
    assert watched.dialogs == []
    assert watched.requests, "the page itself was not requested"
    assert all(url.startswith(("file:", "data:", "about:")) for url in watched.requests), (
        watched.requests
    )


@pytest.fixture
def watched(browser: Browser, site: Path) -> Iterator[Watched]:
    with _open(browser, site) as opened:
        yield opened


def test_write_page_returns_the_index(site: Path) -> None:
    assert site.name == "index.html" and site.is_file()
    html = site.read_text(encoding="utf-8")
    assert "<script>alert" not in html  # the evil id only as escaped text
    assert "http://" not in html and "https://" not in html  # nothing to fetch


def test_an_unchecked_pass_is_counted_apart(site: Path) -> None:
    html = site.read_text(encoding="utf-8")
    assert '<span id="unchecked"' in html and ">1 PASS unchecked</span>" in html
    assert '<dd data-field="checked_by">' in html


def test_counts_at_the_top(watched: Watched) -> None:
    expected = Counter(row["result"] for row in ROWS)
    page = watched.page
    labels = page.locator("button.count .label").all_text_contents()
    assert labels == [result.value for result in Result]  # in the enum's order
    for result in Result:
        count = page.locator(f'button.count[data-result="{result.value}"] .n')
        assert count.text_content() == str(expected[result.value])
    assert watched.cells("result") and len(watched.models()) == len(ROWS)
    bars = page.locator("#pair-chart .pair-bar")
    assert sorted(bars.evaluate_all("els => els.map(e => e.dataset.pair)")) == sorted({A, B, C})


def test_search_narrows_case_insensitively(watched: Watched) -> None:
    watched.page.fill("#search", "LLAMA")
    assert sorted(watched.models()) == ["org/Llama-Tiny", "org/llama-tiny-chat"]
    watched.page.fill("#search", "no-such-model")
    assert watched.models() == []
    assert watched.page.locator("#no-match").is_visible()
    watched.page.fill("#search", "")
    assert len(watched.models()) == len(ROWS)


def test_result_and_pair_filters(watched: Watched) -> None:
    page = watched.page
    page.select_option("#result-filter", "FAIL(load)")
    assert watched.models() == ["org/mid-t5"]
    page.select_option("#result-filter", "FAIL*")
    assert len(watched.models()) == 5
    assert all(result.startswith("FAIL") for result in watched.cells("result"))
    page.select_option("#result-filter", "")
    page.select_option("#pair-filter", B)
    assert sorted(watched.models()) == ["org/Llama-Tiny", "org/whisper", "org/zeta-lm"]
    assert set(watched.cells("pair")) == {B}
    page.click('button.count[data-result="PASS"]')  # a count filters too
    assert watched.models() == ["org/Llama-Tiny"]


def test_selection_in_rank_order(watched: Watched) -> None:
    watched.page.click('button[data-view="selection"]')
    assert watched.models() == ["org/zeta-lm", "org/zeta-lm", "org/alpha-bert", "org/mid-t5"]
    assert watched.cells("col-rank") == ["1", "1", "2", "3"]
    assert watched.page.locator("th.col-rank").is_visible()


def test_views_by_task(watched: Watched) -> None:
    page = watched.page
    page.click('button[data-view="task"]')
    groups = page.locator("tr.group").evaluate_all("els => els.map(e => e.dataset.task)")
    assert groups == sorted({row["task"] for row in ROWS})
    fill_mask = page.locator('tbody.task-group:has(tr.group[data-task="fill-mask"]) tr.row')
    assert fill_mask.locator("button.model").all_text_contents() == ["org/alpha-bert"]
    page.select_option("#task-filter", "text-generation")
    assert set(watched.cells("task")) == {"text-generation"}
    assert page.locator("tr.group").count() == 1


def test_detail_of_a_failed_model(watched: Watched) -> None:
    page = watched.page
    page.click("button.model:text-is('org/mid-t5')")
    detail = page.locator("dialog#detail")
    assert detail.is_visible()
    assert detail.locator("#detail-title").text_content() == "org/mid-t5"
    error = detail.locator('pre[data-field="error"]').text_content()
    assert error == "OSError: no weights & no <config>\nline 2 of the traceback"
    assert detail.locator('pre[data-field="run_py"]').text_content() == MID_RUN_PY
    assert detail.locator('pre[data-field="notes"]').text_content() == "needs a newer tokenizer"
    assert detail.locator('dd[data-field="result"]').text_content() == "FAIL(load)"
    assert not detail.locator('[data-block="check"]').is_visible()
    detail.locator("#copy-run-py").click()
    sync_api.expect(detail.locator("#copy-status")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == MID_RUN_PY
    detail.locator("#detail-close").click()
    assert not detail.is_visible()
    page.click("button.model:text-is('org/llama-tiny-chat')")
    assert '"tokens": 32' in str(detail.locator('pre[data-field="check"]').text_content())


def test_failures_grouped_as_the_command_groups_them(watched: Watched, results: Path) -> None:
    page = watched.page
    page.click('button[data-view="failures"]')
    assert page.locator("#failures").is_visible() and not page.locator("#rows-table").is_visible()
    pairs = [pair_of(row) for row in ROWS if row["result"].startswith("FAIL")]
    expected = {}  # page label -> (key, cause text, models) of each group, as the CLI has them
    for pair in sorted(set(pairs)):
        groups = pair_failures(results, pair)[1]
        expected[pair.removesuffix(".parquet").replace("/", " / ")] = [
            [g.cause.key, g.cause.text, [m.model_id for m in g.models]] for g in groups
        ]
    shown = page.locator(".failure-pair").evaluate_all(
        """els => Object.fromEntries(els.map(e => [e.dataset.pair, [...e.querySelectorAll(
            "tr.failure-group")].map(tr => [tr.dataset.key, tr.querySelector(".cause").textContent,
            [...tr.querySelectorAll(".group-model button")].map(b => b.textContent)])]))"""
    )
    assert shown == expected
    assert list(shown) == [C, B, A]  # in version order, as the bars
    assert "ValueError: <script>alert(<n>)</script>" in expected[C][1][1]  # shown as text
    zeta = page.locator("tr.failure-group", has_text="org/zeta-lm")
    assert zeta.locator(".cause").text_content() == (
        "NotImplementedError at op torch._C._nn.linear (through BackendCompilerFailed "
        "backend='neuron')"
    )
    assert zeta.locator(".repro").text_content().split() == [  # type: ignore[union-attr]
        "repro.py",
        "of",
        "org/zeta-lm",
        "(1",
        "op)",
    ]
    no_repro = page.locator("tr.failure-group", has_text="org/whisper").locator(".repro")
    assert no_repro.inner_text() == "no repro: rerun with --neuron-minify"
    zeta.locator(".repro button").click()
    detail = page.locator("dialog#detail")
    assert detail.locator("#detail-title").text_content() == "org/zeta-lm"
    assert detail.locator('dd[data-field="result"]').text_content() == "FAIL(gen)"
    assert detail.locator('dd[data-field="graphs"]').text_content() == "3 / 2"
    assert detail.locator('dd[data-field="repro_ops"]').text_content() == "1 op (minified from 40)"
    reasons = detail.locator('pre[data-field="graph_break_reasons"]').text_content()
    assert reasons == "\n".join(ZETA_BREAKS)
    assert detail.locator('pre[data-field="repro_py"]').text_content() == ZETA_REPRO
    detail.locator("#copy-repro-py").click()
    sync_api.expect(detail.locator("#copy-repro-status")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == ZETA_REPRO
    detail.locator("#detail-close").click()
    page.click("#failures button.model-link:text-is('org/mid-t5')")
    assert not detail.locator('[data-block="repro_py"]').is_visible()
    assert not detail.locator('[data-block="graph_break_reasons"]').is_visible()
    assert detail.locator('dd[data-field="graphs"]').text_content() == "—"
    detail.locator("#detail-close").click()
    page.click('button[data-view="all"]')
    assert not page.locator("#failures").is_visible() and len(watched.models()) == len(ROWS)


def test_performance_and_training_views(watched: Watched, results: Path) -> None:
    """The tables of ``neuronsupport perf`` and ``train-report``, cell for cell (same code)."""
    page = watched.page
    cells = """els => els.map(t => [...t.rows].map(r => [...r.cells].map(c => c.textContent)))"""
    page.click('button[data-view="perf"]')
    assert page.locator("#perf").is_visible() and not page.locator("#rows-table").is_visible()
    (perf,) = perf_tables(results)
    expected = [[list(g.header), *map(list, g.cells)] for g in perf.tables]
    expected.append([list(FAILED_HEADER), *map(list, perf.failed)])
    assert page.locator("#perf table").evaluate_all(cells) == expected
    titles = page.locator("#perf h4").all_text_contents()
    assert titles == ["Encoder Models", "Decoder Models", "Without figures"]
    assert expected[0][1][2] == "123.46 ±1.5!"  # throughput, its spread, and the noisy flag
    assert expected[2][1][3] == "<b>it raised</b>"  # shown as text (no <b> on the page)
    page.click('button[data-view="train"]')
    assert page.locator("#train").is_visible() and not page.locator("#perf").is_visible()
    (train,) = train_tables(results)
    shown = page.locator("#train table").evaluate_all(cells)
    assert shown == [[list(train.grid.header), *map(list, train.grid.cells)]]
    assert shown[0][2][:6] == ["zoo:gpt2", "causal-lm", "fp32", "128", "8", "16*"]
    assert "memory cap GB: 4.0, None" in str(page.locator("#train h3").text_content())
    page.click('button[data-view="all"]')
    assert not page.locator("#train").is_visible() and len(watched.models()) == len(ROWS)


def test_the_dashboard_view_is_the_commands_table_with_plots_and_links(
    watched: Watched, results: Path
) -> None:
    """The table of ``neuronsupport dashboard`` cell for cell (same code), a plot per metric,
    the worst models opening their rows, and each model's history in its details."""
    page = watched.page
    cells = """t => [...t.rows].map(r => [...r.cells].map(c => c.textContent.trim()))"""
    page.click('button[data-view="dashboard"]')
    assert page.locator("#dashboard").is_visible() and not page.locator("#rows-table").is_visible()
    board = dashboard(results)
    table = grid(board)
    shown = page.locator("#dashboard table").evaluate(cells)
    assert shown[0] == [table.header[0], "across pairs", *table.header[1:]]
    assert [[line[0], *line[2:]] for line in shown[1:]] == [list(line) for line in table.cells]
    assert table.header[1:] == (C, B, A)  # version order; B is A's previous
    assert page.locator("#dashboard svg.plot").count() >= 2  # inline SVG, no script from outside
    titles = page.locator("#dashboard svg.plot circle title").all_text_contents()
    assert f"{B}: 33.3%" in titles  # of zeta-lm, Llama-Tiny and whisper, one passed
    worst = page.locator(f'#dashboard .worst-pair[data-pair="{B}"] li[data-metric="pass rate"]')
    assert worst.locator("button.model-link").all_text_contents() == ["org/whisper", "org/zeta-lm"]
    a_failed = page.locator(f'#dashboard .worst-pair[data-pair="{A}"] li[data-metric="pass rate"]')
    shown_failed = " ".join(str(a_failed.text_content()).split())
    assert shown_failed == "pass rate: org/mid-t5 FAIL(load) (only in this pair)"  # B lacks it
    worst.locator("button.model-link", has_text="org/zeta-lm").click()
    detail = page.locator("dialog#detail")
    assert detail.locator("#detail-title").text_content() == "org/zeta-lm"
    assert detail.locator('dd[data-field="pair"]').text_content() == B  # the row of that pair
    rows = detail.locator("#detail-history tbody tr").evaluate_all(
        "rs => rs.map(r => [...r.cells].map(c => c.textContent))"
    )
    epyc, xeon = (", ".join(host.values()) for host in (EPYC, XEON))
    assert rows == [[B, "FAIL(gen)", "—", "—", epyc], [A, "PASS", "—", "—", xeon]]
    assert detail.locator('dd[data-field="reference_host"]').text_content() == epyc
    assert [h["pair"] for h in history(board)["org/zeta-lm"]] == [B, A]
    detail.locator("#detail-close").click()
    page.click('button[data-view="all"]')
    page.click("button.model:text-is('org/alpha-bert')")
    assert detail.locator("#detail-history tbody tr td.result").all_text_contents() == [
        "PASS unchecked"
    ]


def test_the_dashboard_compares_like_with_like_and_lists_the_rest_apart(
    watched: Watched,
) -> None:
    """A against B (its previous pair) over org/zeta-lm, the one model both tested; the models
    tested in only one of them are named apart, each opening its row in the pair that has it."""
    page = watched.page
    page.click('button[data-view="dashboard"]')
    cells = "t => [...t.rows].map(r => [...r.cells].map(c => c.textContent.trim()))"
    table = {line[0]: line[2:] for line in page.locator("#dashboard table").evaluate(cells)}
    assert table["tested in both"] == ["-", "-", "1"]  # the columns: C, B, A
    # zeta-lm's references: B's from an EPYC, A's from a Xeon: A's column says so
    hosts = table["CPU references from"]
    assert hosts[1] == "AMD EPYC, Intel AVX2 (1)"
    assert hosts[2] == (
        "Intel Xeon, Intel AVX10.1 and AMX (1) (another kind of host than the previous pair's)"
    )
    # A's own pass rate is over its 3 models; its change over zeta-lm alone: FAIL -> PASS
    assert table["pass rate"][2] == "66.7% (+100.0 pp over 1 in both: 0.0% -> 100.0%)"
    apart = page.locator(f'#dashboard .apart-pair[data-pair="{A}"]')
    assert " ".join(str(apart.locator("h4").text_content()).split()) == f"{A} vs {B}, 1 in both"
    here = apart.locator('li[data-side="only in this pair"] button.model-link')
    assert here.all_text_contents() == ["org/alpha-bert", "org/mid-t5"]  # vit-small: EXCLUDED
    before = apart.locator('li[data-side="only in the previous"] button.model-link')
    assert before.all_text_contents() == ["org/Llama-Tiny", "org/whisper"]
    before.filter(has_text="org/whisper").click()
    detail = page.locator("dialog#detail")
    assert detail.locator("#detail-title").text_content() == "org/whisper"
    assert detail.locator('dd[data-field="pair"]').text_content() == B
    assert page.locator("#dashboard .apart-pair").count() == 1  # C is its compiler's first


def test_the_architectures_view_is_the_coverage_commands_matrix(
    watched: Watched, results: Path
) -> None:
    page = watched.page
    page.click('button[data-view="coverage"]')
    assert page.locator("#coverage").is_visible() and not page.locator("#rows-table").is_visible()
    assert not page.locator(".filters").is_visible()
    matrix = coverage(results)
    cells = """els => els.map(t => [...t.rows].map(r => [...r.cells].map(c => c.textContent)))"""
    shown = page.locator("#coverage table").evaluate_all(cells)
    assert shown == [[list(matrix.grid.header), *map(list, matrix.grid.cells)]]
    header, *lines = shown[0]
    assert header[2:5] == [C, B, A]  # the pairs in version order, as the bars
    by_class = {line[1]: dict(zip(header, line, strict=True)) for line in lines}
    assert sorted(by_class) == ["BertForMaskedLM", "LlamaForCausalLM"]
    llama = by_class["LlamaForCausalLM"]
    assert (llama["model type"], llama[A], llama[B], llama[C]) == (
        "llama",
        "PASS",
        "1 PASS, 1 FAIL(gen)",
        "-",
    )
    assert (llama["runner"], llama["cores"], llama["graph breaks"]) == ("dense", "1, 2", "2")
    assert llama["failure"] == (
        "NotImplementedError at op torch._C._nn.linear (through BackendCompilerFailed "
        "backend='neuron')"
    )  # the cause of its failures group
    assert llama["models"] == "org/Llama-Tiny, org/zeta-lm"
    assert by_class["BertForMaskedLM"][A] == "PASS unchecked"
    note = page.locator("#coverage-note").text_content() or ""
    assert note.startswith("5 models on no line") and "org/mid-t5" in note
    page.click('button[data-view="all"]')
    assert not page.locator("#coverage").is_visible() and len(watched.models()) == len(ROWS)


def test_views_without_performance_training_or_architecture_rows_say_so(tmp_path: Path) -> None:
    html = write_page(write_results(tmp_path / "results", ROWS[:1]), tmp_path / "site")
    text = html.read_text(encoding="utf-8")
    assert 'id="no-perf"' in text and 'id="no-train"' in text
    for section in ("perf", "train"):
        assert (
            "report-table" not in text.split(f'<section id="{section}"')[1].split("</section>")[0]
        )
    assert 'id="no-coverage"' not in text  # its one row names its architecture
    bare = write_page(write_results(tmp_path / "bare", ROWS[3:4]), tmp_path / "bare-site")
    assert 'id="no-coverage"' in bare.read_text(encoding="utf-8")  # mid-t5 names none
    summary = " ".join(text.split('id="summary">')[1].split("</p>")[0].split())
    assert summary.startswith("1 row · 1 model · 1 pair")  # no "1 pairs"
    no_apart = text.split('id="no-apart">')[1].split("</p>")[0]
    assert no_apart == "No pair has a previous pair of its compiler to be compared with."


def test_markup_in_data_stays_text(watched: Watched) -> None:
    page = watched.page
    page.fill("#search", "<script>")
    assert watched.models() == [EVIL_ID]
    page.locator("button.model").first.click()
    assert page.locator("#detail-title").text_content() == EVIL_ID
    assert page.locator('pre[data-field="error"]').text_content() == EVIL_ERROR
    assert page.locator('pre[data-field="notes"]').text_content() == "<b>not bold</b>"
    assert page.locator("script").count() == 2  # the data and the page's own script
    assert page.locator("img, b, pre *").count() == 0
    assert page.evaluate("typeof window.alert") == "function"


def test_screenshot(watched: Watched, tmp_path: Path) -> None:
    shot = tmp_path / "page.png"
    watched.page.screenshot(path=str(shot), full_page=True)
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000


def test_empty_dataset(browser: Browser, tmp_path: Path) -> None:
    index = write_page(tmp_path / "no-results", tmp_path / "site")
    with _open(browser, index) as watched:
        page = watched.page
        assert "No results" in str(page.locator("#empty").text_content())
        assert watched.models() == []
        counts = page.locator("button.count .n").all_text_contents()
        assert counts == ["0"] * len(Result)
