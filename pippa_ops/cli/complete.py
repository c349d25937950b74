"""Shell completion of the names pippa knows (typer's ``autocompletion``): hosts and recipes.

A completion runs on every Tab: it reads the inventory files and ~/.ssh/config, never a host, and a
broken file completes nothing rather than printing a traceback into the user's prompt.
"""

from __future__ import annotations


def host_names(incomplete: str) -> list[str]:
    """``local``, the inventory's hosts and the ~/.ssh/config aliases that start with ``incomplete``."""
    try:
        from pippa_ops.hosts.inventory import LOCAL, load_inventory, load_ssh_config, ssh_aliases

        names = [LOCAL, *load_inventory(), *ssh_aliases(load_ssh_config())]
    except Exception:
        return []
    return [n for n in dict.fromkeys(names) if n.startswith(incomplete)]


def recipe_names(incomplete: str) -> list[str]:
    """The project's recipes that start with ``incomplete``."""
    try:
        from pippa_ops.runs.launching.recipes import list_recipes

        names = [r.name for r in list_recipes()]
    except Exception:
        return []
    return [n for n in names if n.startswith(incomplete)]
