"""Dr GRPO math on tiny tensors, and TRL's dr_grpo advantages and loss matching it and training_core.rl."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from training_core.methods.drgrpo import (
    clipped_token_objective,
    dr_grpo_loss,
    group_advantages,
    grpo_advantages,
    grpo_loss,
)
from training_core.rl import get_response_log_probs, group_normalize, grpo_microbatch_train_step


def test_advantage_is_reward_minus_group_mean_without_std() -> None:
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.4, 0.6])  # two groups of 4
    a = group_advantages(r, 4)
    assert torch.allclose(a, torch.tensor([0.75, -0.25, -0.25, -0.25, 0.0, 0.0, -0.1, 0.1]))
    # GRPO's std division inflates the low-spread group to the same scale: the difficulty bias.
    g = grpo_advantages(r, 4)
    assert g[7] / a[7] > 5 and torch.allclose(g[:4].abs().max(), g[4:].abs().max(), rtol=0.5)


def test_loss_divides_by_the_constant_length_not_each_completion_length() -> None:
    per_token = torch.ones(2, 4)  # (B, T)
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    assert dr_grpo_loss(per_token, mask, max_completion_length=8).item() == pytest.approx(5 / 16)
    assert grpo_loss(per_token, mask).item() == pytest.approx(1.0)  # the long and short answer weigh the same


def test_clipping_limits_the_ratio() -> None:
    logps = torch.log(torch.tensor([[2.0, 0.5]]))  # ratios 2 and 0.5 against old logp 0
    old = torch.zeros(1, 2)
    pos = clipped_token_objective(logps, old, torch.tensor([1.0]), epsilon=0.2)
    neg = clipped_token_objective(logps, old, torch.tensor([-1.0]), epsilon=0.2)
    assert torch.allclose(pos, torch.tensor([[-1.2, -0.5]]))
    assert torch.allclose(neg, torch.tensor([[2.0, 0.8]]))


def _digit_count(completions: list[str], **_: object) -> list[float]:
    """A deterministic reward with spread between the tiny model's random completions."""
    return [float(sum(ch.isdigit() for ch in c)) for c in completions]


@pytest.fixture(scope="module")
def tiny_trainer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training_core.hardware.platform import PlatformFacts
    from training_core.methods.trainer import PippaGRPOTrainer, grpo_args
    from training_core.models import tiny
    from training_core.recipes import resolve

    cfg = resolve(
        "tiny", ["train.max_completion_length=6", "train.num_generations=4"], PlatformFacts()
    ).config
    path = tiny.ensure()
    tok, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    trainer = PippaGRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[_digit_count],  # type: ignore[list-item]  # TRL types rewards as list[float | None]
        args=grpo_args(cfg, tmp_path_factory.mktemp("drgrpo"), ["none"], "t"),
        train_dataset=Dataset.from_list([{"prompt": "1+1=", "answer": "2"}] * 8),
    )
    trainer.current_gradient_accumulation_steps = 1
    return trainer, tok, cfg


@pytest.mark.slow
def test_trl_dr_grpo_loss_matches_the_paper_functions_and_the_rl_train_step(tiny_trainer: Any) -> None:
    trainer, _, cfg = tiny_trainer
    model = trainer.model
    torch.manual_seed(0)
    b, p, t = 4, 3, 5
    prompt_ids, completion_ids = torch.randint(3, 20, (b, p)), torch.randint(3, 20, (b, t))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.2]), 4)
    logps, _, _ = trainer._get_per_token_logps_and_entropies(
        model,
        torch.cat([prompt_ids, completion_ids], 1),
        torch.cat([torch.ones(b, p, dtype=torch.long), mask], 1),
        t,
    )
    # rl.get_response_log_probs on the same sequences (labels shifted by one) gives TRL's log-probs.
    seq = torch.cat([prompt_ids, completion_ids], 1)
    ours = get_response_log_probs(model, seq[:, :-1], seq[:, 1:])["log_probs"][:, -t:]  # (B, T)
    assert torch.allclose(ours * mask, logps * mask, atol=1e-5)
    old = logps.detach() + 0.3 * torch.randn(b, t)  # ratios away from 1, so clipping matters
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones(b, p, dtype=torch.long),
        "completion_ids": completion_ids,
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum(),
    }
    model.train()
    trl_loss = trainer._compute_loss(model, inputs)
    paper = dr_grpo_loss(clipped_token_objective(logps, old, adv, cfg.train.epsilon), mask.float(), 6)
    assert trl_loss.item() == pytest.approx(paper.item(), rel=1e-5, abs=1e-7)
    # The CS336-style microbatch step with Dr GRPO's constant divisor: same loss, same gradient.
    model.zero_grad()
    trl_loss.backward()
    trl_grad = [q.grad.clone() for q in model.parameters() if q.grad is not None]
    model.zero_grad()
    step_loss, _ = grpo_microbatch_train_step(
        ours,
        mask,
        1,
        "grpo_clip",
        advantages=adv.unsqueeze(1),
        old_log_probs=old,
        cliprange=cfg.train.epsilon,
        normalize_constant=6,
    )
    assert step_loss.item() == pytest.approx(trl_loss.item(), rel=1e-5, abs=1e-7)
    step_grad = [q.grad for q in model.parameters() if q.grad is not None]
    assert len(step_grad) == len(trl_grad)
    assert all(torch.allclose(a, g, atol=1e-6) for a, g in zip(step_grad, trl_grad, strict=True))
    model.zero_grad()


@pytest.mark.slow
def test_trl_advantages_are_the_group_mean_difference_without_std(tiny_trainer: Any) -> None:
    trainer, tok, _ = tiny_trainer
    torch.manual_seed(3)
    rows = [{"prompt": "1+1=", "answer": "2"}] * 4 + [{"prompt": "3+4=", "answer": "7"}] * 4
    out = trainer._generate_and_score_completions(rows)
    texts = tok.batch_decode(out["completion_ids"], skip_special_tokens=True)
    rewards = torch.tensor(_digit_count(texts))
    assert rewards.std() > 0  # the check below would hold trivially on constant rewards
    assert torch.allclose(out["advantages"], group_normalize(rewards, 4, normalize_by_std=False))
    assert not torch.allclose(out["advantages"], group_normalize(rewards, 4, normalize_by_std=True))
