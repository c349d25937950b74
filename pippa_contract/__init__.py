"""The contract between the laptop (pippa_ops), the host agent (pippa_agent) and the trainer
(training_core), as code: run-dir layout, names and run ids, the metrics.jsonl reader and writer
rules, run states, error kinds, and the agent's verbs. docs/CONTRACTS.md describes it; this package
is what both sides import.

Standard library only, python3 >= 3.8: it is shipped to hosts inside the agent bundle.
"""
