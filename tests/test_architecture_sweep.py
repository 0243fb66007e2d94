"""CI's sample of the architecture sweep, held against the checked-in expected results.

The whole list (``model_lists/architectures.toml``, every tiny architecture that builds) is a
benchmark (``benchmarks/architectures.py``); CI sweeps this fixed sample of it on the CPU with
``aot_eager``, with ``--neuron-baseline model_lists/architectures-expected.toml``: a
transformers or torch upgrade that breaks one of them fails here.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_neuronsupport import baseline
from pytest_neuronsupport.bundled import bundled_dir
from pytest_neuronsupport.modellist import parse
from tests.sweeping import SweepRunner

EXPECTED = bundled_dir() / "architectures-expected.toml"
#: Every kind of the card's tasks and every runner the list routes to, 14 of them (about a
#: minute on 2 cores, each built first): decoders with and without experts, encoder-decoders
#: (Marian was once routed as an encoder for its class name; T5 lacked a decoder start token),
#: masked LMs (XLM's was once routed as a decoder), token and sequence classifiers (FNet takes
#: no attention mask), question answering (a ``...Simple`` head once had no runner), an
#: image-text-to-text model (Qwen2-VL: its image grid, rotary sections, a borrowed processor);
#: one expected failure (ProphetNet: transformers' own generation refuses its position ids) and one
#: exclusion (speech to text), so that every kind of row is held; and MobileBERT's masked LM, whose
#: build warns (torch: ``Initializing zero-element tensors is a no-op``), swept under ``-W error``
#: as a strict project's ``filterwarnings = error`` would: a library's warning is not a FAIL(load).
SAMPLE = (
    "LlamaForCausalLM",
    "GPT2LMHeadModel",
    "MixtralForCausalLM",
    "T5ForConditionalGeneration",
    "MarianMTModel",
    "BertForMaskedLM",
    "XLMWithLMHeadModel",
    "FNetForTokenClassification",
    "RobertaForSequenceClassification",
    "XLNetForQuestionAnsweringSimple",
    "Qwen2VLForConditionalGeneration",
    "ProphetNetForCausalLM",
    "VoxtralForConditionalGeneration",
    "MobileBertForMaskedLM",
)
IDS = [f"zoo:arch/{cls}" for cls in SAMPLE]


def test_the_sample_is_in_the_list_and_its_baseline() -> None:
    listed = {spec.id for spec in parse(bundled_dir() / "architectures.toml")}
    expected = baseline.read(EXPECTED).expected
    assert set(IDS) <= listed
    assert set(expected) == listed  # the baseline holds the whole list
    results = {expected[i].result for i in IDS}
    assert {"PASS", "EXCLUDED"} <= results and any(r.startswith("FAIL") for r in results)


@pytest.mark.slow
def test_a_sample_of_the_architectures_gives_the_expected_results(
    sweep_folder: Callable[..., SweepRunner],
) -> None:
    runner = sweep_folder("architectures")
    done = runner.run(*IDS, args=["--neuron-baseline", str(EXPECTED), "-W", "error"])
    expected = baseline.read(EXPECTED)
    got = {i: done.row(i)["result"] for i in IDS}
    assert got == {i: expected.expected[i].result for i in IDS}
    assert done.result.ret == 0, "\n".join(done.result.outlines[-30:])
    assert done.junit[IDS[0]]["baseline"] == "same"
