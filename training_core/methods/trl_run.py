"""What the TRL methods (grpo, sft, dpo) share: ``TrlMethod``, the base whose ``run`` is one TRL run
(model, rows, metrics / eval / extra callbacks, LoRA, the method's trainer, ``trainer.train``, all inside
``RunLifecycle``), and ``SupervisedMethod``, the base of SFT and DPO (no rewards, a TRL trainer class and
its config). A method supplies what differs: its checks, its rows, its rewards and its trainer. Torch,
TRL and transformers are imported inside ``run``, so validation stays torch-free.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pippa_contract.names import NAME_RE
from training_core.config import Resolved, RunConfig
from training_core.data.loaders import Row
from training_core.errors import BadSetting
from training_core.methods.base import Method


class TrlMethod(Method):
    """A method trained by a TRL trainer in TRL's loop."""

    # Whether the method writes its own batch (generation): training_core.run.flops counts that forward.
    generates: ClassVar[bool] = False

    def validate(self, cfg: RunConfig) -> None:
        """The checks every TRL trainer needs, the method's own (``validate_method``), its callbacks."""
        validate_trainer_settings(cfg)
        self.validate_method(cfg)
        validate_callbacks(cfg)

    def validate_method(self, cfg: RunConfig) -> None:
        """The method's own cross-field checks (none by default)."""

    @abstractmethod
    def banner(self, cfg: RunConfig) -> str:
        """What the start line says of the method (``loss dr_grpo``, ``sft``)."""

    @abstractmethod
    def train_rows(self, rows: list[Row], cfg: RunConfig, tokenizer: Any) -> list[Row]:
        """The dataset's rows in the form the method's TRL trainer reads."""

    @abstractmethod
    def reward_funcs(self, cfg: RunConfig, ctx: Any) -> list[Any]:
        """The reward functions the trainer calls (TRL's signature); [] for a method without rewards."""

    @abstractmethod
    def build_trainer(
        self,
        cfg: RunConfig,
        run_dir: Path,
        model: Any,
        tokenizer: Any,
        train_ds: Any,
        callbacks: list[Any],
        peft_config: Any,
        reward_funcs: Sequence[Any] = (),
    ) -> Any:
        """The method's TRL trainer over ``train_ds``, with pippa's callbacks and LoRA config."""

    def run(self, res: Resolved, run_dir: Path, resume: bool = False) -> int:
        return run_trl(self, res, run_dir, resume)


class SupervisedMethod(TrlMethod):
    """SFT and DPO: TRL's SFTTrainer or DPOTrainer on prepared rows; no rewards are read or called."""

    def check_names(self, cfg: RunConfig) -> None:
        """The dataset and eval task the config names are registered, and the rewards it lists exist
        (they are not read)."""
        check_data_and_eval_names(cfg)
        from training_core.rewards.registry import REWARDS

        for r in cfg.rewards:
            REWARDS.get(r.name, cfg.plugins)

    def reward_funcs(self, cfg: RunConfig, ctx: Any) -> list[Any]:
        return []  # the loss is the data's: the response's likelihood, or chosen against rejected

    @abstractmethod
    def trainer(self) -> tuple[Any, Callable[[RunConfig, Path, list[str], str], Any]]:
        """The TRL trainer class and the function that makes its config (training_core.methods.supervised,
        imported here so that validation stays torch-free)."""

    def build_trainer(
        self,
        cfg: RunConfig,
        run_dir: Path,
        model: Any,
        tokenizer: Any,
        train_ds: Any,
        callbacks: list[Any],
        peft_config: Any,
        reward_funcs: Sequence[Any] = (),
    ) -> Any:
        import datasets

        trainer_cls, make_args = self.trainer()
        datasets.disable_progress_bars()  # TRL's tokenizing maps would draw bars into the run's log
        return trainer_cls(
            model=model,
            args=make_args(cfg, run_dir, ["none"], run_dir.name),
            train_dataset=train_ds,
            processing_class=tokenizer,
            callbacks=callbacks,
            peft_config=peft_config,
            precision=cfg.model.precision,
        )


