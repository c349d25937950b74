"""MBPP (Austin et al. 2021): loading both hub configs, the standard prompt, pass@k, scoring.

The hub dataset ``google-research-datasets/mbpp`` has two configs whose columns differ:
``full`` (text, code, test_list, test_setup_code) and ``sanitized`` (prompt, code, test_list,
test_imports). ``MbppProblem`` is the one shape the rest of the code sees. Scoring runs every
program in the sandbox: a problem passes when the code exits 0 and all its asserts hold (as in
Austin et al. 2021, arXiv:2108.07732), judged outside the sandbox (``asserts``).

The prompt shows the asserts, so a table of their answers would pass them. Each problem therefore
holds asserts back (``held_out``): ``challenge_test_list`` where the row has one, else its last
assert. A pass needs the held-out asserts too, and both rates are reported
(``mbpp_eval/visible_pass_rate``, ``mbpp_eval/held_out_pass_rate``): a gap between them is the
signature of answers copied from the prompt.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from training_core.code.asserts import AssertJob, Verdict, assert_job, judge
from training_core.code.extract import extract_code
from training_core.sandbox import SandboxLimits, SandboxPool, default_pool

HUB_NAME = "google-research-datasets/mbpp"
CONFIGS = ("full", "sanitized")


@dataclass(frozen=True)
class MbppProblem:
    task_id: int
    text: str  # the task description ("text" in full, "prompt" in sanitized)
    code: str  # the reference solution
    test_list: tuple[str, ...]  # assert statements
    setup: str = ""  # test_setup_code (full) or the test_imports lines joined (sanitized)
    challenge: tuple[str, ...] = ()  # challenge_test_list (full config; empty for most problems)

    @property
    def held_out(self) -> tuple[str, ...]:
        """Asserts the prompt never shows: the challenge tests, else the last assert."""
        if self.challenge:
            return self.challenge
        return self.test_list[-1:] if len(self.test_list) > 1 else ()

    @property
    def visible(self) -> tuple[str, ...]:
        """Asserts the prompt may show."""
        return (
            self.test_list if self.challenge else self.test_list[: len(self.test_list) - len(self.held_out)]
        )

    @property
    def all_tests(self) -> tuple[str, ...]:
        return self.visible + self.held_out


def problem_from_row(row: dict[str, Any]) -> MbppProblem:
    """Either config's row as an MbppProblem."""
    text = row.get("text") if row.get("text") is not None else row.get("prompt", "")
    if row.get("test_setup_code"):
        setup = str(row["test_setup_code"])
    else:
        setup = "\n".join(str(s) for s in row.get("test_imports") or [])
    return MbppProblem(
        task_id=int(row["task_id"]),
        text=str(text).strip(),
        code=str(row.get("code", "")),
        test_list=tuple(str(t) for t in row["test_list"]),
        setup=setup,
        challenge=tuple(str(t) for t in row.get("challenge_test_list") or ()),
    )


def load_mbpp(
    config: str = "sanitized",
    split: str = "test",
    limit: int = 10,
    data_files: str | Sequence[str] | None = None,
) -> list[MbppProblem]:
    """The first ``limit`` problems (0 = all). ``data_files`` reads local JSON/JSONL rows in either
    config's format instead of the hub (tests, offline hosts)."""
    if config not in CONFIGS:
        raise ValueError(f"MBPP config must be one of {CONFIGS}, not {config!r}")
    from datasets import load_dataset

    if data_files:
        files = [data_files] if isinstance(data_files, str) else list(data_files)
        ds = load_dataset("json", data_files=files, split="train")
    else:
        ds = load_dataset(HUB_NAME, config, split=split)
    rows: Iterable[dict[str, Any]] = ds
    problems = [problem_from_row(r) for r in rows]
    return problems[:limit] if limit > 0 else problems


PROMPT_TEMPLATE = (
    "You are an expert Python programmer, and here is your task: {text} "
    "Your code should pass these tests:\n\n{tests}\n"
)
ANSWER_HINT = "Write the complete function in one ```python code block."


def mbpp_prompt(problem: MbppProblem, n_tests: int = 3, hint: str = ANSWER_HINT) -> str:
    """The MBPP paper's prompt: the task, then (up to) three of its visible tests, one per line."""
    tests = "\n".join(problem.visible[:n_tests])
    prompt = PROMPT_TEMPLATE.format(text=problem.text, tests=tests)
    return f"{prompt}{hint}\n" if hint else prompt


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k)/C(n, k), as a stable product."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


