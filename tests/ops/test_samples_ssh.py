"""What the model wrote, end to end over a real OpenSSH host (tests/sshd.py): a real `tiny` run through
`pippa run` writes samples.jsonl; `pippa samples` reads it from the host (--json, --step, --best,
--worst, --grep, --diff), prints a completion holding control sequences escaped, and `pippa pull`
brings the file along; `pippa ps` shows a run's alarm as a warning."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import sshd
from conftest import PIPPA

from pippa_contract import samples as sm
from pippa_contract.alarms import NO_LEARNING_SIGNAL, write_alarms

# Host 3, as the daily loop's module: the same xdist worker runs both, one after the other.
pytestmark = [pytest.mark.ssh, pytest.mark.xdist_group("daily_loop")]
REPO = Path(__file__).resolve().parents[2]


def pippa(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@dataclass
class Sampled:
    env: dict[str, str]
    host: sshd.SSHHost
    run_id: str

    @property
    def run_dir(self) -> Path:
        return self.host.home / "pippa" / "runs" / self.run_id

    def samples(self, *args: str) -> subprocess.CompletedProcess[str]:
        return pippa(self.env, "samples", self.run_id, "--host", self.host.name, *args)

    def answer(self, *args: str) -> dict[str, object]:
        p = self.samples("--json", *args)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def sampled(ssh_world: sshd.World, tmp_path_factory: pytest.TempPathFactory) -> Sampled:
    h = ssh_world.hosts[3]
    h.start()
    home = tmp_path_factory.mktemp("samples") / "client"
    shutil.copytree(ssh_world.client_template, home)
    os.chmod(home / ".ssh" / "id_ed25519", 0o600)
    env = sshd.client_subprocess_env(home)
    sets = ["train.max_steps=6", "samples.every=2", "eval.interval=3", "eval.n=8", "checkpoint.every=0"]
    setting = [a for s in sets for a in ("--set", s)]
    p = pippa(env, "run", "tiny", "--host", h.name, "--name", "sampled", *setting)
    assert p.returncode == 0, p.stderr
    run_id = next(line.split()[1] for line in p.stdout.splitlines() if line.startswith("started "))
    done = pippa(env, "wait", run_id, "--host", h.name, timeout=400)
    assert done.returncode == 0, done.stderr
    return Sampled(env, h, run_id)


def test_the_run_wrote_three_sampled_steps_and_samples_json_returns_them(sampled: Sampled) -> None:
    newest = sampled.answer("-n", "20")
    assert newest["run_id"] == sampled.run_id and newest["step"] == 6
    seen: dict[int, list[dict[str, object]]] = {}
    step: object = newest["step"]
    while isinstance(step, int):  # walk back through the sampled steps
        answer = sampled.answer("--step", str(step), "--kind", "train", "-n", "20")
        if answer["rows"]:
            seen[step] = answer["rows"]  # type: ignore[assignment]
        step = answer["prev"]
    assert sorted(seen) == [1, 2, 4, 6]
    for rows in seen.values():
        for r in rows:
            assert r["prompt"] and isinstance(r["completion"], str)
            assert set(r["rewards"]) == {"baseline_correctness"} and isinstance(r["reward"], float)  # type: ignore[arg-type]


def test_step_best_worst_and_grep_select_what_they_say(sampled: Sampled) -> None:
    at4 = sampled.answer("--step", "4", "-n", "20")["rows"]
    assert at4 and {r["step"] for r in at4} == {4}  # type: ignore[union-attr,index]
    rewards = sorted((r["reward"] for r in at4), reverse=True)  # type: ignore[union-attr,index]
    best = sampled.answer("--step", "4", "--best", "-n", "3")["rows"]
    worst = sampled.answer("--step", "4", "--worst", "-n", "3")["rows"]
    assert [r["reward"] for r in best] == rewards[:3]  # type: ignore[union-attr,index]
    assert [r["reward"] for r in worst] == sorted(rewards)[:3]  # type: ignore[union-attr,index]
    prompt = str(at4[0]["prompt"])  # type: ignore[index]
    found = sampled.answer("--grep", prompt, "-n", "50")["rows"]
    assert found and all(prompt in r["prompt"] for r in found)  # type: ignore[union-attr,index]
    text = sampled.samples("--step", "4", "-n", "2")
    assert text.returncode == 0 and "step 4 · train" in text.stdout
    assert "rewards: baseline_correctness" in text.stdout
    diff = sampled.samples("--diff", "2", "6", "--kind", "train")
    assert diff.returncode == 0 and ("│" in diff.stdout or "no prompt was sampled at both" in diff.stdout)


def test_a_completion_with_control_sequences_is_printed_escaped(sampled: Sampled) -> None:
    row = sm.sample_row(99, "train", "1+1=", "2\x1b[2J\x1b]0;owned\x07\x1b[31mred", reward=1.0)
    path = sampled.run_dir / sm.SAMPLES
    kept = path.read_bytes()  # the module's other tests read the run as it ended: put it back
    try:
        path.write_bytes(kept + sm.encode(row))
        p = sampled.samples("--step", "99")
    finally:
        path.write_bytes(kept)
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout
    assert "\\x1b[2J" in p.stdout and "\\x1b]0;owned\\x07" in p.stdout
    unknown = pippa(sampled.env, "samples", "no-such-run", "--host", sampled.host.name)
    line = f"pippa: {sampled.host.name}: no run named 'no-such-run' on this host\n"
    assert (unknown.returncode, unknown.stderr) == (2, line)


def test_pull_brings_samples_and_ps_shows_an_alarm(sampled: Sampled, tmp_path: Path) -> None:
    write_alarms(
        str(sampled.run_dir / "alarms.json"),
        [{"kind": NO_LEARNING_SIGNAL, "since": 2, "message": "m", "samples_step": 2}],
    )
    host = sampled.host.name
    pulled = pippa(sampled.env, "pull", sampled.run_id, "--host", host, "--runs-dir", str(tmp_path))
    assert pulled.returncode == 0, pulled.stderr
    copy = tmp_path / sampled.host.name / sampled.run_id
    assert (copy / sm.SAMPLES).read_bytes() == (sampled.run_dir / sm.SAMPLES).read_bytes()
    local = pippa(
        sampled.env,
        "samples",
        sampled.run_id,
        "--host",
        sampled.host.name,
        "--runs-dir",
        str(tmp_path),
        "--json",
    )
    assert local.returncode == 0 and json.loads(local.stdout)["alarms"][0]["since"] == 2
    ps = pippa(sampled.env, "ps", "--host", sampled.host.name, "--all")
    assert ps.returncode == 0, ps.stderr
    assert "warning: no learning signal (step 2)" in ps.stdout
    assert f"pippa samples {sampled.run_id} --step 2 --host {sampled.host.name}" in ps.stdout
