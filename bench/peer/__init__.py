"""bench/peer_vllm.py's parts: the random-weight checkpoints both systems load, the vLLM side (run by
the vLLM venv's interpreter as a subprocess), the wgc side, the HTTP load generator and the tables."""
