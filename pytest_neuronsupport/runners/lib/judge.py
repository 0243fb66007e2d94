"""The English judge: a small instruct model says whether a generated text is fluent English.

Used when the CPU comparison does not run (several cores, or the CPU run cannot complete), and
only when a judge is set: the script's entry then runs ``judged(run)``. The judge
(``--neuron-judge``: a Hub id pinned as ``id@revision``, a local checkpoint or a ``zoo:``
model) runs on the CPU in fp32, eagerly. Its prompt is :data:`JUDGE_PROMPT`, sent as a user
message through its chat template when it has one (else as plain text followed by
``"\\nAnswer:"``), and its decision is :data:`JUDGE_RULE`: one forward pass, no sampling, no
parsing of free text.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
import transformers

from pytest_neuronsupport.runners.lib.models import load_pretrained, load_tokenizer, user_message
from pytest_neuronsupport.runners.lib.protocol import Result, phase

JUDGE_PROMPT = (
    "Is the following text fluent English? Answer with one word, Yes or No.\n\nText: {text}"
)
JUDGE_RULE = (
    "english is Y when the judge's next-token logit for 'Yes' is above its logit for 'No' "
    "(each the best over the first tokens of 'Yes', ' Yes', 'yes' / 'No', ' No', 'no' that "
    "the other answer does not share), else N"
)
YES = ("Yes", " Yes", "yes")
NO = ("No", " No", "no")


def judged(run: Callable[..., Any]) -> Callable[..., Any]:
    """The run, then the English judge wherever the CPU comparison did not run."""

    def run_and_judge(params: dict[str, Any], ops: Any) -> Any:
        verdict = run(params, ops)
        check = (verdict or {}).get("check") or {}
        if check.get("rule") == "english":
            phase("judge")
            try:
                check["judge"] = judge_english(params["judge"], verdict["text"])
            except Exception as exc:
                check["judge"] = f"the judge {params['judge']} could not run: {exc!r}"[:500]
            else:
                verdict["english"] = check["judge"]["english"]
                if verdict["english"] != "Y":
                    verdict["result"] = Result.FAIL_OUTPUT
        return verdict

    return run_and_judge


def first_tokens(tokenizer: Any, words: tuple[str, ...]) -> list[int]:
    """The first token of each spelling of a word."""
    ids = [tokenizer.encode(w, add_special_tokens=False) for w in words]
    return sorted({i[0] for i in ids if i})


def judge_english(judge: str, text: str) -> dict[str, Any]:
    """The judge's verdict on ``text``, with everything that decided it. ``judge`` is a
    checkpoint folder, or a Hub id with its revision after an ``@``."""
    checkpoint, _, revision = (judge, "", "") if os.path.isdir(judge) else judge.partition("@")
    where = {"checkpoint": checkpoint, "revision": revision or None}
    tokenizer = load_tokenizer(where)
    model = load_pretrained(transformers.AutoModelForCausalLM, where, "float32", "cpu")
    yes_all, no_all = first_tokens(tokenizer, YES), first_tokens(tokenizer, NO)
    yes, no = [t for t in yes_all if t not in no_all], [t for t in no_all if t not in yes_all]
    if not yes or not no:
        raise ValueError(f"the judge's tokenizer cannot tell 'Yes' {yes_all} from 'No' {no_all}")
    with torch.inference_mode():
        inputs = user_message(tokenizer, JUDGE_PROMPT.format(text=text), "\nAnswer:")
        logits = model(**inputs).logits[0, -1].float()
    yes_logit, no_logit = float(logits[yes].max()), float(logits[no].max())
    english = "Y" if yes_logit > no_logit else "N"
    decision = {"model": checkpoint, "revision": revision or None, "prompt": JUDGE_PROMPT}
    details = {"rule": JUDGE_RULE, "yes_tokens": yes, "no_tokens": no, "yes_logit": yes_logit}
    return {**decision, **details, "no_logit": no_logit, "english": english}
