"""wgc.runtime: the coordinator, workers and HTTP frontend that serve a compiled plan."""
