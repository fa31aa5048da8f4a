"""The official `openai` package against a real server on loopback: chat, speech, images, errors."""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import Iterator

import openai
import pytest

from tests.http.server import API_KEY, Server


@pytest.fixture(scope="module")
def client(toy: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{toy.url}/v1", api_key=API_KEY, max_retries=0, timeout=20) as c:
        yield c


def echo(text: str) -> str:
    return f"Echo: {text}"


def test_chat_non_streaming_answers_with_exact_usage(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="toy", messages=[
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "héllo 🙂"},
    ])
    choice = r.choices[0]
    assert choice.message.content == echo("héllo 🙂")
    assert choice.finish_reason == "stop"
    prompt = "<|system|>be brief\n<|user|>héllo 🙂\n<|assistant|>"  # the toy's chat template
    assert r.usage.prompt_tokens == len(prompt.encode())
    assert r.usage.completion_tokens == len(echo("héllo 🙂").encode())  # every byte the walk emitted
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_multi_turn_goes_through_the_template(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="toy", messages=[
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "Echo: first"},
        {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "text", "text": " part"}]},
    ])
    assert r.choices[0].message.content == echo("second part")


def test_chat_streaming_sends_whole_characters_then_done(client: openai.OpenAI) -> None:
    text = "ü€𝄞 mixed"  # 2-, 3- and 4-byte characters, each split over several tokens
    stream = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": text}], stream=True,
                                            stream_options={"include_usage": True})
    deltas, finishes, usage = [], [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                deltas.append(c.delta.content)
            if c.finish_reason:
                finishes.append(c.finish_reason)
    assert "".join(deltas) == echo(text)
    assert "�" not in "".join(deltas)
    assert {"€", "𝄞", "ü"} <= set(deltas)  # each multi-byte character came whole, in one delta
    assert finishes == ["stop"]
    assert usage is not None and usage.completion_tokens == len(echo(text).encode())


def test_n_streamed_choices_interleave_and_each_finishes(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "two"}], n=2,
                                            stream=True, seed=1)
    text, finish = ["", ""], [None, None]
    for chunk in stream:
        for c in chunk.choices:
            text[c.index] += c.delta.content or ""
            finish[c.index] = c.finish_reason or finish[c.index]
    assert text == [echo("two")] * 2 and finish == ["stop", "stop"]


def test_streamed_chat_audio_comes_as_pcm_chunks(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "hi"}], stream=True,
                                            modalities=["text", "audio"], audio={"voice": "alto", "format": "pcm16"})
    pcm, text = b"", ""
    for chunk in stream:
        for c in chunk.choices:
            text += c.delta.content or ""
            if c.delta.audio is not None and c.delta.audio.data:
                pcm += base64.b64decode(c.delta.audio.data)
    assert text == echo("hi") and len(pcm) == 2 * 20 * len(echo("hi"))


def test_max_tokens_cuts_with_finish_reason_length(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "a long answer"}],
                                       max_tokens=5)
    assert r.choices[0].message.content == "Echo:"
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5
    r = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "ab"}],
                                       max_completion_tokens=3)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == ("Ech", "length")


def test_stop_strings_end_the_text_before_them(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "one two three"}],
                                       stop=["two", "zzz"])
    assert r.choices[0].message.content == "Echo: one "
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == len(b"Echo: one two")  # the tokens that arrived, and no more
    chunks = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "one two"}],
                                            stop="e t", stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Echo: on"


def test_n_choices_and_seed(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "x"}], n=3, seed=7,
                                       temperature=0.5, top_p=0.9)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.message.content == echo("x") for c in r.choices)
    assert r.usage.completion_tokens == 3 * len(echo("x"))


def test_chat_with_an_image_part_sends_the_image_in_order(client: openai.OpenAI) -> None:
    png = base64.b64encode(_png(3, 2)).decode()
    r = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": [
        {"type": "text", "text": "look "},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
        {"type": "text", "text": " here"},
    ]}])
    assert r.choices[0].message.content == echo("look [image 2x3x3] here")


def test_chat_with_audio_out_gives_text_and_a_wav(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": "hi"}],
                                       modalities=["text", "audio"], audio={"voice": "bass", "format": "wav"})
    message = r.choices[0].message
    assert message.content == echo("hi") and message.audio.transcript == echo("hi")
    with wave.open(io.BytesIO(base64.b64decode(message.audio.data))) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (8000, 1, 2)
        assert w.getnframes() == 20 * len(echo("hi"))  # the toy vocoder: 20 samples per token


