"""Which open documents are TOML, and which TOML documents are placement files.

A document is TOML if the client says so (languageId `toml`) or its URI's path ends in `.toml`;
TOML is never analysed as a `.walk` program. Of those, a document is checked as a placement if
its URI's path ends in `.toml` (its bases and its program are found beside that path) and its text
is a placement: a top-level `cluster` table (every placement has one, its own or its base's) or a
top-level `extends` (a placement built on another). pyproject.toml, Cargo.toml and other TOML have
neither and get no diagnostics. While the text is not valid TOML the same is judged from its
lines: one opening a `cluster` table or setting a `cluster.` key, or an `extends =` before the
first table header; so a placement with a typo gets its syntax error and other TOML does not.
"""

from __future__ import annotations

import re
from tomllib import TOMLDecodeError, loads
from urllib.parse import urlsplit

# `[cluster`, `[cluster.hosts]`, `[[cluster.hosts]]`, `cluster.ranks = 2`; not `[clusters]`, not `[cluster-x]`.
_CLUSTER_LINE = re.compile(r"""^[ \t]*(\[\[?[ \t]*["']?cluster(?![\w-])|["']?cluster["']?[ \t]*\.)""", re.M)
_EXTENDS_LINE = re.compile(r"^[ \t]*extends[ \t]*=", re.M)
_HEADER_LINE = re.compile(r"^[ \t]*\[", re.M)


def has_toml_name(uri: str) -> bool:
    return urlsplit(uri).path.lower().endswith(".toml")


def is_toml(uri: str, language_id: str) -> bool:
    return language_id == "toml" or has_toml_name(uri)


def is_placement(text: str) -> bool:
    try:
        data = loads(text)
    except (TOMLDecodeError, RecursionError):
        return _reads_as_placement(text)
    return "cluster" in data or "extends" in data


def _reads_as_placement(text: str) -> bool:
    if _CLUSTER_LINE.search(text):
        return True
    header = _HEADER_LINE.search(text)
    return _EXTENDS_LINE.search(text[: header.start()] if header else text) is not None
