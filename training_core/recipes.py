"""Recipes: TOML override files over the dataclass defaults, resolved into one checked RunConfig.

Layers, later wins: dataclass defaults (config.py) < ``recipes/base.toml`` < the recipe file <
the platform preset (``[platform.<cpu|v100|a100|h100|gpu>]`` tables of base.toml, then of the recipe)
< ``--set key=value``; then "auto" precision / vLLM resolve from the platform facts. ``--set`` beats the
preset on purpose: what the user typed is what runs. Lists (``rewards``, ``callbacks``, ``plugins``)
are replaced, not merged; ``--set rewards.<name>.weight=0.5`` / ``rewards.<name>.<param>=...`` edits
(or adds) one reward. Recipes are data, never executed code. Torch-free.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from training_core.config import CallbackSpec, Resolved, RewardSpec, RunConfig
from training_core.errors import BadSetting, UnknownRecipe
from training_core.hardware.platform import PLATFORMS, PlatformFacts, resolve_auto

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
_NAME_ONLY_KEYS = ("description", "platform")
_AUTO_KEYS = ("model.precision", "train.use_vllm")  # what "auto" leaves to the platform (resolve_auto)


def recipe_path(recipe: str, recipes_dir: Path = RECIPES_DIR) -> Path:
    """A recipe name in recipes/ or a path to a .toml file."""
    p = Path(recipe)
    if p.suffix == ".toml" or "/" in recipe:
        if not p.is_file():
            raise UnknownRecipe(f"recipe file not found: {recipe}")
        return p
    cand = recipes_dir / f"{recipe}.toml"
    if not cand.is_file() or recipe == "base":
        names = available(recipes_dir)
        near = difflib.get_close_matches(recipe, names, n=3)
        hint = f"did you mean {', '.join(near)}?" if near else f"known: {', '.join(names)}"
        raise UnknownRecipe(f"unknown recipe {recipe!r}; {hint}")
    return cand


def available(recipes_dir: Path = RECIPES_DIR) -> list[str]:
    return sorted(p.stem for p in recipes_dir.glob("*.toml") if p.stem != "base")


def resolve(recipe: str, sets: list[str], facts: PlatformFacts, recipes_dir: Path = RECIPES_DIR) -> Resolved:
    path = recipe_path(recipe, recipes_dir)
    base_file = recipes_dir / "base.toml"
    base = _load_toml(base_file) if base_file.is_file() else {}
    rec = _load_toml(path)
    cfg = _to_plain(RunConfig())
    presets: dict[str, Any] = {}
    for layer, where in ((base, str(base_file)), (rec, str(path))):
        layer = dict(layer)
        layer.pop("restart", None)  # the host supervisor's retry policy (pippa_ops.runs.launching.restart)
        for pname, preset in layer.pop("platform", {}).items():
            if pname not in PLATFORMS:
                raise BadSetting(f"{where}: unknown platform preset {pname!r}; known: {', '.join(PLATFORMS)}")
            presets[pname] = _merge(presets.get(pname, {}), preset)
        _check_keys(layer, cfg, where)
        cfg = _merge(cfg, layer)
    platform = facts.platform
    before = copy.deepcopy(cfg)
    preset = presets.get(platform, {})
    _check_keys(preset, cfg, f"[platform.{platform}]")
    cfg = _merge(cfg, preset)
    changes = {
        k: {"from": _get(before, k), "to": v} for k, v in _flatten(preset).items() if _get(before, k) != v
    }
    for item in sets:
        _apply_set(cfg, item)
    changes.update(resolve_auto(cfg, facts))
    config = _build(RunConfig, cfg, "")
    _validate(config)
    name = path.stem
    return Resolved(name, str(path), config, {"name": platform, "facts": facts.as_dict(), "preset": changes})


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise BadSetting(f"{path}: invalid TOML: {e}") from None


def _to_plain(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k not in ("params",):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k != "params":
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _get(d: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        d = d[part] if isinstance(d, dict) else None  # type: ignore[assignment]
    return d


def valid_keys() -> list[str]:
    """Every dotted key ``--set`` accepts (reward / callback entries are addressed by name)."""
    plain = sorted(_flatten(_to_plain(RunConfig())).keys() - {"rewards", "callbacks"})
    return [*plain, "rewards.<name>.weight", "rewards.<name>.<param>", "callbacks.<name>.<param>"]


def _unknown(key: str, candidates: list[str], where: str) -> BadSetting:
    near = difflib.get_close_matches(key, candidates, n=3, cutoff=0.5)
    if not near:
        section = key.split(".")[0]
        near = [c for c in candidates if c.startswith(section + ".")][:6] or candidates[:6]
    return BadSetting(f"{where}unknown setting {key!r}; nearest valid keys: {', '.join(near)}")


def _check_keys(layer: dict[str, Any], cfg: dict[str, Any], where: str) -> None:
    flat_valid = list(_flatten(cfg).keys())
    for key in _flatten(layer):
        top = key.split(".")[0]
        if top in ("rewards", "callbacks", "plugins", *_NAME_ONLY_KEYS) or ".params." in f".{key}.":
            continue
        if key not in flat_valid:
            raise _unknown(key, flat_valid, f"{where}: ")


def parse_value(raw: str) -> Any:
    """A --set value as a TOML literal (5e-6, true, 8, [..]); anything else is a plain string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _apply_set(cfg: dict[str, Any], item: str) -> None:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise BadSetting(f"bad --set {item!r}: expected key=value, e.g. train.learning_rate=1e-5")
    value = parse_value(raw.strip())
    parts = key.split(".")
    if parts[0] in ("rewards", "callbacks") and len(parts) == 3:
        entries = cfg[parts[0]]
        entry = next((e for e in entries if e["name"] == parts[1]), None)
        if entry is None:
            entry = (
                {"name": parts[1], "weight": 1.0, "params": {}}
                if parts[0] == "rewards"
                else {"name": parts[1], "params": {}}
            )
            entries.append(entry)
        if parts[2] == "weight" and parts[0] == "rewards":
            entry["weight"] = value
        else:
            entry["params"][parts[2]] = value
        return
    flat = _flatten(_to_plain(RunConfig()))
    if key not in flat and not (len(parts) >= 3 and parts[-2] == "params" and ".".join(parts[:-1]) in flat):
        raise _unknown(key, valid_keys(), "")
    target = cfg
    for p in parts[:-1]:
        target = target[p]
    target[parts[-1]] = value


