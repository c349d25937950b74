"""Data loaders: GSM8K answers from real-format rows, seeded synthetic arithmetic, long-prompt filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training_core.config import DataConfig
from training_core.data.loaders import DATASETS, build_dataset, gsm8k_answer, load_rows
from training_core.errors import UnknownName

# Two rows in the real openai/gsm8k "main" format (question / answer with <<calc>> and "#### N").
GSM8K_ROWS = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
        "clips in May. How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
        "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    },
    {
        "question": "A farm has 1,200 cows and buys 34 more. How many cows?",
        "answer": "1,200 + 34 = <<1200+34=1234>>1,234\n#### 1,234",
    },
]


class CharTok:
    """Counts characters as tokens: enough to exercise the length filter without a model."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}


def test_gsm8k_answer_after_hashes() -> None:
    assert gsm8k_answer(GSM8K_ROWS[0]["answer"]) == "72"
    assert gsm8k_answer(GSM8K_ROWS[1]["answer"]) == "1234"


def test_gsm8k_loader_reads_real_format_rows(tmp_path: Path) -> None:
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in GSM8K_ROWS))
    rows = load_rows(DataConfig(dataset="gsm8k", n_rows=1, params={"data_files": str(path)}), seed=42)
    first = GSM8K_ROWS[0]
    assert rows == [{"prompt": first["question"], "answer": "72", "solution": first["answer"]}]


def test_synthetic_arithmetic_is_seeded() -> None:
    cfg = DataConfig(dataset="synthetic_arithmetic", params={"n": 50, "max_operand": 4})
    a, b = load_rows(cfg, seed=1), load_rows(cfg, seed=1)
    assert a == b and a != load_rows(cfg, seed=2) and len(a) == 50
    assert all(int(r["answer"]) == eval(r["prompt"].rstrip("=")) for r in a)
    assert load_rows(cfg, seed=1, split="test") != a


def test_fixed_arithmetic_has_twelve_questions() -> None:
    rows = load_rows(DataConfig(), seed=42)
    assert len(rows) == 12 and {"prompt", "answer"} <= set(rows[0])


def test_long_prompts_are_dropped_with_a_count(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "x" * 100, "answer": "0"}]
    out = build_dataset(rows, DataConfig(prompt_style="plain", max_prompt_length=10), CharTok())
    assert [r["prompt"] for r in out] == ["1+1="]
    assert "dropped 1 of 2 prompts longer than 10 tokens" in capsys.readouterr().out


def test_chat_style_wraps_prompts_as_messages() -> None:
    class ChatTok(CharTok):
        def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):  # type: ignore[no-untyped-def]
            return [0] * sum(len(m["content"]) for m in messages)

    out = build_dataset([{"prompt": "hi", "answer": "1"}], DataConfig(system_prompt="be brief"), ChatTok())
    assert out[0]["prompt"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def test_unknown_dataset_lists_known_names() -> None:
    with pytest.raises(UnknownName, match="gsm8k"):
        DATASETS.get("gsm9k")


def test_eval_problems_are_distinct_and_held_out_ones_never_trained_on() -> None:
    from training_core.data.loaders import distinct_problems

    params = {"max_operand": 9, "max_answer": 9, "holdout": 0.25}
    every = distinct_problems(0, seed=3, max_operand=9, max_answer=9, part="all")
    assert len(every) == 55 and len({r["prompt"] for r in every}) == 55  # all a+b <= 9, each once
    test = distinct_problems(0, seed=3, part="test", **params)
    train = distinct_problems(0, seed=3, part="train", **params)
    assert len(test) == 14 and len(train) == 41
    assert not {r["prompt"] for r in test} & {r["prompt"] for r in train}
    # A capped draw is a subset without repeats, in a seeded order.
    some = distinct_problems(20, seed=3, part="train", **params)
    assert len({r["prompt"] for r in some}) == 20 and some == distinct_problems(20, 3, part="train", **params)
    # Training rows come only from the train part.
    drawn = load_rows(DataConfig(dataset="synthetic_arithmetic", params={"n": 500, **params}), seed=1)
    assert {r["prompt"] for r in drawn} <= {r["prompt"] for r in train}


def test_constant_baseline_is_the_best_single_answer() -> None:
    from training_core.data.loaders import distinct_problems
    from training_core.eval.greedy import constant_baseline
    from training_core.eval.tasks import EVAL_TASKS

    every = distinct_problems(0, seed=0, max_operand=9, max_answer=9)
    acc, answer = constant_baseline(EVAL_TASKS.get("arithmetic"), [r["answer"] for r in every])
    assert (answer, acc) == ("9", 10 / 55)  # ten of the 55 sums are 9
