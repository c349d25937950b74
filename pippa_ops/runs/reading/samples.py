"""What the model wrote, laptop side: a run's samples from its host (one agent request, the host reads
samples.jsonl from its end) or from a pulled copy, and the readable blocks ``pippa samples`` and the
dashboard show (styled lines, no rich or textual here: the CLI and the TUI draw them).

Text from the model is escaped before it reaches a terminal: every control character but newline
(ESC, CR, backspace, BEL, C1, DEL, bidirectional overrides) is shown as ``\\xNN`` / ``\\uNNNN``, so a
completion cannot move the cursor, recolour the screen or set the window title.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pippa_contract import samples as sm
from pippa_contract import termsafe, verbs

if TYPE_CHECKING:
    from pippa_contract.messages import SamplesAnswer, SamplesRequest

Line = tuple[str, str]  # (style name: "head", "prompt", "text", "meta", "warn"; the text)
MAX_PROMPT_LINES = 4


def fetch(host: str, name: str, request: SamplesRequest) -> SamplesAnswer:
    """``verbs.samples`` on ``host``: one agent request, the host reads the file from its end."""
    from pippa_ops.hosts.connect import connect
    from pippa_ops.transport import agent_client

    spec, transport = connect(host)
    with transport:
        req: SamplesRequest = {**request, "remote_dir": spec.remote_dir, "name": name}
        return verbs.samples(agent_client.Once(transport), req)


def local_answer(run_dir: Path, request: SamplesRequest) -> SamplesAnswer:
    """The ``samples`` verb's answer from a run directory on this machine (a pulled copy)."""
    return sm.answer(run_dir.name, str(run_dir), dict(request))  # type: ignore[return-value]


def escape(text: str) -> str:
    """``text`` safe for a terminal (``termsafe.escape``'s one rule, newlines kept), tabs as spaces."""
    return termsafe.escape(text.replace("\t", "    "), keep_newlines=True)


def wrap(text: str, width: int, max_lines: int | None = None) -> list[str]:
    """Escaped ``text`` wrapped to ``width`` columns, its own line breaks kept; at most ``max_lines``
    (the cut said)."""
    lines: list[str] = []
    for para in escape(text).split("\n"):
        lines += textwrap.wrap(para, width, replace_whitespace=False, drop_whitespace=False) or [""]
    if max_lines is not None and len(lines) > max_lines:
        lines = [*lines[: max_lines - 1], f"… ({len(lines) - max_lines + 1} more lines)"]
    return lines


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def header(row: dict[str, Any]) -> str:
    bits = [
        f"step {row.get('step')}",
        f"{row.get('kind')} #{row.get('index')}",
        f"reward {_num(row.get('reward'), '.3g')}",
    ]
    if row.get("advantage") is not None:
        bits.append(f"adv {_num(row.get('advantage'), '+.3g')}")
    if row.get("length") is not None:
        bits.append(f"len {row.get('length')}" + (" truncated" if row.get("truncated") else ""))
    return " · ".join(bits)


def block(row: dict[str, Any], width: int = 80) -> list[Line]:
    """One row as lines of at most ``width`` columns: a header, the prompt (dimmed, a few lines), the
    completion, the rewards per function, the expected answer and the transcript when there are."""
    width = max(20, width)
    head = header(row)
    lines: list[Line] = [("head", ("── " + head + " " + "─" * width)[:width])]
    lines += [("prompt", ln) for ln in wrap(str(row.get("prompt", "")), width, MAX_PROMPT_LINES)]
    lines += [("text", ln) for ln in wrap(str(row.get("completion", "")), width)]
    rewards = row.get("rewards") or {}
    if rewards:
        text = "rewards: " + "  ".join(f"{escape(str(k))} {_num(v, '.3g')}" for k, v in rewards.items())
        lines += [("meta", ln) for ln in wrap(text, width)]
    if "answer" in row:
        passed = row.get("passed")
        verdict = "" if passed is None else (" · passed" if passed else " · failed")
        lines += [("meta", ln) for ln in wrap(f"answer: {row['answer']}{verdict}", width)]
    for t in row.get("transcript") or []:
        lines += [("meta", ln) for ln in wrap(f"  {t}", width)]
    return lines


def blocks(answer: SamplesAnswer, width: int = 80) -> list[Line]:
    """Every row of an answer, then where to go next (the sampled steps around it) and the alarms."""
    lines: list[Line] = []
    for row in answer.get("rows") or []:
        lines += block(row, width)
    if not answer.get("rows"):
        at = answer.get("step")
        lines.append(("meta", "no samples" + (f" at step {at}" if at is not None else "")))
    around = [f"{k} {answer.get(k)}" for k in ("prev", "next") if answer.get(k) is not None]
    if around:
        lines.append(("meta", "sampled steps: " + ", ".join(around)))
    for a in answer.get("alarms") or []:
        lines += [("warn", ln) for ln in wrap(f"alarm: {a.get('kind')}: {a.get('message')}", width)]
    return lines


def side_by_side(answer: SamplesAnswer, width: int = 80) -> list[Line]:
    """``--diff A B``: per prompt that recurs, its completion at A and at B in two columns."""
    steps: list[Any] = [*(answer.get("diff") or []), None, None]
    a_step, b_step = steps[0], steps[1]
    col = max(10, (width - 3) // 2)
    lines: list[Line] = []
    for a, b in answer.get("pairs") or []:
        prompt = wrap(str(a.get("prompt", "")), width)[0]
        lines.append(("head", ("── " + prompt + " " + "─" * width)[:width]))
        left = [_side_head(a_step, a), *wrap(str(a.get("completion", "")), col)]
        right = [_side_head(b_step, b), *wrap(str(b.get("completion", "")), col)]
        for i in range(max(len(left), len(right))):
            l_text = left[i] if i < len(left) else ""
            r_text = right[i] if i < len(right) else ""
            lines.append(("meta" if i == 0 else "text", f"{l_text:<{col}} │ {r_text}"[:width]))
    if not lines:
        lines.append(("meta", f"no prompt was sampled at both step {a_step} and step {b_step}"))
    return lines


def _side_head(step: Any, row: dict[str, Any]) -> str:
    return f"step {step} · reward {_num(row.get('reward'), '.3g')}"


def first_line(row: dict[str, Any] | None, width: int = 80) -> str:
    """The dashboard's one line of the newest sample: step, reward, the completion's first line."""
    if row is None:
        return ""
    text = wrap(str(row.get("completion", "")), 10_000)[0] if row.get("completion") else ""
    reward = _num(row.get("reward"), ".3g")
    return f"step {row.get('step')} ({row.get('kind')}) reward {reward}: {text}"[:width]
