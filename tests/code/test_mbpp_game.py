"""MBPP loading (both configs), the prompt, pass@k against hand values, scoring; code game logic."""

from __future__ import annotations

import json
from fractions import Fraction
from math import comb
from pathlib import Path

import pytest

from training_core.code.mbpp import (
    ProblemResult,
    load_mbpp,
    mbpp_prompt,
    pass_at_k,
    score_samples,
    summary,
)
from training_core.code.mbpp_game import GameStats, parse_prediction, play
from training_core.code.problems import PROBLEMS, problem_prompt
from training_core.data.loaders import DATASETS
from training_core.rewards import code as rc

FULL_ROWS = [
    {
        "task_id": 11,
        "text": "Write a python function to remove first and last occurrence of a given character.",
        "code": "def remove_Occ(s, ch):\n    return s.replace(ch, '', 1)[::-1].replace(ch, '', 1)[::-1]",
        "test_list": [
            'assert remove_Occ("hello","l") == "heo"',
            'assert remove_Occ("abcda","a") == "bcd"',
            'assert remove_Occ("PHP","P") == "H"',
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 12,
        "text": "Write a function to add the constant K.",
        "code": "def add_k(x):\n    return x + K",
        "test_list": ["assert add_k(1) == 4", "assert add_k(0) == 3", "assert add_k(-3) == 0"],
        "test_setup_code": "K = 3",
        "challenge_test_list": [],
    },
]
SANITIZED_ROWS = [
    {
        "source_file": "x.py",
        "task_id": 2,
        "prompt": "Write a function to find the shared elements.",
        "code": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))",
        "test_imports": ["import math"],
        "test_list": [
            "assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))",
            "assert math.isclose(1.0, 1.0)",
            "assert similar_elements((1,), (2,)) == ()",
            "assert similar_elements((), ()) == ()",
        ],
    },
]


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_loader_reads_both_configs_into_one_shape(tmp_path: Path) -> None:
    full = load_mbpp("full", data_files=write_jsonl(tmp_path / "full.jsonl", FULL_ROWS), limit=0)
    san = load_mbpp("sanitized", data_files=write_jsonl(tmp_path / "san.jsonl", SANITIZED_ROWS))
    assert [p.task_id for p in full] == [11, 12] and full[1].setup == "K = 3"
    assert full[0].text.startswith("Write a python function to remove")
    assert san[0].text == "Write a function to find the shared elements." and san[0].setup == "import math"
    assert len(san[0].test_list) == 4
    with pytest.raises(ValueError, match="config"):
        load_mbpp("nope")


def test_prompt_shows_the_task_and_three_tests(tmp_path: Path) -> None:
    san = load_mbpp("sanitized", data_files=write_jsonl(tmp_path / "san.jsonl", SANITIZED_ROWS))[0]
    assert mbpp_prompt(san, hint="") == (
        "You are an expert Python programmer, and here is your task: Write a function to find the shared "
        "elements. Your code should pass these tests:\n\n"
        "assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))\n"
        "assert math.isclose(1.0, 1.0)\nassert similar_elements((1,), (2,)) == ()\n"
    )
    assert "similar_elements((), ())" not in mbpp_prompt(san)  # the fourth test stays hidden


def test_mbpp_judges_on_asserts_the_prompt_does_not_show(tmp_path: Path) -> None:
    """A table of the prompt's answers passes the visible asserts and fails the held-out one: no pass,
    and the two rates show the gap. challenge_test_list, where a row has one, is what is held out."""
    problems = load_mbpp("full", data_files=write_jsonl(tmp_path / "full.jsonl", FULL_ROWS), limit=0)
    add_k = problems[1]
    assert add_k.held_out == ("assert add_k(-3) == 0",) and "add_k(-3)" not in mbpp_prompt(add_k)
    table = "```python\ndef add_k(x):\n    return {1: 4, 0: 3}[x]\n```"
    results = score_samples([add_k], [[table, f"```python\n{add_k.code}\n```"]])
    assert results[0].statuses == ("held_out_asserts_failed", "pass")
    m = summary(results, eval_time=0.0)
    assert m["mbpp_eval/visible_pass_rate"] == 1.0 and m["mbpp_eval/held_out_pass_rate"] == 0.5
    rows = [dict(FULL_ROWS[1], challenge_test_list=["assert add_k(100) == 103"])]
    challenged = load_mbpp("full", data_files=write_jsonl(tmp_path / "c.jsonl", rows), limit=0)[0]
    assert challenged.held_out == ("assert add_k(100) == 103",) and len(challenged.visible) == 3
    row = DATASETS.get("mbpp")(config="full", data_files=write_jsonl(tmp_path / "d.jsonl", rows))[0]
    assert "add_k(100)" not in row["prompt"] and "assert add_k(100) == 103" in row["test_list"]


