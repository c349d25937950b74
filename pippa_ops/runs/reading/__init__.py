"""Reading runs: logs, why, samples, curves, plots and compare, the catalog of every run, W&B's runs,
wait and the background watcher. Imports the other three parts of runs, none of which imports it."""
