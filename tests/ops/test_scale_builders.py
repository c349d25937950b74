"""Pure pieces of scaling out on the laptop side: the launch flags as recipe settings, the rendezvous
arguments of a multi-host run, and how its hosts' records add up to one run."""

from __future__ import annotations

from pippa_ops.runs.launching.launch import launch_sets
from pippa_ops.runs.launching.script import group_port, rendezvous_args
from pippa_ops.runs.records.listing import RunRecord, merge_group, merge_groups


def test_launch_flags_become_the_recipe_settings_the_trainer_checks() -> None:
    assert launch_sets("0-6", 7, "zero3") == [
        'launch.gpus="0-6"',
        "launch.processes=7",
        'launch.strategy="zero3"',
    ]
    assert launch_sets(None, None, None) == []


def test_every_host_of_a_run_derives_the_same_rendezvous_port_from_its_id() -> None:
    port = group_port("20260101-000000-tiny-abcd")
    assert port == group_port("20260101-000000-tiny-abcd") and 20000 <= port < 40000
    assert rendezvous_args(2, 1, "10.0.0.1", port).split() == [
        "--machines",
        "2",
        "--machine-rank",
        "1",
        "--main-addr",
        "10.0.0.1",
        "--main-port",
        str(port),
    ]


def _rec(
    host: str, rank: int, state: str, step: int | None = None, exit_code: int | None = None
) -> RunRecord:
    return RunRecord(
        host=host,
        run_id="r1",
        session="training",
        recipe="tiny",
        command="...",
        state=state,
        exit_code=exit_code,
        last_step=step,
        hosts=("a", "b"),
        machine_rank=rank,
    )


def test_a_rank_that_died_fails_the_run_else_a_running_rank_keeps_it_running() -> None:
    both = merge_group([_rec("b", 1, "running"), _rec("a", 0, "running", step=7)])
    assert (both.host, both.state, both.last_step) == ("a+b", "running", 7)  # rank 0's progress
    died = merge_group([_rec("a", 0, "running", step=7), _rec("b", 1, "failed", exit_code=1)])
    assert (died.state, died.exit_code) == ("failed", 1)
    ended = merge_group([_rec("a", 0, "stopped", exit_code=130), _rec("b", 1, "finished", exit_code=0)])
    assert ended.state == "stopped"


def test_ps_merges_a_run_only_when_every_one_of_its_hosts_answered() -> None:
    from pippa_ops.runs.records.listing import HostRuns

    a = HostRuns("a", 0.0, runs=(_rec("a", 0, "running"),))
    b = HostRuns("b", 0.0, runs=(_rec("b", 1, "running"),))
    assert [r.host for r in merge_groups({"a": a, "b": b})] == ["a+b"]
    assert [r.host for r in merge_groups({"a": a})] == ["a"]  # b unreachable: a's copy stands alone
