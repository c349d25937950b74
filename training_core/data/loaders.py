"""Prompt datasets by name: the 12 fixed arithmetic questions, seeded synthetic arithmetic, GSM8K.

Extension point: ``@DATASETS.register("name")`` on ``loader(split, n_rows, seed, **params) -> rows``
where each row is a dict with a ``prompt`` (the user's text) and any columns the rewards read (the
math rewards read ``answer``); every column reaches reward functions as a keyword argument. Provider
modules are listed in ``DATASETS.modules`` (``training_core.code`` is imported when it exists) or named
in a recipe's ``plugins``. ``build_dataset`` turns rows into TRL's format (plain text or chat messages)
and drops prompts longer than ``data.max_prompt_length`` tokens, reporting how many. The heavy
``datasets`` import happens inside the loaders, so this module stays torch-free.
"""

from __future__ import annotations

import random
import sys
from typing import Any

from training_core.config import DataConfig
from training_core.errors import UsageError
from training_core.plugin_registry import Registry

Row = dict[str, Any]
DATASETS: Registry[Any] = Registry(
    "dataset", ["training_core.data.loaders", "training_core.data.math", "training_core.code"]
)

FIXED_ARITHMETIC: list[tuple[str, str]] = [
    ("What is 2 + 3?", "5"),
    ("What is 7 + 8?", "15"),
    ("What is 12 + 30?", "42"),
    ("What is 9 - 4?", "5"),
    ("What is 15 - 20?", "-5"),
    ("What is 6 * 7?", "42"),
    ("What is 3 * 12?", "36"),
    ("What is 20 / 4?", "5"),
    ("What is 9 / 2?", "4.5"),
    ("What is 100 + 250?", "350"),
    ("What is 1000 + 234?", "1234"),
    ("What is 11 * 11?", "121"),
]


def _take(rows: list[Row], n_rows: int) -> list[Row]:
    return rows[:n_rows] if n_rows > 0 else rows


@DATASETS.register("arithmetic_fixed")
def arithmetic_fixed(split: str = "train", n_rows: int = 0, seed: int = 42, **_: Any) -> list[Row]:
    """The baseline recipe's 12 questions, in a fixed order."""
    return _take([{"prompt": q, "answer": a} for q, a in FIXED_ARITHMETIC], n_rows)


def _value(a: int, op: str, b: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b}[op] if op != "/" else a // b


def problem_pool(
    max_operand: int, ops: str, min_operand: int = 0, max_answer: int | None = None
) -> list[tuple[int, str, int]]:
    """Every distinct problem ``(a, op, b)`` in range, sorted; division only where it is exact."""
    pool = []
    for op in sorted(set(ops)):
        for a in range(min_operand, max_operand + 1):
            for b in range(min_operand, max_operand + 1):
                if op == "/":
                    if b == 0:
                        continue
                    a_ = a * b
                else:
                    a_ = a
                if max_answer is None or _value(a_, op, b) <= max_answer:
                    pool.append((a_, op, b))
    return pool


def holdout_split(pool: list[tuple[int, str, int]], holdout: float) -> tuple[list[Any], list[Any]]:
    """(train, held-out) parts of a problem pool: a fixed shuffle (seed 0, not the run's seed), so
    every run and every evaluation agree on which problems training never sees."""
    order = list(pool)
    random.Random(0).shuffle(order)
    k = max(1, round(len(order) * holdout))
    return order[k:], order[:k]


def _row(a: int, op: str, b: int, template: str) -> Row:
    return {"prompt": template.format(a=a, op=op, b=b), "answer": str(_value(a, op, b))}


def pool_part(
    max_operand: int = 9,
    ops: str = "+",
    min_operand: int = 0,
    max_answer: int | None = None,
    holdout: float = 0.0,
    part: str = "train",
) -> list[tuple[int, str, int]]:
    """The distinct problems of one part of the pool: "train", "test" (the held-out fraction) or "all"."""
    if part not in ("train", "test", "all"):
        raise UsageError(f"arithmetic part must be train, test or all, not {part!r}")
    pool = problem_pool(max_operand, ops, min_operand, max_answer)
    if holdout > 0 and part != "all":
        train, test = holdout_split(pool, holdout)
        return test if part == "test" else train
    if part == "test":
        raise UsageError("arithmetic part 'test' needs a holdout fraction (data.params.holdout)")
    return pool


def synthetic_problems(
    n: int,
    seed: int,
    max_operand: int = 9,
    ops: str = "+",
    template: str = "{a}{op}{b}=",
    min_operand: int = 0,
    max_answer: int | None = None,
    holdout: float = 0.0,
    part: str = "train",
    balance_answers: bool = False,
) -> list[Row]:
    """``n`` random problems ``a op b`` from ``seed``; integer answers (division uses divisible pairs).

    With ``max_answer`` or ``holdout`` the problems are drawn from the pool of distinct problems
    (answers up to ``max_answer``); ``holdout`` reserves that fraction of the pool for ``part="test"``
    so held-out accuracy measures problems training never saw (the tiny recipe has only ~50 sums).
    ``balance_answers`` draws an answer uniformly first, then a problem with that answer: with one-digit
    sums uniform over problems, "9" is ten times as frequent as "0", and a policy learns those
    frequencies (a constant "9") long before it learns to read the prompt."""
    rng = random.Random(seed)
    if max_answer is not None or holdout > 0:
        pool = pool_part(max_operand, ops, min_operand, max_answer, holdout, part)
        if balance_answers:
            by_answer: dict[int, list[tuple[int, str, int]]] = {}
            for q in pool:
                by_answer.setdefault(_value(*q), []).append(q)
            groups = [by_answer[k] for k in sorted(by_answer)]
            picks = [rng.choice(rng.choice(groups)) for _ in range(n)]
        else:
            picks = [rng.choice(pool) for _ in range(n)]
        return [_row(a, op, b, template) for a, op, b in picks]
    rows: list[Row] = []
    while len(rows) < n:
        op = rng.choice(ops)
        a, b = rng.randint(min_operand, max_operand), rng.randint(min_operand, max_operand)
        if op == "/":
            if b == 0:
                continue
            a = a * b
        rows.append(_row(a, op, b, template))
    return rows


