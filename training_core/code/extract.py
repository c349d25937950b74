"""Getting the program out of a completion.

Completions reach reward functions as plain strings or, in TRL's conversational format, as a list
of chat messages; both are handled here so every code reward sees the same text.
"""

from __future__ import annotations

import re
from typing import Any

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|\Z)", re.DOTALL)
_PY_TAGS = {"python", "py", "python3", ""}


def completion_text(completion: Any) -> str:
    """The assistant's text: a string as is; for a message list, the last assistant message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content(completion.get("content"))
    if isinstance(completion, list):
        for msg in reversed(completion):
            if isinstance(msg, dict) and msg.get("role", "assistant") == "assistant":
                return _content(msg.get("content"))
        return ""
    return str(completion)


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: [{"type": "text", "text": ...}]
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def fenced_code(text: str) -> str | None:
    """The first fenced block tagged python (or untagged); other languages are skipped."""
    for m in _FENCE.finditer(text):
        if m.group(1).lower() in _PY_TAGS:
            return m.group(2)
    return None


def extract_code(completion: Any, answer_tag: bool = False) -> str:
    """The program to run: ``<answer>`` content (when ``answer_tag``), then a python or plain fenced
    block (inside the answer if there is one), else the raw text. Empty when there is no code."""
    text = completion_text(completion)
    if answer_tag:
        m = _ANSWER.search(text)
        if m:
            text = m.group(1)
    code = fenced_code(text)
    if code is None:
        code = text
    return code.strip("\n") if code.strip() else ""
