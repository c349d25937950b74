"""The host's watcher follows its host's environment: ``watch-ensure`` (what each ``pippa up`` runs)
replaces a watcher started with another PATH, so a PATH that gained an ``nvidia-smi`` is watched with
it, no manual restart; ``alerts status`` (what ``pippa hosts`` shows) says whether the watcher's PATH
finds one. The host program itself on this machine, its watcher a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostprogram import install

from pippa_ops.provision.alerts import status_line

FAKE_SMI = "#!/bin/sh\necho 0\n"


@pytest.fixture
def host_home(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A host user's home with the alerts program and an idle watch configured; its watcher stopped after."""
    home = tmp_path / "home"
    alerts = home / ".config" / "pippa" / "alerts"
    alerts.mkdir(parents=True)
    prog = install(home)
    config = {
        "host": "hx",
        "python": [sys.executable],
        "idle_alert_s": 3600,
        "remote_dir": str(home / "pippa"),
    }
    (alerts / "config.json").write_text(json.dumps(config))
    try:
        yield home, prog
    finally:
        _alerts(home, prog, os.environ["PATH"], "watch-stop")


def _alerts(home: Path, prog: Path, path: str, verb: str) -> dict[str, Any]:
    env = {**os.environ, "HOME": str(home), "PATH": path}
    p = subprocess.run(
        ["python3", "-S", "-I", str(prog), "alerts", verb],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def _gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not Path(f"/proc/{pid}").exists()


def test_a_path_that_gains_nvidia_smi_is_seen_at_the_next_up(host_home, tmp_path: Path) -> None:
    home, prog = host_home
    bare = "/usr/bin:/bin"
    first = _alerts(home, prog, bare, "watch-ensure")["watcher"]
    assert isinstance(first, int)
    assert _alerts(home, prog, bare, "watch-ensure")["watcher"] == first  # the same PATH: the same watcher
    blind = _alerts(home, prog, bare, "status")
    assert blind["watcher"] == first and blind["nvidia_smi"] is None
    assert "no nvidia-smi on its PATH" in status_line(blind)

    gpu_bin = tmp_path / "nvidia" / "bin"
    gpu_bin.mkdir(parents=True)
    (gpu_bin / "nvidia-smi").write_text(FAKE_SMI)
    (gpu_bin / "nvidia-smi").chmod(0o755)
    gained = f"{gpu_bin}:{bare}"  # the login environment now puts the driver's tools on PATH
    second = _alerts(home, prog, gained, "watch-ensure")["watcher"]
    assert isinstance(second, int) and second != first
    assert _gone(first)
    sees = _alerts(home, prog, gained, "status")
    assert sees["watcher"] == second and sees["nvidia_smi"] == str(gpu_bin / "nvidia-smi")
    assert "nvidia-smi" not in status_line(sees)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(x.decode().split("=", 1) for x in raw if b"=" in x)


def _set_env(home: Path, env: dict[str, str] | None) -> None:
    """What `pippa up` writes: the host entry's env in config.json (provision.alerts.host_config)."""
    path = home / ".config" / "pippa" / "alerts" / "config.json"
    config = json.loads(path.read_text())
    config.pop("env", None)
    path.write_text(json.dumps(config if env is None else {**config, "env": env}))


def test_a_host_entry_env_that_changes_restarts_the_watcher_with_it(host_home, tmp_path: Path) -> None:
    home, prog = host_home
    bare = "/usr/bin:/bin"
    _set_env(home, {"CUDA_VISIBLE_DEVICES": "0", "LD_LIBRARY_PATH": "/opt/a"})
    first = _alerts(home, prog, bare, "watch-ensure")["watcher"]
    assert isinstance(first, int)
    assert _alerts(home, prog, bare, "watch-ensure")["watcher"] == first  # the same env: the same watcher
    assert {k: _environ(first).get(k) for k in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")} == {
        "CUDA_VISIBLE_DEVICES": "0",
        "LD_LIBRARY_PATH": "/opt/a",
    }

    _set_env(home, {"CUDA_VISIBLE_DEVICES": "1", "LD_LIBRARY_PATH": "/opt/a"})  # a value changed
    second = _alerts(home, prog, bare, "watch-ensure")["watcher"]
    assert isinstance(second, int) and second != first
    assert _gone(first)
    assert _environ(second)["CUDA_VISIBLE_DEVICES"] == "1"
    assert _alerts(home, prog, bare, "watch-ensure")["watcher"] == second

    _set_env(home, {"CUDA_VISIBLE_DEVICES": "1"})  # a variable removed: the new watcher has none
    third = _alerts(home, prog, bare, "watch-ensure")["watcher"]
    assert isinstance(third, int) and third != second
    assert _gone(second)
    assert "LD_LIBRARY_PATH" not in _environ(third) and _environ(third)["CUDA_VISIBLE_DEVICES"] == "1"

    gpu_bin = tmp_path / "nvidia" / "bin"  # the entry's own PATH finds nvidia-smi: the watcher sees it
    gpu_bin.mkdir(parents=True)
    (gpu_bin / "nvidia-smi").write_text(FAKE_SMI)
    (gpu_bin / "nvidia-smi").chmod(0o755)
    _set_env(home, {"CUDA_VISIBLE_DEVICES": "1", "PATH": f"{gpu_bin}:{bare}"})
    fourth = _alerts(home, prog, bare, "watch-ensure")["watcher"]
    assert isinstance(fourth, int) and fourth != third
    assert _alerts(home, prog, bare, "watch-ensure")["watcher"] == fourth
    sees = _alerts(home, prog, bare, "status")
    assert sees["watcher"] == fourth and sees["nvidia_smi"] == str(gpu_bin / "nvidia-smi")

    _set_env(home, None)  # no env in the entry any more
    fifth = _alerts(home, prog, bare, "watch-ensure")["watcher"]
    assert isinstance(fifth, int) and fifth != fourth
    assert "CUDA_VISIBLE_DEVICES" not in _environ(fifth) and _environ(fifth)["PATH"] == bare
    assert _alerts(home, prog, bare, "watch-ensure")["watcher"] == fifth
