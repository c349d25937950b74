"""The adversarial code game.

The policy writes a program that prints an integer; an opponent (a frozen copy of the policy, or a
named model) reads the program and predicts the integer. The true output comes from the sandbox,
never from running the program in the trainer (the earlier script's bug). Rewards: +1 when the
opponent is wrong, -1 when it is right, and -1 when the program fails or prints no integer (the
earlier script rewarded crashing programs with +1: a crash is not a win). Each program runs twice in
fresh sandboxes, at different random times further apart than the time limit (``run_twice``);
different outputs (randomness, ``hash()``, clocks, addresses) make it invalid (-1).

The opponent is any ``predict(prompts) -> texts`` callable, so the game logic is tested without a
model; ``hf_opponent`` wraps a transformers model.
"""

from __future__ import annotations

import random
import re
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from training_core.code.extract import extract_code
from training_core.sandbox import SandboxLimits, SandboxPool, SandboxResult, Status, default_pool
from training_core.sandbox.launcher import Launcher

Predictor = Callable[[list[str]], list[str]]

GAME_PROMPT = (
    "Write a short Python program that prints exactly one integer. Another model will read your "
    "program and try to predict the integer without running it: make that hard, but the program "
    "must run without errors within a second. Put the program in one ```python code block."
)
OPPONENT_PROMPT = (
    "What integer does this Python program print?\n\n```python\n{code}\n```\n\n"
    "Answer with the integer only, inside <answer>...</answer>."
)

_INT = re.compile(r"[-+]?\d+")
_ANSWER = re.compile(r"<answer>\s*([-+]?\d+)\s*</answer>")


def program_output(result: SandboxResult) -> int | None:
    """The integer a program printed: a clean run whose whole stripped stdout is one integer."""
    if result.status is not Status.OK:
        return None
    text = result.stdout.strip()
    if not re.fullmatch(r"[-+]?\d+", text) or len(text) > 4000:
        return None
    return int(text)


def _stable_output(first: SandboxResult, second: SandboxResult) -> int | None:
    """The printed integer when two runs of the program agree on it, else None (invalid)."""
    a, b = program_output(first), program_output(second)
    return a if a is not None and a == b else None


def parse_prediction(text: str) -> int | None:
    """The opponent's integer: the ``<answer>`` content, else the last integer in its text."""
    m = _ANSWER.search(text)
    if m:
        return int(m.group(1))
    found = _INT.findall(text)
    return int(found[-1]) if found else None


@dataclass
class GameStats:
    """Running opponent accuracy over programs that printed an integer (thread-safe counters)."""

    rounds: int = 0  # valid programs judged
    opponent_right: int = 0
    invalid: int = 0  # programs that failed or printed no integer
    last_accuracy: float = 0.0  # accuracy of the latest batch
    # per completion of the latest batch: 1.0 opponent right, 0.0 wrong, None no valid program
    last_hits: list[float | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, right: int, valid: int, invalid: int) -> None:
        with self._lock:
            self.rounds += valid
            self.opponent_right += right
            self.invalid += invalid
            self.last_accuracy = right / valid if valid else 0.0

    @property
    def accuracy(self) -> float:
        return self.opponent_right / self.rounds if self.rounds else 0.0

    def metrics(self) -> dict[str, float]:
        return {
            "code_game/opponent_accuracy": self.last_accuracy,
            "code_game/opponent_accuracy_total": self.accuracy,
            "code_game/invalid_programs": float(self.invalid),
        }


# The game's invariant (docs/sandbox.md, "The code game's invariant"): nothing a program's first run
# does can be read by its second, and nothing the machine shows reaches either. ``invariant_gaps``
# names what a launcher leaves open; the game's own pool (``default_pool``) leaves nothing.
INVARIANT = "nothing the first run does can be read by the second, and no run reads the machine's state"


def invariant_gaps(launcher: Launcher) -> tuple[str, ...]:
    """What ``launcher`` leaves open of ``INVARIANT``: () where it holds."""
    gaps = []
    if launcher.runsc is None:  # gVisor: a kernel of its own, with no counter of the host's to read or move
        if launcher.bwrap is None:
            gaps.append("no sandbox: the program sees the host")
        if not launcher.landlock:
            gaps.append("no Landlock: the machine's /proc files are readable")
        if launcher.seccomp is None:
            gaps.append("no seccomp filter: page cache, futexes, locks, keyrings, mlock and sysinfo are open")
    if launcher.usr == "/usr":
        gaps.append("the host's /usr: its page cache is shared by every run")
    return tuple(gaps)