def test_speech_streams_audio_as_it_is_produced(client: openai.OpenAI) -> None:
    text = "streamed speech"
    with client.audio.speech.with_streaming_response.create(model="toy", voice="alto", input=text,
                                                            response_format="pcm") as response:
        assert response.headers["content-type"] == "audio/pcm"
        assert response.headers["x-sample-rate"] == "8000"
        chunks = list(response.iter_bytes(chunk_size=None))
    pcm = b"".join(chunks)
    assert len(pcm) == 2 * 20 * len(echo(text).encode())
    assert len(chunks) > 1  # sent as produced, not in one piece
    streamed = client.audio.speech.create(model="toy", voice="bass", input="hi", response_format="wav").read()
    whole = client.audio.speech.create(model="toy", voice="bass", input="hi", response_format="wav",
                                       extra_body={"stream": False}).read()
    assert streamed[44:] == whole[44:]  # the same samples; a streamed WAV cannot know its length up front
    with wave.open(io.BytesIO(whole)) as w:
        assert (w.getnframes(), w.getframerate()) == (20 * len(echo("hi")), 8000)


def test_image_generation_honours_size_n_and_seed(client: openai.OpenAI) -> None:
    r = client.images.generate(model="toy", prompt="a gradient", size="24x12", n=2, extra_body={"seed": 5})
    assert len(r.data) == 2 and r.size == "24x12"
    shapes = [_png_size(base64.b64decode(d.b64_json)) for d in r.data]
    assert shapes == [(24, 12), (24, 12)]
    assert r.data[0].b64_json != r.data[1].b64_json  # seed 5 and 6: different blue
    with pytest.raises(openai.BadRequestError) as err:
        client.images.generate(model="toy", prompt="too big", size="1024x1024")
    assert err.value.code == "unsupported_value" and "width must be in 8..128" in err.value.message


def test_image_edit_takes_the_image_as_a_file(client: openai.OpenAI) -> None:
    r = client.images.edit(model="toy", image=("in.png", _png(4, 4), "image/png"), prompt="make it blue",
                           size="8x8")
    assert _png_size(base64.b64decode(r.data[0].b64_json)) == (8, 8)


@pytest.mark.parametrize(("call", "exc", "code"), [
    (lambda c: c.chat.completions.create(model="toy", messages=[]), openai.UnprocessableEntityError,
     "validation_error"),
    (lambda c: c.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}]),
     openai.NotFoundError, "model_not_found"),
    (lambda c: c.chat.completions.create(model="toy", messages=[{"role": "user", "content": "x"}],
                                         logprobs=True), openai.BadRequestError, "unsupported_parameter"),
    (lambda c: c.chat.completions.create(model="toy", messages=[{"role": "user", "content": "x"}],
                                         max_tokens=100000), openai.UnprocessableEntityError, "validation_error"),
    (lambda c: c.chat.completions.create(model="toy", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]),
     openai.BadRequestError, "unsupported_value"),
    (lambda c: c.chat.completions.create(model="toy", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGEgcG5n"}}]}]),
     openai.BadRequestError, "invalid_media"),
    (lambda c: c.audio.speech.create(model="toy", voice="nova", input="x"), openai.BadRequestError,
     "unsupported_value"),
    (lambda c: c.audio.speech.create(model="toy", voice="alto", input="x", response_format="mp3"),
     openai.UnprocessableEntityError, "validation_error"),
    (lambda c: c.images.generate(model="toy", prompt="x", quality="hd"), openai.BadRequestError,
     "unsupported_parameter"),
])
def test_errors_raise_the_right_exception_class(client: openai.OpenAI, call, exc, code) -> None:
    with pytest.raises(exc) as err:
        call(client)
    assert err.value.code == code
    assert err.value.type and err.value.message


def test_a_wrong_api_key_is_an_authentication_error(toy: Server) -> None:
    with openai.OpenAI(base_url=f"{toy.url}/v1", api_key="wrong", max_retries=0) as c, \
            pytest.raises(openai.AuthenticationError):
        c.models.list()


def test_models_lists_the_plan_and_its_routes(client: openai.OpenAI) -> None:
    (card,) = client.models.list().data
    assert card.id == "toy"
    assert card.model_extra["routes"] == {"chat": True, "completions": True, "speech": True, "images": True,
                                          "edits": True, "world_model": False, "policy": False, "generate": True}


def _png(w: int, h: int) -> bytes:
    import numpy as np
    from wgc.runtime.http.media.png import encode_png

    return encode_png(np.full((h, w, 3), 7, dtype=np.uint8))


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
