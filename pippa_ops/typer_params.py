"""Plain coercion for the CLI's str / int / float / bool / list[str] options, so a run loads no pydantic.

Why: typer 0.29 coerces every parameter that is not an already-bool flag through a pydantic
``TypeAdapter`` built on first use (``typer.core._TyperParameter.get_runtime_param``). Importing
pydantic and building the adapters is ~75 ms of every ``pippa`` call (measured with
``python -X importtime`` and cProfile on ``pippa run --cmd``; even ``--help``'s own flag builds one),
more than the SSH handshake. typer has
no setting to turn it off, so ``install`` fills that lazy slot ahead of time with a small coercer for
the plain types our commands use, with the same results and the same kind of error (BadParameter:
usage + one line, exit 2). Any other type (paths, choices, ranges, custom parsers) keeps typer's own
path; if typer's internals change shape, nothing is installed and typer behaves as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any, get_args, get_origin

try:  # typer internals: guarded, so a typer upgrade degrades to typer's own (slower) coercion
    from typer._click.exceptions import BadParameter
    from typer._coercion import RuntimeParam
    from typer.core import _TyperParameter
except ImportError:  # pragma: no cover - depends on the installed typer
    RuntimeParam = None  # type: ignore[assignment,misc]

_MESSAGES = {
    int: "Input should be a valid integer, unable to parse string as an integer",
    float: "Input should be a valid number, unable to parse string as a number",
    bool: "Input should be a valid boolean, unable to interpret input",
}
_TRUE = {"1", "on", "t", "true", "y", "yes"}  # what typer (through pydantic) reads as a bool
_FALSE = {"", "0", "off", "f", "false", "n", "no"}

if RuntimeParam is not None:

    @dataclasses.dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):
        """str, int, float or bool, or a list of str (``many``), converted without pydantic."""

        kind: type = str
        many: bool = False

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.many:
                items = value if isinstance(value, (list, tuple)) else [value]
                return [self._one(v, param, ctx) for v in items]
            return self._one(value, param, ctx)

        def _one(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.kind is str:
                if isinstance(value, bytes):
                    return value.decode("utf-8", "replace")
                return str(value)
            if self.kind is bool:
                return self._bool(value, param, ctx)
            if isinstance(value, bool):  # pydantic refuses a bool where a number is expected
                raise BadParameter(_MESSAGES[self.kind], ctx=ctx, param=param)
            if isinstance(value, self.kind) or (self.kind is float and isinstance(value, int)):
                return self.kind(value)
            try:
                return self.kind(value.strip() if isinstance(value, str) else value)
            except (TypeError, ValueError):
                raise BadParameter(_MESSAGES[self.kind], ctx=ctx, param=param) from None

        def _bool(self, value: Any, param: Any, ctx: Any) -> bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            text = value.strip().lower() if isinstance(value, str) else None
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise BadParameter(_MESSAGES[bool], ctx=ctx, param=param)


def _plain(param: Any) -> PlainRuntimeParam | None:
    desc = getattr(param, "type_descriptor", None)
    info = getattr(desc, "parameter_info", None)
    if desc is None or info is None or getattr(desc, "file_annotation", 1) is not None:
        return None
    if getattr(info, "parser", 1) is not None:
        return None
    if getattr(desc, "is_path", True) or getattr(desc, "is_choice", True):
        return None
    if getattr(info, "min", 1) is not None or getattr(info, "max", 1) is not None:
        return None
    ann = desc.annotation
    if ann in (str, int, float, bool):
        return PlainRuntimeParam(annotation=ann, parameter_info=info, kind=ann)
    if get_origin(ann) is list and get_args(ann) == (str,):
        return PlainRuntimeParam(annotation=ann, parameter_info=info, kind=str, many=True)
    return None


def install(params: list[Any]) -> int:
    """Give each plain parameter in ``params`` the coercer above; how many got it."""
    if RuntimeParam is None:
        return 0
    done = 0
    for param in params:
        if not isinstance(param, _TyperParameter) or getattr(param, "_runtime_param", 1) is not None:
            continue
        runtime = _plain(param)
        if runtime is not None:
            param._runtime_param = runtime
            done += 1
    return done
