"""The ``pippa`` entry point and the table of its commands; importing it loads no typer.

A hot verb (``ps``, ``logs``, ``gpus``, ``run``, ``stop``, ``wait`` and their ``--help``) is handed to
the warm process (``pippa_ops.instant``) when one is running: it has typer, the command modules and
the core imported already and forks a child per command, which runs the same code as below on this
terminal. Everything else, or when there is no warm process, builds the typer app here
(``cli.typer_app``), which registers each command module from the table below, handed to it
(it imports nothing from here: no cycle).
"""

from __future__ import annotations

import os
import sys

# command -> (module that registers it, the one-line help `pippa --help` shows), in --help order
COMMANDS: dict[str, tuple[str, str]] = {
    "hosts": (
        "pippa_ops.cli.hosts_cmd",
        "Hosts (local, pippa.toml, ~/.config/pippa/hosts.toml, ~/.ssh/config aliases), checked in parallel.",
    ),
    "up": (
        "pippa_ops.cli.hosts_cmd",
        "Prepare a host: check tmux/GPUs/python/disk, install uv, sync, run setup, push secrets.",
    ),
    "notify-test": (
        "pippa_ops.cli.notify_cmd",
        "Send one test alert from the host to PIPPA_NOTIFY; non-zero exit with the service's error.",
    ),
    "keep": (
        "pippa_ops.cli.keep_cmd",
        "Cancel the host's armed stop command (its alert said when it runs); the host keeps running.",
    ),
    "sync": (
        "pippa_ops.cli.hosts_cmd",
        "Copy the project's tree to the host: changed files only, one stream, deletions only with --delete.",
    ),
    "run": (
        "pippa_ops.cli.run_cmd",
        "Start recipes (one after another) or a command in a named tmux session on a host.",
    ),
    "resume": (
        "pippa_ops.cli.run_cmd",
        "Continue a stopped or failed recipe run from its newest checkpoint, in the same run directory.",
    ),
    "ps": (
        "pippa_ops.cli.ps_cmd",
        "Runs on every host (in parallel) or one: state, duration, last step and reward.",
    ),
    "logs": (
        "pippa_ops.cli.logs_cmd",
        "Print a run's output (the session's current run, or a run id); -f follows it.",
    ),
    "attach": (
        "pippa_ops.cli.logs_cmd",
        "Attach this terminal to the run's tmux session (detach with C-b d; the run goes on).",
    ),
    "stop": (
        "pippa_ops.cli.stop_cmd",
        "Interrupt a run (Ctrl-C, so a trainer can save), then kill its session after a grace period.",
    ),
    "recipes": ("pippa_ops.cli.run_cmd", "The recipes this repo ships (recipes/*.toml)."),
    "samples": (
        "pippa_ops.cli.samples_cmd",
        "What the model wrote at a step: prompt, completion, rewards per function, length; alarms.",
    ),
    "rm": (
        "pippa_ops.cli.tidy_cmd",
        "Remove ended runs (their directories on the host, checkpoints included); never a running run.",
    ),
    "prune": (
        "pippa_ops.cli.tidy_cmd",
        "Remove ended runs older than an age on every host (or those named); never a running run.",
    ),
    "why": (
        "pippa_ops.cli.why_cmd",
        "Why a run's attempts ended: class, retry, deciding log lines, stuck frames, next command.",
    ),
    "recover": (
        "pippa_ops.cli.recover_cmd",
        "Resume every lost run (session gone, no exit code) that has attempts left, each in its own session.",
    ),
    "wait": (
        "pippa_ops.cli.wait_cmd",
        "Wait until runs end (riding out dropped connections); exit with their status (0: all exited 0).",
    ),
    "pull": (
        "pippa_ops.cli.pull_cmd",
        "Bring runs' records (run.json, metrics, log, evals; --checkpoints) into runs/<host>/<run-id>/ here.",
    ),
    "runs": (
        "pippa_ops.cli.pull_cmd",
        "Every run on the hosts and pulled here: recipe, state, steps, final/best reward, eval, W&B link.",
    ),
    "export": (
        "pippa_ops.cli.export_cmd",
        "A recipe's run as a SkyPilot task YAML or a SLURM job script, for an engine pippa does not drive.",
    ),
    "compare": (
        "pippa_ops.cli.compare_cmd",
        "Runs side by side: config keys that differ, final/best reward, curves (terminal and --png).",
    ),
    "ssh": (
        "pippa_ops.cli.remote_cmd",
        "A shell (or one command, after --) on the host, with pippa's host resolution, keys and identity.",
    ),
    "forward": (
        "pippa_ops.cli.remote_cmd",
        "Forward local ports to ports on the host (TensorBoard, a vLLM server) until Ctrl-C.",
    ),
    "gpus": (
        "pippa_ops.cli.gpus_cmd",
        "Per GPU: index, name, utilization, memory, temperature, power, and the processes on it.",
    ),
    "doctor": (
        "pippa_ops.cli.doctor_cmd",
        "Is the box healthy? Driver, ECC, remaps, slowdowns, PCIe, NVLink, Xids, torch, disk; GEMM, NCCL.",
    ),
    "dash": ("pippa_ops.cli.dash_cmd", "Live dashboard: GPUs, runs and training curves across hosts."),
}


def main() -> None:
    argv = sys.argv[1:]
    if argv == ["--version"]:  # the installed metadata says the same (a test checks it)
        from pippa_ops import __version__

        print(f"pippa {__version__}")
        raise SystemExit(0)
    from pippa_ops.instant import hot_verb

    if hot_verb(argv) is not None:
        from pippa_ops.instant import client

        code = client.run_warm(argv)
        if code is not None:
            # The command ran in the warm process's child; this process only waited for it and has
            # nothing to clean up: skip the interpreter's own teardown (~10 ms here).
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    from pippa_ops.cli.typer_app import main as assembled_main

    assembled_main(COMMANDS)


if __name__ == "__main__":
    main()
