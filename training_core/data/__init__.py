"""Training rows: datasets by name (``loaders``: arithmetic, GSM8K), MATH problems (``math``), and the
prompt/response pairs the SFT and DPO trainers read (``pairs``). Torch-free."""
