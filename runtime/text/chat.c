/* SPDX-License-Identifier: MIT */
/*
 * Chat templates as transformers applies them: the context holds the
 * messages (role, content), the tokenizer's special-token strings
 * (bos_token, eos_token, unk_token, pad_token), add_generation_prompt,
 * tools and documents (none unless given) and the caller's further
 * variables (apply_chat_template's **kwargs), which may override the
 * special-token strings as kwargs do there.
 * The contents are tainted strings, so the render says which bytes came
 * from them; encoding treats those as plain text (text.h: no prompt
 * injection through special-token text in a message) unless the caller
 * asks for Hugging Face's behaviour.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "jinja.h"
#include "load/json_buf.h"
#include "tokenizer.h"

static const struct jinja_limits limits = {
	.max_output = PFX_CHAT_MAX_OUTPUT,
	.max_memory = PFX_CHAT_MAX_MEMORY,
	.max_steps = PFX_CHAT_MAX_STEPS,
	.max_depth = PFX_CHAT_MAX_DEPTH,
};

static int put_str(struct jarena *a, struct jdict *d, const char *key, const char *s, size_t n,
		   bool taint)
{
	struct jstr v = js_dup(a, s, n, taint);
	return v.s ? jd_set(a, d, js_cstr(key), jv_str(v)) : -1;
}

/* The caller's variables, vars (a JSON object's text), into ctx. Their
 * strings come from the caller as the contents do: tainted, so special-
 * token text in a tool's description is plain text unless
 * PFX_TEXT_PARSE_SPECIAL; but a bos_token (...) given here is the
 * template's marker, as the tokenizer's own would be. */
static int put_vars(struct jarena *a, struct jdict *ctx, const char *vars, struct pfx_error *err)
{
	size_t n = strlen(vars), bad = ju_invalid(vars, n);
	if (bad != (size_t)-1)
		return pfx_errorf(err, -EILSEQ, "chat: the template variables are not UTF-8 (byte offset %zu)",
				  bad);
	json_object *o;
	int rc = json_parse_object(vars, n, &o, err);
	if (rc) {
		char m[sizeof(err->msg)];
		snprintf(m, sizeof(m), "%s", err ? err->msg : "");
		return pfx_errorf(err, rc, "chat: the template variables: %s", m);
	}
	json_object_object_foreach(o, key, val)
	{
		/* apply_chat_template passes these itself: a second value is
		 * a TypeError there. */
		if (!strcmp(key, "messages") || !strcmp(key, "add_generation_prompt")) {
			rc = pfx_errorf(err, -EINVAL,
					"chat: the template variable \"%s\" is the call's own (give it as %s)",
					key, key[0] == 'm' ? "the messages" : "pfx_chat_opts.add_generation_prompt");
			break;
		}
		/* As transformers checks them: a list (of dicts) or none. */
		bool list = json_object_is_type(val, json_type_array), ok = true;
		if (!strcmp(key, "tools") || !strcmp(key, "documents")) {
			ok = list || json_object_is_type(val, json_type_null);
			for (size_t i = 0; list && i < json_object_array_length(val); i++)
				ok = ok && json_object_is_type(json_object_array_get_idx(val, i),
							       json_type_object);
		}
		if (!ok) {
			rc = pfx_errorf(err, -EINVAL, "chat: the template variable \"%s\" must be a list of objects or null",
					key);
			break;
		}
		struct jv v;
		struct jstr k = js_dup(a, key, strlen(key), false);
		bool marker = !strcmp(key, "bos_token") || !strcmp(key, "eos_token") ||
			      !strcmp(key, "unk_token") || !strcmp(key, "pad_token");
		if (!k.s || jv_from_json(a, val, !marker, &v) || jd_set(a, ctx, k, v)) {
			rc = pfx_errorf(err, -E2BIG, "chat: the template variables pass the render's %u MiB limit",
					PFX_CHAT_MAX_MEMORY >> 20);
			break;
		}
	}
	json_object_put(o);
	return rc;
}

static int context(const struct pfx_tokenizer *t, struct jarena *a,
		   const struct pfx_chat_message *m, size_t n, const struct pfx_chat_opts *o,
		   struct jdict **out, struct pfx_error *err)
{
	struct jdict *ctx = jd_new(a);
	struct jlist *msgs = jl_new(a);
	if (!ctx || !msgs)
		goto big;
	for (size_t i = 0; i < n; i++) {
		if (!m[i].role || !m[i].content)
			return pfx_errorf(err, -EINVAL, "chat: message %zu has no %s", i,
					  m[i].role ? "content" : "role");
		size_t rl = strlen(m[i].role), cl = strlen(m[i].content);
		size_t bad = ju_invalid(m[i].role, rl);
		if (bad != (size_t)-1)
			return pfx_errorf(err, -EILSEQ, "chat: message %zu's role is not UTF-8 (byte %zu)",
					  i, bad);
		if ((bad = ju_invalid(m[i].content, cl)) != (size_t)-1)
			return pfx_errorf(err, -EILSEQ,
					  "chat: message %zu's content is not UTF-8 (byte offset %zu)", i,
					  bad);
		struct jdict *d = jd_new(a);
		if (!d || put_str(a, d, "role", m[i].role, rl, false) ||
		    put_str(a, d, "content", m[i].content, cl, true) ||
		    jl_push(a, msgs, (struct jv){ .t = JV_DICT, .u.d = d }))
			goto big;
	}
	/* transformers renders with tools=None and documents=None when not
	 * given: defined, and none. */
	if (jd_set(a, ctx, js_cstr("messages"), (struct jv){ .t = JV_LIST, .u.l = msgs }) ||
	    jd_set(a, ctx, js_cstr("add_generation_prompt"), jv_bool(o->add_generation_prompt)) ||
	    jd_set(a, ctx, js_cstr("tools"), jv_none()) ||
	    jd_set(a, ctx, js_cstr("documents"), jv_none()))
		goto big;
	static const char *const specials[] = { "bos_token", "eos_token", "unk_token", "pad_token" };
	for (size_t k = 0; t && k < sizeof(specials) / sizeof(specials[0]); k++) {
		const char *s = tok_special_string(t, specials[k]);
		if (s && put_str(a, ctx, specials[k], s, strlen(s), false))
			goto big;
	}
	int rc = o->vars_json ? put_vars(a, ctx, o->vars_json, err) : 0;
	if (rc)
		return rc;
	*out = ctx;
	return 0;
big:
	return pfx_errorf(err, -E2BIG, "chat: the messages pass the render's %u MiB limit",
			  PFX_CHAT_MAX_MEMORY >> 20);
}

