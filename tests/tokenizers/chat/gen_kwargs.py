#!/usr/bin/env python3
"""Writes kwargs.json: chat cases with apply_chat_template's further arguments (tools, documents,
enable_thinking, a template's own variables, a special-token string overridden), rendered by Python
Jinja2 in transformers' environment with the context transformers builds: the tokenizer's special
tokens, then the kwargs over them, and messages, tools, documents (None when not given) and
add_generation_prompt. The templates and their special tokens are cases.json's. test_chat.c renders
each through pfx_chat_render_opts and compares byte for byte.
Usage: python3 gen_kwargs.py > kwargs.json   (Jinja2 3.1.6 made the committed file)"""
import json
import os
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.exceptions import TemplateError


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
here = os.path.dirname(os.path.abspath(__file__))
templates = json.load(open(os.path.join(here, "cases.json"), encoding="utf-8"))["templates"]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, now (°C). Never say <|im_end|> here.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "UTC time",
                                         "parameters": {"type": "object", "properties": {}}}}
CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Weather in Zürich?"}]
TOOL_TURN = CHAT + [{"role": "assistant", "content": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}\n</tool_call>"},
                    {"role": "tool", "content": "{\"temp\": 21}"}]

cases = [
    ("qwen3", "thinking_on", {"enable_thinking": True}, CHAT),
    ("qwen3", "thinking_off", {"enable_thinking": False}, CHAT),
    ("qwen3", "tools", {"tools": [WEATHER, TIME]}, CHAT),
    ("qwen3", "tools_no_system", {"tools": [TIME]}, CHAT[1:]),
    ("qwen3", "tools_and_tool_turn", {"tools": [WEATHER], "enable_thinking": False}, TOOL_TURN),
    ("qwen3", "tools_null", {"tools": None}, CHAT),
    ("qwen3", "tools_empty", {"tools": []}, CHAT),
    ("qwen3", "unused_variables", {"documents": [{"title": "a", "text": "b"}], "nested": {"x": [1, 2.5, None]}}, CHAT),
    ("llama3", "bos_token_override", {"bos_token": "<|end_of_text|>"}, CHAT),
    ("llama3", "unused_variables", {"date_string": "26 Jul 2024", "tools": [TIME]}, CHAT),
    ("tinyllama", "eos_token_override", {"eos_token": "<unk>"}, CHAT),
]
out = []
for tname, name, kwargs, messages in cases:
    t = templates[tname]
    ctx = dict(t["context"])
    ctx.update({k: v for k, v in kwargs.items() if k not in ("tools", "documents")})
    for agp in (True, False):
        r = env.from_string(t["template"]).render(messages=messages, tools=kwargs.get("tools"),
                                                  documents=kwargs.get("documents"),
                                                  add_generation_prompt=agp, **ctx)
        out.append({"template": tname, "name": name, "add_generation_prompt": agp, "kwargs": kwargs,
                    "messages": messages, "rendered": r})
print(json.dumps({"generator": "gen_kwargs.py", "renderer": "Python Jinja2 %s as transformers apply_chat_template"
                  % __import__("jinja2").__version__, "cases": out}, ensure_ascii=False, indent=1))
