"""The language model component: prompt format, token ids, sampling, KV state (checkpoint/restore,
release, fork, export/import, exhaustion), the no-weights log line, and models/orpheus.walk run end
to end on the real tiny components."""

from __future__ import annotations

import logging

import pytest
import torch
from wgc.models.orpheus import KVExhausted, LanguageModel, SnacDecoder, TokenMap, encode_prompt, tiny_tokenizer
from wgc.models.orpheus.config import AUDIO_BASE, AUDIO_END, CODEBOOK, END_OF_SPEECH, FRAME
from wgc.models.orpheus.llm import kv_budget
from wgc.models.orpheus.vocab import CODE_START, COMPACT_VOCAB, load_tokenizer
from wgc.runtime.components.base import Call, load_class
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster

from tests.models.orpheus.helpers import llm_spec, orpheus_plan, snac_spec

DEFAULTS = (0.6, 0.8, 1.3)  # temperature, top_p, repetition penalty
DEFAULT = "default"  # the label of a component that declares none


@pytest.fixture(scope="module")
def lm() -> LanguageModel:
    return LanguageModel.tiny(llm_spec(page_size=4), 0, "cpu")


def generate(lm: LanguageModel, requests: list[int], steps: int, text: str = "hello") -> dict[int, list[int]]:
    tokens = lm.prefill([Call(r, "", (text, "tara", *DEFAULTS)) for r in requests])
    out = {r: [t] for r, t in zip(requests, tokens)}
    for _ in range(steps):
        tokens = lm.decode([Call(r, "", (out[r][-1], *DEFAULTS)) for r in requests])
        for r, t in zip(requests, tokens):
            out[r].append(t)
    return out


def release(lm: LanguageModel, *requests: int) -> None:
    for r in requests:
        lm.release(r)
    lm.pages.check()
    assert lm.pages.used_pages == 0 and lm.counters()["requests"] == 0


def test_prompt_format_and_tokenizer_round_trip(tmp_path) -> None:
    tok = tiny_tokenizer()
    ids = encode_prompt(tok, "tara", "Hi!")
    assert ids == [128259, 128000, *b"tara: Hi!", 128009, 128260, 128261, 128257]
    tok.save(str(tmp_path / "tokenizer.json"))
    assert encode_prompt(load_tokenizer(tmp_path), "tara", "Hi!") == ids
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        load_tokenizer(tmp_path / "missing")


def test_compact_token_map_round_trips_and_writes_frame_positions() -> None:
    m = TokenMap("compact")
    assert m.to_model(65) == 65 and m.from_model(65, 3) == 65
    assert m.from_model(m.to_model(END_OF_SPEECH), 5) == END_OF_SPEECH
    for step in range(9):
        orpheus = m.from_model(CODE_START + 77, step)
        assert orpheus == AUDIO_BASE + CODEBOOK * (step % FRAME) + 77
        assert m.to_model(orpheus) == CODE_START + 77
    assert m.to_model(AUDIO_END - 1) == COMPACT_VOCAB - 1
    with pytest.raises(ValueError, match="no id in the compact vocabulary"):
        m.to_model(5000)
    assert TokenMap("orpheus").from_model(AUDIO_BASE + 3, 4) == AUDIO_BASE + 3


def test_the_tiny_model_speaks_in_whole_frames(lm: LanguageModel) -> None:
    out = generate(lm, [1, 2, 3], steps=41)
    for tokens in out.values():
        assert all(AUDIO_BASE + CODEBOOK * (i % FRAME) <= t < AUDIO_BASE + CODEBOOK * (i % FRAME + 1)
                   for i, t in enumerate(tokens))  # every token a code of its frame position
    release(lm, 1, 2, 3)


def test_a_request_draws_the_same_tokens_alone_or_batched(lm: LanguageModel) -> None:
    alone = generate(lm, [7], steps=12, text="a b c")[7]
    release(lm, 7)
    lm.prefill([Call(8, "", ("a much longer prompt than the other one", "leo", *DEFAULTS))])  # another in the pool
    together = generate(lm, [9, 7], steps=12, text="a b c")[7]
    assert together == alone
    assert generate(lm, [10], steps=3, text="a b c")[10] != alone[:4]  # the seed comes from the request id
    release(lm, 7, 8, 9, 10)


def test_checkpoint_restore_rolls_back_a_speculative_step(lm: LanguageModel) -> None:
    tokens = generate(lm, [20], steps=6)[20]
    length, used = lm.pages.length(20, DEFAULT), lm.pages.used_pages
    mark = lm.checkpoint(20, DEFAULT)
    ahead = [lm.decode([Call(20, "", (tokens[-1], *DEFAULTS))])[0]]
    ahead.append(lm.decode([Call(20, "", (ahead[-1], *DEFAULTS))])[0])
    assert lm.pages.length(20, DEFAULT) == length + 2
    lm.restore(20, DEFAULT, mark)
    assert lm.pages.length(20, DEFAULT) == length and lm.pages.used_pages == used
    again = [lm.decode([Call(20, "", (tokens[-1], *DEFAULTS))])[0]]
    again.append(lm.decode([Call(20, "", (again[-1], *DEFAULTS))])[0])
    assert again == ahead  # same step, same draw: the rolled-back step left no trace
    release(lm, 20)


