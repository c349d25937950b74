"""The machine a run trains on: which platform it is (``platform``), which GPUs a launch names
(``gpu_ids``), which bf16 mode fits them (``precision``) and the doctor's active checks of the GPUs
(``doctor_active``, run by the host agent as ``python -m training_core.hardware.doctor_active``).
Nothing here imports torch at load time."""
