"""`python -m wgc` is the `wgc` command."""

from wgc.cli.main import main

main()
