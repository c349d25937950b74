"""SPIRAL self-play (Liu et al. 2025, arXiv 2506.24119): one policy plays both roles of a zero-sum text
game, every turn is a training sample, and each role's turns get the game's payoff minus that role's own
moving-average baseline (role-conditioned advantage estimation). Built on ``training_core.rl``, not on
TRL's GRPOTrainer: GRPO's group normalisation has no notion of whole games or roles.

Modules: ``game`` (tic-tac-toe and payoffs), ``opponents`` (random and minimax), ``prompts`` (observation,
prompt, move parsing), ``rae`` (the baselines), ``rollout`` (batched games with HF generate), ``update``
(the policy-gradient step), ``evaluate`` (games against fixed opponents), ``loop`` (the run).
"""
