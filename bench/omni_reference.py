"""bench/omni_speech.py's in-process side: the tiny Qwen3-Omni components as a worker builds them,
transformers' `Qwen3OmniMoeForConditionalGeneration` on their weights, the TTFA floor timed on the
components, and the greedy codec frames of one request through the compiled walk (LocalCluster).

The transformers twin is built as tests/models/qwen3_omni/test_talker_with_thinker.py builds it (the
thinker and talker converters of tests/models/qwen3_omni/ are imported, not copied): every weight
copied from our components, float64 like the tiny thinker and talker on CPU, code2wav in float32
like ours, the eager attention and expert paths (the grouped kernels take no float64).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.models.qwen3_omni import chat  # noqa: E402
from wgc.models.qwen3_omni.config import VocabMap  # noqa: E402
from wgc.runtime.api import request_spec  # noqa: E402
from wgc.runtime.components.base import Call, Component, load_class  # noqa: E402
from wgc.runtime.process.local import LocalCluster  # noqa: E402

from tests.models.qwen3_omni import thinker_reference as tr  # noqa: E402
from tests.models.qwen3_omni.talker_helpers import hf_config, hf_configs, hf_modeling, hf_talker  # noqa: E402
from wgc.plan.model import Plan  # noqa: E402

SPEAKER = "Chelsie"  # greedy, the tiny preset's Ethan ends some replies at frame 0 (random weights)
FLOOR_FRAMES = 25  # the first chunk of the walk's left_context(25, 25) stream


def components(plan: Plan) -> dict[str, Component]:
    """Every component of the plan, constructed as a worker process constructs it (the tiny preset
    when WGC_QWEN3_OMNI_DIR is unset), in this process."""
    return {c.name: load_class(c.cls)(c, 0, "cpu") for c in plan.components}


def rows_shared(comps: dict[str, Component]) -> bool:
    """Whether the talker's seven thinker rows are the thinker's input embeddings (one model)."""
    th, tk = comps["thinker"], comps["talker"]
    ids = list(tk.config.thinker.rows())
    want = th.model.model.embed_tokens.weight[ids].to(tk.model.thinker_rows.dtype)
    return bool(torch.allclose(tk.model.thinker_rows, want))


def twin(comps: dict[str, Component]) -> Any:
    """transformers' whole model with our components' weights."""
    th, tk, cw = comps["thinker"], comps["talker"], comps["code2wav"]
    tokens, vmap = th.config.tokens, VocabMap(th.config)
    config = hf_configs.Qwen3OmniMoeConfig(
        thinker_config=tr.hf_config(th.config).to_dict(), talker_config=hf_config(tk.config).to_dict(),
        code2wav_config=cw.config.hf_config(),
        **{f"{name}_token_id": vmap.to_model(getattr(tokens, name))
           for name in ("im_start", "im_end", "tts_pad", "tts_bos", "tts_eos", "system", "user", "assistant")})
    for part in (config.thinker_config, config.thinker_config.text_config, config.talker_config,
                 config.talker_config.text_config):
        part._attn_implementation = "eager"
        part._experts_implementation = "eager"
    model = hf_modeling.Qwen3OmniMoeForConditionalGeneration(config).eval()
    model.thinker = tr.reference(th).double()
    model.talker = hf_talker(tk)
    model.code2wav.load_state_dict(cw.net.state_dict(), strict=True)
    model.frames = []  # the codes each generate hands code2wav: [B, 16, n]
    decode = model.code2wav.chunked_decode
    model.code2wav.chunked_decode = lambda codes, **kw: model.frames.append(codes) or decode(codes, **kw)
    return model


def prompt_ids(thinker: Component, text: str) -> list[int]:
    """The chat template's ids for one user turn and the assistant header, in the model vocabulary."""
    t, vmap = thinker.config.tokens, VocabMap(thinker.config)
    ids = [t.im_start, t.user, t.newline, *chat.encode(thinker.tokenizer, text), t.im_end, t.newline,
           t.im_start, t.assistant, t.newline]
    return [vmap.to_model(i) for i in ids]


