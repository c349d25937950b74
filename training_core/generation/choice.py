"""The trainer side of the generation engines: run the plan's engine, fall back in one line, time it.

``EngineChoice`` is a mixin for TRL's GRPOTrainer (``PippaGRPOTrainer``). It wraps TRL's
``_generate_single_turn`` (TRL 1.16; the one method through which every engine's completions pass, and no
public hook exists around it): when an engine raises, the trainer prints one line, switches to the plan's
next engine and generates the same batch again, so the run goes on. The same wrap counts generation
seconds and tokens; ``log`` adds them to each logged step as ``perf/gen_*`` (training_core.run.flops turns
them into per-phase figures).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from training_core.generation.engines import Plan, apply


def fell_back(engine: str, error: BaseException, instead: str) -> str:
    """The one line printed when an engine fails during the run."""
    first = (str(error).strip().splitlines() or [""])[0][:200]
    return f"generation engine {engine} failed ({type(error).__name__}: {first}); using {instead}"


@dataclass
class GenClock:
    """Generation seconds and tokens since the last logged step."""

    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def take(self) -> dict[str, float]:
        out = {
            "perf/gen_time_s": self.seconds,
            "perf/gen_prompt_tokens": float(self.prompt_tokens),
            "perf/gen_tokens": float(self.completion_tokens),
        }
        self.seconds, self.prompt_tokens, self.completion_tokens = 0.0, 0, 0
        return out


class EngineChoice:
    """Mixin for TRL's GRPOTrainer; ``generation`` (a Plan) is its one constructor argument."""

    def __init__(self, *args: Any, generation: Plan | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.engine_plan = generation or Plan()
        self.engine = self.engine_plan.chain[0]
        self.gen_clock = GenClock()
        apply(self, self.engine, self.engine_plan)

    def _generate_single_turn(self, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
        while True:
            t0 = time.perf_counter()
            try:
                out = super()._generate_single_turn(prompt_ids, *args, **kwargs)  # type: ignore[misc]
            except Exception as e:
                nxt = self.engine_plan.after(self.engine)
                if nxt is None:
                    raise
                print(fell_back(self.engine, e, nxt), file=sys.stdout, flush=True)
                self.engine = nxt
                apply(self, nxt, self.engine_plan)
                continue
            # the completions are Python lists here (copied off the device): the time is the engine's
            c = self.gen_clock
            c.seconds += time.perf_counter() - t0
            c.prompt_tokens += sum(len(p) for p in prompt_ids)
            c.completion_tokens += sum(len(ids) for ids in out[0])
            return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.model.training and not any(k.startswith("eval_") for k in logs):  # type: ignore[attr-defined]
            logs = {**logs, **self.gen_clock.take()}
        super().log(logs, start_time)  # type: ignore[misc]