def _build(cls: Any, data: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        kwargs[f.name] = _coerce(data[f.name], hints[f.name], key) if f.name in data else None
        if f.name not in data:
            del kwargs[f.name]
    return cls(**kwargs)


def _coerce(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise BadSetting(f"bad value for {key}: expected a table")
        return _build(tp, value, key + ".")
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, key)
            except BadSetting:
                continue
        raise BadSetting(f"bad value for {key}: expected {_describe(tp)}, got {value!r}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp) or isinstance(value, bool) != any(
            isinstance(a, bool) for a in typing.get_args(tp)
        ):
            raise BadSetting(f"bad value for {key}: expected {_describe(tp)}, got {value!r}")
        return value
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise BadSetting(f"bad value for {key}: expected a list, got {value!r}")
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise BadSetting(f"bad value for {key}: expected a table, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise BadSetting(f"bad value for {key}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadSetting(f"bad value for {key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadSetting(f"bad value for {key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise BadSetting(f"bad value for {key}: expected a string, got {value!r}")
        return value
    return value


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))


def _validate(cfg: RunConfig) -> None:
    """Cross-field checks, by the method that reads the fields (training_core.methods)."""
    from training_core import methods

    methods.get(cfg.method).validate(cfg)


__all__ = ["CallbackSpec", "Resolved", "RewardSpec", "available", "parse_value", "recipe_path", "resolve"]


def explain(
    recipe: str, sets: list[str], facts: PlatformFacts, recipes_dir: Path = RECIPES_DIR
) -> list[tuple[str, Any, str]]:
    """Every setting of the resolved recipe: ``(key, value, where it came from)``, in key order. The
    source is the last layer that set it (module docstring): ``default``, the base file, the recipe
    file, ``[platform.<name>]``, ``--set``, or ``auto (<platform>)`` for an "auto" the platform decided."""
    res = resolve(recipe, sets, facts, recipes_dir)
    path, base_file = recipe_path(recipe, recipes_dir), recipes_dir / "base.toml"
    final = _flatten(_to_plain(res.config))
    origin = dict.fromkeys(final, "default")
    for layer_file in (base_file, path):
        if not layer_file.is_file():
            continue
        layer = {k: v for k, v in _load_toml(layer_file).items() if k not in ("restart", "platform")}
        where = layer_file.name if layer_file.parent == recipes_dir else str(layer_file)
        origin.update(
            {
                k: f"recipes/{where}" if layer_file.parent == recipes_dir else where
                for k in _flatten(layer)
                if k in origin
            }
        )
    name = str(res.platform["name"])
    changed = res.platform["preset"]
    decided = {k for k in _AUTO_KEYS if isinstance(changed.get(k), dict) and changed[k]["from"] == "auto"}
    preset_keys = set(changed) - decided
    origin.update({k: f"[platform.{name}]" for k in preset_keys if k in origin})
    for item in sets:
        key = item.partition("=")[0].strip()
        while key and key not in origin:
            key = key.rpartition(".")[0]
        if key:
            origin[key] = "--set"
    origin.update({k: f"auto ({name})" for k in decided if k in origin})
    return [(k, final[k], origin[k]) for k in sorted(final)]
