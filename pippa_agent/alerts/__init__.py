"""The host's alerts (host code, run by the host program as ``alerts ...``): events about runs and the
host (``events``), delivery through Apprise (``deliver``), the idle-GPU watcher and disk check
(``watch``), its files (``files``) and the command line (``main``)."""
