"""Hosts: the inventory (where each connection field comes from), connecting, preparing, secrets."""