/* The runs of tainted bytes. */
static int spans_of(const uint8_t *taint, size_t len, struct pfx_text_span **spans, size_t *n,
		    struct pfx_error *err)
{
	*spans = NULL;
	*n = 0;
	size_t count = 0;
	for (size_t i = 0; taint && i < len; i++)
		count += taint[i] && (i == 0 || !taint[i - 1]);
	if (!count)
		return 0;
	struct pfx_text_span *s = malloc(count * sizeof(*s));
	if (!s)
		return pfx_errorf(err, -ENOMEM, "chat: out of memory");
	size_t k = 0;
	for (size_t i = 0; i < len; i++) {
		if (!taint[i])
			continue;
		size_t start = i;
		while (i < len && taint[i])
			i++;
		s[k++] = (struct pfx_text_span){ start, i - start };
	}
	*spans = s;
	*n = count;
	return 0;
}

int chat_render_with(const struct pfx_tokenizer *t, const char *src,
		     const struct pfx_chat_message *m, size_t n, const struct pfx_chat_opts *o,
		     char **text, size_t *len, struct pfx_text_span **spans, size_t *nspans,
		     struct pfx_error *err)
{
	*text = NULL;
	*len = 0;
	if (spans) {
		*spans = NULL;
		*nspans = 0;
	}
	if ((!m && n) || !o)
		return pfx_errorf(err, -EINVAL, "chat: no %s", o ? "messages" : "options");
	struct jinja_template *tmpl;
	int rc = jinja_parse(src, strlen(src), &tmpl, err);
	if (rc)
		return rc;
	struct jarena *a = ja_new(PFX_CHAT_MAX_MEMORY);
	if (!a) {
		jinja_template_free(tmpl);
		return pfx_errorf(err, -ENOMEM, "chat: out of memory");
	}
	struct jdict *ctx = NULL;
	uint8_t *taint = NULL;
	rc = context(t, a, m, n, o, &ctx, err);
	if (!rc)
		rc = jinja_render(tmpl, ctx, a, &limits, text, len, spans ? &taint : NULL, err);
	ja_free(a);
	jinja_template_free(tmpl);
	if (!rc && spans && (rc = spans_of(taint, *len, spans, nspans, err))) {
		free(*text);
		*text = NULL;
		*len = 0;
	}
	free(taint);
	return rc;
}

int pfx_chat_render_opts(const struct pfx_tokenizer *t, const struct pfx_chat_message *m,
			 size_t n, const struct pfx_chat_opts *o, char **text, size_t *len,
			 struct pfx_text_span **spans, size_t *nspans, struct pfx_error *err)
{
	const char *src = tok_chat_template(t, NULL);
	if (!src) {
		*text = NULL;
		*len = 0;
		if (spans) {
			*spans = NULL;
			*nspans = 0;
		}
		return pfx_errorf(err, -ENOENT,
				  "chat: the tokenizer has no chat template (tokenizer_config.json's "
				  "chat_template)");
	}
	return chat_render_with(t, src, m, n, o, text, len, spans, nspans, err);
}

int pfx_chat_render(const struct pfx_tokenizer *t, const struct pfx_chat_message *m, size_t n,
		    bool add_generation_prompt, char **text, size_t *len,
		    struct pfx_text_span **spans, size_t *nspans, struct pfx_error *err)
{
	struct pfx_chat_opts o = { .add_generation_prompt = add_generation_prompt };
	return pfx_chat_render_opts(t, m, n, &o, text, len, spans, nspans, err);
}

int pfx_chat_encode_opts(const struct pfx_tokenizer *t, const struct pfx_chat_message *m,
			 size_t n, const struct pfx_chat_opts *o, unsigned flags, int32_t **ids,
			 size_t *nids, struct pfx_error *err)
{
	*ids = NULL;
	*nids = 0;
	char *text;
	size_t len, nspans;
	struct pfx_text_span *spans;
	int rc = pfx_chat_render_opts(t, m, n, o, &text, &len, &spans, &nspans, err);
	if (rc)
		return rc;
	rc = pfx_tokenize_spans(t, text, len, spans, nspans, flags, ids, nids, err);
	free(text);
	free(spans);
	return rc;
}

int pfx_chat_encode(const struct pfx_tokenizer *t, const struct pfx_chat_message *m, size_t n,
		    bool add_generation_prompt, unsigned flags, int32_t **ids, size_t *nids,
		    struct pfx_error *err)
{
	struct pfx_chat_opts o = { .add_generation_prompt = add_generation_prompt };
	return pfx_chat_encode_opts(t, m, n, &o, flags, ids, nids, err);
}
