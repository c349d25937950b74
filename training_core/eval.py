"""``python -m training_core.eval MODEL_OR_CHECKPOINT --task arithmetic|gsm8k [-n N]``: accuracy as JSON.

MODEL_OR_CHECKPOINT is a hub id, a local model or checkpoint directory, or "tiny". Greedy decoding with
HF generate (the same code as the interval eval); the prompt style follows ``--recipe`` (default: the
tiny recipe's plain style for "tiny" and local checkpoints of it, chat otherwise). Prints
``{"task", "model", "accuracy", "n", "correct", "time_s", "results": [...]}``.
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
    p.add_argument("-n", type=int, default=20, help="distinct problems to score (default 20; 0 = all)")
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

        if args.n < 0:
            raise UsageError("-n must be >= 0 (0 = every problem the task has)")
        is_tiny = args.model == "tiny" or "tiny" in Path(args.model).name or _is_tiny_checkpoint(args.model)
        recipe = args.recipe or ("tiny" if is_tiny else "baseline")
        cfg = resolve(recipe, args.sets, PlatformFacts()).config
        task = EVAL_TASKS.get(args.task, cfg.plugins)
        rows = task.load(args.n, cfg.seed, data=cfg.data, **cfg.eval.params)

        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from training_core import tiny
        from training_core.evaluation import evaluate

        path = str(tiny.ensure()) if args.model == "tiny" else args.model
        tokenizer = AutoTokenizer.from_pretrained(path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        if torch.cuda.is_available():
            model = model.to("cuda")
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


def _is_tiny_checkpoint(path: str) -> bool:
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return False
    from training_core.tiny import CHARS, SPECIALS

    return bool(json.loads(cfg.read_text()).get("vocab_size") == len(CHARS) + len(SPECIALS))


if __name__ == "__main__":
    sys.exit(main())
