"""Code rewards: run the completion's program in the sandbox and score what happened.

Every program runs through ``training_core.sandbox`` (a separate, limited process), never in the
trainer. A batch is scored through the shared pool so slow programs overlap.

- ``code_execution``: does it run? +1.0 clean run with output, +0.5 clean run without output,
  -0.5 syntax/indentation error, -1.0 anything else (error, timeout, no code). "Clean" means exit 0
  and empty stderr, as in the team's script.
- ``test_cases``: stdout-compared tests (column ``tests``: a list of ``{"program", "expected"}``).
- ``code_game`` / ``code_game_opponent_accuracy``: the adversarial game (``training_core.code.mbpp_game``),
  built by factories because they need the policy model for the frozen opponent.
- ``assert_tests``: MBPP style (columns ``test_list`` and ``test_setup``): the code runs in the
  sandbox, the values the asserts need come out as plain data, and the asserts are judged in the
  trainer, so the code can neither read, patch nor short-circuit them.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from training_core.code.asserts import Verdict, assert_job, judge
from training_core.code.checks import execution_score, stdout_test_passed
from training_core.code.extract import extract_code
from training_core.code.mbpp_game import OPPONENT_PROMPT, GameStats, Predictor, hf_opponent, play
from training_core.rewards.registry import RewardContext, RewardFn, register, register_factory
from training_core.sandbox import SandboxLimits, default_pool


def _limits(timeout_s: float, memory_mb: int) -> SandboxLimits:
    return SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb)


@register("code_execution")
def code_execution(
    completions: list[Any],
    timeout_s: float = 3.0,
    memory_mb: int = 512,
    with_output: float = 1.0,
    without_output: float = 0.5,
    syntax: float = -0.5,
    failure: float = -1.0,
    **_: Any,
) -> list[float]:
    """+1 runs cleanly with output, +0.5 without, -0.5 syntax error, -1 otherwise."""
    codes = [extract_code(c) for c in completions]
    todo = [c for c in codes if c]
    results = iter(default_pool().map(todo, _limits(timeout_s, memory_mb)))
    return [
        execution_score(next(results) if c else None, with_output, without_output, syntax, failure)
        for c in codes
    ]


def _test_fields(test: Any) -> tuple[str, str]:
    if isinstance(test, dict):
        program = test.get("program", test.get("input", ""))
        return str(program), str(test.get("expected", test.get("output", "")))
    program, expected = test
    return str(program), str(expected)


@register("test_cases")
def test_cases(
    completions: list[Any],
    tests: list[Sequence[Any]],
    n_tests: int = 5,
    base_weight: float = 1.0,
    perfect_bonus: float = 1.0,
    perfect_weight: float = 1.0,
    answer_tag: bool = False,
    timeout_s: float = 1.0,
    memory_mb: int = 512,
    **_: Any,
) -> list[float]:
    """(passed/total)·base_weight + perfect_bonus·perfect_weight when all pass; 0 without code."""
    jobs: list[tuple[int, str, str]] = []
    totals: list[int] = []
    for i, (completion, row_tests) in enumerate(zip(completions, tests, strict=True)):
        code = extract_code(completion, answer_tag=answer_tag)
        chosen = list(row_tests or [])[:n_tests]
        totals.append(len(chosen) if code else 0)
        if code:
            for t in chosen:
                program, expected = _test_fields(t)
                jobs.append((i, f"{code}\n\n{program}\n", expected))
    results = default_pool().map([j[1] for j in jobs], _limits(timeout_s, memory_mb))
    passed = [0] * len(completions)
    for (i, _program, expected), r in zip(jobs, results, strict=True):
        passed[i] += stdout_test_passed(r, expected)
    out = []
    for p, total in zip(passed, totals, strict=True):
        if total == 0:
            out.append(0.0)
            continue
        out.append(p / total * base_weight + (perfect_bonus * perfect_weight if p == total else 0.0))
    return out


@register("assert_tests")
def assert_tests(
    completions: list[Any],
    test_list: list[Sequence[str]],
    test_setup: list[str] | None = None,
    passed: float = 1.0,
    failed: float = 0.0,
    answer_tag: bool = False,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    **_: Any,
) -> list[float]:
    """``passed`` when the code exits 0 and every assert holds, judged outside the sandbox on the
    values the code returned (``training_core.code.asserts``), else ``failed``: whatever goes wrong
    for one completion (its run, its values, a check) fails that completion alone."""
    verdicts = assert_verdicts(completions, test_list, test_setup, answer_tag, timeout_s, memory_mb)
    return [passed if v.passed else failed for v in verdicts]


def assert_verdicts(
    completions: list[Any],
    test_list: list[Sequence[str]],
    test_setup: list[str] | None = None,
    answer_tag: bool = False,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
) -> list[Verdict]:
    """Per completion a ``Verdict`` (passed, or the reason it did not)."""
    setups = test_setup or [""] * len(completions)
    codes = [extract_code(c, answer_tag=answer_tag) for c in completions]
    jobs = [assert_job(c, t, s) for c, t, s in zip(codes, test_list, setups, strict=True) if c]
    results = iter(
        default_pool().map([j.program for j in jobs], _limits(timeout_s, memory_mb), [j.calls for j in jobs])
    )
    verdicts = iter([judge(j, next(results)) for j in jobs])
    return [next(verdicts) if c else Verdict(False, "no code") for c in codes]


def _opponent(ctx: RewardContext, opponent: str, max_new_tokens: int) -> Predictor:
    """A frozen copy of the policy as loaded (``opponent=""``) or the named model."""
    if opponent:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from training_core.models import tiny

        path = str(tiny.ensure()) if opponent == "tiny" else opponent
        model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        if ctx.model is not None:
            model.to(ctx.model.device)
    else:
        if ctx.model is None:
            raise ValueError("code_game needs the policy model (or params.opponent = a model name)")
        model, tok = copy.deepcopy(ctx.model), ctx.tokenizer
    model.eval()
    model.requires_grad_(False)
    return hf_opponent(model, tok, max_new_tokens=max_new_tokens)


@register_factory("code_game")
def code_game(
    ctx: RewardContext,
    opponent: str = "",
    timeout_s: float = 2.0,
    max_new_tokens: int = 24,
    win: float = 1.0,
    lose: float = -1.0,
    invalid: float = -1.0,
    prefix: str = "",
    opponent_prompt: str = OPPONENT_PROMPT,
) -> RewardFn:
    """+1 when the opponent mispredicts the program's printed integer, -1 when it is right or the
    program fails / prints no integer. Pair with ``code_game_opponent_accuracy`` (weight 0) to log
    the opponent's accuracy as ``reward/code_game_opponent_accuracy``."""
    predict = _opponent(ctx, opponent, max_new_tokens)
    stats = GameStats()
    ctx.extra["code_game"] = stats
    limits = SandboxLimits(timeout_s=timeout_s)

    def reward(completions: list[Any], **_: Any) -> list[float]:
        return play(
            completions,
            predict,
            stats,
            limits=limits,
            win=win,
            lose=lose,
            invalid=invalid,
            prefix=prefix,
            opponent_prompt=opponent_prompt,
        )

    return reward


@register_factory("code_game_opponent_accuracy")
def code_game_opponent_accuracy(ctx: RewardContext) -> RewardFn:
    """Not a training signal (give it weight 0): per completion 1.0 when the opponent predicted the
    program's output, 0.0 when not, None (ignored in the mean) for invalid programs. Must come after
    ``code_game`` in the recipe's rewards (TRL calls reward functions in order)."""

    def accuracy(completions: list[Any], **_: Any) -> list[float | None]:
        stats = ctx.extra.get("code_game")
        if not isinstance(stats, GameStats) or len(stats.last_hits) != len(completions):
            return [None] * len(completions)
        return list(stats.last_hits)

    return accuracy  # type: ignore[return-value]
