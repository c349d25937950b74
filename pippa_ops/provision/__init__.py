"""Provisioning a host for `pippa up`: checks, sync, setup, secrets, the alerts program, recovery at boot.

A layer above hosts/, runs/, sync and alerts/, which it composes; nothing below imports it.
"""
