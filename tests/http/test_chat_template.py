"""Chat templates rendered as transformers' `apply_chat_template` renders them: the same text (and,
through the llama family's tokenizer, the same ids) for several conversations and templates —
system prompts, multi-turn, add_generation_prompt on and off, `tojson` of non-ASCII and HTML
characters, `namespace`, loop controls, special tokens — and a template that raises is a 400
template_error naming `messages`, where transformers raises TemplateError."""

from __future__ import annotations

from typing import Any

import jinja2
import pytest
from wgc.models.llama.config import TINY_TEMPLATE
from wgc.models.llama.tokenizer import ChatTokenizer, tiny_tokenizer
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.text.template import ChatTemplate

transformers = pytest.importorskip("transformers")

SPECIALS = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<|end_of_text|>"}

# A Llama-3-like template with a default system prompt, the system turn pulled out of the messages,
# tojson, a namespace counter, loop controls and a role check that raises.
RICH = """{{- bos_token }}
{%- set ns = namespace(turns=0) %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system = "You are helpful. Today: " + strftime_now("%Y") %}
{%- endif %}
<|start_header_id|>system<|end_header_id|>\n\n{{ system }}<|eot_id|>
{%- for m in messages %}
    {%- if m['role'] not in ['user', 'assistant'] %}
        {{- raise_exception("roles must be user or assistant, found " + m['role']) }}
    {%- endif %}
    {%- if m['content'] == 'skip me' %}{% continue %}{% endif %}
    {%- set ns.turns = ns.turns + 1 %}
    {{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}
{{- '' if ns.turns else pad_token }}
{{- {'meta': messages | length, 'text': 'ünï <b>&\\'</b>'} | tojson if add_generation_prompt else '' }}
"""

CONVERSATIONS = {
    "system-user": [{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": "Hi there"}],
    "user-only": [{"role": "user", "content": "héllo 🙂"}],
    "multi-turn": [{"role": "system", "content": "sys"}, {"role": "user", "content": "one"},
                   {"role": "assistant", "content": "two"}, {"role": "user", "content": "skip me"},
                   {"role": "user", "content": "three\n"}],
}


def _hf(template: str) -> Any:
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tiny_tokenizer().tokenizer, chat_template=template,
                                                **SPECIALS)


@pytest.mark.parametrize("template", [TINY_TEMPLATE, RICH], ids=["tiny", "rich"])
@pytest.mark.parametrize("generation", [True, False], ids=["generation-prompt", "no-generation-prompt"])
@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_rendering_equals_apply_chat_template(template: str, generation: bool, name: str) -> None:
    messages = CONVERSATIONS[name]
    hf = _hf(template)
    want = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
    ours = ChatTemplate(template, specials=SPECIALS)
    got = ours.text([dict(m) for m in messages], add_generation_prompt=generation)
    assert got == want
    ids = hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation, return_dict=False)
    tok = ChatTokenizer(tiny_tokenizer().tokenizer, template, SPECIALS, ())
    assert tok.encode(got) == list(ids)  # the rendered specials are single tokens, no BOS added twice


def test_tojson_keeps_non_ascii_and_does_not_escape_html() -> None:
    text = ChatTemplate(RICH, specials=SPECIALS).text(CONVERSATIONS["user-only"])
    assert '"text": "ünï <b>&\'</b>"' in text


def test_a_template_that_raises_is_a_template_error_naming_messages() -> None:
    messages = [{"role": "tool", "content": "x"}]
    with pytest.raises(jinja2.TemplateError, match="roles must be user or assistant, found tool"):
        _hf(RICH).apply_chat_template(messages, tokenize=False)
    with pytest.raises(ApiError) as err:
        ChatTemplate(RICH, specials=SPECIALS).text(messages)
    assert err.value.code == "template_error" and err.value.param == "messages"
    assert "roles must be user or assistant, found tool" in err.value.message


def test_a_namespace_refuses_underscore_names() -> None:
    with pytest.raises(ApiError, match="may not store '_x'"):
        ChatTemplate("{% set ns = namespace(_x=1) %}{{ ns._x }}").text([])
