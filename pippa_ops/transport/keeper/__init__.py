"""The connection keeper: a background process per user that holds authenticated SSH connections
between commands (``server``), and the command's side of it (``client``, ``process``).

Imports point one way: ``wire`` (the frames, stdlib only: the warm client imports it) and ``ops`` (the
typed requests) at the bottom; ``transport.sshconn`` (asyncssh, the direct path's too) under ``pool``
and ``relay``, those under ``server``; ``process`` under ``client``. Nothing here is imported by
``__init__``: a warm command that needs ``wire`` pays for nothing else.
"""
