"""wgc, the Walk Graph Compiler."""

__version__ = "0.1.0"
