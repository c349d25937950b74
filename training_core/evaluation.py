"""Held-out accuracy by greedy generation: the interval eval callback and the helper eval.py uses.

``evaluate`` formats each problem's prompt like the training data (plain or chat), generates greedily
in batches with HF ``generate`` (left padding), and scores with the task's ``score``. The callback runs
it at the start (step 0, not on resume), every ``eval.interval`` steps and at the end, writes
``eval`` lines to metrics.jsonl (the writer mirrors them to W&B when a W&B run is active).
"""

from __future__ import annotations

import time
from typing import Any

from training_core.config import DataConfig, EvalConfig
from training_core.data import to_prompt
from training_core.eval_tasks import EvalTask
from training_core.metrics import MetricsWriter


def _render(prompt: Any, tokenizer: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return str(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False))


def generate(
    model: Any, tokenizer: Any, prompts: list[Any], max_new_tokens: int, batch_size: int = 16
) -> list[str]:
    import torch

    texts = [_render(p, tokenizer) for p in prompts]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    out: list[str] = []
    try:
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(
                texts[i : i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False
            )
            enc = {k: v.to(model.device) for k, v in enc.items()}
            with torch.no_grad():
                ids = model.generate(
                    **enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
                )
            out.extend(tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True))
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return out


def evaluate(
    model: Any,
    tokenizer: Any,
    task: EvalTask,
    rows: list[dict[str, Any]],
    data: DataConfig,
    max_new_tokens: int,
) -> dict[str, Any]:
    start = time.time()
    completions = generate(model, tokenizer, [to_prompt(r["prompt"], data) for r in rows], max_new_tokens)
    results = [
        {
            "prompt": r["prompt"],
            "answer": r["answer"],
            "completion": c,
            "correct": bool(task.score(c, r["answer"])),
        }
        for r, c in zip(rows, completions, strict=True)
    ]
    n_right = sum(r["correct"] for r in results)
    return {
        "accuracy": n_right / max(1, len(results)),
        "n": len(results),
        "correct": n_right,
        "time_s": time.time() - start,
        "results": results,
    }


def make_callback(
    task: EvalTask,
    rows: list[dict[str, Any]],
    cfg: EvalConfig,
    data: DataConfig,
    max_new_tokens: int,
    tokenizer: Any,
    writer: MetricsWriter,
) -> Any:
    from transformers import TrainerCallback

    class IntervalEval(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.done_at: int | None = None

        def _run(self, state: Any, model: Any) -> None:
            if self.done_at == state.global_step:
                return
            self.done_at = state.global_step
            res = evaluate(model, tokenizer, task, rows, data, max_new_tokens)
            metrics = {"eval/accuracy": res["accuracy"], "eval/n": res["n"], "eval/time_s": res["time_s"]}
            if task.metrics is not None:
                metrics.update(task.metrics(res))
            writer.eval(state.global_step, metrics)
            print(
                f"eval step {state.global_step}: accuracy {res['accuracy']:.3f} "
                f"({res['correct']}/{res['n']})",
                flush=True,
            )

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if cfg.at_start and state.global_step == 0:
                self._run(state, model)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if cfg.interval > 0 and state.global_step % cfg.interval == 0:
                self._run(state, model)

        def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if cfg.at_end:
                self._run(state, model)

    return IntervalEval()
