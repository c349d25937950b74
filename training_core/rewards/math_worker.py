"""The math-verify grading process: ``python -m training_core.rewards.math_worker``.

Reads one JSON object per line on stdin (``{"gold": ..., "pred": ...}``), answers one line on stdout
(``{"ok": true|false}``), and exits at end of input (its parent died or closed it). math-verify's own
timeouts are off here (they use ``signal.alarm``, which raises off the main thread and would replace
a trainer's SIGALRM handler): the parent bounds each answer by killing this process
(``training_core.rewards.math_grader``).
"""

from __future__ import annotations

import json
import logging
import sys


def equivalent(gold: str, pred: str) -> bool:
    """math-verify's equivalence of a gold answer and a predicted answer, both LaTeX without ``$``.

    Both are read as the content of ``\\boxed{}`` so bare LaTeX ("\\frac12", "2^{1/2}") parses as
    LaTeX; a prediction that does not parse that way is read as free text ("The answer is 42.").
    A percent is the number written before it on both sides (``answer_form.strip_percent``): math-verify
    would also pay ``400\\%`` for 4.
    """
    from math_verify import parse, verify

    from training_core.rewards.answer_form import strip_percent

    gold, pred = strip_percent(gold), strip_percent(pred)

    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)  # type: ignore[arg-type]
    pred_parsed = parse(f"\\boxed{{{pred}}}", parsing_timeout=None)  # type: ignore[arg-type]
    if not pred_parsed:
        pred_parsed = parse(pred, parsing_timeout=None)  # type: ignore[arg-type]
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def main() -> int:
    logging.disable(logging.WARNING)  # math-verify warns once that its timeout is off: it is, on purpose
    import math_verify  # noqa: F401  # import before "ready", so the first answer's clock is fair

    print("ready", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        try:
            ok = equivalent(str(job["gold"]), str(job["pred"]))
        except Exception:  # an unparseable answer is a wrong answer, never a dead grader
            ok = False
        print(json.dumps({"ok": ok}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
