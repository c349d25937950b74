"""`pippa doctor` on the host: is this box sound? Passive checks read NVIDIA's structured output, the
kernel log and the host; active checks run the training python's GPU program (``run`` is the verb)."""
