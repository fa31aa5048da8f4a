"""The official `openai` client against `wgc run models/llama.walk --serve` on a tiny random Llama
checkpoint (WGC_LLAMA_DIR): chat and text completions, whole and streamed, greedy replies equal to
transformers' `generate` on the same weights (the prompt rendered by the checkpoint's chat template),
exact usage, finish_reason "length" at max_tokens and "stop" at a stop id or a stop string, and bad
input answered 400 (or 422, a schema violation) naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import torch
from wgc.models.llama.config import LlamaChatConfig
from wgc.models.llama.tokenizer import load_chat_tokenizer
from wgc.runtime.http.text.template import ChatTemplate

from tests.http.server import Server
from tests.models.llama.checkpoint import write_checkpoint
from tests.models.llama.helpers import llama_plan

transformers = pytest.importorskip("transformers")
STOP_PROBE = [{"role": "user", "content": "stop probe"}]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Tell me more"}]
PROMPT = "Once upon a time"
MAX = 12


class Checkpoint:
    """The checkpoint, its transformers model, and what the served model should answer."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.hf = write_checkpoint(directory, seed=7)
        self.tokenizer = load_chat_tokenizer(directory, LlamaChatConfig.from_directory(directory))
        self.template = ChatTemplate(self.tokenizer.chat_template, specials=self.tokenizer.template_tokens)
        self.stops = [257, 260]
        # a stop id the greedy reply to STOP_PROBE meets (a reply that ends by itself) and the other
        # prompts' replies do not
        probe = self.greedy(self.chat_ids(STOP_PROBE), MAX)
        others = {*self.greedy(self.chat_ids(MESSAGES), MAX), *self.greedy(self.tokenizer.encode_prompt(PROMPT), 8)}
        self.probe_at = next(i for i, t in enumerate(probe) if i > 0 and t not in others and t not in probe[:i])
        self.stops.append(probe[self.probe_at])
        (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": self.stops}), encoding="utf-8")

    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return self.tokenizer.encode(self.template.text(messages))

    def greedy(self, ids: list[int], max_new: int) -> list[int]:
        with torch.no_grad():
            out = self.hf.generate(torch.tensor([ids]), max_new_tokens=max_new, do_sample=False,
                                   eos_token_id=self.stops, pad_token_id=257)
        return out[0, len(ids):].tolist()

    def answer(self, ids: list[int], max_new: int = MAX) -> tuple[str, str, int]:
        """(text, finish_reason, completion_tokens) the server should give for prompt ids."""
        tokens = self.greedy(ids, max_new)
        cut = next((i for i, t in enumerate(tokens) if t in self.stops), None)
        shown = tokens if cut is None else tokens[:cut]
        text = self.tokenizer.decode(shown).decode("utf-8", errors="replace")
        return text, "length" if cut is None else "stop", len(tokens)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    return Checkpoint(tmp_path_factory.mktemp("llama-ckpt"))


@pytest.fixture(scope="module")
def client(checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    plan = llama_plan(tmp_path_factory.mktemp("llama-plan"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WGC_LLAMA_DIR", str(checkpoint.directory))
        server = Server(plan)
    try:
        with openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=30) as c:
            yield c
    finally:
        assert server.stop() == 128 + 15


def _stream(chunks: Any, field: str) -> tuple[str, list[str], Any]:
    text, finishes, usage = [], [], None
    for chunk in chunks:
        usage = chunk.usage or usage
        for c in chunk.choices:
            piece = c.delta.content if field == "delta" else c.text
            text.append(piece or "")
            if c.finish_reason:
                finishes.append(c.finish_reason)
    return "".join(text), finishes, usage


def test_chat_whole_and_streamed_equal_generate_with_exact_usage(client: openai.OpenAI,
                                                                 checkpoint: Checkpoint) -> None:
    ids = checkpoint.chat_ids(MESSAGES)
    text, finish, count = checkpoint.answer(ids)
    assert finish == "length"
    r = client.chat.completions.create(model="llama", messages=MESSAGES, max_tokens=MAX, temperature=0)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (text, finish)
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids), count)
    stream = client.chat.completions.create(model="llama", messages=MESSAGES, max_tokens=MAX, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    streamed, finishes, usage = _stream(stream, "delta")
    assert (streamed, finishes) == (text, [finish])
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (len(ids), count, len(ids) + count)


def test_a_stop_id_ends_the_reply_with_stop(client: openai.OpenAI, checkpoint: Checkpoint) -> None:
    text, finish, count = checkpoint.answer(checkpoint.chat_ids(STOP_PROBE))
    assert finish == "stop" and count == checkpoint.probe_at + 1  # the stop id is counted, not shown
    r = client.chat.completions.create(model="llama", messages=STOP_PROBE, max_tokens=MAX, temperature=0)
    assert (r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens) == (text, "stop",
                                                                                                     count)


def test_a_stop_string_cuts_the_text(client: openai.OpenAI, checkpoint: Checkpoint) -> None:
    text, _, _ = checkpoint.answer(checkpoint.chat_ids(MESSAGES))
    stop = next(ch for ch in text[1:] if ch != "\ufffd")  # random weights write few valid characters
    for stream in (False, True):
        r = client.chat.completions.create(model="llama", messages=MESSAGES, max_tokens=MAX, temperature=0,
                                           stop=[stop], stream=stream)
        got, finishes, _ = _stream(r, "delta") if stream else (r.choices[0].message.content,
                                                               [r.choices[0].finish_reason], None)
        assert (got, finishes) == (text[:text.index(stop)], ["stop"])


def test_text_completions_whole_streamed_and_from_token_ids(client: openai.OpenAI, checkpoint: Checkpoint) -> None:
    prompt = PROMPT
    ids = checkpoint.tokenizer.encode_prompt(prompt)
    assert ids[0] == 256  # the tokenizer's BOS, as a raw prompt gets it
    text, finish, count = checkpoint.answer(ids, 8)
    r = client.completions.create(model="llama", prompt=prompt, max_tokens=8, temperature=0)
    assert (r.object, r.choices[0].text, r.choices[0].finish_reason) == ("text_completion", text, finish)
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids), count)
    stream = client.completions.create(model="llama", prompt=prompt, max_tokens=8, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    streamed, finishes, usage = _stream(stream, "text")
    assert (streamed, finishes, usage.completion_tokens) == (text, [finish], count)
    by_ids = client.completions.create(model="llama", prompt=ids, max_tokens=8, temperature=0)
    assert by_ids.choices[0].text == text and by_ids.usage.prompt_tokens == len(ids)


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": ["two", "prompts"]}, "prompt"),
    ({"prompt": "x", "echo": True}, "echo"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, 2, 10**6]}, "prompt"),
])
def test_bad_completions_are_4xx_naming_the_field(client: openai.OpenAI, body: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client.post("/completions", body={"model": "llama", **body}, cast_to=object)
    assert err.value.status_code in (400, 422) and param in str(err.value.body)
