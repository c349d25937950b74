"""``python3 -m pippa_ops ...``: the CLI without an installed ``pippa`` script (a GPU box with the repo
on PYTHONPATH, bench/gpu_acceptance.sh)."""

from pippa_ops.cli.app import main

main()
