"""The split of each shared layer kind across a tensor-parallel group, as pure arithmetic on sizes.

One statement of what rank `rank` of a `tp`-way copy keeps of each whole tensor (`weights_io.Part`:
a range of output rows, dim 0, or of input columns, dim 1), used both to cut a whole model in place
(random weights) and to read a checkpoint per shard (safetensors slices): tp_shard.py applies these
to a module tree, tensor_parallel.shard_cuts to a Llama config.

- SelfAttention: q/k/v column-parallel (heads/tp query heads; kv_heads/tp KV heads, or, when tp
  exceeds them, the one KV head this rank's query heads share), o row-parallel over the same query
  columns. A q/k norm is an RMSNorm over head_dim with one weight for every head: it stays whole.
- SwiGLU: gate and up column-parallel over intermediate/tp rows, down row-parallel over them.
- Embedding / LMHead: a contiguous range of vocabulary rows (the first vocab % tp ranks one longer).
- SparseMoE: experts partitioned, each expert whole on one rank (`expert_range`), the router whole
  on every rank. Of the two splits this is the one whose arithmetic is exact against tp 1: an
  expert's three products are the very products tp 1 computes (same rows, same weights, no inner
  sum split across ranks), and the ranks' weighted expert rows are combined by an all-reduce in
  which each row has exactly one non-zero contributor (x + 0 = x), before the same per-token sum
  tp 1 does; cutting every expert's gate/up/down instead splits each down product's inner sum over
  the ranks, which reassociates it (tp_modules.ExpertParallelMoE).
"""

from __future__ import annotations

from wgc.models.weights_io import Part


def split(n: int, size: int, rank: int) -> tuple[int, int]:
    """[start, end) of rank's contiguous part of n items (the first n % size parts one longer)."""
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    return kv_heads // tp if kv_heads >= tp else 1


def local_heads(heads: int, kv_heads: int, tp: int) -> tuple[int, int]:
    """(query heads, KV heads) one rank holds: what its KV cache geometry is made of."""
    check_heads(heads, kv_heads, tp)
    return heads // tp, kv_heads_per_rank(kv_heads, tp)


def check_heads(heads: int, kv_heads: int, tp: int) -> None:
    """ValueError (one line) for a degree the attention cannot be split by."""
    if heads % tp:
        raise ValueError(f"tp = {tp} does not divide the {heads} attention heads")
    if kv_heads >= tp and kv_heads % tp:
        raise ValueError(f"tp = {tp} does not divide the {kv_heads} KV heads")
    if kv_heads < tp and tp % kv_heads:
        raise ValueError(f"tp = {tp} is not a multiple of the {kv_heads} KV heads (each would be replicated)")


def check_mlp(intermediate: int, tp: int, what: str = "MLP") -> None:
    if intermediate % tp:
        raise ValueError(f"tp = {tp} does not divide the {what}'s {intermediate} intermediate features")


def check_experts(experts: int, tp: int) -> None:
    if experts % tp:
        raise ValueError(f"tp = {tp} does not divide the {experts} experts (each rank holds experts / tp whole)")


def check_degree(what: str, tp: int, heads: int, kv_heads: int, intermediate: int | None = None,
                 experts: int | None = None) -> None:
    """ValueError naming `what` (a component) for a degree its layers cannot be split by: checked before
    anything is built or read, so a wrong tp fails start-up in one line."""
    if tp == 1:
        return
    try:
        check_heads(heads, kv_heads, tp)
        if intermediate is not None:
            check_mlp(intermediate, tp)
        if experts is not None:
            check_experts(experts, tp)
    except ValueError as err:
        raise ValueError(f"{what}: {err}") from None


def attention_cuts(prefix: str, heads: int, kv_heads: int, head_dim: int, tp: int, rank: int,
                   suffixes: tuple[str, ...] = ("",)) -> dict[str, Part]:
    """The weights of one attention module under `prefix` (e.g. "layers.0.self_attn."), for every
    expert's projections (`suffixes`: "" for the module's own, "_moe_gen" for BAGEL's second)."""
    check_heads(heads, kv_heads, tp)
    local, kv = local_heads(heads, kv_heads, tp)
    kv_index = rank * kv if kv_heads >= tp else rank // (tp // kv_heads)  # the first KV head this rank keeps
    q = (rank * local * head_dim, (rank + 1) * local * head_dim)
    kvs = (kv_index * head_dim, (kv_index + kv) * head_dim)
    out: dict[str, Part] = {}
    for s in suffixes:
        out.update({
            f"{prefix}q_proj{s}.weight": Part(0, *q),  # column-parallel: output rows
            f"{prefix}k_proj{s}.weight": Part(0, *kvs),
            f"{prefix}v_proj{s}.weight": Part(0, *kvs),
            f"{prefix}o_proj{s}.weight": Part(1, *q),  # row-parallel: input columns
        })
    return out


def mlp_cuts(prefix: str, intermediate: int, tp: int, rank: int) -> dict[str, Part]:
    """The weights of one SwiGLU under `prefix` (e.g. "layers.0.mlp.")."""
    check_mlp(intermediate, tp)
    part = intermediate // tp
    rows = (rank * part, (rank + 1) * part)
    return {f"{prefix}gate_proj.weight": Part(0, *rows), f"{prefix}up_proj.weight": Part(0, *rows),
            f"{prefix}down_proj.weight": Part(1, *rows)}


def vocab_cut(vocab: int, tp: int, rank: int) -> Part:
    """The rows of an embedding table or LM head a rank keeps."""
    return Part(0, *split(vocab, tp, rank))


def expert_range(experts: int, tp: int, rank: int) -> range:
    """The experts a rank holds whole (a contiguous block of experts / tp)."""
    check_experts(experts, tp)
    return range(*split(experts, tp, rank))
