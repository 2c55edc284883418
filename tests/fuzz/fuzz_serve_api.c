/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes prefix-serve's request parsing (tools/prefix-serve/api*.c): byte
 * 0 of the input picks the endpoint (bit 0: /v1/completions, else chat)
 * and --parse-special (bit 1); the rest is the request body, tokenized
 * with tests/tokenizers/tiny-chat within a 512-token context. Either -1
 * with an error whose status is 400, 413 or 500 and whose object is JSON,
 * or a request within its bounds, whose response and stream chunks (the
 * prompt decoded as every choice's text, its tokens as logprobs) are JSON.
 */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "fuzz.h"

static const struct pfx_tokenizer *tokenizer(void)
{
	static struct pfx_tokenizer *t; /* loaded once, kept */
	if (!t) {
		struct pfx_error err = { { 0 } };
		FUZZ_CHECK(!pfx_tokenizer_load(SOURCE_ROOT "/tests/tokenizers/tiny-chat", &t, &err));
	}
	return t;
}

/* s (taken) is a JSON object, or one Server-Sent Event of one. */
static void check_json(char *s, bool sse)
{
	FUZZ_CHECK(s);
	const char *p = s;
	size_t len = strlen(s);
	if (sse) {
		FUZZ_CHECK(len > 8 && !strncmp(s, "data: ", 6) && !strcmp(s + len - 2, "\n\n"));
		p += 6;
		len -= 8;
	}
	struct json_tokener *tk = json_tokener_new();
	FUZZ_CHECK(tk);
	struct json_object *o = json_tokener_parse_ex(tk, p, (int)len);
	FUZZ_CHECK(o && json_object_is_type(o, json_type_object) &&
		   json_tokener_get_parse_end(tk) == len);
	json_object_put(o);
	json_tokener_free(tk);
	free(s);
}

static void respond(const struct api_call *c, const struct pfx_tokenizer *t)
{
	size_t n = c->req.nprompt < 64 ? c->req.nprompt : 64;
	struct serve_token tokens[64];
	memset(tokens, 0, sizeof(tokens));
	for (size_t i = 0; i < n; i++) {
		tokens[i].id = c->req.prompt[i];
		tokens[i].logprob = -(float)i / 3.0f;
		tokens[i].ntop = c->req.top_logprobs < n ? c->req.top_logprobs : (uint32_t)n;
		for (uint32_t j = 0; j < tokens[i].ntop; j++) {
			tokens[i].top_id[j] = c->req.prompt[j];
			tokens[i].top_logprob[j] = j ? -(float)j * 1e-6f : 0.0f;
		}
	}
	char *text = NULL;
	size_t len = 0;
	struct pfx_error err = { { 0 } };
	FUZZ_CHECK(!pfx_detokenize(t, c->req.prompt, n, 0, &text, &len, &err));
	struct serve_choice ch = { .text = text, .text_len = len, .tokens = tokens, .ntokens = n,
				   .finish = SERVE_STOP };
	const struct serve_choice *list[SERVE_MAX_CHOICES];
	for (uint32_t i = 0; i < c->req.n; i++)
		list[i] = &ch;
	struct serve_job_usage u = { .prompt_tokens = c->req.nprompt, .completion_tokens = n };
	const char *model = c->model ? c->model : "m";
	check_json(api_response_json(c, t, "id-1", 1, model, list, c->req.n, &u), false);
	char *role = api_chunk_role(c, "id-1", 1, model, 0);
	FUZZ_CHECK((role != NULL) == (c->kind == API_CHAT));
	if (role)
		check_json(role, true);
	check_json(api_chunk_text_at(c, t, "id-1", 1, model, 0, text, len, tokens, n, 3), true);
	check_json(api_chunk_finish(c, "id-1", 1, model, 0, SERVE_LENGTH), true);
	check_json(api_chunk_usage(c, "id-1", 1, model, &u), true);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	const struct pfx_tokenizer *t = tokenizer();
	struct api_limits lim = { .ctx = 512, .parse_special = data[0] & 2 };
	enum api_kind kind = data[0] & 1 ? API_COMPLETION : API_CHAT;
	struct api_call c;
	struct api_error e;
	int rc = api_parse(kind, (const char *)data + 1, size - 1, t, &lim, &c, &e);
	if (rc) {
		FUZZ_CHECK(rc == -1 && (e.status == 400 || e.status == 413 || e.status == 500));
		FUZZ_CHECK(e.type && e.message[0]);
		FUZZ_CHECK(!c.req.prompt && !c.model);
		check_json(api_error_json(&e), false);
		return 0;
	}
	FUZZ_CHECK(c.kind == kind && c.req.prompt && c.req.nprompt >= 1);
	for (size_t i = 0; i < c.req.nprompt; i++)
		FUZZ_CHECK(c.req.prompt[i] >= 0 &&
			   (size_t)c.req.prompt[i] < pfx_tokenizer_vocab_size(t));
	FUZZ_CHECK(c.req.max_tokens >= 1 && c.req.nprompt + c.req.max_tokens <= lim.ctx);
	FUZZ_CHECK(c.req.n >= 1 && c.req.n <= SERVE_MAX_CHOICES);
	FUZZ_CHECK(c.req.nstop <= SERVE_MAX_STOPS);
	for (size_t i = 0; i < c.req.nstop; i++)
		FUZZ_CHECK(c.req.stop[i] && c.req.stop[i][0]);
	FUZZ_CHECK(c.req.temperature >= 0 && c.req.temperature <= 2);
	FUZZ_CHECK(c.req.top_p > 0 && c.req.top_p <= 1 && c.req.top_k >= 0);
	FUZZ_CHECK(c.req.top_logprobs <= SERVE_MAX_TOP_LOGPROBS);
	FUZZ_CHECK(!c.include_usage || c.stream);
	respond(&c, t);
	api_call_free(&c);
	return 0;
}
