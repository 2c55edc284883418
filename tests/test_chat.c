/* SPDX-License-Identifier: MIT */
/*
 * Chat templates: the Jinja interpreter (runtime/text/jinja*.c) renders
 * the real templates of tests/tokenizers/chat/cases.json byte for byte as
 * transformers does (Python Jinja2 3.1.6 in its environment), supports
 * the constructs the brief lists with Python Jinja2's output, refuses
 * what it lacks by name and line, bounds hostile templates, and tracks
 * which output bytes came from message contents.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

#define CHAT_DIR SOURCE_ROOT "/tests/tokenizers/chat"

static const struct jinja_limits lim = {
	.max_output = 1u << 20, .max_memory = 64u << 20, .max_steps = 1000000, .max_depth = 200
};

struct rendered {
	int rc;
	char *text;
	size_t len;
	uint8_t *taint;
	struct pfx_error err;
};

/* Renders src with ctx_json (a JSON object: the context) and, when
 * messages_json is given, messages whose contents are tainted. */
static struct rendered render_lim(const char *src, size_t srclen, struct json_object *ctx_json,
				  const struct jinja_limits *l)
{
	struct rendered out = { 0 };
	struct jinja_template *t = NULL;
	out.rc = jinja_parse(src, srclen, &t, &out.err);
	if (out.rc)
		return out;
	struct jarena *a = ja_new(l->max_memory);
	cr_assert(a);
	struct jdict *ctx = jd_new(a);
	cr_assert(ctx);
	if (ctx_json) {
		json_object_object_foreach(ctx_json, key, val)
		{
			struct jv v;
			cr_assert_eq(jv_from_json(a, val, false, &v), 0);
			if (!strcmp(key, "messages") && v.t == JV_LIST)
				for (size_t i = 0; i < v.u.l->n; i++) {
					struct jv *c = v.u.l->v[i].t == JV_DICT ?
							       jd_get(v.u.l->v[i].u.d, "content", 7) :
							       NULL;
					if (c && c->t == JV_STR)
						c->u.s = js_dup(a, c->u.s.s, c->u.s.n, true);
				}
			cr_assert_eq(jd_set(a, ctx, js_cstr(key), v), 0);
		}
	}
	out.rc = jinja_render(t, ctx, a, l, &out.text, &out.len, &out.taint, &out.err);
	ja_free(a);
	jinja_template_free(t);
	return out;
}

static struct rendered render(const char *src, const char *ctx)
{
	struct json_object *j = ctx ? json_tokener_parse(ctx) : NULL;
	cr_assert(!ctx || j, "bad test context %s", ctx);
	struct rendered r = render_lim(src, strlen(src), j, &lim);
	json_object_put(j);
	return r;
}

static void done(struct rendered *r)
{
	free(r->text);
	free(r->taint);
}

static struct json_object *load_cases(void)
{
	struct json_object *j = json_object_from_file(CHAT_DIR "/cases.json");
	cr_assert(j, "cannot read %s", CHAT_DIR "/cases.json");
	return j;
}

/* The context of a case: the tokenizer's special tokens, the kwargs, the
 * messages and add_generation_prompt, as gen_chat.mjs passes them. */
static struct json_object *case_context(struct json_object *tmpl, struct json_object *c)
{
	struct json_object *ctx = json_object_new_object(), *x;
	json_object_object_foreach(json_object_object_get(tmpl, "context"), k, v)
		json_object_object_add(ctx, k, json_object_get(v));
	json_object_object_foreach(json_object_object_get(c, "kwargs"), k2, v2)
		json_object_object_add(ctx, k2, json_object_get(v2));
	cr_assert(json_object_object_get_ex(c, "messages", &x));
	json_object_object_add(ctx, "messages", json_object_get(x));
	cr_assert(json_object_object_get_ex(c, "add_generation_prompt", &x));
	json_object_object_add(ctx, "add_generation_prompt", json_object_get(x));
	return ctx;
}

Test(chat, every_case_renders_byte_identical)
{
	struct json_object *j = load_cases(), *cases, *templates;
	cr_assert(json_object_object_get_ex(j, "cases", &cases));
	cr_assert(json_object_object_get_ex(j, "templates", &templates));
	size_t n = json_object_array_length(cases), same = 0;
	cr_assert_eq(n, 112);
	for (size_t i = 0; i < n; i++) {
		struct json_object *c = json_object_array_get_idx(cases, i);
		const char *tname = json_object_get_string(json_object_object_get(c, "template"));
		struct json_object *tmpl = json_object_object_get(templates, tname);
		const char *src = json_object_get_string(json_object_object_get(tmpl, "template"));
		struct json_object *want = json_object_object_get(c, "rendered");
		struct json_object *ctx = case_context(tmpl, c);
		struct rendered r = render_lim(src, strlen(src), ctx, &lim);
		json_object_put(ctx);
		const char *name = json_object_get_string(json_object_object_get(c, "name"));
		cr_expect_eq(r.rc, 0, "%s/%s: %s", tname, name, r.err.msg);
		size_t wl = (size_t)json_object_get_string_len(want);
		const char *w = json_object_get_string(want);
		if (!r.rc && r.len == wl && !memcmp(r.text, w, wl)) {
			same++;
		} else if (!r.rc) {
			size_t k = 0;
			while (k < r.len && k < wl && r.text[k] == w[k])
				k++;
			cr_expect_fail("%s/%s: differs at byte %zu: got \"%.40s\", want \"%.40s\"", tname,
				       name, k, r.text + k, w + k);
		}
		done(&r);
	}
	cr_expect_eq(same, n, "%zu of %zu cases identical", same, n);
	json_object_put(j);
}

/* Each construct the interpreter supports, against Python Jinja2's output
 * in transformers' environment (features.json, from gen_features.py). */
Test(chat, features_render_as_python_jinja2)
{
	struct json_object *j = json_object_from_file(CHAT_DIR "/features.json"), *cases;
	cr_assert(j, "cannot read features.json");
	cr_assert(json_object_object_get_ex(j, "cases", &cases));
	size_t n = json_object_array_length(cases), same = 0;
	cr_assert_gt(n, 60);
	for (size_t i = 0; i < n; i++) {
		struct json_object *c = json_object_array_get_idx(cases, i);
		const char *name = json_object_get_string(json_object_object_get(c, "name"));
		struct json_object *src = json_object_object_get(c, "template");
		struct json_object *want = json_object_object_get(c, "rendered");
		struct rendered r = render_lim(json_object_get_string(src),
					       (size_t)json_object_get_string_len(src),
					       json_object_object_get(c, "context"), &lim);
		cr_expect_eq(r.rc, 0, "%s: %s", name, r.err.msg);
		size_t wl = (size_t)json_object_get_string_len(want);
		if (!r.rc && r.len == wl && !memcmp(r.text, json_object_get_string(want), wl))
			same++;
		else if (!r.rc)
			cr_expect_fail("%s: got \"%s\", want \"%s\"", name, r.text,
				       json_object_get_string(want));
		done(&r);
	}
	cr_expect_eq(same, n, "%zu of %zu features identical", same, n);
	json_object_put(j);
}