def run_twice(
    pool: SandboxPool, codes: Sequence[str], limits: SandboxLimits, rng: random.Random | None = None
) -> list[tuple[SandboxResult, SandboxResult]]:
    """Each program's two runs, at different times in fresh sandboxes: all first runs (in a shuffled
    order), then a pause longer than the time limit and of random length, then all second runs (in
    another order). No two runs of one program overlap, and they are more than the time limit apart,
    so a clock read finer than that gap (seconds, with a limit of 1 s or more) differs between them.

    The invariant the game relies on (docs/sandbox.md, "The code game"): nothing the first run does
    can be read by the second. Each run is its own sandbox (own tmpfs, PID, IPC and network
    namespaces, a cgroup slot it cannot read), its /usr a memory-resident copy (``default_pool``:
    no page a run could load or evict, so nothing to probe, not even by timing or fault-around), and
    the seccomp filter refuses every call that writes or probes state the two could share: the page
    cache (fadvise, readahead, madvise advice, RWF_NOWAIT, mincore, cachestat), shared futexes, locks,
    file watches, keyrings, SysV IPC, mlock, sysinfo; and no run reads a machine-wide file. A program
    cannot tell which of its runs it is (same argv, environment, pid 1 tree, clock only coarser than
    the gap), so a scheme "draw in the first run, replay in the second" prints two different numbers:
    invalid. A coarse clock does agree nearly always (``int(time.time()) // 3600`` differs only when
    an hour starts between the runs): that is not isolated (docs). The machine's counters and gauges
    are unreadable (Landlock: ``procview``), sysinfo and mlock refused: ``invariant_gaps``."""
    if not codes:
        return []
    rng = rng or random.SystemRandom()
    results: list[list[SandboxResult]] = [[] for _ in codes]
    for round_ in range(2):
        if round_:
            time.sleep(limits.timeout_s * (1.0 + rng.random()) + 0.1)
        order = list(range(len(codes)))
        rng.shuffle(order)
        for i, r in zip(order, pool.map([codes[i] for i in order], limits), strict=True):
            results[i].append(r)
    return [(a, b) for a, b in results]


def play(
    completions: Sequence[Any],
    predict: Predictor,
    stats: GameStats | None = None,
    pool: SandboxPool | None = None,
    limits: SandboxLimits | None = None,
    win: float = 1.0,
    lose: float = -1.0,
    invalid: float = -1.0,
    prefix: str = "",
    opponent_prompt: str = OPPONENT_PROMPT,
) -> list[float]:
    """Score one batch: run every program, ask the opponent about the valid ones, compare.

    ``prefix`` is prepended to each extracted program (a prompt that opens the code, e.g. ``print(``);
    ``opponent_prompt`` is the opponent's question with a ``{code}`` slot."""
    codes = [prefix + code if (code := extract_code(c)) else "" for c in completions]
    pool = pool or default_pool()  # /usr in memory: no page cache a run could leave for another
    if gaps := invariant_gaps(pool.launcher):  # Python's warning filter shows it once per process
        warnings.warn(
            f"code game: the invariant ({INVARIANT}) does not hold here: {'; '.join(gaps)}",
            RuntimeWarning,
            stacklevel=2,
        )
    limits = limits or SandboxLimits(timeout_s=2.0)
    todo = [c for c in codes if c]
    # twice, each in a fresh sandbox: a program whose output differs between runs (os.urandom, random,
    # hash(), time, id()) is not "unpredictable", it is invalid: nothing could have predicted it
    both = iter(run_twice(pool, todo, limits))
    truths = [_stable_output(*next(both)) if c else None for c in codes]
    valid = [i for i, t in enumerate(truths) if t is not None]
    guesses = predict([opponent_prompt.replace("{code}", codes[i]) for i in valid]) if valid else []
    rewards = [invalid] * len(codes)
    hits: list[float | None] = [None] * len(codes)
    for i, text in zip(valid, guesses, strict=True):
        hit = parse_prediction(text) == truths[i]
        hits[i] = float(hit)
        rewards[i] = lose if hit else win
    if stats is not None:
        stats.add(int(sum(h for h in hits if h is not None)), len(valid), len(codes) - len(valid))
        stats.last_hits = hits
    return rewards


def hf_opponent(model: Any, tokenizer: Any, max_new_tokens: int = 24, batch_size: int = 8) -> Predictor:
    """Greedy predictions from a transformers causal LM (chat template when the tokenizer has one)."""
    import torch

    def predict(prompts: list[str]) -> list[str]:
        texts = []
        for p in prompts:
            if getattr(tokenizer, "chat_template", None):
                texts.append(
                    tokenizer.apply_chat_template(
                        [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
                    )
                )
            else:
                texts.append(p)
        outs: list[str] = []
        side = tokenizer.padding_side
        tokenizer.padding_side = "left"
        try:
            for s in range(0, len(texts), batch_size):
                enc = tokenizer(texts[s : s + batch_size], return_tensors="pt", padding=True).to(model.device)
                with torch.no_grad():
                    gen = model.generate(
                        **enc,
                        max_new_tokens=max_new_tokens,
                        do_sample=False,
                        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
                    )
                outs += tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        finally:
            tokenizer.padding_side = side
        return outs

    return predict
