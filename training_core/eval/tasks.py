"""Held-out evaluation tasks by name ("arithmetic", "gsm8k"); torch-free.

Extension point: ``EVAL_TASKS.register("name")(EvalTask(load=..., score=...))`` where
``load(n, seed, data, **params) -> rows`` gives rows with a ``prompt`` (user text) and an ``answer``,
and ``score(completion_text, answer) -> bool`` says whether one greedy completion is right. The interval
eval (training_core.eval.greedy) and ``python -m training_core.eval`` both use this table. Tasks that
need more than one greedy completion per prompt (MBPP with pass@k) are better written as a trainer
callback (training_core.methods.callbacks) that logs its own ``<task>_eval/...`` keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from training_core.config import DataConfig
from training_core.data.loaders import distinct_problems, gsm8k
from training_core.plugin_registry import Registry
from training_core.rewards.text import numbers, parse_number, same_number


@dataclass(frozen=True)
class EvalTask:
    load: Callable[..., list[dict[str, Any]]]
    score: Callable[[str, str], bool]
    # Optional task-named keys from evaluate()'s result (e.g. mbpp_eval/pass_rate), added to eval lines.
    metrics: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # Score the best constant answer on the same problems (``eval/constant_baseline``): what a policy
    # that ignores the prompt reaches. Off for tasks whose score is costly (MBPP runs code).
    constant_baseline: bool = False
    # Strings that end a completion (greedy generation stops after them), e.g. "</answer>".
    stop: tuple[str, ...] = ()


EVAL_TASKS: Registry[EvalTask] = Registry("eval task", ["training_core.eval.tasks", "training_core.code"])


def _last_number_right(completion: str, answer: str) -> bool:
    found, want = numbers(completion), parse_number(answer)
    return bool(found) and want is not None and same_number(found[-1], want)


def _arithmetic(n: int, seed: int, data: DataConfig | None = None, **params: Any) -> list[dict[str, Any]]:
    """Distinct synthetic problems in the training data's template, each scored once.

    ``part`` picks them: "test" (the default where the data holds a fraction out: problems training
    never draws), "train" (the problems training draws from) or "all"."""
    merged = dict(data.params) if data is not None and data.dataset == "synthetic_arithmetic" else {}
    for training_only in ("n", "balance_answers"):
        merged.pop(training_only, None)
    merged.update(params)
    if "template" not in merged and (data is None or data.prompt_style == "chat"):
        merged["template"] = "What is {a} {op} {b}?"
    merged.setdefault("part", "test" if merged.get("holdout") else "all")
    return distinct_problems(n, seed + 104729, **merged)


def _gsm8k(
    n: int, seed: int, data: DataConfig | None = None, split: str = "test", **params: Any
) -> list[dict[str, Any]]:
    if data is not None and data.dataset == "gsm8k":
        params = {**{k: v for k, v in data.params.items() if k == "instruction"}, **params}
    return gsm8k(split=split, n_rows=n, seed=seed, **params)


EVAL_TASKS.register("arithmetic")(
    EvalTask(load=_arithmetic, score=_last_number_right, constant_baseline=True)
)
EVAL_TASKS.register("gsm8k")(EvalTask(load=_gsm8k, score=_last_number_right, constant_baseline=True))


_MATH_DATASETS = ("math", "synthetic_math", "gsm8k")


def _math(
    n: int, seed: int, data: DataConfig | None = None, split: str = "test", **params: Any
) -> list[dict[str, Any]]:
    """The training data's math set (its template, files, hub id) in its test split; MATH otherwise.

    ``dataset`` picks another: "math", "synthetic_math" or "gsm8k" (with the r1_zero template)."""
    from training_core.data.loaders import DATASETS

    merged: dict[str, Any] = {"template": "r1_zero"}
    default = data.dataset if data is not None and data.dataset in _MATH_DATASETS else "math"
    name = str(params.pop("dataset", default))
    if data is not None and data.dataset == name:
        merged.update(data.params)
    merged.update(params)
    return list(DATASETS.get(name)(split=split, n_rows=n, seed=seed, **merged))


def _r1_zero_right(completion: str, answer: str) -> bool:
    from training_core.rewards.r1_zero import r1_zero_reward_fn

    return r1_zero_reward_fn(completion, answer)["reward"] == 1.0


def _format_rate(res: dict[str, Any]) -> dict[str, Any]:
    from training_core.rewards.r1_zero import r1_zero_answer

    results = res.get("results", [])
    formatted = sum(r1_zero_answer(r["completion"]) is not None for r in results)
    return {"eval/format_rate": formatted / max(1, len(results))}


EVAL_TASKS.register("math")(
    EvalTask(load=_math, score=_r1_zero_right, metrics=_format_rate, stop=("</answer>",))
)
