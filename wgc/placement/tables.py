"""Facts the placement rules consult, kept as data: GPU models, default transports and engine settings,
bounds. The values a key allows are in the schema itself (spec.py)."""

from __future__ import annotations

# Memory per GPU as nvidia-smi reports it (MiB). `cluster.memory` overrides the table.
GPU_MEMORY_MIB: dict[str, int] = {"H100": 81559, "H200": 143771, "A100-80GB": 81920, "A100-40GB": 40960,
                                  "L40S": 46068, "L4": 23034}
# device → (intra_host, inter_host)
DEFAULT_TRANSPORT: dict[str, tuple[str, str]] = {"cpu": ("shm", "gloo"), "cuda": ("cuda_ipc", "nccl")}

# Engine defaults computed from other keys (the plain ones are in the schema, spec.py).
DEFAULT_MAX_BATCH = 16  # when no CUDA-graph buckets are given; else the largest bucket
# Tokens a kv component may write per scheduling round (decodes 1 each, prompt chunks their
# length), by device kind; raised to max_batch when that is larger (a round of decodes must fit).
DEFAULT_TOKEN_BUDGET: dict[str, int] = {"cpu": 512, "cuda": 8192}
# Tokens of a round in which the component decodes nothing (every call a prompt chunk), by device
# kind; raised to the token budget when that is larger. cpu: vLLM's CPU server's
# max_num_batched_tokens; cuda: the token budget's (the CUDA path is unchanged, and unmeasured).
DEFAULT_PREFILL_TOKEN_BUDGET: dict[str, int] = {"cpu": 2048, "cuda": 8192}

# Streams: default capacity in items (at least two chunks), and the size of item types.
DEFAULT_STREAM_CAPACITY = 64
TOKEN_BYTES = 8  # token ids travel as i64

MAX_EXTENDS_DEPTH = 16

# Hard bounds on placement values, so that no value can make the compiler or a rank exhaust memory
# or time before a located diagnostic (docs/placement.md, *Bounds*).
MAX_RANKS = 4096  # ranks in one cluster: one process and one device each
MAX_GPUS_PER_HOST = 16  # cuda ranks on one host (one GPU each): declare [[cluster.hosts]] beyond
MAX_BATCH = 65536  # max_batch and CUDA-graph buckets
MAX_TOKEN_BUDGET = 2**20  # tokens per scheduling round
MAX_SIZE = 64 * 2**40  # bytes: any size, and what one rank may hold when its memory is not known
MAX_INTEGER = 2**53  # any other integer (exact as a float and in JSON)
MAX_COUNT = 2**31  # a request limit counted in [serve]: beyond any request the frontend could parse
MAX_SECONDS = 86400.0  # a request limit in seconds
