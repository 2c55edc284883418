/* SPDX-License-Identifier: MIT */
/*
 * Request bodies: the JSON parsed within bounds, every field OpenAI or vLLM
 * defines checked for its type and range, what the server cannot do
 * refused by name, the prompt tokenized and fitted to the context.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"

#define BAD "invalid_request_error"
/* Request bodies nest four deep (messages[].content[].text); a hostile
 * one cannot make the parser recurse past this. */
#define BODY_MAX_DEPTH 32
#define MODEL_MAX_LEN 256

static struct json_object *parse_body(const char *body, size_t len, struct api_error *e)
{
	if (len > INT_MAX) {
		api_fail(e, 413, BAD, NULL, NULL, "The request body is too large.");
		return NULL;
	}
	struct json_tokener *tok = json_tokener_new_ex(BODY_MAX_DEPTH);
	if (!tok) {
		api_fail(e, 500, "server_error", NULL, NULL, "Out of memory parsing the body.");
		return NULL;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	struct json_object *o = json_tokener_parse_ex(tok, body ? body : "", (int)len);
	enum json_tokener_error r = json_tokener_get_error(tok);
	size_t end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (o && end == len)
		return o;
	json_object_put(o);
	if (o || r == json_tokener_success)
		api_fail(e, 400, BAD, NULL, NULL,
			 "We could not parse the JSON body of your request: unexpected data at "
			 "byte %zu after the JSON value.", end);
	else if (r == json_tokener_continue)
		api_fail(e, 400, BAD, NULL, NULL,
			 "We could not parse the JSON body of your request: it ends before the "
			 "JSON value does (%zu bytes).", len);
	else if (r == json_tokener_error_depth)
		api_fail(e, 400, BAD, NULL, NULL,
			 "We could not parse the JSON body of your request: it nests deeper than "
			 "%d levels.", BODY_MAX_DEPTH);
	else
		api_fail(e, 400, BAD, NULL, NULL,
			 "We could not parse the JSON body of your request: %s at byte %zu.",
			 json_tokener_error_desc(r), end);
	return NULL;
}

static int unsupported(const char *param, const char *why, struct api_error *e)
{
	return api_fail(e, 400, BAD, NULL, param, "Invalid '%s': %s", param, why);
}

static int read_stop(struct json_object *root, struct serve_request *r, struct api_error *e)
{
	struct json_object *v = api_member(root, "stop");
	if (!v)
		return 0;
	bool one = json_object_is_type(v, json_type_string);
	if (!one && !json_object_is_type(v, json_type_array))
		return api_fail(e, 400, BAD, NULL, "stop",
				"Invalid type for 'stop': expected a string or an array of strings, "
				"but got %s instead.", api_type_name(v));
	size_t count = one ? 1 : json_object_array_length(v);
	if (count > SERVE_MAX_STOPS)
		return api_fail(e, 400, BAD, NULL, "stop",
				"Invalid 'stop': array too long. Expected an array with maximum length "
				"%d, but got an array with length %zu instead.", SERVE_MAX_STOPS, count);
	for (size_t i = 0; i < count; i++) {
		struct json_object *s = one ? v : json_object_array_get_idx(v, i);
		if (!json_object_is_type(s, json_type_string))
			return api_fail(e, 400, BAD, NULL, "stop",
					"Invalid type for 'stop[%zu]': expected a string, but got %s "
					"instead.", i, api_type_name(s));
		size_t len = (size_t)json_object_get_string_len(s);
		const char *p = json_object_get_string(s);
		if (!len || strlen(p) != len)
			return api_fail(e, 400, BAD, NULL, "stop",
					"Invalid 'stop[%zu]': a stop sequence must be a non-empty string "
					"without NUL characters.", i);
		if (!(r->stop[r->nstop] = strdup(p)))
			return api_fail(e, 500, "server_error", NULL, NULL, "Out of memory.");
		r->nstop++;
	}
	return 0;
}

/* Sampling and the common options of both endpoints. */
static int read_sampling(struct json_object *root, struct api_call *c, struct api_error *e)
{
	struct serve_request *r = &c->req;
	double temperature = r->temperature, top_p = r->top_p;
	int64_t n = 1, top_k = 0, seed = 0;
	if (api_read_int(root, "n", "n", 1, SERVE_MAX_CHOICES, &n, NULL, e) ||
	    api_read_num(root, "temperature", "temperature", 0, false, 2, &temperature, NULL, e) ||
	    api_read_num(root, "top_p", "top_p", 0, true, 1, &top_p, NULL, e) ||
	    api_read_int(root, "top_k", "top_k", -1, INT_MAX, &top_k, NULL, e) ||
	    api_read_int(root, "seed", "seed", INT64_MIN, INT64_MAX, &seed, &r->has_seed, e) ||
	    api_read_bool(root, "ignore_eos", "ignore_eos", &r->ignore_eos, NULL, e) ||
	    read_stop(root, r, e))
		return -1;
	r->n = (uint32_t)n;
	r->temperature = (float)temperature;
	r->top_p = (float)top_p;
	r->top_k = top_k < 0 ? 0 : (int)top_k; /* vLLM: -1 and 0 are both "off" */
	r->seed = (uint64_t)seed;
	return 0;
}

/* Sampler features the engine lacks: refused unless they are no-ops. */
static int refuse_sampling(struct json_object *root, struct api_error *e)
{
	static const struct {
		const char *key;
		double lo, hi, off;
		bool lo_open;
	} knobs[] = {
		{ "presence_penalty", -2, 2, 0, false },
		{ "frequency_penalty", -2, 2, 0, false },
		{ "min_p", 0, 1, 0, false },
		{ "repetition_penalty", 0, 2, 1, true },
	};
	for (size_t k = 0; k < sizeof(knobs) / sizeof(knobs[0]); k++) {
		double v = knobs[k].off;
		if (api_read_num(root, knobs[k].key, knobs[k].key, knobs[k].lo, knobs[k].lo_open,
				 knobs[k].hi, &v, NULL, e))
			return -1;
		if (v != knobs[k].off)
			return api_fail(e, 400, BAD, NULL, knobs[k].key,
					"Invalid '%s': this server's sampler has no %s; leave it out "
					"(or %g).", knobs[k].key, knobs[k].key, knobs[k].off);
	}
	struct json_object *v = api_member(root, "logit_bias");
	if (v && !json_object_is_type(v, json_type_object))
		return api_fail(e, 400, BAD, NULL, "logit_bias",
				"Invalid type for 'logit_bias': expected an object, but got %s instead.",
				api_type_name(v));
	if (v && json_object_object_length(v))
		return unsupported("logit_bias", "this server's sampler has no logit bias.", e);
	return 0;
}

/* What both endpoints take: the model's name (echoed back), user, stream
 * and its options, sampling. */
static int read_common(struct json_object *root, struct api_call *c, struct api_error *e)
{
	const char *model = NULL, *user = NULL;
	size_t mlen = 0;
	if (api_read_str(root, "model", "model", &model, &mlen, e) ||
	    api_read_str(root, "user", "user", &user, NULL, e))
		return -1;
	if (model && (mlen > MODEL_MAX_LEN || strlen(model) != mlen))
		return api_fail(e, 400, BAD, NULL, "model",
				"Invalid 'model': a model name has at most %d bytes and no NUL "
				"characters.", MODEL_MAX_LEN);
	if (model && !(c->model = strdup(model)))
		return api_fail(e, 500, "server_error", NULL, NULL, "Out of memory.");
	if (api_read_bool(root, "stream", "stream", &c->stream, NULL, e))
		return -1;
	struct json_object *so = api_member(root, "stream_options");
	if (so) {
		if (!json_object_is_type(so, json_type_object))
			return api_fail(e, 400, BAD, NULL, "stream_options",
					"Invalid type for 'stream_options': expected an object, but got "
					"%s instead.", api_type_name(so));
		if (!c->stream)
			return api_fail(e, 400, BAD, NULL, "stream_options",
					"The 'stream_options' parameter is only allowed when 'stream' is "
					"enabled.");
		if (api_read_bool(so, "include_usage", "stream_options.include_usage",
				  &c->include_usage, NULL, e))
			return -1;
	}
	return read_sampling(root, c, e) || refuse_sampling(root, e) ? -1 : 0;
}

static int read_chat(struct json_object *root, struct api_call *c, struct api_error *e)
{
	struct json_object *v;
	static const char *const tooling[] = { "tools", "functions" };
	for (size_t k = 0; k < 2; k++)
		if ((v = api_member(root, tooling[k])) &&
		    (!json_object_is_type(v, json_type_array) || json_object_array_length(v)))
			return unsupported(tooling[k], "this server has no tool calling.", e);
	if ((v = api_member(root, "tool_choice")) &&
	    (!json_object_is_type(v, json_type_string) ||
	     (strcmp(json_object_get_string(v), "none") && strcmp(json_object_get_string(v), "auto"))))
		return unsupported("tool_choice", "this server has no tool calling.", e);
	if ((v = api_member(root, "response_format"))) {
		const char *type = NULL;
		if (!json_object_is_type(v, json_type_object))
			return api_fail(e, 400, BAD, NULL, "response_format",
					"Invalid type for 'response_format': expected an object, but "
					"got %s instead.", api_type_name(v));
		if (api_read_str(v, "type", "response_format.type", &type, NULL, e))
			return -1;
		if (!type || strcmp(type, "text"))
			return unsupported("response_format",
					   "only {\"type\": \"text\"} is supported: this server "
					   "cannot constrain output to JSON or a schema.", e);
	}
	int64_t top = 0;
	bool top_set = false;
	if (api_read_bool(root, "logprobs", "logprobs", &c->req.logprobs, NULL, e) ||
	    api_read_int(root, "top_logprobs", "top_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &top,
			 &top_set, e))
		return -1;
	if (top_set && !c->req.logprobs)
		return api_fail(e, 400, BAD, NULL, "top_logprobs",
				"Invalid 'top_logprobs': 'logprobs' must be set to true when "
				"'top_logprobs' is given.");
	c->req.top_logprobs = (uint32_t)top;
	return 0;
}

static int read_completion(struct json_object *root, struct api_call *c, struct api_error *e)
{
	bool echo = false;
	int64_t best_of = 1, logprobs = 0;
	bool lp_set = false;
	const char *suffix = NULL;
	if (api_read_bool(root, "echo", "echo", &echo, NULL, e) ||
	    api_read_int(root, "best_of", "best_of", 0, 20, &best_of, NULL, e) ||
	    api_read_str(root, "suffix", "suffix", &suffix, NULL, e) ||
	    api_read_int(root, "logprobs", "logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &logprobs,
			 &lp_set, e))
		return -1;
	if (echo)
		return unsupported("echo", "this server does not echo the prompt back.", e);
	if (best_of > 1)
		return unsupported("best_of", "this server does not rank candidates; use 'n'.", e);
	if (suffix && *suffix)
		return unsupported("suffix", "this server does not insert text before a suffix.", e);
	c->req.logprobs = lp_set;
	c->req.top_logprobs = (uint32_t)logprobs;
	return 0;
}

/* The completion's length, if the request names one. */
struct budget {
	const char *name; /* the field that gave it */
	int64_t max;
	bool set;
};

static int read_budget(struct json_object *root, enum api_kind kind, struct budget *b,
		       struct api_error *e)
{
	b->name = "max_tokens";
	if (kind == API_CHAT &&
	    api_read_int(root, "max_completion_tokens", "max_completion_tokens", 1, INT32_MAX,
			 &b->max, &b->set, e))
		return -1;
	if (b->set)
		b->name = "max_completion_tokens";
	else if (api_read_int(root, "max_tokens", "max_tokens", 1, INT32_MAX, &b->max, &b->set, e))
		return -1;
	return 0;
}

/* The prompt and max_tokens against the context: without a max_tokens,
 * what the prompt leaves (a completion's at most 16; capped by the
 * server's default). */
static int fit(struct api_call *c, const struct budget *b, const struct api_limits *lim,
	       struct api_error *e)
{
	size_t np = c->req.nprompt;
	const char *what = c->kind == API_CHAT ? "messages" : "prompt";
	if (np >= lim->ctx)
		return api_fail(e, 400, BAD, "context_length_exceeded", what,
				"This model's maximum context length is %zu tokens. However, your %s "
				"resulted in %zu tokens, which leaves no room for a completion. Please "
				"reduce the length of the %s to at most %zu tokens.", lim->ctx, what, np,
				what, lim->ctx ? lim->ctx - 1 : 0);
	size_t room = lim->ctx - np;
	int64_t max = b->max;
	if (b->set && (uint64_t)max > room)
		return api_fail(e, 400, BAD, "context_length_exceeded", b->name,
				"This model's maximum context length is %zu tokens. However, you "
				"requested %zu tokens (%zu in the %s, %" PRId64 " in the completion). "
				"Please reduce the length of the %s or completion: with this %s, "
				"'%s' can be at most %zu.", lim->ctx, np + (size_t)max, np, what, max,
				what, what, b->name, room);
	if (!b->set) {
		/* vLLM's defaults: a chat gets what fits; a completion 16
		 * tokens (OpenAI's documented default for /v1/completions),
		 * fewer if fewer fit. */
		max = room > UINT32_MAX ? UINT32_MAX : (int64_t)room;
		if (c->kind == API_COMPLETION && max > API_COMPLETION_MAX_TOKENS)
			max = API_COMPLETION_MAX_TOKENS;
		if (lim->max_tokens_default && (uint64_t)max > lim->max_tokens_default)
			max = lim->max_tokens_default;
	}
	c->req.max_tokens = (uint32_t)max;
	return 0;
}

int api_parse(enum api_kind kind, const char *body, size_t len, const struct pfx_tokenizer *t,
	      const struct api_limits *lim, struct api_call *out, struct api_error *e)
{
	memset(out, 0, sizeof(*out));
	out->kind = kind;
	out->req.n = 1;
	out->req.temperature = 1.0f; /* OpenAI's defaults */
	out->req.top_p = 1.0f;
	out->req.client_fd = -1;
	struct json_object *root = parse_body(body, len, e);
	if (!root)
		return -1;
	int rc = -1;
	if (!json_object_is_type(root, json_type_object)) {
		api_fail(e, 400, BAD, NULL, NULL,
			 "The request body must be a JSON object, but it is %s.", api_type_name(root));
		goto out;
	}
	struct budget b = { 0 };
	if (read_common(root, out, e) ||
	    (kind == API_CHAT ? read_chat(root, out, e) : read_completion(root, out, e)) ||
	    read_budget(root, kind, &b, e))
		goto out;
	/* The prompt last: it is the costly part. */
	if (kind == API_CHAT)
		rc = api_chat_prompt(api_member(root, "messages"), t, lim, &out->req.prompt,
				     &out->req.nprompt, e);
	else
		rc = api_completion_prompt(api_member(root, "prompt"), t, lim, &out->req.prompt,
					   &out->req.nprompt, e);
	if (!rc && !out->req.nprompt)
		rc = api_fail(e, 400, BAD, NULL, kind == API_CHAT ? "messages" : "prompt",
			      "Invalid '%s': it encodes to no tokens.",
			      kind == API_CHAT ? "messages" : "prompt");
	if (!rc)
		rc = fit(out, &b, lim, e);
out:
	json_object_put(root);
	if (rc)
		api_call_free(out);
	return rc ? -1 : 0;
}

void api_call_free(struct api_call *c)
{
	if (!c)
		return;
	free(c->req.prompt);
	for (size_t i = 0; i < c->req.nstop && i < SERVE_MAX_STOPS; i++)
		free(c->req.stop[i]);
	free(c->model);
	memset(c, 0, sizeof(*c));
	c->req.client_fd = -1;
}
