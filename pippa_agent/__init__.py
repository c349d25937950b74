"""The host side of pippa: the program that answers each remote operation (``serve``), one module per
concern (probe and install, runs, SLURM, streams, pull, sync, W&B).

It is sent to a host once, with ``pippa_contract``, as one bundle (``bundle``, built by the
laptop's ``pippa_ops.transport.agent_client``) and cached there compiled, by content hash. It runs
on python3 >= 3.8 with the standard library and ``pippa_contract`` only; the laptop never imports
it (tests/test_architecture.py).
"""
