"""``python -m training_core.eval MODEL_OR_CHECKPOINT --task arithmetic|gsm8k|tictactoe [-n N]``: JSON.

MODEL_OR_CHECKPOINT is a hub id, a local model or checkpoint directory, or "tiny". Greedy decoding with
HF generate (the same code as the interval eval); the prompt style follows ``--recipe`` (default: the
tiny recipe's plain style for "tiny" and local checkpoints of it, chat otherwise). Prints
``{"task", "model", "accuracy", "n", "correct", "time_s", "results": [...]}``. ``--task tictactoe`` plays
N games against a random-move and N against a minimax opponent, half in each role, sampling as the
self-play recipe evaluates (``tictactoe_tiny`` for the tiny model, ``tictactoe`` otherwise), and prints
``{"task", "model", "n", "vs_random": {win, draw, loss, invalid, p0_win, ...}, "vs_minimax": {...}, ...}``.
"""

from __future__ import annotations

import argparse
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
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from training_core.eval_tasks import EVAL_TASKS
        from training_core.platform import PlatformFacts
        from training_core.recipes import resolve
        from training_core.selfplay.evaluate import GAME_TASKS

        if args.n < 0:
            raise UsageError("-n must be >= 0 (0 = every problem the task has)")
        is_tiny = args.model == "tiny" or "tiny" in Path(args.model).name or _is_tiny_checkpoint(args.model)
        if args.task in GAME_TASKS:
            recipe = args.recipe or ("tictactoe_tiny" if is_tiny else "tictactoe")
            return _play(args, resolve(recipe, args.sets, PlatformFacts()).config)
        recipe = args.recipe or ("tiny" if is_tiny else "baseline")
        cfg = resolve(recipe, args.sets, PlatformFacts()).config
        task = EVAL_TASKS.get(args.task, cfg.plugins)
        rows = task.load(args.n, cfg.seed, data=cfg.data, **cfg.eval.params)

        from training_core.evaluation import evaluate

        model, tokenizer = _load(args.model)
        max_new = args.max_new_tokens or cfg.train.max_completion_length
        res = evaluate(model, tokenizer, task, rows, cfg.data, max_new)
        if task.metrics is not None:
            res = {**task.metrics(res), **res}
        print(json.dumps({"task": args.task, "model": args.model, **res}, indent=2))
        return 0
    except TrainingError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        print(f"error: cannot load {args.model}: {e}".splitlines()[0], file=sys.stderr)
        return 2


def _load(model_arg: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training_core import tiny

    path = str(tiny.ensure()) if model_arg == "tiny" else model_arg
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model, tokenizer


def _play(args: argparse.Namespace, cfg: Any) -> int:
    """Games against the fixed opponents (training_core.selfplay.evaluate)."""
    from training_core.selfplay.evaluate import play_eval
    from training_core.selfplay.rollout import Player, Sampling

    model, tokenizer = _load(args.model)
    sp, t = cfg.selfplay, cfg.train
    sampling = Sampling(args.max_new_tokens or t.max_completion_length, sp.eval_temperature, sp.eval_top_p)
    player = Player(model, tokenizer, sp.prompt, cfg.data.prompt_style, sampling)
    res = play_eval(player, args.n or cfg.eval.n, cfg.seed, sp.max_turns)
    print(json.dumps({"task": args.task, "model": args.model, "n": args.n or cfg.eval.n, **res}, indent=2))
    return 0


def _is_tiny_checkpoint(path: str) -> bool:
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return False
    from training_core.tiny import CHARS, SPECIALS

    return bool(json.loads(cfg.read_text()).get("vocab_size") == len(CHARS) + len(SPECIALS))


if __name__ == "__main__":
    sys.exit(main())
