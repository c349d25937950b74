"""The GPU hosts' install sets resolve, without installing them: `uv lock` of pyproject.toml (what
`uv sync` on a host does first) must find both [train] and [vllm] forks, and [vllm, gpu] must resolve to
wheels (no source builds but DeepSpeed's pure-Python sdist) for an x86_64 host with glibc >= 2.31
(Ubuntu 20.04+; vLLM's llguidance has no manylinux_2_28 wheel, so an older host would need a Rust toolchain).
Reaches PyPI; skips only when the registry is unreachable."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def uv_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    assert importlib.util.find_spec("uv"), "uv is in the dev extra: pip install -e '.[dev]'"
    try:
        urllib.request.urlopen("https://pypi.org/simple/uv/", timeout=5).close()
    except OSError as e:
        pytest.skip(f"PyPI unreachable ({e}): cannot check that the GPU install sets resolve")
    # Our own cache, and no user config: tests never read or write the real $HOME.
    cache = tmp_path_factory.mktemp("uv-cache")
    return {**os.environ, "UV_CACHE_DIR": str(cache), "UV_NO_CONFIG": "1", "UV_NO_PROGRESS": "1"}


def _uv(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "uv", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _locked_versions(lock: str, name: str) -> set[str]:
    return set(re.findall(rf'^name = "{re.escape(name)}"\nversion = "([^"]+)"', lock, flags=re.M))


def test_uv_lock_resolves_the_train_and_vllm_sets_side_by_side(
    tmp_path: Path, uv_env: dict[str, str]
) -> None:
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    (tmp_path / "README.md").write_text("pippa\n")
    r = _uv(["lock"], tmp_path, uv_env)
    assert r.returncode == 0, r.stderr
    lock = (tmp_path / "uv.lock").read_text()
    # One transformers per fork: 5.17 for [vllm] (vLLM's cap), 5.23 for [train].
    assert sorted(v.rsplit(".", 1)[0] for v in _locked_versions(lock, "transformers")) == ["5.17", "5.23"]
    assert _locked_versions(lock, "vllm") == {"0.31.0"}
    assert _locked_versions(lock, "torch") == {"2.13.0"}
    assert len(_locked_versions(lock, "deepspeed")) == 1  # the same ZeRO in both GPU-host sets


def test_the_vllm_set_resolves_to_wheels_for_a_gpu_host(tmp_path: Path, uv_env: dict[str, str]) -> None:
    args = [
        "pip",
        "compile",
        str(REPO / "pyproject.toml"),
        "--extra",
        "vllm",
        "--extra",
        "gpu",
        "--python-platform",
        "x86_64-manylinux_2_31",
        "--python-version",
        "3.11",
        "--no-header",
        "--no-annotate",
        "--only-binary",
        ":all:",
        # DeepSpeed ships only an sdist, pure Python to build (its ops compile on first use, not here)
        "--no-binary",
        "deepspeed",
    ]
    r = _uv(args, tmp_path, uv_env)
    assert r.returncode == 0, r.stderr
    pins = dict(line.split("==", 1) for line in r.stdout.splitlines() if "==" in line)
    assert pins["vllm"] == "0.31.0" and pins["torch"] == "2.13.0" and pins["transformers"].startswith("5.17.")
    assert pins["trl"].startswith("1.16.") and "bitsandbytes" in pins
    assert pins["deepspeed"].startswith("0.19.")
    both = _uv([*args[:3], "--extra", "train", "--extra", "vllm"], tmp_path, uv_env)
    assert both.returncode != 0 and "transformers" in both.stderr  # the conflict pyproject.toml declares


def test_the_committed_lock_is_what_pippa_up_installs(tmp_path: Path, uv_env: dict[str, str]) -> None:
    """`pippa up` runs `uv sync --locked`: the committed uv.lock must match pyproject.toml (else the
    host's setup stops), and it pins the tested torch and both transformers forks."""
    from pippa_ops.provision.prep import DEFAULT_SETUP

    assert "--locked" in DEFAULT_SETUP[0].split()
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "uv.lock"], cwd=REPO, capture_output=True)
    assert tracked.returncode == 0, "uv.lock is committed"
    for name in ("pyproject.toml", "uv.lock"):
        shutil.copy(REPO / name, tmp_path)
    (tmp_path / "README.md").write_text("pippa\n")
    r = _uv(["lock", "--check"], tmp_path, uv_env)
    assert r.returncode == 0, r.stderr
    lock = (tmp_path / "uv.lock").read_text()
    assert _locked_versions(lock, "torch") == {"2.13.0"}
    assert sorted(v.rsplit(".", 1)[0] for v in _locked_versions(lock, "transformers")) == ["5.17", "5.23"]