@dataclass(frozen=True)
class ProblemResult:
    task_id: int
    n: int  # samples scored
    correct: int  # samples whose code passed every assert
    pass_at_1: float
    statuses: tuple[str, ...]  # per sample: "pass", or the sandbox status / which asserts failed
    completions: tuple[str, ...]  # the samples (for the per-problem JSON)
    visible_correct: int = 0  # samples that passed the asserts the prompt showed
    held_out_correct: int = 0  # samples that passed the asserts it did not show
    held_out_n: int = 0  # samples judged on held-out asserts: all of them, or 0 when it holds none out

    @property
    def passed(self) -> bool:
        """The first sample passed (what ``mbpp_eval/problems_passed`` counts)."""
        return self.n > 0 and self.statuses[0] == "pass"


def score_samples(
    problems: Sequence[MbppProblem],
    samples: Sequence[Sequence[Any]],
    pool: SandboxPool | None = None,
    timeout_s: float = 10.0,
) -> list[ProblemResult]:
    """Run every sample of every problem (all in one pool batch) against its visible asserts and,
    in a second fresh sandbox, its held-out ones; a sample passes when both hold."""
    pool = pool or default_pool()
    jobs: list[AssertJob | None] = []  # per sample: visible, then held-out (None: no code / none held out)
    for p, outs in zip(problems, samples, strict=True):
        for out in outs:
            code = extract_code(out)
            jobs.append(assert_job(code, p.visible, p.setup) if code else None)
            jobs.append(assert_job(code, p.held_out, p.setup) if code and p.held_out else None)
    limits = SandboxLimits(timeout_s=timeout_s)
    todo = [j for j in jobs if j]
    ran = iter(pool.map([j.program for j in todo], limits, [j.calls for j in todo]))
    verdicts = [judge(j, next(ran)) if j else None for j in jobs]
    scored: list[ProblemResult] = []
    k = 0
    for p, outs in zip(problems, samples, strict=True):
        statuses: list[str] = []
        seen = held = 0
        for _ in outs:
            shown, hidden = verdicts[k], verdicts[k + 1]
            k += 2
            if shown is None:
                statuses.append("no_code")
                continue
            seen += shown.passed
            held += hidden is not None and hidden.passed
            if shown.passed and (hidden is None or hidden.passed):
                statuses.append("pass")
            else:
                statuses.append(_status(hidden, "held_out") if shown.passed else _status(shown, "visible"))
        c = statuses.count("pass")
        scored.append(
            ProblemResult(
                p.task_id,
                len(outs),
                c,
                c / len(outs) if outs else 0.0,
                tuple(statuses),
                tuple(str(o) for o in outs),
                seen,
                held,
                len(outs) if p.held_out else 0,
            )
        )
    return scored


def _status(v: Verdict | None, which: str) -> str:
    """A failed sample's status: the sandbox status when the program failed, else which asserts did."""
    reason = v.reason if v is not None else ""
    if reason.startswith("program "):
        return reason.split()[1]
    return f"{which}_asserts_failed"


def summary(results: Sequence[ProblemResult], eval_time: float) -> dict[str, float | int]:
    """The ``mbpp_eval/...`` metrics, the share of samples passing the visible and
    the held-out asserts (``visible_pass_rate``; ``held_out_pass_rate`` over the samples of problems
    that hold some out, 0 when none does), the unbiased pass@1 and, with k > 1
    samples per problem, ``mbpp_eval/pass_at_<k>``: each problem's ``pass_at_k(n, c, k)`` averaged
    over problems (Chen et al. 2021), k = the smallest sample count of any problem."""
    total = len(results)
    passed = sum(r.passed for r in results)
    samples = sum(r.n for r in results)
    judged = sum(r.held_out_n for r in results)  # only problems that hold asserts out count
    out: dict[str, float | int] = {
        "mbpp_eval/pass_rate": passed / total if total else 0.0,
        "mbpp_eval/problems_passed": passed,
        "mbpp_eval/total_problems": total,
        "mbpp_eval/eval_time": eval_time,
        "mbpp_eval/pass_at_1": mean_pass_at_k(results, 1),
        "mbpp_eval/visible_pass_rate": sum(r.visible_correct for r in results) / max(samples, 1),
        "mbpp_eval/held_out_pass_rate": sum(r.held_out_correct for r in results) / max(judged, 1),
    }
    k = min((r.n for r in results), default=0)
    if k > 1:
        out[f"mbpp_eval/pass_at_{k}"] = mean_pass_at_k(results, k)
    return out


def mean_pass_at_k(results: Sequence[ProblemResult], k: int) -> float:
    """Unbiased pass@k averaged over problems; a problem with no samples counts as failed."""
    if not results:
        return 0.0
    return sum(pass_at_k(r.n, r.correct, k) if r.n >= k else 0.0 for r in results) / len(results)


def results_json(results: Sequence[ProblemResult]) -> list[dict[str, Any]]:
    return [asdict(r) | {"passed": r.passed} for r in results]
