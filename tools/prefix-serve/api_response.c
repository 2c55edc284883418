/* SPDX-License-Identifier: MIT */
/*
 * Responses, stream chunks and the model list in OpenAI's shapes, fields
 * in the order OpenAI sends them: chat.completion, chat.completion.chunk,
 * text_completion (whole and streamed), and {"object":"list"}.
 */
#include "api_impl.h"

const char api_sse_done[] = "data: [DONE]\n\n";

const char *api_finish_reason(enum serve_finish f)
{
	switch (f) {
	case SERVE_RUNNING: return NULL;
	case SERVE_STOP: return "stop";
	case SERVE_LENGTH: return "length";
	case SERVE_CANCELLED: return "abort"; /* vLLM's word for it */
	case SERVE_FAILED: return "error";
	}
	return NULL;
}

static bool is_chat(const struct api_call *c)
{
	return c->kind == API_CHAT;
}

/* {"id","object","created","model"} */
static struct json_object *head(struct jw *w, const char *id, const char *object,
				int64_t created, const char *model)
{
	struct json_object *o = jw_obj(w);
	jw_put(w, o, "id", jw_str(w, id));
	jw_put(w, o, "object", jw_str(w, object));
	jw_put(w, o, "created", jw_int(w, created));
	jw_put(w, o, "model", jw_str(w, model));
	return o;
}

static struct json_object *usage(struct jw *w, const struct serve_job_usage *u)
{
	struct json_object *o = jw_obj(w), *d = jw_obj(w);
	jw_put(w, o, "prompt_tokens", jw_int(w, (int64_t)u->prompt_tokens));
	jw_put(w, o, "completion_tokens", jw_int(w, (int64_t)u->completion_tokens));
	jw_put(w, o, "total_tokens", jw_int(w, (int64_t)(u->prompt_tokens + u->completion_tokens)));
	jw_put(w, d, "cached_tokens", jw_int(w, (int64_t)u->cached_tokens));
	jw_put(w, o, "prompt_tokens_details", d);
	return o;
}

/* The logprobs of tokens[0, n) in the endpoint's shape, or null when the
 * request did not ask for them. */
static void put_logprobs(struct jw *w, struct json_object *o, const struct api_call *c,
			 const struct pfx_tokenizer *t, const struct serve_token *tokens,
			 size_t n, size_t offset)
{
	if (!c->req.logprobs) {
		jw_put_null(w, o, "logprobs");
		return;
	}
	if (!tokens)
		n = 0;
	jw_put(w, o, "logprobs", is_chat(c) ? api_chat_logprobs(w, t, tokens, n)
					    : api_completion_logprobs(w, t, tokens, n, offset));
}

char *api_response_json(const struct api_call *c, const struct pfx_tokenizer *t,
			const char *id, int64_t created, const char *model,
			const struct serve_choice *const *choices, uint32_t n,
			const struct serve_job_usage *u)
{
	struct jw w = { 0 };
	struct json_object *root = head(&w, id, is_chat(c) ? "chat.completion" : "text_completion",
					created, model);
	struct json_object *list = jw_arr(&w);
	for (uint32_t i = 0; i < n && !w.oom; i++) {
		const struct serve_choice *ch = choices[i];
		struct json_object *o = jw_obj(&w);
		if (is_chat(c)) {
			struct json_object *m = jw_obj(&w);
			jw_put(&w, o, "index", jw_int(&w, i));
			jw_put(&w, m, "role", jw_str(&w, "assistant"));
			jw_put(&w, m, "content", jw_strn(&w, ch->text, ch->text_len));
			jw_put(&w, o, "message", m);
		} else {
			jw_put(&w, o, "text", jw_strn(&w, ch->text, ch->text_len));
			jw_put(&w, o, "index", jw_int(&w, i));
		}
		put_logprobs(&w, o, c, t, ch->tokens, ch->ntokens, 0);
		jw_put_str_or_null(&w, o, "finish_reason", api_finish_reason(ch->finish));
		jw_push(&w, list, o);
	}
	jw_put(&w, root, "choices", list);
	if (u)
		jw_put(&w, root, "usage", usage(&w, u));
	else
		jw_put_null(&w, root, "usage");
	return jw_finish(&w, root, false);
}

/* A chunk of one choice; the caller fills in the choice's fields. */
static struct json_object *chunk(struct jw *w, const struct api_call *c, const char *id,
				 int64_t created, const char *model, struct json_object **choice)
{
	struct json_object *root = head(w, id, is_chat(c) ? "chat.completion.chunk"
							 : "text_completion", created, model);
	struct json_object *list = jw_arr(w);
	*choice = jw_obj(w);
	if (*choice)
		json_object_get(*choice); /* the caller's reference */
	jw_push(w, list, *choice);
	jw_put(w, root, "choices", list);
	return root;
}