def distinct_problems(
    n: int,
    seed: int,
    max_operand: int = 9,
    ops: str = "+",
    template: str = "{a}{op}{b}=",
    min_operand: int = 0,
    max_answer: int | None = None,
    holdout: float = 0.0,
    part: str = "all",
) -> list[Row]:
    """Up to ``n`` DISTINCT problems of one part of the pool (all of them when ``n`` <= 0 or the part is
    smaller), in a seeded order: an evaluation that scores each problem once, so a policy that knows
    one frequent answer cannot look better by that answer being drawn again and again."""
    pool = pool_part(max_operand, ops, min_operand, max_answer, holdout, part)
    chosen = random.Random(seed).sample(pool, len(pool) if n <= 0 else min(n, len(pool)))
    return [_row(a, op, b, template) for a, op, b in chosen]


@DATASETS.register("synthetic_arithmetic")
def synthetic_arithmetic(
    split: str = "train", n_rows: int = 0, seed: int = 42, n: int = 256, **params: Any
) -> list[Row]:
    """Seeded random arithmetic (the tiny recipe's task); params: n, max_operand, min_operand, ops, template.
    The "test" split uses another seed so evaluation sees fresh draws."""
    rows = synthetic_problems(n, seed + (7919 if split != "train" else 0), **params)
    return _take(rows, n_rows)


def gsm8k_answer(solution: str) -> str:
    """GSM8K's final answer: the text after ``####``, stripped, thousands separators removed."""
    return solution.split("####")[-1].strip().replace(",", "")


@DATASETS.register("gsm8k")
def gsm8k(
    split: str = "train",
    n_rows: int = 0,
    seed: int = 42,
    data_files: str = "",
    instruction: str = "",
    template: str = "",
    **_: Any,
) -> list[Row]:
    """``openai/gsm8k`` config ``main`` (the config is required), or local JSON rows in the same format
    via ``data_files`` (tests, offline hosts). ``template`` ("r1_zero", or a string with ``{question}``)
    puts the question in a prompt template, as the MATH loader does (training_core.data.math).
    ``solution`` is the worked answer (the sft recipe's target)."""
    import datasets

    if data_files:
        ds = datasets.load_dataset("json", data_files=data_files, split="train")
    else:
        ds = datasets.load_dataset("openai/gsm8k", "main", split=split)
    if n_rows > 0:
        ds = ds.select(range(min(n_rows, len(ds))))
    suffix = f"\n{instruction}" if instruction else ""
    rows = [
        {"prompt": r["question"] + suffix, "answer": gsm8k_answer(r["answer"]), "solution": r["answer"]}
        for r in ds
    ]
    if template:
        from training_core.data.prompts import render

        rows = [{**r, "prompt": render(r["prompt"], template)} for r in rows]
    return rows


def load_rows(
    cfg: DataConfig, seed: int, split: str | None = None, plugins: list[str] | None = None
) -> list[Row]:
    loader = DATASETS.get(cfg.dataset, plugins or [])
    rows: list[Row] = loader(split=split or cfg.split, n_rows=cfg.n_rows, seed=seed, **cfg.params)
    if not rows:
        raise UsageError(f"dataset {cfg.dataset!r} gave no rows")
    return rows


def to_prompt(text: str, cfg: DataConfig) -> Any:
    """TRL's prompt format: the text itself (plain) or a message list (chat)."""
    if cfg.prompt_style == "plain":
        return text
    messages = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
    return [*messages, {"role": "user", "content": text}]


def prompt_tokens(prompt: Any, tokenizer: Any) -> int:
    if isinstance(prompt, str):
        return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return len(ids)


def build_dataset(rows: list[Row], cfg: DataConfig, tokenizer: Any, log: Any = None) -> list[Row]:
    """Rows in TRL's format, prompts over ``max_prompt_length`` tokens dropped (the count is printed)."""
    out = []
    for r in rows:
        prompt = to_prompt(r["prompt"], cfg)
        if prompt_tokens(prompt, tokenizer) <= cfg.max_prompt_length:
            out.append({**r, "prompt": prompt})
    dropped = len(rows) - len(out)
    if dropped:
        print(
            f"data: dropped {dropped} of {len(rows)} prompts longer than {cfg.max_prompt_length} tokens",
            file=log or sys.stdout,
            flush=True,
        )
    if not out:
        raise UsageError(f"every prompt is longer than data.max_prompt_length={cfg.max_prompt_length}")
    return out
