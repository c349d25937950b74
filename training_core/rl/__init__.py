"""Policy-gradient, SFT and DPO building blocks in pure torch, named as in Stanford CS336 (spring 2025)
assignment 5 so they can be checked against that reference; custom loops (self-play, expert iteration)
use them, and ``training_core.methods.drgrpo`` states TRL's Dr GRPO loss through them."""

from training_core.data.prompts import ALPACA_TEMPLATE, R1_ZERO_PROMPT
from training_core.rl.dpo import per_instance_dpo_loss
from training_core.rl.logprobs import compute_entropy, get_response_log_probs, tokenize_prompt_and_output
from training_core.rl.masked import masked_mean, masked_normalize
from training_core.rl.policy_gradient import (
    LossType,
    compute_group_normalized_rewards,
    compute_grpo_clip_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    group_normalize,
)
from training_core.rl.train_step import grpo_microbatch_train_step, sft_microbatch_train_step

__all__ = [
    "ALPACA_TEMPLATE",
    "R1_ZERO_PROMPT",
    "LossType",
    "compute_entropy",
    "compute_group_normalized_rewards",
    "compute_grpo_clip_loss",
    "compute_naive_policy_gradient_loss",
    "compute_policy_gradient_loss",
    "get_response_log_probs",
    "group_normalize",
    "grpo_microbatch_train_step",
    "masked_mean",
    "masked_normalize",
    "per_instance_dpo_loss",
    "sft_microbatch_train_step",
    "tokenize_prompt_and_output",
]
