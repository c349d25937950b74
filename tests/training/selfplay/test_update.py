"""The policy-gradient step on the tiny model: the loss is REINFORCE with the Dr GRPO aggregation
(masked sum / max_completion_length, batch mean), and a positive advantage raises its move's
probability while a negative one lowers it, with one epoch and with two clipped PPO epochs."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from training_core.selfplay.loop import lr_schedule
from training_core.selfplay.update import Sample, UpdateSettings, policy_update

PROMPT = "012345678o:"


@pytest.fixture(scope="module")
def tiny_parts() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training_core.models import tiny

    path = tiny.ensure()
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _logp(model: Any, tok: Any, answer: str) -> float:
    ids = tok(PROMPT + answer)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits
    return float(torch.log_softmax(logits[0, -1], -1)[ids[-1]])


@pytest.mark.parametrize("epochs", [1, 2])
def test_the_update_follows_the_advantage_sign_with_the_dr_grpo_loss(
    tiny_parts: tuple[Any, Any], epochs: int
) -> None:
    base, tok = tiny_parts
    model = type(base)(base.config)
    model.load_state_dict(base.state_dict())
    samples = [Sample(PROMPT, "4", 1.0, 0), Sample(PROMPT, "5", -1.0, 1)]
    before = {a: _logp(model, tok, a) for a in "45"}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = lr_schedule(opt, "constant", 0, 10)
    settings = UpdateSettings(
        max_completion_length=4, micro_batch_size=1, epochs=epochs, cliprange=0.2, max_grad_norm=1.0
    )
    m = policy_update(model, tok, opt, sched, samples, settings)
    if epochs == 1:
        # per sequence −A·log p / 4 (one response token, divisor 4), averaged over the 2 sequences
        assert m["loss/total"] == pytest.approx(-(before["4"] - before["5"]) / 4 / 2, rel=1e-4)
    else:
        assert 0.0 <= m["loss/clip_fraction"] <= 1.0
    for _ in range(4):
        policy_update(model, tok, opt, sched, samples, settings)
    after = {a: _logp(model, tok, a) for a in "45"}
    assert after["4"] > before["4"] + 0.1 and after["5"] < before["5"] - 0.1
    assert m["optim/lr"] == pytest.approx(1e-2) and m["grad/norm"] > 0


def test_lr_schedule_warms_up_then_holds_or_decays() -> None:
    p = torch.nn.Parameter(torch.zeros(1))
    for kind, want in (("constant", [1 / 3, 2 / 3, 1, 1, 1]), ("linear", [1 / 3, 2 / 3, 1, 2 / 3, 1 / 3])):
        opt = torch.optim.SGD([p], lr=1.0)
        sched = lr_schedule(opt, kind, 2, 5)
        seen = []
        for _ in range(5):
            seen.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        assert seen == pytest.approx(want), kind
