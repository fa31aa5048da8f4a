"""Errors of the process runtime; each message is one line that names the rank."""

from __future__ import annotations


class StartError(RuntimeError):
    """The runtime could not start: a worker failed to start or did not report ready in time."""


class RankDownError(RuntimeError):
    """A rank is down, so the runtime cannot serve new requests: restart it."""
