#!/usr/bin/env python3
"""Writes features.json: small templates, each exercising one construct, with the output
Python Jinja2 gives in transformers' chat-template environment (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, tojson = json.dumps(ensure_ascii=False),
raise_exception). test_chat.c renders each and compares byte for byte.
Usage: python3 gen_features.py > features.json   (Jinja2 3.1.6 made the committed file)"""
import json
import jinja2
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

M = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
                  {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]}
C = {"s": "  Hello, World  ", "n": 7, "f": 2.5, "xs": [3, 1, 2], "d": {"b": 1, "a": [1, "two", None, True]},
     "u": "héllo wörld ÿ", "e": "", "t": "they're bill's-friend (ok) [x] <y>"}

cases = [
    # whitespace control, trim_blocks and lstrip_blocks
    ("ws_trim_blocks", "{% if true %}\nA\n{% endif %}\nB", {}),
    ("ws_lstrip_blocks", "x\n    {% if true %}\n    y\n    {% endif %}\nz", {}),
    ("ws_minus", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c", {}),
    ("ws_var_minus", "a \n {{- 'b' -}} \n c", {}),
    ("ws_var_no_trim", "{{ 'a' }}\nb", {}),
    ("ws_plus", "x\n    {%+ if true %}y{% endif +%}\nz", {}),
    ("ws_comment", "a\n  {# note #}\nb {#- x -#} c", {}),
    ("ws_raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}!", {}),
    ("ws_trailing_newline", "a\n", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("ws_inline_block", "a {% if true %}b{% endif %} c\n", {}),
    # loops
    ("loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }};{% endfor %}", C),
    ("loop_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("loop_else", "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", {}),
    ("loop_filter", "{% for x in range(10) if x is odd %}{{ x }}{{ loop.index }} {% endfor %}", {}),
    ("loop_unpack", "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}", C),
    ("loop_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", C),
    ("loop_string", "{% for c in 'abc' %}[{{ c }}]{% endfor %}", {}),
    ("loop_scope", "{% set x = 1 %}{% for i in range(3) %}{% set x = i %}{% endfor %}{{ x }}", {}),
    ("loop_nested", "{% for a in range(2) %}{% for b in range(2) %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("loop_prev_next", "{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", C),
    ("loop_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("namespace", "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }}", M),
    # conditions and operators
    ("if_elif_else", "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %} {% endfor %}", {}),
    ("logic", "{{ true and false }} {{ true or false }} {{ not true }} {{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }}", {}),
    ("compare", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ [1, 2] < [1, 3] }}", {}),
    ("in_not_in", "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in d }} {{ 'z' not in 'abc' }} {{ not 'b' in ['a'] }}", C),
    ("arith", "{{ 7 + 2 }} {{ 7 - 2 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 10 / 4 }} {{ -n }} {{ 3 * 'ab' }} {{ [1] * 2 }}", C),
    ("floats", "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0 }} {{ 2.5e-7 }} {{ 1/3 }} {{ 100.0 * 3 }} {{ f }}", C),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ [1] }} {{ 'a' + 'b' }} {{ [1] + [2, 3] }}", {}),
    ("ternary", "{{ 'y' if n > 5 else 'n' }} {{ 'y' if n > 50 else 'n' }} [{{ 'only' if false }}]", C),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ not 1 == 2 }} {{ 'a' ~ (1 + 2) }} {{ -2 ** 2 }}", {}),
    ("filter_binds_tight", "{{ 'x' + s | trim + 'y' }}", C),
    # indexing and slicing
    ("index", "{{ xs[0] }} {{ xs[-1] }} {{ d['b'] }} {{ d.a[1] }} {{ s[2] }} {{ messages[1].content }} {{ messages[0]['role'] }}", {**C, **M}),
    ("slice", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ s[2:7] }} {{ u[::-1] }} {{ u[1:4] }} {{ xs[5:] }} {{ xs[-10:2] }}", C),
    ("messages_slice", "{% for m in messages[1:] %}{{ m.role }} {% endfor %}{% for m in messages[::-1] %}{{ m.content }}|{% endfor %}", M),
    ("get", "{{ d.get('b') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ messages[0].get('content') }}", {**C, **M}),
    ("undefined_attr", "[{{ d.missing }}] {{ d.missing is defined }} {{ nothing is defined }} {{ d.missing is undefined }} [{{ nothing }}]", C),
    # filters
    ("f_trim", "[{{ s|trim }}] [{{ '\\n\\t x \\u3000'|trim }}] [{{ 'xxhixx'|trim('x') }}]", C),
    ("f_length", "{{ xs|length }} {{ u|length }} {{ d|length }} {{ e|length }} {{ s|count }}", C),
    ("f_tojson", "{{ d|tojson }} {{ xs|tojson }} {{ u|tojson }} {{ 'a\"b\\\\c\\n\\u0001'|tojson }} {{ f|tojson }} {{ none|tojson }} {{ messages[0]|tojson }}", {**C, **M}),
    ("f_tojson_indent", "{{ d|tojson(indent=2) }}\n{{ [] | tojson(indent=2) }} {{ {'z': 1, 'a': 2}|tojson(sort_keys=true) }}", C),
    ("f_items", "{% for k, v in {'x': 1, 'y': [2]}|items %}{{ k }}:{{ v }} {% endfor %}", {}),
    ("f_case", "{{ u|upper }} {{ 'ABC'|lower }} {{ t|title }} {{ 'hello WORLD'|capitalize }}", C),
    ("f_default", "{{ nothing|default('x') }} {{ e|default('y') }} {{ e|default('y', true) }} {{ nothing|d('z') }} {{ n|default(1) }}", C),
    ("f_join", "{{ xs|join(', ') }} {{ ['a', 'b']|join }} {{ messages|map(attribute='role')|join('/') }}", {**C, **M}),
    ("f_first_last", "{{ xs|first }} {{ xs|last }} {{ 'abc'|first }} {{ xs|list }} {{ 'ab'|list }}", C),
    ("f_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab'|replace('', '-') }}", {}),
    ("f_reverse", "{{ xs|reverse|list }} {{ u|reverse }}", C),
    ("f_string_int_float", "{{ 5|string ~ 'x' }} {{ '42'|int + 1 }} {{ '3.5'|float }} {{ 'x'|int }} {{ 3.9|int }} {{ '7'|float }}", {}),
    ("f_abs", "{{ -3|abs }} {{ (-3)|abs }} {{ -2.5|abs }}", {}),
    ("f_select", "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ messages|rejectattr('role', 'eq', 'user')|list|length }} {{ [1, 2, 3, 4]|select('even')|list }} {{ [0, 1, '']|select|list }}", M),
    ("f_indent", "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(4, true) }}|{{ 'a\\n\\nb'|indent(1, blank=true) }}", {}),
    ("f_safe_map", "{{ 'x'|safe }} {{ ['a', 'b']|map('upper')|list }}", {}),
    # tests
    ("tests", "{{ none is none }} {{ 1 is number }} {{ 'a' is string }} {{ d is mapping }} {{ xs is iterable }} {{ 1 is iterable }} {{ xs is sequence }} {{ true is boolean }} {{ 1 is integer }} {{ 1.0 is float }} {{ false is false }} {{ true is true }} {{ 1 is true }}", C),
    ("tests_args", "{{ 4 is divisibleby 2 }} {{ 5 is divisibleby(2) }} {{ 3 is odd }} {{ 3 is even }} {{ 1 is eq 1 }} {{ 'a' is in 'abc' }} {{ 2 is gt 1 }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ none is not none }}", {}),
    ("callable", "{% macro m() %}{% endmacro %}{{ m is callable }} {{ 1 is callable }}", {}),
    # string methods
    ("str_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n\\nx\\n'.lstrip('\\n') }}|{{ 'ab  '.rstrip(' b') }}", C),
    ("str_split", "{{ 'a,b,,c'.split(',') }} {{ '  a b  c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'x</think>y</think>z'.split('</think>')[-1] }} {{ ''.split() }} {{ ''.split(',') }}", {}),
    ("str_affixes", "{{ s.startswith('  He') }} {{ s.endswith('x') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }}", C),
    ("str_case", "{{ t.title() }} {{ u.upper() }} {{ 'ABC'.lower() }} {{ 'hELLO wORLD'.capitalize() }}", C),
    ("str_misc", "{{ 'a-b-c'.replace('-', '+') }} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ ', '.join(['a', 'b']) }} {{ u.find('w') }}", C),
    # macros and set
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}", {}),
    ("macro_scope", "{% set g = 'global' %}{% macro m(x) %}{{ g }}-{{ x }}{% endmacro %}{% for i in range(2) %}{{ m(i) }} {% endfor %}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = (3, 4) %}{{ c }} {{ c[1] }}", {}),
    ("set_block", "{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]", {}),
    ("literals", "{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': 1} }} {{ ('t',) }} {{ \"dq'\" }} {{ 'sq\"' }} {{ 'a' 'b' }} {{ 1_000 }}", {}),
    ("string_escapes", "{{ 'tab\\there' }}|{{ 'nl\\\\n' }}|{{ '\\x41\\u00e9\\U0001F600' }}|{{ 'q\\'s' }}|{{ 'keep\\d' }}", {}),
    ("none_output", "{{ none }} {{ true }} {{ false }} {{ [none] }} {{ {'a': none} }}", {}),
    ("repr_strings", "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'nl\\n'] }}", {}),
    # constructs of other real templates (written after them: Gemma, Mistral, Phi-3, Llama 3.1)
    ("gemma_like", "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}", {"bos_token": "<bos>", "add_generation_prompt": True, "messages": M["messages"][1:]}),
    ("mistral_like", "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}\n            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- else %}\n        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n", {"bos_token": "<s>", "eos_token": "</s>", **M}),
    ("phi3_like", "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}", {"eos_token": "<|endoftext|>", "add_generation_prompt": False, **M}),
    ("llama31_like", "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n{%- endif %}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{%- if builtin_tools is defined or tools is not none %}\n    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{%- if tools is not none and not tools_in_user_message %}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n    {%- endfor %}\n{%- endif %}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n{%- for message in messages %}\n    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n", {"bos_token": "<|begin_of_text|>", "add_generation_prompt": True, "tools_in_user_message": False, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}], **M}),
    ("generation_block", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}|{% endfor %}", M),
]

out = []
for name, src, ctx in cases:
    try:
        if name == "generation_block":
            rendered = "".join(m["content"] + "|" for m in ctx["messages"])  # transformers' extension, no body change
        else:
            rendered = env.from_string(src).render(**ctx)
    except Exception as e:  # noqa: BLE001
        raise SystemExit("%s: %s" % (name, e))
    out.append({"name": name, "template": src, "context": ctx, "rendered": rendered})
json.dump({"generator": "gen_features.py, Python Jinja2 %s" % jinja2.__version__, "cases": out},
          __import__("sys").stdout, ensure_ascii=False, indent=1)
print()