def test_fork_shares_pages_and_copies_on_write(lm: LanguageModel) -> None:
    lm.prefill([Call(30, "", ("fork me", "tara", *DEFAULTS))])  # 4-token pages: the last is partial
    lm.fork(30, "copy", DEFAULT)
    assert lm.pages.counters()["kv_pages_shared"] > 0
    logits = lm.forward([(30, DEFAULT, [CODE_START + 5]), (30, "copy", [CODE_START + 5])])
    torch.testing.assert_close(logits[0], logits[1])
    assert lm.pages.counters()["kv_copies"] >= 1
    release(lm, 30)


def test_export_import_moves_a_label_between_components(lm: LanguageModel) -> None:
    other = LanguageModel.tiny(llm_spec(page_size=16), 1, "cpu")  # another rank, other page size
    tokens = generate(lm, [40], steps=5)[40]
    state = lm.export_label(40, DEFAULT)
    other.import_label(40, DEFAULT, state)
    assert other.pages.length(40, DEFAULT) == lm.pages.length(40, DEFAULT)
    a = lm.decode([Call(40, "", (tokens[-1], *DEFAULTS))])
    b = other.decode([Call(40, "", (tokens[-1], *DEFAULTS))])
    assert a == b
    release(lm, 40)
    release(other, 40)


def test_an_exhausted_pool_fails_the_batch_and_allocates_nothing() -> None:
    small = LanguageModel.tiny(llm_spec(page_size=16, kv_memory=4 * 2 * 4 * 2 * 32 * 4 * 16), 0, "cpu")  # 4 pages
    assert small.pages.num_pages == 4
    with pytest.raises(KVExhausted, match="4 free of 4"):
        small.prefill([Call(1, "", ("x" * 40, "tara", *DEFAULTS)), Call(2, "", ("y" * 40, "tara", *DEFAULTS))])
    assert small.pages.used_pages == 0
    small.prefill([Call(1, "", ("short", "tara", *DEFAULTS))])
    release(small, 1)


def test_kv_budget_from_settings_or_the_cpu_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    assert kv_budget({"kv_memory": 1 << 20}, cpu) == 1 << 20
    monkeypatch.setenv("WGC_CPU_KV_MEMORY", "3MiB")
    assert kv_budget({}, cpu) == 3 << 20
    monkeypatch.setenv("WGC_CPU_KV_MEMORY", "3 parsecs")
    with pytest.raises(ValueError, match="WGC_CPU_KV_MEMORY"):
        kv_budget({}, cpu)
    assert 0 < kv_budget({"kv_memory_fraction": 0.001}, cpu)


def test_without_weights_the_tiny_preset_runs_and_says_so_in_one_line(monkeypatch, caplog) -> None:
    monkeypatch.delenv("WGC_ORPHEUS_DIR", raising=False)
    monkeypatch.delenv("WGC_SNAC_DIR", raising=False)
    for cls, spec in ((LanguageModel, llm_spec()), (SnacDecoder, snac_spec())):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="wgc.models.orpheus"):
            component = cls(spec, 0, "cpu")
        records = [r for r in caplog.records if r.name == "wgc.models.orpheus"]
        assert len(records) == 1 and records[0].levelno == logging.WARNING, [r.getMessage() for r in records]
        assert "no weights given" in records[0].getMessage() and "tiny" in records[0].getMessage()
        assert "\n" not in records[0].getMessage()
        assert "random weights" in component.source


def test_orpheus_walk_runs_end_to_end_on_the_tiny_components() -> None:
    made = []

    def factory(spec, rank):
        made.append(load_class(spec.cls).tiny(spec, rank, "cpu"))
        return made[-1]

    cluster = LocalCluster(orpheus_plan(), factory, fake_inputs=False)
    max_tokens = [49, 35, 30]
    out = cluster.run([RequestSpec(params={"max_tokens": n, "voice": v}, inputs={"prompt": "Hello there."},
                                   output_modalities=["audio"]) for n, v in zip(max_tokens, ["tara", "leo", "zoe"])])
    snac = next(c for c in made if isinstance(c, SnacDecoder))
    for n, outputs in zip(max_tokens, (out[r] for r in sorted(out))):
        audio = outputs["audio"]
        assert len(audio) == 1 + (n - 28) // 7  # one window per 7 tokens after the first 28
        assert all(a.dtype == torch.float32 and a.shape == (snac.frame,) and a.abs().sum() > 0 for a in audio)
    llm = next(c for c in made if isinstance(c, LanguageModel))
    assert llm.counters()["kv_pages_used"] == 0 and llm.counters()["requests"] == 0  # released
    assert snac.counters()["invalid_windows"] == 0
    assert llm.stats["forwards"] <= max(max_tokens) + 1  # batched: one forward per step for all requests
