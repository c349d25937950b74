"""One self-play run: load the policy, then per step play games against itself, turn them into samples
with role-conditioned advantages and take the policy-gradient step; evaluate against fixed opponents
every ``eval.interval`` steps; checkpoint every ``checkpoint.every`` steps and on SIGINT/SIGTERM.

The run record is every method's (training_core.run.lifecycle, docs/CONTRACTS.md): header, step, eval and
end lines in metrics.jsonl, mirrored to W&B under the same keys; a failure before the first step still
writes a failed end line; ``--resume`` continues from the newest checkpoint after moving the lines it
redoes to metrics.superseded.jsonl.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training_core.config import Resolved
from training_core.errors import UsageError
from training_core.run.layout import checkpoints_dir
from training_core.run.lifecycle import RunLifecycle
from training_core.selfplay import state
from training_core.selfplay.evaluate import eval_metrics, play_eval, summary
from training_core.selfplay.prompts import render
from training_core.selfplay.rae import RoleBaselines
from training_core.selfplay.rollout import Game, Player, RolloutStats, Sampling, self_play
from training_core.selfplay.tictactoe import TicTacToe
from training_core.selfplay.update import Sample, UpdateSettings, policy_update, subsample, turn_samples


@dataclass
class _Run:
    model: Any
    tokenizer: Any
    optimizer: Any
    scheduler: Any
    baselines: RoleBaselines
    rng: random.Random  # subsampling; the policy samples with torch's RNG
    start_step: int
    player: Player  # sampling as in training
    eval_player: Player  # sampling as in evaluation
    n_params: int
    done: int = 0  # the last completed step
    games: list[Game] | None = None  # the last step's games (samples.jsonl transcripts)


def run(res: Resolved, run_dir: Path, resume: bool = False) -> int:
    """Set up and train inside the run lifecycle every method shares (training_core.run.lifecycle)."""
    with RunLifecycle(res, run_dir, resume) as life:
        r = _prepare(life)
        _train(life, r)
    return life.code


def _check_prompt(res: Resolved, tokenizer: Any, model: Any) -> None:
    """Refuse, with one line, a prompt the model cannot read: no chat template for "chat", characters
    its vocabulary lacks, or a prompt plus answer longer than its positions."""
    cfg = res.config
    if cfg.data.prompt_style == "chat" and not getattr(tokenizer, "chat_template", None):
        raise UsageError(
            f'model {cfg.model.name!r} has no chat template: set data.prompt_style = "plain" to send the '
            "prompt as raw text (the tiny recipe does)"
        )
    text = render(TicTacToe().board, 0, cfg.selfplay.prompt, cfg.data.prompt_style, tokenizer)
    ids = tokenizer(text)["input_ids"]
    if tokenizer.decode(ids, skip_special_tokens=True) != text and cfg.data.prompt_style == "plain":
        raise UsageError(
            f"the {cfg.selfplay.prompt!r} prompt has characters the tokenizer of {cfg.model.name!r} does not "
            'know (the tiny character model needs selfplay.prompt = "board")'
        )
    limit = getattr(model.config, "max_position_embeddings", None)
    need = len(ids) + cfg.train.max_completion_length
    if limit is not None and need > limit:
        raise UsageError(
            f"a {len(ids)}-token prompt plus train.max_completion_length={cfg.train.max_completion_length} "
            f"exceeds the model's {limit} positions"
        )


def _prepare(life: RunLifecycle) -> _Run:
    res, resume_from = life.res, life.resume_from
    cfg, t, sp = res.config, res.config.train, res.config.selfplay
    import torch

    from training_core.methods.precision_hooks import adamw
    from training_core.models import load_model

    # the checkpoint's weights on resume; the header keeps the recipe's model name
    model, tokenizer = load_model(str(resume_from) if resume_from else cfg.model.name, cfg.model.precision)
    if cfg.model.precision not in ("bf16_kahan", "bf16_pure", "fp32"):
        raise UsageError(
            f"selfplay trains in bf16 weights or fp32, not {cfg.model.precision}: "
            'set model.precision = "bf16" or "fp32"'
        )
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    if cfg.model.gradient_checkpointing is True:  # "auto" is settled at start
        model.gradient_checkpointing_enable()
    _check_prompt(res, tokenizer, model)
    life.open_record()

    optimizer = adamw(model.parameters(), cfg.model.precision, t.learning_rate, t.weight_decay)
    total = t.max_steps * t.num_iterations  # one optimizer step per PPO epoch
    scheduler = lr_schedule(optimizer, t.lr_scheduler_type, round(t.warmup_ratio * total), total)
    rng = random.Random(cfg.seed)
    baselines = RoleBaselines(sp.rae_decay)
    start_step = 0
    if resume_from is not None:
        start_step, saved = state.load(resume_from, optimizer, scheduler, rng)
        baselines.load_state_dict(saved)
    style = cfg.data.prompt_style
    player = Player(
        model, tokenizer, sp.prompt, style, Sampling(t.max_completion_length, t.temperature, t.top_p)
    )
    eval_sampling = Sampling(
        cfg.eval.max_new_tokens or t.max_completion_length, sp.eval_temperature, sp.eval_top_p
    )
    eval_player = Player(model, tokenizer, sp.prompt, style, eval_sampling)
    n_params = sum(p.numel() for p in model.parameters())
    return _Run(
        model, tokenizer, optimizer, scheduler, baselines, rng, start_step, player, eval_player, n_params
    )


def lr_schedule(optimizer: Any, kind: str, warmup: int, total: int) -> Any:
    """Linear warmup, then constant (SPIRAL's) or linear decay to 0. Written here rather than taken from
    transformers.get_scheduler, whose import pulls in the Trainer stack (~8 s of a short run on CPU)."""
    import torch

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if kind == "linear":
            return max(0.0, (total - step) / max(1, total - warmup))
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def game_metrics(games: list[Game]) -> dict[str, float]:
    """Outcomes by role, invalid-move rates, game length and payoffs of one step's self-play games."""
    n = max(1, len(games))
    ends = [g.game for g in games]
    turns = [t for g in games for t in g.turns]
    pay = [g.payoffs() for g in ends]
    return {
        "game/p0_win": sum(e.result == "win" and e.winner == 0 for e in ends) / n,
        "game/p1_win": sum(e.result == "win" and e.winner == 1 for e in ends) / n,
        "game/draw": sum(e.result in ("draw", "cap") for e in ends) / n,
        "game/p0_invalid": sum(e.result == "invalid" and e.offender == 0 for e in ends) / n,
        "game/p1_invalid": sum(e.result == "invalid" and e.offender == 1 for e in ends) / n,
        "game/invalid_rate": sum(e.result == "invalid" for e in ends) / n,
        "game/invalid_per_move": sum(not t.valid for t in turns) / max(1, len(turns)),
        "game/mean_length": sum(e.turns for e in ends) / n,
        "game/games": float(len(games)),
        "reward/mean": sum(a + b for a, b in pay) / (2 * n),
        "reward/p0": sum(a for a, _ in pay) / n,
        "reward/p1": sum(b for _, b in pay) / n,
        "completions/mean_length": sum(t.n_tokens for t in turns) / max(1, len(turns)),
        "completions/clipped_ratio": sum(t.truncated for t in turns) / max(1, len(turns)),
    }


def _stats(xs: list[float], prefix: str) -> dict[str, float]:
    if not xs:
        return {}
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
    return {f"{prefix}/mean": mean, f"{prefix}/std": std, f"{prefix}/min": min(xs), f"{prefix}/max": max(xs)}


def one_step(res: Resolved, r: _Run) -> dict[str, float]:
    """Play games until ``samples_per_step`` non-zero-advantage turns exist (at most 32 batches beyond
    the expected number: an all-draw stretch at baseline 0 could otherwise loop), then update."""
    import torch

    cfg, sp = res.config, res.config.selfplay
    start = time.time()
    stats = RolloutStats()
    games: list[Game] = []
    kept: list[Sample] = []
    advantages: list[float] = []
    dropped = 0
    max_rounds = 32 + math.ceil(sp.samples_per_step / sp.parallel_games)
    for _ in range(max_rounds):
        batch = self_play(r.player, sp.parallel_games, sp.max_turns, stats)
        k, a, d = turn_samples(batch, r.baselines, sp.game, sp.drop_zero_advantage)
        games, kept, advantages, dropped = games + batch, kept + k, advantages + a, dropped + d
        if len(kept) >= sp.samples_per_step:
            break
    rollout_s = time.time() - start
    chosen = subsample(kept, sp.samples_per_step, r.rng)
    t = cfg.train
    settings = UpdateSettings(
        t.max_completion_length, sp.micro_batch_size, t.num_iterations, t.epsilon, t.max_grad_norm
    )
    update = policy_update(r.model, r.tokenizer, r.optimizer, r.scheduler, chosen, settings) if chosen else {}
    r.games = games
    m = game_metrics(games)
    m.update(_stats(advantages, "adv"))
    m["adv/frac_dropped"] = dropped / max(1, len(advantages))
    m["rae/baseline_p0"] = r.baselines.get(sp.game, 0)
    m["rae/baseline_p1"] = r.baselines.get(sp.game, 1)
    m["samples/collected"] = float(len(kept))
    m["samples/trained"] = float(len(chosen))
    m.update(update)
    now = time.time()
    m["perf/rollout_time_s"] = rollout_s
    m["perf/update_time_s"] = now - start - rollout_s
    m["perf/step_time_s"] = now - start
    m["perf/gen_tokens_per_s"] = stats.generated_tokens / max(1e-9, stats.generate_s)
    if torch.cuda.is_available():
        m["perf/peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return m


def game_rows(samples: Any, step: int, games: list[Game]) -> list[dict[str, Any]]:
    """samples.jsonl rows of a step's first ``per_step`` games: the first turn's prompt, the last
    response, both players' payoffs (player 0's as the total) and the transcript, one line per turn."""
    rows = []
    for i, g in enumerate(games[: samples.per_step]):
        if not g.turns or not g.game.done:
            continue
        p0, p1 = g.game.payoffs()
        last = g.turns[-1]
        transcript = [
            f"p{t.player}: {t.action or t.response!r}" + ("" if t.valid else " (invalid)") for t in g.turns
        ] + [f"result: {g.game.result} (payoffs {p0:+g}, {p1:+g})"]
        rows.append(
            samples.row(
                step,
                "selfplay",
                g.turns[0].prompt,
                last.response,
                index=i,
                rewards={"p0": p0, "p1": p1},
                reward=p0,
                length=sum(t.n_tokens for t in g.turns),
                truncated=any(t.truncated for t in g.turns),
                transcript=transcript,
            )
        )
    return rows


def progress_line(step: int, max_steps: int, m: dict[str, float]) -> str:
    def f(key: str, fmt: str) -> str:
        v = m.get(key)
        return format(v, fmt) if isinstance(v, float) and math.isfinite(v) else "-"

    return (
        f"step {step}/{max_steps}  invalid {f('game/invalid_rate', '.2f')}  win p0 {f('game/p0_win', '.2f')} "
        f"p1 {f('game/p1_win', '.2f')}  draw {f('game/draw', '.2f')}  len {f('game/mean_length', '.1f')}  "
        f"adv {f('adv/mean', '+.2f')}  loss {f('loss/total', '.4f')}  {f('perf/step_time_s', '.2f')}s/step"
    )


def _train(life: RunLifecycle, r: _Run) -> None:
    res, run_dir, writer, handler = life.res, life.run_dir, life.writer, life.stop
    cfg = res.config
    t, ev, ck = cfg.train, cfg.eval, cfg.checkpoint
    ckpt_root = checkpoints_dir(run_dir)
    r.done = r.start_step
    life.training(
        f"run {run_dir.name}: recipe {res.recipe}, platform {res.platform['name']}, "
        f"selfplay {cfg.selfplay.game}, "
        f"{r.n_params / 1e6:.2f}M params" + (f", resuming from step {r.start_step}" if r.start_step else ""),
        step=lambda: r.done,
    )

    def evaluate(step: int) -> None:
        out = play_eval(r.eval_player, ev.n, cfg.seed + step, cfg.selfplay.max_turns)
        writer.eval(step, eval_metrics(out))
        print(f"eval step {step}: {summary(out)}", flush=True)

    def save(step: int) -> None:
        state.save(
            ckpt_root,
            step,
            r.model,
            r.tokenizer,
            r.optimizer,
            r.scheduler,
            r.baselines.state_dict(),
            r.rng,
            ck.keep,
        )

    evaluating = ev.task != "none"
    last_eval = None
    if evaluating and ev.at_start and r.start_step == 0:
        evaluate(0)
        last_eval = 0
    for step in range(r.start_step + 1, t.max_steps + 1):
        m = one_step(res, r)
        r.done = step
        writer.step(step, m)
        if life.samples.due(step):
            life.samples.write(game_rows(life.samples, step, r.games or []))
        if cfg.logging.progress:
            print(progress_line(step, t.max_steps, m), flush=True)
        if evaluating and ev.interval > 0 and step % ev.interval == 0:
            evaluate(step)
            last_eval = step
        saved = ck.every > 0 and (step % ck.every == 0 or step == t.max_steps)
        if saved:
            save(step)
        if handler.requested is not None and step < t.max_steps:
            if not saved:
                save(step)
            raise KeyboardInterrupt(f"signal {handler.requested}")
    if evaluating and ev.at_end and last_eval != t.max_steps and r.done == t.max_steps:
        evaluate(t.max_steps)
