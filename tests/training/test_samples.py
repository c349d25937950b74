"""samples.jsonl and alarms.json from the real trainer on CPU (the tiny model): what a sampled step
holds, a resume that redoes steps, the cap of a long run, and the alarms of a run that learns nothing
and of healthy runs."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pippa_contract import alarms
from pippa_contract import samples as sm
from training_core.config import RunConfig, SamplesConfig
from training_core.run.samples import SamplesWriter

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RUN_ID = "20261126-120000-tiny-5a5a"
SETS = (
    "train.max_steps=4",
    "samples.every=1",
    "samples.per_step=6",
    "eval.interval=2",
    "eval.n=8",
    "checkpoint.every=2",
)


def train(
    run_dir: Path, recipe: str, *sets: str, resume: bool = False, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "training_core.train", recipe, "--run-dir", str(run_dir)]
    for s in ("logging.progress=false", *sets):
        argv += ["--set", s]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home or run_dir.parent)}
    p = subprocess.run(
        [*argv, *(["--resume"] if resume else [])],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return p


def rows(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / sm.SAMPLES).read_text().splitlines()]


def test_a_tiny_run_samples_its_batches_and_evals_and_a_resume_keeps_one_row_each(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / RUN_ID
    train(run_dir, "tiny", *SETS)
    got = rows(run_dir)
    train_rows = [r for r in got if r["kind"] == "train"]
    assert sorted({r["step"] for r in train_rows}) == [1, 2, 3, 4]
    for r in train_rows:
        assert isinstance(r["prompt"], str) and r["prompt"].endswith("=")
        assert isinstance(r["completion"], str)
        assert set(r["rewards"]) == {"baseline_correctness"}  # type: ignore[arg-type]
        assert r["reward"] == r["rewards"]["baseline_correctness"]  # type: ignore[index]  # weight 1
        assert r["length"] == 1 and isinstance(r["truncated"], bool) and isinstance(r["advantage"], float)
    assert sum(r["step"] == 1 for r in train_rows) == 6
    evals = [r for r in got if r["kind"] == "eval"]
    assert {r["step"] for r in evals} == {0, 2, 4} and all(isinstance(r["passed"], bool) for r in evals)
    assert [r["step"] for r in got] == sorted(r["step"] for r in got)  # in step order

    # A kill after step 4 but before its checkpoint: the resume from step 2 redoes steps 3 and 4.
    shutil.rmtree(run_dir / "checkpoints" / "checkpoint-4")
    p = train(run_dir, "tiny", *SETS, resume=True)
    assert "redone samples to samples.superseded.jsonl" in p.stdout
    after = rows(run_dir)
    keys = [(r["step"], r["kind"], r["index"]) for r in after]
    assert len(keys) == len(set(keys)) and {r["step"] for r in after if r["kind"] == "train"} == {1, 2, 3, 4}
    moved = [json.loads(line) for line in (run_dir / sm.SAMPLES_SUPERSEDED).read_text().splitlines()]
    assert {r["step"] for r in moved} == {3, 4}
    assert not (run_dir / alarms.ALARMS_JSON).exists()  # 4 healthy steps raise nothing


def test_a_constant_reward_raises_the_no_learning_signal_alarm_and_one_alert(tmp_path: Path) -> None:
    """The host as `pippa up` leaves it with alerts on (the host program, config.json, PIPPA_NOTIFY in
    the secrets file, a real HTTP webhook), and the run directory as a launch leaves it (agent.pyz)."""
    from hostprogram import install
    from ops import webhook

    home = tmp_path / "home"
    alerts_dir = home / ".config" / "pippa" / "alerts"
    alerts_dir.mkdir(parents=True)
    prog = install(home)
    (alerts_dir / "config.json").write_text(json.dumps({"host": "hx", "python": [sys.executable]}))
    run_dir = tmp_path / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    (run_dir / "agent.pyz").symlink_to(prog)
    with webhook.serve() as hook:
        (home / ".config" / "pippa" / "secrets.env").write_text(f"PIPPA_NOTIFY='{hook.url('tok-a1a2')}'\n")
        p = train(run_dir, str(HERE / "constant.toml"), "samples.every=2", home=home)
        (alarm,) = alarms.read_alarms(str(run_dir / alarms.ALARMS_JSON))
        assert alarm["kind"] == alarms.NO_LEARNING_SIGNAL and alarm["since"] == 1  # within its 3-step window
        assert alarm["samples_step"] == 1 and sm.select(str(run_dir / sm.SAMPLES), step=1)["rows"]
        assert p.stdout.count("alarm: no learning signal") == 1
        zero = [json.loads(line).get("reward/frac_zero_std") for line in (run_dir / "metrics.jsonl").open()]
        assert [z for z in zero if z is not None] == [1.0] * 6
        told = hook.wait_for(lambda x: x.fields.get("state") == "alarm", timeout=60)
        assert told.json["title"] == f"pippa: alarm {RUN_ID} on hx"
        assert told.fields["reason"].startswith("no learning signal since step 1: ")
        assert told.fields["look"] == f"pippa samples {RUN_ID} --step 1 --host hx"
        argv = ["python3", "-S", "-I", str(prog), "alerts", "alarms", "--run-dir", str(run_dir)]
        again = subprocess.run(
            argv, env={**os.environ, "HOME": str(home)}, capture_output=True, text=True, timeout=60
        )
        assert again.returncode == 0 and json.loads(again.stdout) == {"told": []}, again.stderr
        assert [x.fields.get("state") for x in hook.posts] == ["alarm"]  # exactly one alert


def test_healthy_tiny_runs_raise_no_alarm() -> None:
    """The alarms over the metrics of five real tiny runs (seeds 0-4, the recipe's defaults), recorded
    by bench/bench_samples.py --record-seeds into tests/fixtures/tiny_seeds_metrics.jsonl.gz."""
    runs: dict[int, dict[str, list[dict[str, object]]]] = {}
    with gzip.open(REPO / "tests" / "fixtures" / "tiny_seeds_metrics.jsonl.gz", "rt") as f:
        for line in f:
            rec = json.loads(line)
            runs.setdefault(rec.pop("seed"), {"step": [], "eval": []})[rec["type"]].append(rec)
    assert sorted(runs) == [0, 1, 2, 3, 4] and all(len(r["step"]) == 200 for r in runs.values())
    for seed, r in runs.items():
        assert alarms.raised(r["step"], r["eval"], None) == [], seed


def test_tiny_runs_past_200_steps_raise_no_length_collapse_where_answers_fill_the_one_token_cap() -> None:
    """tiny's answers are one token by design (max_completion_length 1): once the model is right, every
    completion sits at the cap. The five recorded healthy seeds, each run on for 100 more steps as a right
    model does (every completion at the cap, the reward of its last ten steps): no alarm, with the run's
    cap known (the trainer passes it) or not (the answers are right: the reward rose)."""
    seeds: dict[int, list[dict[str, object]]] = {}
    with gzip.open(REPO / "tests" / "fixtures" / "tiny_seeds_metrics.jsonl.gz", "rt") as f:
        for line in f:
            rec = json.loads(line)
            if rec["type"] == "step":
                seeds.setdefault(rec.pop("seed"), []).append(rec)
    for seed, steps in seeds.items():
        tail = steps[-10:]
        right = sum(float(r["reward/mean"]) for r in tail) / 10  # type: ignore[arg-type]
        at_cap = {"completions/clipped_ratio": 1.0, "completions/mean_length": 1.0, "reward/mean": right}
        more = [{**tail[-1], **at_cap, "step": 200 + i} for i in range(1, 101)]
        long = [*steps, *more]
        assert alarms.raised(long, [], {"length_cap": 1}) == [], seed
        assert alarms.raised(long, [], None) == [], seed
    # the same truncation with a real cap and a reward that did not rise is still a collapse
    flat = [{**r, "reward/mean": 0.0} for r in long]
    (a,) = alarms.raised(flat, [], {"length_cap": 256})
    assert a["kind"] == alarms.LENGTH_COLLAPSE and 190 < a["since"] <= 201


def test_an_alarm_hint_names_a_step_that_has_samples() -> None:
    from training_core.run.samples import sampled_step

    assert sampled_step(296, 300, 50) == 300  # the run reached step 300: its samples are there
    assert sampled_step(296, 299, 50) == 250  # it has not (or never will): the last sampled step before
    assert sampled_step(1, 5, 50) == 1 and sampled_step(40, 45, 50) == 1  # the first step is always sampled
    assert sampled_step(100, 100, 50) == 100


def test_the_samples_of_a_long_run_stay_under_their_cap(tmp_path: Path) -> None:
    cfg = RunConfig(samples=SamplesConfig(every=1, per_step=8, cap_mb=0.2))
    writer = SamplesWriter(tmp_path, cfg, secrets={})
    for step in range(1, 3001):
        writer.write([writer.row(step, "train", "1+2=", "x" * 40, index=i, reward=0.5) for i in range(8)])
        assert (tmp_path / sm.SAMPLES).stat().st_size <= 200_000
    writer.close()
    steps = [s for s, _ in sm.steps_of(str(tmp_path / sm.SAMPLES))]
    assert steps[-1] == 3000 and steps[0] == 1  # the newest always, and the run's beginning
    assert len(steps) > 50 and any(s < 1000 for s in steps[1:])  # a spread of the past, not only its end


def test_a_sample_quoting_a_rotated_token_is_written_without_it(tmp_path: Path, monkeypatch) -> None:
    """The writer takes out today's secrets and the remembered prints of those pushed before
    (pippa_contract.secretprints): the token was removed from the host, the sample still shows ***."""
    from pippa_contract.secretprints import remember

    monkeypatch.setenv("HOME", str(tmp_path))
    for key in ("HF_TOKEN", "WANDB_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    token = "hf_R0tatedAwayT0ken9xQ"
    remember({"HF_TOKEN": token})  # as the host's agent does when `pippa up` pushes it
    writer = SamplesWriter(tmp_path, RunConfig(samples=SamplesConfig(every=1, per_step=1)))
    row = writer.row(1, "train", f"use {token}", f"the key is {token}.", index=0, reward=0.0)
    assert token not in json.dumps(row) and "the key is ***." in json.dumps(row)