def validate_trainer_settings(cfg: RunConfig) -> None:
    """Checks every TRL method needs (TRL would otherwise report them deep inside its constructor)."""
    t = cfg.train
    for k in (
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "num_generations",
        "max_completion_length",
        "logging_steps",
    ):
        if k == "per_device_train_batch_size" and t.per_device_train_batch_size == 0:
            if t.generation_batch_size < 1:  # auto: the step's completions must be named
                raise BadSetting(
                    "train.per_device_train_batch_size = 0 (auto) needs train.generation_batch_size"
                )
            continue
        if getattr(t, k) < 1:
            raise BadSetting(f"bad value for train.{k}: must be >= 1, got {getattr(t, k)}")
    if cfg.model.from_run and not NAME_RE.match(cfg.model.from_run):
        raise BadSetting(f"bad value for model.from_run: not a run id: {cfg.model.from_run!r}")


def validate_callbacks(cfg: RunConfig) -> None:
    for c in cfg.callbacks:
        if not c.name:
            raise BadSetting("a [[callbacks]] entry has no name")


def check_data_and_eval_names(cfg: RunConfig) -> None:
    """The dataset and eval task the config names are registered (without importing torch)."""
    from training_core.data.loaders import DATASETS
    from training_core.eval.tasks import EVAL_TASKS

    DATASETS.get(cfg.data.dataset, cfg.plugins)
    if cfg.eval.task != "none":
        EVAL_TASKS.get(cfg.eval.task, cfg.plugins)


_CODE_REWARDS = ("code_execution", "test_cases", "assert_tests", "code_game")


def runs_model_code(cfg: RunConfig) -> bool:
    """Whether this recipe runs model-written code (a code reward, the MBPP evaluation or callback)."""
    return (
        any(r.name in _CODE_REWARDS for r in cfg.rewards)
        or cfg.eval.task == "mbpp"
        or any(c.name == "mbpp_eval" for c in cfg.callbacks)
    )


def run_trl(method: TrlMethod, res: Resolved, run_dir: Path, resume: bool) -> int:
    """Set up and train one TRL run; the end line, exit code and failed-start record are the lifecycle's."""
    from training_core.run.lifecycle import RunLifecycle

    with RunLifecycle(res, run_dir, resume) as life:
        trainer, n_rows, n_params = _prepare(method, life)
        cfg = life.res.config
        world = trainer.accelerator.num_processes
        # A checkpoint at max_steps (a stop that came during the last step): nothing is left to train.
        # transformers' loop would still take one more step before it checks max_steps.
        done = life.resumed_step is not None and 0 < cfg.train.max_steps <= life.resumed_step
        life.training(
            f"run {run_dir.name}: recipe {res.recipe}, platform {res.platform['name']}, "
            f"{method.banner(cfg)}, {n_params / 1e6:.2f}M params, precision {cfg.model.precision}, "
            f"{n_rows} prompts"
            + (f", {world} processes ({cfg.launch.strategy})" if world > 1 else "")
            + (f", resuming from step {life.resumed_step}" if life.resumed_step else ""),
            step=lambda: int(life.resumed_step or 0) if done else int(trainer.state.global_step),
        )
        from training_core.methods.trainer import quiet_tied_head_warning, stop_callback

        trainer.add_callback(stop_callback(lambda: life.stop.requested, _any_rank(trainer)))
        from training_core.run import testhooks

        if testhooks.wanted():
            trainer.add_callback(testhooks.callback(lambda: life.stop.requested))
        resume_from = life.resume_from
        if done:
            if life.main:
                print(
                    f"resume: step {life.resumed_step} is the last (train.max_steps = "
                    f"{cfg.train.max_steps}): nothing left to train",
                    flush=True,
                )
        else:
            if resume_from:
                quiet_tied_head_warning(trainer.model)
            trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    return life.code