def hf_generate(model: Any, thinker: Component, prompts: list[str], reply: int, frames: int) -> tuple[
        list[list[int]], list[Tensor]]:
    """One `generate(return_audio=True)` over the prompts (left-padded when several), greedy thinker
    and talker: each row's reply (Qwen ids) and waveform [samples]."""
    vmap = VocabMap(thinker.config)
    eos = vmap.to_model(thinker.config.tokens.im_end)
    rows = [prompt_ids(thinker, p) for p in prompts]
    width = max(map(len, rows))
    x = torch.tensor([[eos] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    with torch.no_grad():
        seq, wavs = model.generate(input_ids=x, attention_mask=mask, speaker=SPEAKER, return_audio=True,
                                   thinker_max_new_tokens=reply, thinker_do_sample=False, thinker_eos_token_id=eos,
                                   talker_do_sample=False, talker_max_new_tokens=frames + 1)
    wavs = [wavs.reshape(-1)] if isinstance(wavs, Tensor) else list(wavs)
    replies = [[vmap.from_model(t) for t in s if t != eos] for s in seq[:, width:].tolist()]
    return replies, wavs


def params(reply: int, frames: int) -> dict[str, Any]:
    """The request's params: greedy thinker and talker, `reply` tokens, `frames` codec frames."""
    return {"max_tokens": reply, "temperature": 0.0, "talker_temperature": 0.0, "speaker": SPEAKER,
            "talker_max_tokens": frames}


# ---- the TTFA floor, on the components -------------------------------------------------------------

def floor_parts(comps: dict[str, Component], prompts: list[str], reply: int, base: int) -> dict[str, float]:
    """Seconds, at batch len(prompts): the thinker's prefill (the prompt part and begin_reply), the
    talker's first 25 frames (its prefill, last_prefill, 24 decodes) and code2wav on one 25-frame
    window per request. The thinker's reply tokens the talker reads are decoded untimed."""
    th, tk, cw = comps["thinker"], comps["talker"], comps["code2wav"]
    reqs = [base + i for i in range(len(prompts))]
    greedy = (0.0, 1.0)
    talker_args = (0.0, 50, 1.05)
    start = time.perf_counter()
    h = th.prefill_text([Call(r, "", (p,)) for r, p in zip(reqs, prompts)])
    toks = th.begin_reply([Call(r, "", greedy) for r in reqs])
    t_prefill = time.perf_counter() - start
    rows = [th.talker_input([Call(r, "", (t,)) for r, t in zip(reqs, toks)])]
    for _ in range(min(reply, FLOOR_FRAMES) - 1):
        toks = th.decode([Call(r, "", (t, *greedy)) for r, t in zip(reqs, toks)])
        rows.append(th.talker_input([Call(r, "", (t,)) for r, t in zip(reqs, toks)]))
    start = time.perf_counter()
    tk.prefill([Call(r, "", (x,)) for r, x in zip(reqs, h)])
    frames = [tk.last_prefill([Call(r, "", (x, SPEAKER, *talker_args)) for r, x in zip(reqs, rows[0])])]
    for step in range(1, FLOOR_FRAMES):
        text = rows[step] if step < len(rows) else [None] * len(reqs)
        frames.append(tk.decode([Call(r, "", (f, x, *talker_args)) for r, f, x in zip(reqs, frames[-1], text)]))
    t_talker = time.perf_counter() - start
    chunks = [torch.stack([torch.as_tensor(f[i]) for f in frames]) for i in range(len(reqs))]  # [25, 16] each
    start = time.perf_counter()
    cw.decode([Call(r, "", (c,)) for r, c in zip(reqs, chunks)])
    t_window = time.perf_counter() - start
    for r in reqs:
        th.release(r)
        tk.release(r)
    return {"prefill": t_prefill, "talker": t_talker, "window": t_window,
            "floor": t_prefill + t_talker + t_window}


def median_parts(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


# ---- greedy parity through the compiled walk --------------------------------------------------------

def wgc_greedy(plan: Plan, comps: dict[str, Component], prompt: str, reply: int, frames: int) -> tuple[
        list[int], Tensor, Tensor]:
    """One request through the walk on LocalCluster (these components, every message through the wire
    codec): its reply, its codec frames [F, 16] (the new frames of each chunk code2wav decodes) and
    its streamed audio [samples]."""
    cw = comps["code2wav"]
    seen: list[Tensor] = []
    decode = cw.decode_chunks
    cw.decode_chunks = lambda chunks: seen.extend(chunks) or decode(chunks)
    try:
        cluster = LocalCluster(plan, lambda spec, rank: comps[spec.name], fake_inputs=False)
        out = cluster.run([request_spec(params=params(reply, frames), parts=[{"kind": "text", "payload": prompt}],
                                        outputs=["text", "audio"])])
    finally:
        cw.decode_chunks = decode
    got = next(iter(out.values()))
    new = [c[cw.windows.context(len(c)):] for c in seen]
    codes = torch.cat(new) if new else torch.empty(0, cw.config.num_quantizers, dtype=torch.int64)
    audio = torch.cat(got["audio"]) if got.get("audio") else torch.empty(0)
    return [int(t) for t in got.get("text", [])], codes, audio
