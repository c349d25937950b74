"""``python -m training_core.eval MODEL_OR_CHECKPOINT --task arithmetic|gsm8k|math|tictactoe [-n N]``: JSON.

MODEL_OR_CHECKPOINT is a hub id, a local model or checkpoint directory, or "tiny". Greedy decoding with
HF generate (the same code as the interval eval), or vLLM with ``--backend vllm`` (``auto``: vLLM where it
is installed and a GPU is present). The prompt style follows ``--recipe`` (default: the task's recipe,
``r1_zero_math`` / ``r1_zero_tiny`` for ``math``, else the tiny recipe's plain style for "tiny" and local
checkpoints of it, chat otherwise). Prints ``{"task", "model", "accuracy", "n", "correct", "time_s",
"results": [...]}``; ``math`` adds ``eval/format_rate`` (well-formed ``</think> <answer>`` completions).
``tictactoe`` plays N games against a random-move and N against a minimax opponent, half in each role,
sampling as the self-play recipe evaluates (``tictactoe`` / ``tictactoe_tiny``, HF generate), and prints
``{"task", "model", "n", "vs_random": {win, draw, loss, invalid, p0_win, ...}, "vs_minimax": {...}, ...}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from training_core.errors import TrainingError, UsageError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training_core.eval", description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="hub id, model/checkpoint directory, or 'tiny'")
    p.add_argument("--task", default="arithmetic", help="eval task name (arithmetic, gsm8k, ...)")
    p.add_argument(
        "-n",
        type=int,
        default=20,
        help="problems to score, 0 = all (tictactoe: games per opponent; 0 = eval.n)",
    )
    p.add_argument("--recipe", default=None, help="take prompt style and task params from this recipe")
    p.add_argument(
        "--max-new-tokens", type=int, default=0, help="default: the recipe's max_completion_length"
    )
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--backend", choices=("auto", "hf", "vllm"), default="hf", help="generation backend (default hf)"
    )
    return p


# The recipe whose prompt style and data an eval task uses by default: (real model, tiny model).
TASK_RECIPES = {"math": ("r1_zero_math", "r1_zero_tiny"), "tictactoe": ("tictactoe", "tictactoe_tiny")}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        # stdout carries only the JSON: libraries print there while loading (deepspeed's accelerator line).
        with contextlib.redirect_stdout(sys.stderr):
            out = _run(args)
        print(json.dumps(out, indent=2))
        return 0
    except TrainingError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        print(f"error: cannot load {args.model}: {e}".splitlines()[0], file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> dict[str, Any]:
    from training_core.eval.tasks import EVAL_TASKS
    from training_core.hardware.platform import PlatformFacts
    from training_core.recipes import resolve
    from training_core.selfplay.evaluate import GAME_TASKS

    if args.n < 0:
        raise UsageError("-n must be >= 0 (0 = every problem the task has)")
    if args.backend == "vllm":
        from training_core.eval import vllm_generate

        vllm_generate.require()
    is_tiny = args.model == "tiny" or "tiny" in Path(args.model).name or _is_tiny_checkpoint(args.model)
    real, small = TASK_RECIPES.get(args.task, ("baseline", "tiny"))
    recipe = args.recipe or (small if is_tiny else real)
    cfg = resolve(recipe, args.sets, PlatformFacts()).config
    if args.task in GAME_TASKS:
        if args.backend == "vllm":
            raise UsageError(f"--task {args.task} plays games with HF generate; drop --backend vllm")
        return _play(args, cfg)
    task = EVAL_TASKS.get(args.task, cfg.plugins)
    rows = task.load(args.n, cfg.seed, data=cfg.data, **cfg.eval.params)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training_core.eval import vllm_generate
    from training_core.eval.greedy import evaluate
    from training_core.models import tiny

    path = str(tiny.ensure()) if args.model == "tiny" else args.model
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    max_new = args.max_new_tokens or cfg.eval.max_new_tokens or cfg.train.max_completion_length
    model: Any = None
    generate_fn = None
    if args.backend == "vllm" or (args.backend == "auto" and vllm_generate.available()):
        generate_fn = vllm_generate.make_generate(path, tokenizer, cfg.seed)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        if torch.cuda.is_available():
            model = model.to("cuda")
    res = evaluate(model, tokenizer, task, rows, cfg.data, max_new, generate_fn=generate_fn)
    if task.metrics is not None:
        res = {**task.metrics(res), **res}
    return {"task": args.task, "model": args.model, **res}


def _play(args: argparse.Namespace, cfg: Any) -> dict[str, Any]:
    """Games against the fixed opponents (training_core.selfplay.evaluate)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training_core.models import tiny
    from training_core.selfplay.evaluate import play_eval
    from training_core.selfplay.rollout import Player, Sampling

    path = str(tiny.ensure()) if args.model == "tiny" else args.model
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if torch.cuda.is_available():
        model = model.to("cuda")
    sp, t = cfg.selfplay, cfg.train
    sampling = Sampling(args.max_new_tokens or t.max_completion_length, sp.eval_temperature, sp.eval_top_p)
    player = Player(model, tokenizer, sp.prompt, cfg.data.prompt_style, sampling)
    n = args.n or cfg.eval.n
    return {"task": args.task, "model": args.model, "n": n, **play_eval(player, n, cfg.seed, sp.max_turns)}


def _is_tiny_checkpoint(path: str) -> bool:
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return False
    from training_core.models.tiny import CHARS, SPECIALS

    return bool(json.loads(cfg.read_text()).get("vocab_size") == len(CHARS) + len(SPECIALS))


if __name__ == "__main__":
    sys.exit(main())
