"""The processes that run rounds.

The composition root (app, fleet), the daemon, the worker, their schedule, socket and
systemd glue.
"""
