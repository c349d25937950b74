"""training_core.rl on tiny tensors: every value below is worked out by hand in the comment beside it."""

from __future__ import annotations

import math

import pytest
import torch

from training_core.rl import (
    compute_entropy,
    compute_group_normalized_rewards,
    compute_grpo_clip_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    grpo_microbatch_train_step,
    masked_mean,
    masked_normalize,
    sft_microbatch_train_step,
)


def _reward(response: str, ground_truth: str) -> dict[str, float]:
    """1 for the right answer, 0.5 for a formatted wrong one, 0 otherwise (a CS336-shaped reward)."""
    fmt = 1.0 if response.startswith("a=") else 0.0
    ans = 1.0 if fmt and response[2:] == ground_truth else 0.0
    return {"reward": ans + 0.5 * (fmt - ans), "format_reward": fmt, "answer_reward": ans}


def test_group_rewards_subtract_the_group_mean_and_optionally_divide_by_its_std() -> None:
    responses = ["a=1", "a=2", "x", "x", "a=3", "a=3", "a=3", "a=3"]
    truths = ["1"] * 4 + ["3"] * 4
    adv, raw, meta = compute_group_normalized_rewards(_reward, responses, truths, 4, 1e-6, False)
    assert raw.tolist() == [1.0, 0.5, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    # group 1 mean 0.375; group 2 is all right: mean 1, no signal
    assert adv.tolist() == pytest.approx([0.625, 0.125, -0.375, -0.375, 0, 0, 0, 0])
    assert meta["frac_zero_std"] == 0.5 and meta["format_reward_mean"] == 0.75
    assert meta["answer_reward_mean"] == pytest.approx(5 / 8) and meta["reward_max"] == 1.0
    std_adv, _, _ = compute_group_normalized_rewards(_reward, responses, truths, 4, 1e-6, True)
    std1 = math.sqrt((0.625**2 + 0.125**2 + 2 * 0.375**2) / 3)  # unbiased std of group 1
    assert std_adv[:4].tolist() == pytest.approx([a / (std1 + 1e-6) for a in (0.625, 0.125, -0.375, -0.375)])
    assert std_adv[4:].tolist() == [0.0] * 4  # 0 / (0 + eps), not nan


def test_group_rewards_reject_a_batch_that_does_not_split_into_groups() -> None:
    with pytest.raises(ValueError, match="groups of 4"):
        compute_group_normalized_rewards(_reward, ["a=1"] * 6, ["1"] * 6, 4, 1e-6, False)


def test_entropy_is_log_v_for_uniform_logits_and_stays_finite_for_huge_ones() -> None:
    logits = torch.zeros(2, 3, 5)  # (B, T, V) uniform over 5
    assert torch.allclose(compute_entropy(logits), torch.full((2, 3), math.log(5)))
    peaked = torch.tensor([[1e4, 0.0, 0.0, 0.0]])  # exp(1e4) overflows a naive softmax
    assert compute_entropy(peaked).item() == pytest.approx(0.0, abs=1e-6)
    two = torch.tensor([[0.0, 0.0, -1e4]])  # two equal choices, one impossible: log 2
    assert compute_entropy(two).item() == pytest.approx(math.log(2))


def test_masked_mean_divides_by_each_rows_length_masked_normalize_by_a_constant() -> None:
    # CS336's length-normalization example: two completions of 4 and 7 tokens, per-token value 2.
    values = torch.full((2, 7), 2.0, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    assert masked_mean(values, mask, dim=1).tolist() == [2.0, 2.0]
    assert masked_normalize(values, mask, dim=1, normalize_constant=7).tolist() == pytest.approx([8 / 7, 2.0])
    masked_mean(values, mask, dim=1).mean().backward()
    assert values.grad is not None
    assert values.grad[0, 0].item() == pytest.approx(1 / 8) and values.grad[1, 0].item() == pytest.approx(
        1 / 14
    )
    values.grad = None
    masked_normalize(values, mask, dim=1, normalize_constant=7).mean().backward()  # Dr GRPO: every token 1/14
    assert values.grad is not None
    assert torch.allclose(values.grad, mask / 14.0)
    assert masked_mean(values, mask).item() == 2.0 and masked_normalize(values, mask).item() == 22.0
    assert masked_mean(values, mask, dim=0).tolist() == [2.0] * 7


def test_naive_loss_is_minus_advantage_times_log_prob_broadcast_over_tokens() -> None:
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.25]])
    assert compute_naive_policy_gradient_loss(torch.tensor([[2.0], [-1.0]]), logp).tolist() == [
        [2.0, 4.0],
        [-0.5, -0.25],
    ]


def test_grpo_clip_stops_the_ratio_at_one_plus_or_minus_eps() -> None:
    old = torch.zeros(2, 3)
    logp = torch.log(torch.tensor([[2.0, 1.0, 0.5], [2.0, 1.0, 0.5]]))  # ratios 2, 1, 0.5 against old 0
    adv = torch.tensor([[1.0], [-1.0]])
    loss, meta = compute_grpo_clip_loss(adv, logp, old, cliprange=0.2)
    # A>0: min(2, 1.2)=1.2, min(1, 1)=1, min(0.5, 0.8)=0.5; A<0: min(-2,-1.2)=-2, -1, min(-0.5,-0.8)=-0.8
    assert torch.allclose(loss, torch.tensor([[-1.2, -1.0, -0.5], [2.0, 1.0, 0.8]]))
    assert meta["clipped"].tolist() == [[True, False, False], [False, False, True]]


