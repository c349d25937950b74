"""Recipes resolve with Dr GRPO really applied, and bad --set input gives one clear line (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from training_core.errors import BadSetting, UnknownRecipe
from training_core.hardware.platform import PlatformFacts
from training_core.recipes import available, resolve
from training_core.train import main

CPU = PlatformFacts()
H100 = PlatformFacts(
    gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, gpu_memory_gb=80, bf16=True, vllm_available=True
)
V100 = PlatformFacts(gpu_name="Tesla V100-SXM2-32GB", gpu_count=1, gpu_memory_gb=32, bf16=False)
SHIPPED = [
    "tiny",
    "baseline",
    "overfit",
    "overfit_aggressive",
    "overfit_memory",
    "overfit_ultra_small",
    "max_gpu",
    "r1_zero_math",
    "r1_zero_tiny",
]
REPO = Path(__file__).resolve().parents[2]


def test_every_shipped_recipe_is_present_with_a_description() -> None:
    import tomllib

    assert set(SHIPPED) <= set(available())
    for name in available():
        with open(REPO / "recipes" / f"{name}.toml", "rb") as f:
            assert tomllib.load(f)["description"].strip()


@pytest.mark.parametrize("name", SHIPPED)
def test_dry_run_shows_dr_grpo_for_every_recipe(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([name, "--dry-run"], facts=CPU) == 0
    out = json.loads(capsys.readouterr().out)
    train = out["config"]["train"]
    assert (train["loss_type"], train["scale_rewards"], train["beta"]) == ("dr_grpo", "none", 0.0)
    assert out["dr_grpo"]["max_completion_length"] == train["max_completion_length"] > 0
    assert out["platform"]["name"] == "cpu"
    assert all(r["name"] and isinstance(r["weight"], float) for r in out["config"]["rewards"])


def test_reference_numbers_of_the_team_recipes() -> None:
    base = resolve("baseline", [], CPU).config
    assert (
        base.train.learning_rate,
        base.train.per_device_train_batch_size,
        base.train.gradient_accumulation_steps,
        base.train.num_generations,
        base.data.max_prompt_length,
        base.train.max_completion_length,
    ) == (5e-6, 2, 4, 4, 64, 50)
    assert [(r.name, r.weight) for r in base.rewards] == [
        ("baseline_correctness", 1.0),
        ("baseline_length_penalty", 0.3),
    ]
    mg = resolve("max_gpu", [], CPU).config
    assert (
        mg.data.n_rows,
        mg.train.per_device_train_batch_size,
        mg.train.num_generations,
        mg.train.warmup_ratio,
        mg.train.max_completion_length,
    ) == (100, 64, 8, 0.01, 256)


def test_dry_run_imports_no_torch_or_trl() -> None:
    code = (
        "import sys, io, contextlib\nfrom training_core.train import main\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['max_gpu', '--dry-run'])\n"
        "print(sorted(m for m in ('torch', 'trl', 'transformers', 'wandb') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    assert out.strip() == "[]"


def test_set_overrides_beat_recipe_and_preset() -> None:
    cfg = resolve(
        "max_gpu",
        [
            "train.per_device_train_batch_size=8",
            "train.learning_rate=2e-5",
            "rewards.gsm8k_length_penalty.weight=0.5",
            "data.params.instruction=Think.",
        ],
        H100,
    ).config
    assert cfg.train.per_device_train_batch_size == 8 and cfg.train.learning_rate == 2e-5
    assert dict((r.name, r.weight) for r in cfg.rewards)["gsm8k_length_penalty"] == 0.5
    assert cfg.data.params == {"instruction": "Think."}


def test_unknown_key_names_nearest_valid_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiny", "--dry-run", "--set", "train.learnig_rate=1e-5"], facts=CPU) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "train.learning_rate" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "item, expected",
    [
        ("train.learning_rate=fast", "expected a number"),
        ("train.max_steps=2.5", "expected an integer"),
        ("model.gradient_checkpointing=yes", "expected true or false"),
        ("train.loss_type=ppo", "one of"),
        ("train.num_generations=3", "multiple of train.num_generations"),
        ("noequals", "expected key=value"),
    ],
)
def test_bad_values_give_one_line_and_exit_2(
    item: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["baseline", "--dry-run", "--set", item], facts=CPU) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_unknown_recipe_and_reward_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UnknownRecipe, match="did you mean overfit"):
        resolve("overfitt", [], CPU)
    bad = tmp_path / "r.toml"
    bad.write_text('description = "x"\n[[rewards]]\nname = "no_such_reward"\n')
    assert main([str(bad), "--dry-run"], facts=CPU) == 2
    assert "unknown reward 'no_such_reward'" in capsys.readouterr().err
    bad.write_text('description = "x"\n[train]\nlearning_rte = 1.0\n')
    with pytest.raises(BadSetting, match=r"train\.learning_rate"):
        resolve(str(bad), [], CPU)


def test_cli_subprocess_exit_code_and_no_traceback() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "training_core.train", "tiny", "--dry-run", "--set", "seed=x"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr and "seed" in p.stderr


def test_check_flag_validates_sets_without_probing_or_loading(capsys: pytest.CaptureFixture[str]) -> None:
    from training_core.train import main

    assert main(["tiny", "--check", "--set", "train.max_steps=3"]) == 0
    assert capsys.readouterr().out == ""  # nothing printed on success: a yes/no for pippa run
    assert main(["tiny", "--check", "--set", "train.max_stepz=3"]) == 2
    assert "unknown setting 'train.max_stepz'" in capsys.readouterr().err


@pytest.mark.parametrize("recipe", ["tiny", "sft_tiny", "tictactoe_tiny"])
def test_a_resolved_config_cannot_be_changed(recipe: str) -> None:
    """What the run header shows is what ran: a resolved config is frozen, a change is a new one."""
    import dataclasses

    res = resolve(recipe, [], PlatformFacts())
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.config.model.precision = "fp32"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.config.seed = 7  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.config = res.config  # type: ignore[misc]
    settled = res.with_model(name="./checkpoint-5")
    assert settled.config.model.name == "./checkpoint-5" and res.config.model.name != "./checkpoint-5"
    assert settled.config.train == res.config.train
