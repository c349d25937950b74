"""The agent's verbs: one request type and one answer type per verb (pippa_contract.messages.VERB_TYPES),
used by the laptop's function and annotated on the agent's handler (pippa_agent.serve.VERBS). mypy
checks each body against its types; this holds the two tables and the annotations to each other."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from pippa_agent import serve
from pippa_contract import messages, verbs, wire

WIRE_VERBS = {value for name, value in vars(wire).items() if name.isupper() and isinstance(value, str)}


def _type_name(t: object) -> str:
    return "None" if t is None else getattr(t, "__name__", repr(t))


def test_every_verb_has_one_row_in_each_table() -> None:
    assert set(messages.VERB_TYPES) == WIRE_VERBS
    assert set(serve.VERBS) == WIRE_VERBS


@pytest.mark.parametrize("verb", sorted(WIRE_VERBS))
def test_the_handler_is_annotated_with_the_verbs_request_and_answer(verb: str) -> None:
    module, name, kind = serve.VERBS[verb]
    handler = getattr(importlib.import_module(f"pippa_agent.{module}"), name)
    request, answer = messages.VERB_TYPES[verb]
    sig = inspect.signature(handler)
    required = [p for p in sig.parameters.values() if p.default is inspect.Parameter.empty]
    assert [p.name for p in required] == ["req"], f"{module}.{name} takes one request"
    # the annotations are strings (``from __future__ import annotations``); the names are the
    # contract's, imported under TYPE_CHECKING, so they resolve in pippa_contract.messages
    assert required[0].annotation == _type_name(request)
    assert getattr(messages, _type_name(request)) is request
    assert (kind == serve.STREAM) == (answer is None or verb in (wire.READ_RUN, wire.PULL))
    if kind == serve.STREAM:  # it writes its own output: its first line, when it has one, is the answer type
        assert sig.return_annotation == "None"
        assert answer is None or _type_name(answer) in inspect.getsource(handler)
    else:
        assert sig.return_annotation == _type_name(answer)


@pytest.mark.parametrize("verb", sorted(WIRE_VERBS))
def test_the_laptops_function_builds_the_request_type_and_reads_the_answer_type(verb: str) -> None:
    request, answer = messages.VERB_TYPES[verb]
    source = inspect.getsource(getattr(verbs, verb))
    assert _type_name(request) in source
    if answer not in (None, messages.Empty) and verb not in (wire.READ_RUN, wire.PULL):  # heads: the caller's
        assert _type_name(answer) in source


def test_the_type_checking_mirror_imports_every_handler_in_the_table() -> None:
    """The lazy string table stays followable: serve's TYPE_CHECKING block imports each handler."""
    tree = ast.parse(Path(serve.__file__).read_text())
    mirrored: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pippa_agent."):
            mirrored |= {(node.module.split(".", 1)[1], a.name) for a in node.names}
    assert {(m, n) for m, n, _ in serve.VERBS.values()} <= mirrored


def test_the_verbs_module_needs_no_type_ignore() -> None:
    assert "type: ignore" not in Path(verbs.__file__).read_text()


def test_the_agent_imports_the_messages_only_for_annotations() -> None:
    """The host bundle leaves pippa_contract.messages out (agent_bundle.ANNOTATION_ONLY): an import of it
    that runs on the host would fail there, so every one sits under ``if TYPE_CHECKING:``."""
    bad = []
    for path in sorted(Path(serve.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        nodes = list(ast.walk(tree))
        blocks = [b for b in nodes if isinstance(b, ast.If) and ast.unparse(b.test) == "TYPE_CHECKING"]
        guarded = {id(n) for block in blocks for n in ast.walk(block)}
        found = [n for n in nodes if isinstance(n, ast.ImportFrom) and n.module == "pippa_contract.messages"]
        bad += [f"{path.name}:{node.lineno}" for node in found if id(node) not in guarded]
    assert bad == []


def test_the_bundle_and_bootstrap_are_made_by_one_thread_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """`pippa hosts` asks every host from a thread of its own; CPython 3.11's ast.parse in several
    threads at once raised "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905)
    and failed the whole command. Sixteen threads asking at once: made once, never two at a time."""
    import threading
    import time

    from pippa_ops.transport import agent_bundle

    monkeypatch.setattr(agent_bundle, "_bootstrap", agent_bundle._bootstrap.__wrapped__)
    inside, most, lock = 0, 0, threading.Lock()
    real = agent_bundle._compact

    def compact(source: str) -> str:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.01)  # a window for another thread to come in, were it let in
        try:
            return real(source)
        finally:
            with lock:
                inside -= 1

    monkeypatch.setattr(agent_bundle, "_compact", compact)
    start = threading.Barrier(16)
    out: list[str] = []

    def ask() -> None:
        start.wait()
        out.append(agent_bundle.bootstrap())

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 16 and len(set(out)) == 1
    assert most == 1