def test_policy_gradient_loss_dispatches_and_names_what_is_missing() -> None:
    logp = torch.tensor([[-1.0, -2.0]])
    raw, adv = torch.tensor([[3.0]]), torch.tensor([[0.5]])
    assert compute_policy_gradient_loss(logp, "no_baseline", raw_rewards=raw)[0].tolist() == [[3.0, 6.0]]
    assert compute_policy_gradient_loss(logp, "reinforce_with_baseline", advantages=adv)[0].tolist() == [
        [0.5, 1.0]
    ]
    clip, meta = compute_policy_gradient_loss(
        logp, "grpo_clip", advantages=adv, old_log_probs=logp, cliprange=0.2
    )
    assert clip.tolist() == [[-0.5, -0.5]] and "clipped" in meta  # ratio 1
    with pytest.raises(ValueError, match="raw_rewards"):
        compute_policy_gradient_loss(logp, "no_baseline", advantages=adv)
    with pytest.raises(ValueError, match="old_log_probs"):
        compute_policy_gradient_loss(logp, "grpo_clip", advantages=adv, cliprange=0.2)
    with pytest.raises(ValueError, match="unknown loss_type"):
        compute_policy_gradient_loss(logp, "ppo", advantages=adv)  # type: ignore[arg-type]


def test_sft_step_backpropagates_the_scaled_response_nll() -> None:
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]], requires_grad=True)
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    loss, meta = sft_microbatch_train_step(logp, mask, gradient_accumulation_steps=2, normalize_constant=5.0)
    # per sequence: 5/5 = 1 and 9/5 = 1.8; mean 1.4; / 2 accumulation steps
    assert loss.item() == pytest.approx(0.7)
    assert meta["nll_per_sequence"].tolist() == pytest.approx([1.0, 1.8])
    assert logp.grad is not None
    assert torch.allclose(logp.grad, -mask / (2 * 2 * 5.0))  # d/dlogp: -1 / (B * accum * constant)


def test_grpo_step_masked_mean_by_default_and_dr_grpo_with_a_constant() -> None:
    logp = torch.tensor([[-1.0, -1.0, -1.0, -1.0], [-1.0, -1.0, -1.0, -1.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    adv = torch.tensor([[1.0], [1.0]])
    loss, _ = grpo_microbatch_train_step(logp, mask, 1, "reinforce_with_baseline", advantages=adv)
    assert loss.item() == pytest.approx(1.0)  # every token's loss is 1, each row's mean is 1
    assert logp.grad is not None
    # masked_mean: the 4-token row's tokens get 1/4 each, the 1-token row's token gets 1 (halved by B=2)
    assert torch.allclose(logp.grad, torch.tensor([[-0.125] * 4, [-0.5, 0.0, 0.0, 0.0]]))
    logp.grad = None
    loss, _ = grpo_microbatch_train_step(
        logp, mask, 2, "reinforce_with_baseline", advantages=adv, normalize_constant=8
    )
    assert loss.item() == pytest.approx(5 / 16 / 2)  # (4/8 + 1/8) / 2 rows / 2 accumulation steps
    assert logp.grad is not None
    assert torch.allclose(logp.grad, -mask / (8 * 2 * 2))  # Dr GRPO: every response token weighs the same


def test_grpo_step_reports_the_clip_fraction_over_response_tokens() -> None:
    logp = torch.log(torch.tensor([[2.0, 1.0, 2.0]])).requires_grad_()
    mask = torch.tensor([[1, 1, 0]])  # the third token is padding: its clipping does not count
    _, meta = grpo_microbatch_train_step(
        logp,
        mask,
        1,
        "grpo_clip",
        advantages=torch.tensor([[1.0]]),
        old_log_probs=torch.zeros(1, 3),
        cliprange=0.2,
    )
    assert meta["clip_fraction"].item() == pytest.approx(0.5)


def test_two_accumulated_microbatches_give_the_gradient_of_one_batch() -> None:
    torch.manual_seed(0)
    logp0, old = torch.randn(4, 5), torch.randn(4, 5)
    mask = (torch.rand(4, 5) > 0.3).long()
    mask[:, 0] = 1
    adv = torch.randn(4, 1)
    whole = logp0.clone().requires_grad_()
    grpo_microbatch_train_step(whole, mask, 1, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=0.2)
    parts = logp0.clone().requires_grad_()
    for rows in (slice(0, 2), slice(2, 4)):
        grpo_microbatch_train_step(
            parts[rows],
            mask[rows],
            2,
            "grpo_clip",
            advantages=adv[rows],
            old_log_probs=old[rows],
            cliprange=0.2,
        )
    assert whole.grad is not None and parts.grad is not None
    assert torch.allclose(whole.grad, parts.grad, atol=1e-7)