def test_held_out_pass_rate_counts_only_problems_that_hold_asserts_out(tmp_path: Path) -> None:
    """A problem with one assert holds none out: its sample is no held-out pass (nor a held-out failure),
    so the rate is add_k's alone (1 of 2), not 2 of 3."""
    one = dict(FULL_ROWS[0], test_list=FULL_ROWS[0]["test_list"][:1])
    rows = [one, FULL_ROWS[1]]
    remove_occ, add_k = load_mbpp("full", data_files=write_jsonl(tmp_path / "f.jsonl", rows), limit=0)
    assert remove_occ.held_out == () and add_k.held_out
    table = "```python\ndef add_k(x):\n    return {1: 4, 0: 3}[x]\n```"
    samples = [[f"```python\n{remove_occ.code}\n```"], [table, f"```python\n{add_k.code}\n```"]]
    results = score_samples([remove_occ, add_k], samples)
    assert [(r.held_out_correct, r.held_out_n) for r in results] == [(0, 0), (1, 2)]
    assert summary(results, eval_time=0.0)["mbpp_eval/held_out_pass_rate"] == 0.5


def test_pass_at_k_matches_hand_computed_values() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(4, 0, 2) == 0.0 and pass_at_k(3, 2, 2) == 1.0 and pass_at_k(1, 1, 1) == 1.0
    exact = 1 - Fraction(comb(190, 100), comb(200, 100))  # large n: the product form stays accurate
    assert pass_at_k(200, 10, 100) == pytest.approx(float(exact), rel=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_scoring_runs_setup_and_counts_first_sample(tmp_path: Path) -> None:
    problems = load_mbpp("full", data_files=write_jsonl(tmp_path / "full.jsonl", FULL_ROWS), limit=0)
    samples = [
        [f"```python\n{problems[0].code}\n```", "def remove_Occ(s, ch):\n    return s"],
        ["import sys\nsys.exit(0)", f"```python\n{problems[1].code}\n```"],
    ]
    results = score_samples(problems, samples)
    assert [(r.correct, r.passed) for r in results] == [(1, True), (1, False)]
    assert results[1].statuses[0] == "visible_asserts_failed"  # exited 0 early: no values, not a pass
    m = summary(results, eval_time=1.5)
    assert m["mbpp_eval/pass_rate"] == 0.5 and m["mbpp_eval/problems_passed"] == 1
    assert m["mbpp_eval/total_problems"] == 2 and m["mbpp_eval/pass_at_1"] == 0.5
    assert m["mbpp_eval/pass_at_2"] == 1.0  # one of two samples passed on each problem


def test_summary_reports_unbiased_pass_at_k_over_problems() -> None:
    def result(n: int, c: int) -> ProblemResult:
        return ProblemResult(1, n, c, c / n, ("pass",) * c + ("fail",) * (n - c), ("",) * n)

    m = summary([result(5, 2), result(5, 0), result(5, 5)], eval_time=0.0)
    assert m["mbpp_eval/pass_at_1"] == pytest.approx((0.4 + 0 + 1) / 3)
    assert m["mbpp_eval/pass_at_5"] == pytest.approx((1 + 0 + 1) / 3)
    one = summary([result(1, 1), result(1, 0)], eval_time=0.0)
    assert one["mbpp_eval/pass_at_1"] == 0.5
    assert [k for k in one if k.startswith("mbpp_eval/pass_at_")] == ["mbpp_eval/pass_at_1"]


def test_mbpp_dataset_rows_feed_assert_tests(tmp_path: Path) -> None:
    rows = DATASETS.get("mbpp")(config="full", data_files=write_jsonl(tmp_path / "f.jsonl", FULL_ROWS))
    got = rc.assert_tests(
        [f"```python\n{FULL_ROWS[1]['code']}\n```"],
        test_list=[rows[1]["test_list"]],
        test_setup=[rows[1]["test_setup"]],
    )
    assert got == [1.0] and rows[1]["prompt"].startswith("You are an expert Python programmer")


def test_repo_problems_reference_solutions_pass_every_test() -> None:
    rows = DATASETS.get("code_tests")(reasoning=True)
    assert len(rows) == len(PROBLEMS) and "<answer>" in rows[0]["prompt"]
    sols = [f"<answer>{p.solution}</answer>" for p in PROBLEMS]
    assert rc.test_cases(sols, tests=[r["tests"] for r in rows], answer_tag=True) == [2.0] * len(PROBLEMS)
    assert "```python" in problem_prompt(PROBLEMS[0])


def test_parse_prediction() -> None:
    assert parse_prediction("I think <answer> -42 </answer>") == -42
    assert parse_prediction("maybe 3, no 7") == 7
    assert parse_prediction("no idea") is None


def test_code_game_rewards_and_opponent_accuracy() -> None:
    programs = [
        "```python\nprint(6 * 7)\n```",  # opponent right -> -1
        "```python\nprint(sum(range(10)))\n```",  # opponent wrong -> +1
        "```python\n1/0\n```",  # crash -> -1, and the opponent is never asked
        "```python\nprint('seven')\n```",  # no integer -> -1
        "no code at all ```python\nprint(1)\nprint(2)\n```",
    ]  # two lines, not one integer -> -1
    asked: list[str] = []

    def opponent(prompts: list[str]) -> list[str]:
        asked.extend(prompts)
        return ["<answer>42</answer>", "<answer>44</answer>"]

    stats = GameStats()
    assert play(programs, opponent, stats) == [-1.0, 1.0, -1.0, -1.0, -1.0]
    assert len(asked) == 2 and "print(6 * 7)" in asked[0]
    assert stats.metrics()["code_game/opponent_accuracy"] == 0.5 and stats.invalid == 3


def test_the_two_runs_of_a_program_are_further_apart_than_the_time_limit() -> None:
    """Each program's second run starts after a pause longer than the time limit: a clock read finer
    than that (whole seconds, even the monotonic one) differs between the runs, so printing it is
    invalid, not a win. A coarse clock (hours) can agree; docs/code-rl.md lists that as not isolated."""
    import random

    from training_core.code.mbpp_game import run_twice
    from training_core.sandbox import SandboxLimits, default_pool

    limits = SandboxLimits(timeout_s=1.0)
    codes = ["import time\nprint(time.time())"] * 3
    for first, second in run_twice(default_pool(), codes, limits, random.Random(7)):
        assert float(second.stdout) - float(first.stdout) > limits.timeout_s
    clocks = [
        "```python\nimport time\nprint(int(time.time()))\n```",
        "```python\nimport time\nprint(int(time.monotonic()))\n```",
        "```python\nprint(12)\n```",
    ]
    assert play(clocks, lambda ps: ["<answer>0</answer>"] * len(ps), limits=SandboxLimits(timeout_s=1.0)) == [
        -1.0,
        -1.0,
        1.0,
    ]


def test_a_program_that_remembers_across_its_two_runs_is_invalid() -> None:
    """The red team's cheat: the first run prints a random number and leaves it in the page cache of
    a /usr file (evict, then load one page per bit), the second run finds its flag page cached and
    prints the number back. The filter refuses the eviction and every probe, so the two runs print
    their own random numbers: invalid (-1). A deterministic program the opponent misses still wins.
    (On main's filter before issue 35, the cheat won: ``hostile_suite --only reward_forging``.)"""
    import hostile_kernel_state

    contained, evidence = hostile_kernel_state.game_remembers(play)
    assert contained, evidence


def test_a_program_that_remembers_with_no_refusable_call_is_invalid() -> None:
    """The cheat with no call a filter could refuse: pages loaded by touching them (MADV_RANDOM: no
    readahead), probed through fault-around and /proc/self/pagemap. On the host's /usr it wins; the
    game's sandboxes see a memory-resident copy instead (every page always present: the sentinel
    page shows it), so its two runs print their own random numbers: invalid."""
    import hostile_kernel_state

    from training_core.sandbox import default_pool

    contained, evidence = hostile_kernel_state.game_remembers_by_fault_around(play)
    assert contained, evidence
    launcher = default_pool().launcher
    assert launcher.usr != "/usr" and "memory-resident copy" in launcher.isolation.header()


def test_the_resident_usr_runs_the_standard_library() -> None:
    """What the game's programs may import is there (extension modules and their libraries too)."""
    from training_core.sandbox import default_pool

    code = (
        "import bz2, collections, ctypes, datetime, decimal, fractions, hashlib, itertools, json, lzma, "
        "math, random, re, sqlite3, ssl, statistics, threading, zlib\nprint(sum(range(10)))"
    )
    r = default_pool().run(code)
    assert r.ok and r.stdout == "45\n", r.stderr[-1000:]


def test_programs_that_start_the_common_tools_run_on_the_resident_usr() -> None:
    """Every code reward's sandbox sees the resident copy: the shell, coreutils, grep, sed, awk and the
    interpreter as python3 are in it, with their libraries."""
    from training_core.sandbox import default_pool

    code = (
        "import os, subprocess\n"
        "print(subprocess.run(['/bin/sh', '-c', 'echo abc | tr a-z A-Z | sed s/B/b/ | grep A | "
        'awk "{print \\$1}"; ls / | sort | head -n 1; python3 -c "print(6 * 7)"\'], '
        "capture_output=True, text=True).stdout, end='')\n"
        "print(os.system('env true'))"
    )
    r = default_pool().run(code)
    assert r.ok and r.stdout == "AbC\nbin\n42\n0\n", (r.stdout, r.stderr[-1000:])
