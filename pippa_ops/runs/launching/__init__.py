"""Starting runs: recipes, the host artifacts (cmd.sh, job.sbatch) from templates, the scheduler seam
(tmux or SLURM), launch, stop, resume, the start-up watch, dry runs, exports, recover. Imports only
``runs.records``."""
