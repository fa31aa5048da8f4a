"""Where every process of one runtime listens: a PULL socket per rank and one for the coordinator.

IPC (Unix domain) sockets in a directory made for this runtime with mode 0700:
reachable from this machine only, and only by this user.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

_MAX_PATH = 100  # a Unix socket path must fit in sockaddr_un (108 bytes on Linux)


@dataclass(frozen=True)
class Endpoints:
    coordinator: str
    ranks: tuple[str, ...]

    @staticmethod
    def in_directory(directory: str, n_ranks: int) -> Endpoints:
        return Endpoints(f"ipc://{directory}/coordinator", tuple(f"ipc://{directory}/rank{r}" for r in range(n_ranks)))


def make_run_directory() -> str:
    """A fresh private directory for one runtime's sockets and files (the caller removes it)."""
    base = tempfile.gettempdir()
    if len(base) + len("/wgc-XXXXXXXX/coordinator") > _MAX_PATH:
        base = "/tmp"
    directory = tempfile.mkdtemp(prefix="wgc-", dir=base)
    os.chmod(directory, 0o700)
    return directory
