"""A fresh clone as a new user meets it (issue 26): no example host contacted, the committed example and
the README agree, ``--version``, did-you-mean, help lines whole. No SSH needed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from conftest import PIPPA

from pippa_ops.hosts.inventory import load_inventory
from pippa_ops.provision.prep import DEFAULT_SETUP

REPO = Path(__file__).resolve().parents[2]


def _fresh_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a new user: an empty HOME, no PIPPA_INVENTORY (the repo's pippa.toml is read)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PIPPA_INVENTORY", "TMUX")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / ".config"), TMUX_TMPDIR=str(tmp_path))
    return env


def test_the_committed_inventory_holds_no_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIPPA_INVENTORY", raising=False)
    assert load_inventory(REPO) == {}


def test_the_commented_example_is_a_valid_entry_and_agrees_with_the_readme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (REPO / "pippa.toml").read_text()
    example = "\n".join(line[2:] for line in text.splitlines() if re.match(r"# (\[hosts\.|\w+ = )", line))
    uncommented = tmp_path / "team.toml"
    uncommented.write_text(example + "\n")
    monkeypatch.setenv("PIPPA_INVENTORY", str(uncommented))
    (spec,) = load_inventory(REPO).values()
    assert spec.address is not None and spec.address.startswith("203.0.113.")  # documentation range
    readme = (REPO / "README.md").read_text()
    assert DEFAULT_SETUP[0] in text and DEFAULT_SETUP[0] in readme  # the default setup, said the same way
    assert "PIPPA_INVENTORY" in text and "PIPPA_INVENTORY" in readme
    assert tomllib.loads(example)["hosts"]["h100-a"]["address"] in readme  # the README shows this example


def test_a_fresh_clone_lists_only_local(tmp_path: Path) -> None:
    p = subprocess.run(
        [PIPPA, "ps", "--json"],
        cwd=REPO,
        env=_fresh_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert list(json.loads(p.stdout)) == ["local"]
    hosts = subprocess.run(
        [PIPPA, "hosts", "--json"],
        cwd=REPO,
        env=_fresh_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert hosts.returncode == 0, hosts.stderr
    assert [h["name"] for h in json.loads(hosts.stdout)] == ["local"]


def _pippa(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PIPPA, *args], cwd=REPO, env=_fresh_env(tmp_path), capture_output=True, text=True, timeout=60
    )


def test_version_and_shell_completion(tmp_path: Path) -> None:
    from importlib.metadata import version

    p = _pippa(tmp_path, "--version")
    assert (p.returncode, p.stdout) == (0, f"pippa {version('pippa')}\n")
    # typer finds the shell by walking up the process tree (shellingham), as it would from a user's
    # prompt; a pytest worker may have no shell above it, so the command runs under one. The trailing
    # `exit` keeps bash from exec-ing pippa in its own place.
    c = subprocess.run(
        ["bash", "-c", '"$0" --show-completion; exit $?', PIPPA],
        cwd=REPO,
        env=_fresh_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert c.returncode == 0 and "_pippa_completion" in c.stdout, c.stderr


def test_help_lists_every_command_with_its_whole_summary(tmp_path: Path) -> None:
    from pippa_ops.cli.app import COMMANDS

    p = _pippa(tmp_path, "--help")
    assert p.returncode == 0
    listing = " ".join(p.stdout.split("Commands:")[1].split())
    assert "..." not in listing
    for name, (_module, summary) in COMMANDS.items():
        assert f"{name} {summary}" in listing


def test_a_mistyped_verb_recipe_or_host_gets_the_nearest_name(tmp_path: Path) -> None:
    verb = _pippa(tmp_path, "stp")
    assert verb.returncode == 2 and "Error: No such command 'stp'. Did you mean 'stop'?" in verb.stderr
    recipe = _pippa(tmp_path, "run", "tinyy", "--no-wait")
    assert recipe.returncode == 2
    assert recipe.stderr.startswith("pippa: unknown recipe 'tinyy' (did you mean 'tiny'?)")
    assert len(recipe.stderr.splitlines()) == 1
    age = _pippa(tmp_path, "prune", "--older-than", "a while")
    assert age.returncode == 2 and age.stderr.startswith("pippa: --older-than 'a while': give an age")
    host = _pippa(tmp_path, "logs", "x", "--host", "locl")
    assert host.returncode == 3
    assert host.stderr.startswith("pippa: unknown host 'locl' (did you mean 'local'?)")


@pytest.mark.parametrize(
    ("typed", "address", "user", "port"),
    [
        ("ubuntu@203.0.113.10:2222", "203.0.113.10", "ubuntu", 2222),
        ("root@[2001:db8::1]:40022", "2001:db8::1", "root", 40022),
        ("[::1]", "::1", None, None),
        ("2001:db8::7", "2001:db8::7", None, None),  # several colons: an IPv6 address, no port
        ("box.example.org", "box.example.org", None, None),
    ],
)
def test_an_address_may_carry_a_port_and_ipv6_goes_in_brackets(
    typed: str, address: str, user: str | None, port: int | None
) -> None:
    from pippa_ops.hosts.inventory import resolve

    spec = resolve(typed, REPO)
    assert (spec.address, spec.user, spec.port) == (address, user, port)


def _pulled_run(root: Path, run_id: str, seed: int, gpu: str) -> None:
    d = root / "h100-a" / run_id
    d.mkdir(parents=True)
    header = {
        "type": "header",
        "run_id": run_id,
        "recipe": "tiny",
        "config": {
            "recipe": "tiny",
            "config": {"seed": seed, "model": {"precision": "bf16"}},
            "platform": {"name": "h100", "facts": {"gpu_name": gpu, "free_mem_gib": 70.1}},
        },
    }
    step = {"type": "step", "step": 1, "reward/mean": 0.5}
    (d / "metrics.jsonl").write_text(json.dumps(header) + "\n" + json.dumps(step) + "\n")
    (d / "exit_code").write_text("0\n")


def test_compare_leaves_the_platform_facts_out_of_the_config_diff_unless_all(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _pulled_run(runs, "20261118-101500-tiny-aaaa", 1, "NVIDIA H100 80GB HBM3")
    _pulled_run(runs, "20261118-101600-tiny-bbbb", 2, "NVIDIA A100-SXM4-80GB")
    ids = ["20261118-101500-tiny-aaaa", "20261118-101600-tiny-bbbb"]
    p = _pippa(tmp_path, "compare", *ids, "--runs-dir", str(runs), "--json")
    assert p.returncode == 0, p.stderr
    assert set(json.loads(p.stdout)["config_diff"]) == {"config.seed"}
    every = _pippa(tmp_path, "compare", *ids, "--runs-dir", str(runs), "--json", "--all")
    assert set(json.loads(every.stdout)["config_diff"]) == {"config.seed", "platform.facts.gpu_name"}
