"""Every environment knob wgc reads, in one place; all are prefixed WGC_.

    WGC_MAX_NESTING      deepest bracket nesting a .walk program may use (64)
    WGC_CPU_KV_MEMORY    KV pool of a kv component whose placement sets neither kv_memory nor
                         kv_memory_fraction, on CPU ("256MiB")
    WGC_CPU_THREADS      torch intra-op threads of a CPU rank's worker process (default: torch's own when
                         OMP_NUM_THREADS is set, else the host's cores shared out among the plan's CPU
                         ranks on it, at least 1)
    WGC_CPU_PACKED_LINEAR  0 turns off the CPU kv components' matrix products through oneDNN over packed
                         weights (runtime/engines/cpu_linear.py), back to F.linear (default on)
    WGC_CPU_KV_MIRROR    0 turns off the CPU decode step's dense mirror of the batch's K/V (runtime/engines/
                         kv_mirror.py), back to gathering the keys from the pages every layer (default on)
    WGC_HTTP_PLAIN       1: serve HTTP the plain way (uvicorn's h11 parser, asyncio's own event loop, every
                         request prepared on a worker thread) instead of httptools, uvloop and small
                         requests prepared on the loop; for comparing them (bench/http_overhead.py)
    WGC_EXPECTED_CONTEXT tokens the HTTP frontend expects one request to hold per KV label, when it
                         sizes its running slots from the KV pools (2048; a component's
                         max_seq_len caps it)
    WGC_ORPHEUS_DIR      local Hugging Face directory of Orpheus's language model (unset: tiny preset)
    WGC_LLAMA_DIR        local Hugging Face directory of a Llama-architecture chat model for
                         models/llama.walk (config.json, safetensors, tokenizer.json, tokenizer_config.json;
                         unset: tiny preset)
    WGC_SNAC_DIR         local directory of SNAC 24 kHz (unset: tiny random SNAC)
    WGC_SNAC_WHOLE_WINDOWS  1: Orpheus's codec decodes each 28-token window whole and slices its kept
                         frame, instead of computing the kept frame's receptive field only; for comparing
                         them (bench/peer/orpheus.py)
    WGC_API_KEY          the Bearer key of `wgc run --serve` when neither --api-key-file nor --api-key
                         is given (unset or empty: none); kept out of the workers' environment
    WGC_BAGEL_DIR        local BAGEL-7B-MoT directory (ema.safetensors, ae.safetensors, llm_config.json,
                         vit_config.json, tokenizer.json) for every BAGEL component (unset: tiny presets)
    WGC_HOST_TIMEOUT     seconds a host of a multi-host plan may go without a heartbeat before it is declared
                         down (the head, for each other host; each host, for the head); default 3
    WGC_QWEN3_OMNI_DIR   local Qwen3-Omni-30B-A3B-Instruct directory (config.json, the safetensors shards
                         with model.safetensors.index.json, tokenizer.json, preprocessor_config.json)
                         for every Qwen3-Omni component (unset: tiny presets)
    WGC_VJEPA2_DIR       local V-JEPA 2-AC directory (config.json and model.safetensors of
                         facebook/vjepa2-vitg-fpc64-256, ac_predictor.safetensors and .json from `wgc convert
                         vjepa2-ac`) for the encoder, masked predictor and AC predictor (unset: tiny presets)
    WGC_PI05_DIR         local lerobot/pi05_base-layout directory (config.json, model.safetensors,
                         PaliGemma's tokenizer.json, the policy_*processor*.safetensors statistics) for
                         π0.5's vit and llm (unset: tiny presets)
"""

from __future__ import annotations

import os
from pathlib import Path


def max_nesting() -> int:
    """Deepest bracket nesting a .walk program may use (WGC_MAX_NESTING, default 64)."""
    try:
        return max(8, int(os.environ.get("WGC_MAX_NESTING", "64")))
    except ValueError:
        return 64


