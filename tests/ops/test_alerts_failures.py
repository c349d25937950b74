"""Alerts about retries and lost runs, end to end (real loopback sshd host, real tmux, the host's
supervisor, Apprise posting to a real HTTP server on loopback): exactly one alert per retry, naming the
attempt, the failure class and reason and the backoff; a lost run sends one; every alert names the run
as the user knows it (session, recipe or cmd, short id)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from test_alerts import TOKEN, configure, hook, pippa, repo, restore_host, started  # noqa: F401

pytestmark = pytest.mark.ssh

FAILS_TWICE = (
    "n=$(cat ~/al-count 2>/dev/null || echo 0); n=$((n+1)); echo $n > ~/al-count; "
    'echo "ValueError: boom $n"; test $n -ge 3'
)


def test_one_alert_per_retry_and_one_for_a_lost_run_each_naming_the_run(
    client_env: Any,
    ssh_hosts: Any,
    repo: Any,  # noqa: F811
    hook: Any,  # noqa: F811
    restore_host: Any,  # noqa: F811
) -> None:
    h = restore_host(ssh_hosts[1])
    env = client_env.env
    (h.home / "al-count").unlink(missing_ok=True)
    (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url(TOKEN)}\n")
    configure(client_env, h.name, "secrets = []\n")
    up = pippa(env, repo, "up", h.name)
    assert up.returncode == 0, up.stderr

    p = pippa(
        env,
        repo,
        "run",
        "--host",
        h.name,
        "--name",
        "al-retry",
        "--retry",
        "2",
        "--backoff",
        "1s",
        "--cmd",
        FAILS_TWICE,
    )
    assert p.returncode == 0, p.stderr
    run_id = started(p.stdout)
    short = run_id.rsplit("-", 1)[1]
    done = hook.wait_for(lambda q: q.fields.get("run") == run_id and q.fields.get("state") == "finished", 90)
    retries = [q for q in hook.posts if q.fields.get("run") == run_id and q.fields.get("state") == "retrying"]
    assert len(retries) == 2  # exactly one per retry
    first = retries[0].fields
    assert first["attempt"] == "1/3"
    assert first["reason"].startswith("attempt 1/3 crash: ValueError: boom 1 (exit 1)")
    assert "retry 1/2" in first["reason"] and "attempt 2 in 1s" in first["reason"]
    for q in [*retries, done]:
        assert q.json["title"].startswith(f"pippa: {q.fields['state']} al-retry (cmd, {short}) on {h.name}")

    lost = pippa(
        env, repo, "run", "--host", h.name, "--name", "al-lost", "--retry", "1", "--cmd", "sleep 300"
    )
    lost_id = started(lost.stdout)
    run_dir = h.home / "pippa" / "runs" / lost_id
    deadline = time.monotonic() + 30
    while not (run_dir / "attempts.json").exists():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    h.run_as_user(["tmux", "kill-server"])
    told = hook.wait_for(lambda q: q.fields.get("run") == lost_id and q.fields.get("state") == "lost", 30)
    assert "lost" in told.fields["reason"] and told.json["title"].startswith("pippa: lost al-lost (cmd, ")
    assert len([q for q in hook.posts if q.fields.get("run") == lost_id]) == 1
