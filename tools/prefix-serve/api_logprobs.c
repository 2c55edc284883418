/* SPDX-License-Identifier: MIT */
/*
 * Logprobs in OpenAI's two shapes. A token's string is its own decoded
 * text (pfx_detokenize of that one id, special tokens kept), so a
 * sentencepiece word's leading space is dropped as a decoder drops it at
 * the start of a text. A token that is only part of a UTF-8 character
 * (a byte-level or <0xNN> byte token) decodes to U+FFFD, as Hugging Face's
 * decode renders it; "bytes" are the bytes of that string (EF BF BD), as
 * vLLM gives them, not the token's raw bytes as OpenAI does: the
 * tokenizer's public interface has no raw bytes of a token. A special
 * token's "bytes" are null, as OpenAI's are.
 */
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"

struct tok_text {
	char *s;
	size_t len;
};

/* An id the tokenizer cannot decode (an engine bug) reads as "". */
static struct tok_text text_of(const struct pfx_tokenizer *t, int32_t id)
{
	struct tok_text x = { NULL, 0 };
	struct pfx_error err = { { 0 } };
	if (pfx_detokenize(t, &id, 1, 0, &x.s, &x.len, &err)) {
		x.s = NULL;
		x.len = 0;
	}
	return x;
}

static struct json_object *bytes_of(struct jw *w, const struct tok_text *x)
{
	struct json_object *a = jw_arr(w);
	for (size_t i = 0; a && i < x->len; i++)
		jw_push(w, a, jw_int(w, (unsigned char)x->s[i]));
	return a;
}

/* {"token","logprob","bytes"} */
static struct json_object *entry(struct jw *w, const struct pfx_tokenizer *t, int32_t id,
				 float lp)
{
	struct tok_text x = text_of(t, id);
	struct json_object *o = jw_obj(w);
	jw_put(w, o, "token", jw_strn(w, x.s, x.len));
	jw_put(w, o, "logprob", jw_logprob(w, lp));
	if (pfx_tokenizer_is_special(t, id))
		jw_put_null(w, o, "bytes"); /* OpenAI's "<|end|>" has none */
	else
		jw_put(w, o, "bytes", bytes_of(w, &x));
	free(x.s);
	return o;
}

struct json_object *api_chat_logprobs(struct jw *w, const struct pfx_tokenizer *t,
				      const struct serve_token *tokens, size_t n)
{
	struct json_object *root = jw_obj(w), *content = jw_arr(w);
	for (size_t i = 0; i < n && !w->oom; i++) {
		const struct serve_token *k = &tokens[i];
		struct json_object *o = entry(w, t, k->id, k->logprob);
		struct json_object *top = jw_arr(w);
		for (uint32_t j = 0; j < k->ntop && j < SERVE_MAX_TOP_LOGPROBS; j++)
			jw_push(w, top, entry(w, t, k->top_id[j], k->top_logprob[j]));
		jw_put(w, o, "top_logprobs", top);
		jw_push(w, content, o);
	}
	jw_put(w, root, "content", content);
	return root;
}

/* top[token's text] = lp. A key is a C string: a token whose text holds
 * a NUL byte is keyed by the text before it. */
static void put_top(struct jw *w, struct json_object *top, const struct pfx_tokenizer *t,
		    int32_t id, float lp)
{
	struct tok_text y = text_of(t, id);
	char *key = strndup(y.s ? y.s : "", y.len);
	if (key)
		jw_put(w, top, key, jw_logprob(w, lp));
	else
		w->oom = true;
	free(key);
	free(y.s);
}

struct json_object *api_completion_logprobs(struct jw *w, const struct pfx_tokenizer *t,
					    const struct serve_token *tokens, size_t n,
					    size_t offset)
{
	struct json_object *root = jw_obj(w);
	struct json_object *toks = jw_arr(w), *lps = jw_arr(w), *tops = jw_arr(w),
			   *offs = jw_arr(w);
	for (size_t i = 0; i < n && !w->oom; i++) {
		const struct serve_token *k = &tokens[i];
		struct tok_text x = text_of(t, k->id);
		jw_push(w, toks, jw_strn(w, x.s, x.len));
		jw_push(w, lps, jw_logprob(w, k->logprob));
		jw_push(w, offs, jw_int(w, (int64_t)offset));
		offset += x.len;
		free(x.s);
		/* The most likely tokens, and the sampled one: "up to
		 * logprobs + 1" entries, as OpenAI documents. */
		struct json_object *top = jw_obj(w);
		bool sampled = false;
		for (uint32_t j = 0; j < k->ntop && j < SERVE_MAX_TOP_LOGPROBS; j++) {
			sampled |= k->top_id[j] == k->id;
			put_top(w, top, t, k->top_id[j], k->top_logprob[j]);
		}
		if (!sampled)
			put_top(w, top, t, k->id, k->logprob);
		jw_push(w, tops, top);
	}
	jw_put(w, root, "tokens", toks);
	jw_put(w, root, "token_logprobs", lps);
	jw_put(w, root, "top_logprobs", tops);
	jw_put(w, root, "text_offset", offs);
	return root;
}