def _prepare(method: TrlMethod, life: Any) -> tuple[Any, int, int]:
    """Everything before the first step: model, data, metrics header, W&B, rewards, eval, trainer."""
    import datasets
    from transformers import PrinterCallback

    from training_core import sandbox
    from training_core.data.loaders import load_rows
    from training_core.eval import greedy
    from training_core.eval.tasks import EVAL_TASKS
    from training_core.methods import callbacks as cb_registry
    from training_core.models import load_model
    from training_core.rewards import registry
    from training_core.run import flops, metrics

    cfg, run_dir = life.res.config, life.run_dir
    # model-written code runs only under real isolation unless the recipe says "unsafe" (the config
    # records the setting; the sandbox refuses with one line naming what to install otherwise)
    sandbox.set_level(cfg.sandbox.isolation)
    if cfg.sandbox.isolation == "unsafe":
        print(
            "sandbox: isolation = unsafe (recipe setting): model-written code runs without namespaces",
            flush=True,
        )
    if runs_model_code(cfg):
        # found now, before the model loads (not at the first reward): a sandbox that cannot keep its
        # promises stops the run here, with one line; the log's line says what every program runs
        # under, short, and the run's sandbox.txt the whole of it (mode, caps, seccomp, which /usr:
        # the resident copy every code reward's pool makes once, or why the host's), or every reason
        # for a refusal
        try:
            iso = sandbox.default_pool().launcher.isolation
        except sandbox.SandboxUnavailable as e:
            (run_dir / "sandbox.txt").write_text(e.details + "\n", encoding="utf-8")
            raise
        (run_dir / "sandbox.txt").write_text(iso.header() + "\n", encoding="utf-8")
        print(iso.summary(), flush=True)
    if life.main:  # what `pippa run` shows while it waits for the first line
        print(f"starting: loading model {cfg.model.name} and the data", flush=True)
    model, tokenizer = load_model(cfg.model.name, cfg.model.precision)
    rows = load_rows(cfg.data, cfg.seed, plugins=cfg.plugins)
    train_rows = method.train_rows(rows, cfg, tokenizer)
    train_ds = datasets.Dataset.from_list(train_rows)
    life.open_record()
    writer = life.writer

    rctx = registry.RewardContext(model=model, tokenizer=tokenizer, run_dir=str(run_dir), config=cfg)
    reward_funcs = method.reward_funcs(cfg, rctx)
    n_params = sum(p.numel() for p in model.parameters())
    progress = cfg.logging.progress and life.main
    setup = flops.setup_for(cfg, model, method.generates)
    cbs: list[Any] = [metrics.make_callback(writer, progress, n_params, life.facts.gpu_name, setup=setup)]
    if cfg.eval.task != "none":
        task = EVAL_TASKS.get(cfg.eval.task, cfg.plugins)
        eval_rows = task.load(cfg.eval.n, cfg.seed, data=cfg.data, **cfg.eval.params)
        max_new = cfg.eval.max_new_tokens or cfg.train.max_completion_length
        cbs.append(
            greedy.make_callback(
                task, eval_rows, cfg.eval, cfg.data, max_new, tokenizer, writer, life.samples
            )
        )
    cctx = cb_registry.CallbackContext(tokenizer=tokenizer, writer=writer, run_dir=str(run_dir), config=cfg)
    for spec in cfg.callbacks:
        cbs.append(cb_registry.CALLBACKS.get(spec.name, cfg.plugins)(cctx, **spec.params))

    peft_config = None
    if cfg.model.lora_r > 0:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=cfg.model.lora_r,
            lora_alpha=cfg.model.lora_alpha,
            lora_dropout=cfg.model.lora_dropout,
            task_type="CAUSAL_LM",
        )
    trainer = method.build_trainer(cfg, run_dir, model, tokenizer, train_ds, cbs, peft_config, reward_funcs)
    trainer.keep_checkpoints = cfg.checkpoint.keep
    # GRPO: a sample of some steps' batches (training_core.methods.samples_trl)
    if hasattr(trainer, "samples"):
        trainer.samples = life.samples
    trainer.remove_callback(PrinterCallback)  # our progress line replaces its raw dict dump
    return trainer, len(train_rows), n_params


def _any_rank(trainer: Any) -> Any:
    """``flag -> bool``: True when any rank's flag is; plain ``bool`` for one process."""
    acc = trainer.accelerator
    if acc.num_processes == 1:
        return bool

    def agree(flag: bool) -> bool:
        import torch

        return bool(acc.reduce(torch.tensor([float(flag)], device=acc.device), reduction="sum").item() > 0)

    return agree
