"""pippa_contract: the rules both sides of pippa import, tested once here (the laptop's and the agent's
views of them are tested where they are used)."""

from __future__ import annotations

import json
import re

import pytest

from pippa_contract import names, states
from pippa_contract.errors import AgentError, ErrorKind
from pippa_contract.metrics import LastRecords, MetricsReader, Summary, redone
from pippa_contract.rundir import RunDir
from pippa_contract.secrets import format_secrets, parse_secrets
from pippa_ops import errors


def _lines(*records: dict[str, object]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


RESUMED = _lines(
    {"type": "header", "recipe": "tiny", "config": {"train": {"max_steps": 4}}, "resumed_from_step": None},
    {"type": "step", "step": 1, "reward/mean": 0.1},
    {"type": "step", "step": 2, "reward/mean": 0.9},
    {"type": "step", "step": 3, "reward/mean": 0.95},
    {"type": "end", "status": "interrupted", "step": 3, "error": None},
    {"type": "header", "recipe": "tiny", "config": {"train": {"max_steps": 4}}, "resumed_from_step": 1},
    {"type": "step", "step": 2, "reward/mean": 0.2},
)


def test_a_resumed_header_forgets_the_points_its_resume_redoes() -> None:
    s = Summary()
    s.feed(RESUMED)
    d = s.as_dict()
    assert d["last_step"] == 2 and d["best_reward"] == 0.2 and d["best_step"] == 2 and d["end"] is None


def test_a_torn_last_line_waits_for_its_newline_whatever_the_chunking() -> None:
    for cut in range(1, len(RESUMED)):
        s = Summary()
        s.feed(RESUMED[:cut])
        s.feed(RESUMED[cut:])
        assert s.as_dict()["best_reward"] == 0.2
    seen: list[int] = []

    class Steps(MetricsReader):
        def on_step(self, step: int, rec: dict[str, object]) -> None:
            seen.append(step)

    r = Steps()
    r.feed(b'{"type": "step", "step": 1}\n{"type": "step", "st')
    assert seen == [1]


def test_the_writer_moves_what_a_resume_redoes_and_keeps_foreign_lines() -> None:
    assert redone(b'{"type": "step", "step": 5}', 4) and not redone(b'{"type": "step", "step": 4}', 4)
    assert redone(b'{"type": "end", "status": "failed"}', 10)
    assert not redone(b"not json", 0) and not redone(b'{"type": "header"}', -1)


def test_last_records_keeps_two_steps_and_an_end_only_when_it_is_last() -> None:
    r = LastRecords()
    r.feed(
        _lines({"type": "step", "step": 1}, {"type": "end", "status": "failed"}, {"type": "step", "step": 2})
    )
    assert [s["step"] for s in r.steps] == [1, 2] and r.end is None


def test_run_ids_follow_one_rule_for_recipes_paths_and_commands() -> None:
    for label in ("tiny", "recipes/gsm8k.toml", "my recipe!", "x" * 90, ""):
        rid = names.new_run_id(label, now=0)
        assert names.NAME_RE.fullmatch(rid), rid
    assert re.fullmatch(r"\d{8}-\d{6}-gsm8k-[0-9a-f]{4}", names.new_run_id("recipes/gsm8k.toml"))


def test_run_dir_paths_are_the_documented_layout() -> None:
    d = RunDir("~/pippa/", "r1")
    assert d.path == "~/pippa/runs/r1" and d.metrics == "~/pippa/runs/r1/metrics.jsonl"
    assert d.exit_code == "~/pippa/runs/r1/exit_code" and d == RunDir("~/pippa/", "r1")


def test_states_of_a_tmux_run_and_of_a_batch_job() -> None:
    assert (
        states.derive_state(session_alive=False, exit_code=None, started=True, stop_requested=False) == "lost"
    )
    assert states.slurm_state("PENDING", exit_code=None, started=False, stop_requested=False) == "queued"


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_every_error_kind_travels_and_comes_back_as_one_typed_error(kind: ErrorKind) -> None:
    answer = AgentError(kind, "why").answer()
    assert json.loads(json.dumps(answer))["error"] == kind.value
    cls = errors.error_class(ErrorKind.parse(answer["error"]), errors.RemoteCommandFailed)
    if kind not in (ErrorKind.INTERNAL, ErrorKind.SLURM, ErrorKind.SYNC, ErrorKind.TMUX):
        assert cls is TimeoutError or errors.error_kind(cls("x")) is kind


def test_an_unknown_error_kind_reads_as_internal() -> None:
    assert ErrorKind.parse("no such kind") is ErrorKind.INTERNAL


def test_the_secrets_file_round_trips_and_refuses_a_key_that_is_no_variable() -> None:
    values = {"HF_TOKEN": "a'b c", "WANDB_API_KEY": "x$y"}
    assert parse_secrets(format_secrets(values)) == values
    with pytest.raises(ValueError):
        format_secrets({"BAD-KEY": "v"})
