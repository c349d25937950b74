"""Hosts: the inventory (where each connection field comes from), resolving endpoints, connecting."""