/* Closes a chunk: OpenAI sends "usage": null on each chunk but the last
 * when the client asked for usage. */
static char *finish_chunk(struct jw *w, const struct api_call *c, struct json_object *root,
			  struct json_object *choice)
{
	json_object_put(choice);
	if (c->include_usage)
		jw_put_null(w, root, "usage");
	return jw_finish(w, root, true);
}

char *api_chunk_role(const struct api_call *c, const char *id, int64_t created,
		     const char *model, uint32_t index)
{
	if (!is_chat(c))
		return NULL;
	struct jw w = { 0 };
	struct json_object *o, *root = chunk(&w, c, id, created, model, &o);
	struct json_object *delta = jw_obj(&w);
	jw_put(&w, o, "index", jw_int(&w, index));
	jw_put(&w, delta, "role", jw_str(&w, "assistant"));
	jw_put(&w, delta, "content", jw_str(&w, ""));
	jw_put(&w, o, "delta", delta);
	jw_put_null(&w, o, "logprobs");
	jw_put_null(&w, o, "finish_reason");
	return finish_chunk(&w, c, root, o);
}

char *api_chunk_text_at(const struct api_call *c, const struct pfx_tokenizer *t,
			const char *id, int64_t created, const char *model, uint32_t index,
			const char *text, size_t len, const struct serve_token *tokens,
			size_t ntokens, size_t text_offset)
{
	if (!c->req.logprobs)
		return api_chunk_text_plain(c, id, created, model, index, text, len);
	struct jw w = { 0 };
	struct json_object *o, *root = chunk(&w, c, id, created, model, &o);
	if (is_chat(c)) {
		struct json_object *delta = jw_obj(&w);
		jw_put(&w, o, "index", jw_int(&w, index));
		jw_put(&w, delta, "content", jw_strn(&w, text, len));
		jw_put(&w, o, "delta", delta);
	} else {
		jw_put(&w, o, "text", jw_strn(&w, text, len));
		jw_put(&w, o, "index", jw_int(&w, index));
	}
	put_logprobs(&w, o, c, t, tokens, ntokens, text_offset);
	jw_put_null(&w, o, "finish_reason");
	return finish_chunk(&w, c, root, o);
}

char *api_chunk_text(const struct api_call *c, const struct pfx_tokenizer *t, const char *id,
		     int64_t created, const char *model, uint32_t index, const char *text,
		     size_t len, const struct serve_token *tokens, size_t ntokens)
{
	return api_chunk_text_at(c, t, id, created, model, index, text, len, tokens, ntokens, 0);
}

char *api_chunk_finish(const struct api_call *c, const char *id, int64_t created,
		       const char *model, uint32_t index, enum serve_finish f)
{
	struct jw w = { 0 };
	struct json_object *o, *root = chunk(&w, c, id, created, model, &o);
	if (is_chat(c)) {
		jw_put(&w, o, "index", jw_int(&w, index));
		jw_put(&w, o, "delta", jw_obj(&w));
	} else {
		jw_put(&w, o, "text", jw_str(&w, ""));
		jw_put(&w, o, "index", jw_int(&w, index));
	}
	jw_put_null(&w, o, "logprobs");
	jw_put_str_or_null(&w, o, "finish_reason", api_finish_reason(f));
	return finish_chunk(&w, c, root, o);
}

char *api_chunk_usage(const struct api_call *c, const char *id, int64_t created,
		      const char *model, const struct serve_job_usage *u)
{
	struct jw w = { 0 };
	struct json_object *root = head(&w, id, is_chat(c) ? "chat.completion.chunk"
							 : "text_completion", created, model);
	jw_put(&w, root, "choices", jw_arr(&w));
	jw_put(&w, root, "usage", usage(&w, u));
	return jw_finish(&w, root, true);
}

/* One model object: {"id","object":"model","created","owned_by"}. */
static struct json_object *model_obj(struct jw *w, const char *model, int64_t created)
{
	struct json_object *m = jw_obj(w);
	jw_put(w, m, "id", jw_str(w, model));
	jw_put(w, m, "object", jw_str(w, "model"));
	jw_put(w, m, "created", jw_int(w, created));
	jw_put(w, m, "owned_by", jw_str(w, "prefixd"));
	return m;
}

char *api_models_json(const char *model, int64_t created)
{
	struct jw w = { 0 };
	struct json_object *root = jw_obj(&w), *list = jw_arr(&w);
	jw_put(&w, root, "object", jw_str(&w, "list"));
	jw_push(&w, list, model_obj(&w, model, created));
	jw_put(&w, root, "data", list);
	return jw_finish(&w, root, false);
}

char *api_model_json(const char *model, int64_t created)
{
	struct jw w = { 0 };
	return jw_finish(&w, model_obj(&w, model, created), false);
}
