"""MATH-style data (boxed answers, local files, GSM8K in the same template), the math eval's format
rate and accuracy, and the R1-Zero recipes: Dr GRPO applied, and the tiny one training on CPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from training_core.config import DataConfig
from training_core.data.loaders import load_rows
from training_core.data.math import last_boxed, render
from training_core.data.prompts import R1_ZERO_PROMPT
from training_core.eval.greedy import evaluate
from training_core.eval.tasks import EVAL_TASKS
from training_core.hardware.platform import PlatformFacts
from training_core.recipes import resolve
from training_core.train import main as train_main

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("solution", "answer"),
    [
        ("so $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("\\boxed{3} first, then \\boxed{\\sqrt{2}}", "\\sqrt{2}"),  # the last box is the answer
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("The answer is \\fbox{7}.", "7"),
        ("no box here", None),
        ("\\boxed{unclosed", None),
    ],
)
def test_the_answer_is_the_last_boxed_expression(solution: str, answer: str | None) -> None:
    assert last_boxed(solution) == answer


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_math_and_gsm8k_rows_from_local_files_in_the_r1_zero_template(tmp_path: Path) -> None:
    files = _jsonl(
        tmp_path / "math.jsonl",
        [
            {"problem": "What is $1/2 + 1/2$?", "solution": "It is $\\boxed{1}$."},
            {"problem": "Unboxed?", "solution": "no answer marked"},
            {"problem": "Given answer", "solution": "", "answer": "\\pi"},
        ],
    )
    rows = load_rows(DataConfig(dataset="math", params={"data_files": files, "template": "r1_zero"}), 0)
    assert [r["answer"] for r in rows] == ["1", "\\pi"]
    assert rows[0]["prompt"] == R1_ZERO_PROMPT.replace("{question}", "What is $1/2 + 1/2$?")
    assert rows[0]["prompt"].endswith("Assistant: <think>")
    gsm = _jsonl(tmp_path / "gsm.jsonl", [{"question": "Tom has 1,200 apples?", "answer": "...\n#### 1,200"}])
    rows = load_rows(DataConfig(dataset="gsm8k", params={"data_files": gsm, "template": "r1_zero"}), 0)
    prompt = render("Tom has 1,200 apples?", "r1_zero")
    assert rows == [{"prompt": prompt, "answer": "1200", "solution": "...\n#### 1,200"}]
    # the math eval reads GSM8K in the same template when asked (eval.params.dataset = "gsm8k")
    assert EVAL_TASKS.get("math").load(0, 0, data=DataConfig(), dataset="gsm8k", data_files=gsm) == rows


def test_a_template_without_the_question_is_refused() -> None:
    from training_core.errors import UsageError

    with pytest.raises(UsageError, match="question"):
        render("1+1", "r2_zero")


def test_math_eval_reports_format_rate_and_accuracy_from_the_completions() -> None:
    task = EVAL_TASKS.get("math")
    data = DataConfig(dataset="synthetic_math", prompt_style="plain", params={"n": 8, "template": "plain"})
    rows = task.load(3, 0, data=data)
    answers = [r["answer"] for r in rows]
    canned = [  # one right, one formatted but wrong, one right answer without the format
        f"ok </think> <answer> {answers[0]} </answer> and then more",
        f"hmm </think> <answer> {int(answers[1]) + 1} </answer>",
        f"the answer is {answers[2]}",
    ]

    def backend(prompts: list[Any], max_new_tokens: int, stop: tuple[str, ...]) -> list[str]:
        assert stop == ("</answer>",) and len(prompts) == 3
        return canned

    res = evaluate(None, None, task, rows, data, 16, generate_fn=backend)
    assert res["results"][0]["completion"].endswith("</answer>")  # cut at the stop string
    assert [r["correct"] for r in res["results"]] == [True, False, False]
    assert res["accuracy"] == pytest.approx(1 / 3)
    assert task.metrics is not None and task.metrics(res) == {"eval/format_rate": pytest.approx(2 / 3)}


def test_eval_cli_math_on_the_tiny_model(capsys: pytest.CaptureFixture[str]) -> None:
    from training_core.eval.cli import main as eval_main

    assert eval_main(["tiny", "--task", "math", "-n", "2", "--max-new-tokens", "3"]) == 0
    out = json.loads(capsys.readouterr().out)  # stdout is only the JSON, whatever libraries log
    assert out["task"] == "math" and out["n"] == 2 and 0.0 <= out["eval/format_rate"] <= out["accuracy"] + 1
    assert out["results"][0]["prompt"].startswith("what is ")  # the tiny recipe's synthetic MATH rows


def test_eval_cli_vllm_backend_without_vllm_is_one_line() -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    p = subprocess.run(
        [sys.executable, "-m", "training_core.eval", "tiny", "--task", "math", "--backend", "vllm"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "--backend vllm needs vLLM" in p.stderr


def test_r1_zero_math_recipe_is_dr_grpo_on_a_base_model_with_the_r1_zero_reward() -> None:
    h100 = PlatformFacts(
        gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, gpu_memory_gb=80, bf16=True, vllm_available=True
    )
    cfg = resolve("r1_zero_math", [], h100).config
    assert (cfg.train.loss_type, cfg.train.scale_rewards, cfg.train.beta) == ("dr_grpo", "none", 0.0)
    assert cfg.model.name == "Qwen/Qwen2.5-Math-1.5B" and cfg.data.prompt_style == "plain"
    assert cfg.data.params["template"] == "r1_zero" and cfg.eval.task == "math"
    assert [(r.name, r.weight) for r in cfg.rewards] == [("r1_zero", 1.0), ("r1_zero_format", 0.0)]
    assert cfg.train.per_device_train_batch_size * cfg.train.gradient_accumulation_steps == 256
    assert cfg.train.use_vllm is True and cfg.model.precision == "bf16"


@pytest.mark.slow
def test_r1_zero_tiny_recipe_trains_and_logs_format_and_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    run_dir = tmp_path / "run"
    assert (
        train_main(
            ["r1_zero_tiny", "--run-dir", str(run_dir), "--set", "train.max_steps=1"], facts=PlatformFacts()
        )
        == 0
    )
    got = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in got if x["type"] == "step"]
    assert len(steps) == 1 and {"reward/r1_zero", "reward/r1_zero_format"} <= steps[0].keys()
    assert 0.0 <= steps[0]["reward/r1_zero"] <= steps[0]["reward/r1_zero_format"] <= 1.0
    evals = [x for x in got if x["type"] == "eval"]
    assert [e["step"] for e in evals] == [0, 1] and all("eval/format_rate" in e for e in evals)
    assert got[-1]["type"] == "end" and got[-1]["status"] == "completed"
