"""MBPP evaluation of a model: sampling, scoring in the sandbox, the interval callback, the eval task.

Defaults: the sanitized MBPP (arXiv:2108.07732) config, test split, 10 problems, 512 new tokens,
temperature 0.2, 10 s per program, at start / every 20 steps / at the end. Each evaluation logs
``mbpp_eval/pass_rate``, ``problems_passed``, ``total_problems`` and ``eval_time``, plus the unbiased
``pass_at_1`` and, with ``samples`` = k > 1, ``pass_at_<k>`` (``mbpp.summary``), to metrics.jsonl
(an ``eval`` line, which the writer mirrors to W&B), and writes per-problem results to
``<run-dir>/mbpp_eval/step-<N>.json``.
The interval is the callback's own parameter (an earlier callback popped it from a shared dict and
never fired).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training_core.code.mbpp import MbppProblem, load_mbpp, mbpp_prompt, results_json, score_samples, summary
from training_core.eval.tasks import EVAL_TASKS, EvalTask
from training_core.methods.callbacks import CALLBACKS, CallbackContext
from training_core.sandbox import SandboxLimits, run_python


@dataclass(frozen=True)
class MbppEvalSettings:
    n: int = 10  # problems (the first n of the split)
    config: str = "sanitized"  # hub config: "sanitized" or "full"
    split: str = "test"
    samples: int = 1  # completions per problem; pass@1 = mean over them, pass_rate uses the first
    max_new_tokens: int = 512
    temperature: float = 0.2  # 0 = greedy
    timeout_s: float = 10.0  # per program
    data_files: str = ""  # local JSON rows in either config's format instead of the hub
    prompt_style: str = "chat"  # "chat" (chat template) or "plain"


def _render(tokenizer: Any, prompt: str, style: str) -> str:
    if style == "chat" and getattr(tokenizer, "chat_template", None):
        return str(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        )
    return prompt


def sample(
    model: Any, tokenizer: Any, prompts: list[str], s: MbppEvalSettings, batch_size: int = 8
) -> list[list[str]]:
    """``s.samples`` completions per prompt (left padding, sampling at ``s.temperature``)."""
    import torch

    texts = [_render(tokenizer, p, s.prompt_style) for p in prompts]
    side, was_training = tokenizer.padding_side, model.training
    tokenizer.padding_side = "left"
    model.eval()
    flat: list[str] = []
    try:
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(
                texts[i : i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False
            )
            enc = {k: v.to(model.device) for k, v in enc.items()}
            gen_kw: dict[str, Any] = {"do_sample": False}
            if s.temperature > 0:
                gen_kw = {"do_sample": True, "temperature": s.temperature, "top_p": 1.0}
            with torch.no_grad():
                ids = model.generate(
                    **enc,
                    max_new_tokens=s.max_new_tokens,
                    num_return_sequences=s.samples,
                    pad_token_id=tokenizer.pad_token_id,
                    **gen_kw,
                )
            flat += tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return [flat[j * s.samples : (j + 1) * s.samples] for j in range(len(prompts))]


def evaluate_mbpp(
    model: Any,
    tokenizer: Any,
    problems: list[MbppProblem],
    s: MbppEvalSettings,
    results_path: Path | None = None,
) -> dict[str, float | int]:
    """Generate, score in the sandbox, return the ``mbpp_eval/...`` metrics (and write the JSON)."""
    start = time.time()
    outs = sample(model, tokenizer, [mbpp_prompt(p) for p in problems], s)
    results = score_samples(problems, outs, timeout_s=s.timeout_s)
    metrics = summary(results, time.time() - start)
    if results_path is not None:
        results_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = results_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"metrics": metrics, "problems": results_json(results)}, indent=1))
        os.replace(tmp, results_path)
    return metrics


@CALLBACKS.register("mbpp_eval")
def mbpp_eval_callback(
    ctx: CallbackContext, interval: int = 20, at_start: bool = True, at_end: bool = True, **settings: Any
) -> Any:
    """MBPP pass rate at the start, every ``interval`` steps and at the end of training."""
    from transformers import TrainerCallback

    if "prompt_style" not in settings and ctx.config is not None:
        settings["prompt_style"] = ctx.config.data.prompt_style
    s = MbppEvalSettings(**settings)
    problems = load_mbpp(s.config, s.split, s.n, s.data_files or None)
    out_dir = Path(ctx.run_dir) / "mbpp_eval"

    class MbppEval(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.done_at: int | None = None

        def _run(self, state: Any, model: Any) -> None:
            if self.done_at == state.global_step or model is None:
                return
            self.done_at = state.global_step
            step = state.global_step
            m = evaluate_mbpp(model, ctx.tokenizer, problems, s, out_dir / f"step-{step}.json")
            ctx.writer.eval(step, dict(m))
            print(
                f"mbpp eval step {step}: pass rate {m['mbpp_eval/pass_rate']:.3f} "
                f"({m['mbpp_eval/problems_passed']}/{m['mbpp_eval/total_problems']}) "
                f"in {m['mbpp_eval/eval_time']:.1f}s",
                flush=True,
            )

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if at_start and state.global_step == 0:
                self._run(state, model)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if interval > 0 and state.global_step % interval == 0:
                self._run(state, model)

        def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if at_end:
                self._run(state, model)

    return MbppEval()


def _load_eval(
    n: int,
    seed: int,
    data: Any = None,
    config: str = "sanitized",
    split: str = "test",
    data_files: str = "",
    **_: Any,
) -> list[dict[str, Any]]:
    """EvalTask rows: the MBPP prompt, and the tests as the ``answer`` (JSON)."""
    return [
        {
            "prompt": mbpp_prompt(p),
            "task_id": p.task_id,
            "answer": json.dumps({"test_list": list(p.all_tests), "setup": p.setup}),
        }
        for p in load_mbpp(config, split, n, data_files or None)
    ]


def _score(completion: str, answer: str) -> bool:
    """One completion passes when its code exits 0 and every assert holds (judged outside the sandbox)."""
    from training_core.code.asserts import assert_job, judged
    from training_core.code.extract import extract_code

    spec = json.loads(answer)
    code = extract_code(completion)
    if not code:
        return False
    job = assert_job(code, spec["test_list"], spec.get("setup", ""))
    return judged(job, run_python(job.program, SandboxLimits(timeout_s=10.0), calls=job.calls))


def _metrics(res: dict[str, Any]) -> dict[str, Any]:
    """The ``mbpp_eval/...`` keys from a greedy ``evaluate`` result (one sample per problem)."""
    return {
        "mbpp_eval/pass_rate": res["accuracy"],
        "mbpp_eval/problems_passed": res["correct"],
        "mbpp_eval/total_problems": res["n"],
        "mbpp_eval/eval_time": res["time_s"],
    }


EVAL_TASKS.register("mbpp")(EvalTask(load=_load_eval, score=_score, metrics=_metrics))
