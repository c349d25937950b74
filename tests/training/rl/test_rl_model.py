"""training_core.rl with a real model: tokenization boundaries, log-probs and the DPO loss on the tiny
Qwen2 model (training_core.models.tiny), checked against transformers' own cross-entropy."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from training_core.data.prompts import ALPACA_TEMPLATE
from training_core.rl import get_response_log_probs, per_instance_dpo_loss, tokenize_prompt_and_output


@pytest.fixture(scope="module")
def tiny_lm() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training_core.models import tiny

    path = tiny.ensure()
    return AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)


def test_tokenize_shifts_by_one_and_masks_only_the_output(tiny_lm: tuple[Any, Any]) -> None:
    tok, _ = tiny_lm
    out = tokenize_prompt_and_output(["1+1=", "12+3="], ["2", "15"], tok)
    # char tokenizer: id = 3 + index in "0123456789+-*/=...": "1"=4, "+"=13, "="=17, "2"=5, "3"=6, "5"=8
    assert out["input_ids"].tolist() == [[4, 13, 4, 17, 5, 0], [4, 5, 13, 6, 17, 4]]  # last token cut
    assert out["labels"].tolist() == [[13, 4, 17, 5, 0, 0], [5, 13, 6, 17, 4, 8]]
    assert out["response_mask"].tolist() == [
        [False, False, False, True, False, False],  # "2" is the 4th label; padding is not response
        [False, False, False, False, True, True],
    ]


def test_log_probs_are_the_model_cross_entropy_and_entropy_has_one_value_per_token(
    tiny_lm: tuple[Any, Any],
) -> None:
    tok, model = tiny_lm
    batch = tokenize_prompt_and_output(["3+4=", "9+0="], ["7", "9"], tok)
    out = get_response_log_probs(model, batch["input_ids"], batch["labels"], return_token_entropy=True)
    assert out["log_probs"].shape == out["token_entropy"].shape == batch["labels"].shape
    with torch.no_grad():
        logits = model(batch["input_ids"]).logits
    ce = F.cross_entropy(logits.transpose(1, 2), batch["labels"], reduction="none")  # (B, T)
    assert torch.allclose(out["log_probs"], -ce, atol=1e-5)
    vocab = logits.shape[-1]
    assert bool(((out["token_entropy"] >= 0) & (out["token_entropy"] <= math.log(vocab) + 1e-5)).all())
    assert "token_entropy" not in get_response_log_probs(model, batch["input_ids"], batch["labels"])


def _nll(model: Any, tok: Any, prompt: str, response: str) -> float:
    """-log p(sequence) from transformers' loss (mean over L-1 predicted tokens, times L-1)."""
    text = ALPACA_TEMPLATE.format(instruction=prompt, response=response) + tok.eos_token
    ids = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        return float(model(ids, labels=ids).loss) * (ids.shape[1] - 1)


def test_dpo_loss_is_log2_against_itself_and_matches_the_formula(tiny_lm: tuple[Any, Any]) -> None:
    tok, model = tiny_lm
    args = dict(tokenizer=tok, beta=0.5, prompt="what is 2+2?", response_chosen="4", response_rejected="5")
    same = per_instance_dpo_loss(lm=model, lm_ref=model, **args)  # type: ignore[arg-type]
    assert same.item() == pytest.approx(math.log(2), abs=1e-6)  # margin 0: -log sigmoid(0)
    ref = copy.deepcopy(model)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    loss = per_instance_dpo_loss(lm=model, lm_ref=ref, **args)  # type: ignore[arg-type]
    margin = (_nll(ref, tok, "what is 2+2?", "4") - _nll(model, tok, "what is 2+2?", "4")) - (
        _nll(ref, tok, "what is 2+2?", "5") - _nll(model, tok, "what is 2+2?", "5")
    )
    assert loss.item() == pytest.approx(-F.logsigmoid(torch.tensor(0.5 * margin)).item(), rel=1e-4)
    assert loss.item() != pytest.approx(math.log(2), abs=1e-4)  # the perturbation moved the margin
    loss.backward()  # gradients reach the trained model only
    assert next(model.parameters()).grad is not None and next(ref.parameters()).grad is None
    model.zero_grad()
