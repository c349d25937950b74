"""A stop signal becomes a checkpoint of the current step (the e2e proof is in test_resume_e2e.py)."""

from __future__ import annotations

import signal

import pytest
from transformers import TrainerControl, TrainerState

from training_core.methods.trainer import stop_callback
from training_core.run.lifecycle import StopOnSignal


def test_first_signal_saves_after_the_step_second_stops_at_once() -> None:
    handler = StopOnSignal(save=True)
    cb = stop_callback(lambda: handler.requested)
    state, control = TrainerState(global_step=7, max_steps=100), TrainerControl()
    cb.on_step_end(None, state, control)
    cb.on_save(None, state, control)  # no signal yet: an ordinary periodic save
    assert not control.should_save
    handler(signal.SIGTERM, None)
    cb.on_step_end(None, state, control)
    assert control.should_save
    with pytest.raises(KeyboardInterrupt, match="signal 15"):
        cb.on_save(None, state, control)
    with pytest.raises(KeyboardInterrupt):
        handler(signal.SIGINT, None)


def test_without_checkpointing_a_signal_stops_at_once_and_the_last_step_just_completes() -> None:
    with pytest.raises(KeyboardInterrupt):
        StopOnSignal(save=False)(signal.SIGINT, None)
    handler = StopOnSignal(save=True)
    handler(signal.SIGINT, None)
    stop_callback(lambda: handler.requested).on_save(
        None, TrainerState(global_step=100, max_steps=100), TrainerControl()
    )


def test_a_rank_the_signal_missed_saves_the_same_step_when_another_rank_got_it() -> None:
    """With several ranks the checkpoint is collective: ``agree`` (an all-reduce in the runner) makes
    every rank save and stop at the step where any rank saw the signal."""
    other_rank_got_it = True
    cb = stop_callback(lambda: None, agree=lambda flag: flag or other_rank_got_it)
    state, control = TrainerState(global_step=3, max_steps=100), TrainerControl()
    cb.on_step_end(None, state, control)
    assert control.should_save
    with pytest.raises(KeyboardInterrupt, match="on another rank"):
        cb.on_save(None, state, control)
