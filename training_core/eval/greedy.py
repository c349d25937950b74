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
from training_core.data.loaders import to_prompt
from training_core.eval.tasks import EvalTask
from training_core.run.metrics import MetricsWriter


def render(prompt: Any, tokenizer: Any) -> str:
    """A prompt as the text the model sees: plain text as is, chat messages through the chat template."""
    if isinstance(prompt, str):
        return prompt
    return str(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False))


def generate(
    model: Any,
    tokenizer: Any,
    prompts: list[Any],
    max_new_tokens: int,
    batch_size: int = 16,
    stop: tuple[str, ...] = (),
) -> list[str]:
    """Greedy completions with HF ``generate``; a completion ends after any string in ``stop``."""
    import torch

    texts = [render(p, tokenizer) for p in prompts]
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
                    **enc,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                    **({"stop_strings": list(stop), "tokenizer": tokenizer} if stop else {}),
                )
            texts_out = tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            out.extend(cut_at_stop(t, stop) for t in texts_out)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return out


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """``text`` up to and including the first stop string (a batch runs on until all rows stopped)."""
    ends = [i + len(s) for s in stop if (i := text.find(s)) >= 0]
    return text[: min(ends)] if ends else text


def constant_baseline(task: EvalTask, answers: list[str]) -> tuple[float, str]:
    """Accuracy of the best constant-answer policy on these problems, and that answer: the bar a
    policy that ignores the prompt clears (on one-digit sums "9" alone scores 10 of 55)."""
    if not answers:
        return 0.0, ""
    best, best_answer = -1, ""
    for candidate in sorted(set(answers)):
        hits = sum(bool(task.score(candidate, a)) for a in answers)
        if hits > best:
            best, best_answer = hits, candidate
    return best / len(answers), best_answer


def evaluate(
    model: Any,
    tokenizer: Any,
    task: EvalTask,
    rows: list[dict[str, Any]],
    data: DataConfig,
    max_new_tokens: int,
    generate_fn: Any = None,
) -> dict[str, Any]:
    """Greedy completions of ``rows`` scored by ``task``; ``generate_fn(prompts, max_new_tokens, stop)``
    replaces HF generate on ``model`` (the eval CLI's vLLM backend)."""
    start = time.time()
    prompts = [to_prompt(r["prompt"], data) for r in rows]
    if generate_fn is None:
        completions = generate(model, tokenizer, prompts, max_new_tokens, stop=task.stop)
    else:
        completions = [cut_at_stop(c, task.stop) for c in generate_fn(prompts, max_new_tokens, task.stop)]
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
    out: dict[str, Any] = {
        "accuracy": n_right / max(1, len(results)),
        "n": len(results),
        "n_problems": len({str(r["prompt"]) for r in rows}),
        "correct": n_right,
        "time_s": time.time() - start,
        "results": results,
    }
    if task.constant_baseline:
        out["constant_baseline"], out["constant_answer"] = constant_baseline(
            task, [str(r["answer"]) for r in rows]
        )
    return out


def eval_metrics(task: EvalTask, res: dict[str, Any]) -> dict[str, Any]:
    """The ``eval/...`` keys of one evaluation (metrics.jsonl eval lines, W&B)."""
    metrics = {
        "eval/accuracy": res["accuracy"],
        "eval/n_problems": res["n_problems"],
        "eval/correct": res["correct"],
        "eval/time_s": res["time_s"],
    }
    if "constant_baseline" in res:
        metrics["eval/constant_baseline"] = res["constant_baseline"]
    if task.metrics is not None:
        metrics.update(task.metrics(res))
    return metrics


def summary(res: dict[str, Any]) -> str:
    line = f"accuracy {res['accuracy']:.3f} ({res['correct']}/{res['n']} distinct problems)"
    if "constant_baseline" in res:
        line += f", best constant answer {res['constant_answer']!r}: {res['constant_baseline']:.3f}"
    return line


def eval_rows(samples: Any, step: int, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """samples.jsonl rows of one evaluation: its first ``per_step`` problems, with the expected answer
    and whether the greedy completion passed."""
    from training_core.run.samples import prompt_text

    return [
        samples.row(
            step,
            "eval",
            prompt_text(r["prompt"]),
            r["completion"],
            index=i,
            answer=r["answer"],
            passed=r["correct"],
            reward=1.0 if r["correct"] else 0.0,
        )
        for i, r in enumerate(results[: samples.per_step])
    ]


def make_callback(
    task: EvalTask,
    rows: list[dict[str, Any]],
    cfg: EvalConfig,
    data: DataConfig,
    max_new_tokens: int,
    tokenizer: Any,
    writer: MetricsWriter,
    samples: Any = None,
) -> Any:
    """``samples``: the run's SamplesWriter; each evaluation's first rows go to samples.jsonl."""
    from transformers import TrainerCallback

    class IntervalEval(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.done_at: int | None = None

        def _run(self, state: Any, model: Any) -> None:
            if self.done_at == state.global_step:
                return
            self.done_at = state.global_step
            res = evaluate(model, tokenizer, task, rows, data, max_new_tokens)
            metrics = eval_metrics(task, res)
            writer.eval(state.global_step, metrics)
            if samples is not None and samples.active:
                samples.write(eval_rows(samples, state.global_step, res["results"]))
            if writer.active:
                print(f"eval step {state.global_step}: {summary(res)}", flush=True)

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