def color_enabled(stream_is_tty: bool) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return stream_is_tty and "NO_COLOR" not in os.environ


DEFAULT_CPU_KV_MEMORY = "256MiB"


def weights_dir(knob: str) -> Path | None:
    """A model family's local weights directory (WGC_ORPHEUS_DIR, WGC_BAGEL_DIR, ...); None when unset."""
    value = os.environ.get(knob)
    return Path(value) if value else None


def cpu_kv_memory() -> int:
    """Bytes of the default CPU KV pool (WGC_CPU_KV_MEMORY, default 256MiB); a bad value is an error."""
    from wgc.placement.units import parse_size

    text = os.environ.get("WGC_CPU_KV_MEMORY") or DEFAULT_CPU_KV_MEMORY
    size, reason = parse_size(text)
    if size is None:
        raise ValueError(f"WGC_CPU_KV_MEMORY={text!r}: {reason}")
    return size


def cpu_threads(ranks_on_host: int) -> int | None:
    """Intra-op threads of one CPU worker: WGC_CPU_THREADS; None (torch's own) when OMP_NUM_THREADS is
    set; else the cores shared out among the `ranks_on_host` CPU ranks (two ranks on two cores must
    not each start two threads)."""
    text = os.environ.get("WGC_CPU_THREADS", "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"WGC_CPU_THREADS={text!r}: not a positive integer")
        return int(text)
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    return max(1, (os.cpu_count() or 1) // max(1, ranks_on_host))


def api_key() -> str | None:
    """The served API key from WGC_API_KEY (surrounding whitespace dropped); None when unset or empty."""
    return os.environ.get("WGC_API_KEY", "").strip() or None


DEFAULT_EXPECTED_CONTEXT = 2048


def expected_context() -> int:
    """Tokens a served request is expected to hold per KV label (WGC_EXPECTED_CONTEXT, default 2048);
    a value that is not a positive integer is an error."""
    text = os.environ.get("WGC_EXPECTED_CONTEXT") or str(DEFAULT_EXPECTED_CONTEXT)
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"WGC_EXPECTED_CONTEXT={text!r}: expected a positive number of tokens")
    return int(text)


def host_timeout() -> float:
    """WGC_HOST_TIMEOUT: a host's allowed silence in seconds (default 3, at least 0.5)."""
    try:
        return max(0.5, float(os.environ.get("WGC_HOST_TIMEOUT", "3")))
    except ValueError:
        return 3.0


def cpu_packed_linear() -> bool:
    """WGC_CPU_PACKED_LINEAR: whether a CPU kv component packs its weights for oneDNN (default on; 0 is off)."""
    return os.environ.get("WGC_CPU_PACKED_LINEAR", "1").strip().lower() not in ("0", "false", "no", "off")


def cpu_kv_mirror() -> bool:
    """WGC_CPU_KV_MIRROR: 0 turns off the CPU decode step's dense K/V mirror (runtime/engines/kv_mirror.py)."""
    return os.environ.get("WGC_CPU_KV_MIRROR", "1").strip().lower() not in ("0", "false", "no", "off")


def gc_freeze() -> bool:
    """WGC_GC_FREEZE: 0 keeps a serving process's start-up heap under the cycle collector
    (runtime/process/heap.py freezes it by default)."""
    return os.environ.get("WGC_GC_FREEZE", "1").strip().lower() not in ("0", "false", "no", "off")


def snac_whole_windows() -> bool:
    """WGC_SNAC_WHOLE_WINDOWS: Orpheus's codec decodes whole windows (default off)."""
    return os.environ.get("WGC_SNAC_WHOLE_WINDOWS", "").strip().lower() in ("1", "true", "yes", "on")


def http_plain() -> bool:
    """WGC_HTTP_PLAIN: serve HTTP without httptools, uvloop and inline preparation (default off)."""
    return os.environ.get("WGC_HTTP_PLAIN", "").strip().lower() in ("1", "true", "yes", "on")
