"""``python -m training_core.train RECIPE [--set key=value ...] [--run-dir DIR] [--resume] [--dry-run]``.

RECIPE is a name in recipes/ or a path to a .toml file. ``--dry-run`` prints the fully resolved
configuration as JSON (Dr GRPO settings, rewards with weights, the platform preset and what it
changed) and exits without importing torch or TRL. Bad input prints one line and exits 2; a run that
fails before its first step (model or data that does not load) prints one line and exits 1, after
writing a failed end line to its metrics.jsonl. ``--debug`` adds the traceback.
The run directory defaults to runs/<run-id> under the current directory; the run id is its name.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from pippa_contract.names import new_run_id
from training_core.errors import TrainingError, UsageError
from training_core.hardware.platform import PlatformFacts, detect
from training_core.recipes import Resolved, resolve


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training_core.train", description=__doc__.split("\n\n")[0])
    p.add_argument("recipe", help="recipe name in recipes/ or a path to a .toml file")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set train.learning_rate=1e-5 (repeatable)",
    )
    p.add_argument("--run-dir", type=Path, default=None, help="run directory (default runs/<run-id>)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in the run dir")
    p.add_argument("--dry-run", action="store_true", help="print the resolved config as JSON and exit")
    p.add_argument(
        "--check",
        action="store_true",
        help="only check the recipe and --set values (no platform probe, no model): exit 0, or 2 and why",
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="print every setting, its value and where it came from as JSON (default CPU platform, no probe)",
    )
    p.add_argument("--debug", action="store_true", help="print the traceback of an error, not only its line")
    return p


def check_names(res: Resolved) -> None:
    """Every dataset / reward / eval task the config names exists (without importing torch)."""
    from training_core import methods

    methods.get(res.config.method).check_names(res.config)


def main(argv: list[str] | None = None, facts: PlatformFacts | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        # --check resolves against default (CPU) facts: keys, types and names do not depend on the platform.
        quick = args.check or args.explain
        res = resolve(args.recipe, args.sets, facts or (PlatformFacts() if quick else detect()))
        if args.explain:
            from training_core.recipes import explain

            rows = explain(args.recipe, args.sets, facts or PlatformFacts())
            print(json.dumps([{"key": k, "value": v, "source": src} for k, v, src in rows]))
            return 0
        check_names(res)
        if args.check:
            return 0
        if args.dry_run:
            print(json.dumps(res.as_dict(), indent=2))
            return 0
        run_dir = args.run_dir or Path("runs") / new_run_id(args.recipe)
        if args.resume and not run_dir.is_dir():
            raise UsageError(f"--resume: no run directory {run_dir}")
        from training_core import methods

        return methods.get(res.config.method).run(res, run_dir.resolve(), resume=args.resume)
    except TrainingError as e:
        if args.debug:
            traceback.print_exception(e)
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
