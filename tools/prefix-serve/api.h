/* SPDX-License-Identifier: MIT */
/*
 * The OpenAI API's shapes: request bodies parsed and validated into an
 * engine request (the prompt tokenized, a chat rendered by the model's
 * template with the messages' contents as plain text), and the JSON of
 * responses, stream chunks and error objects. Pure functions of their
 * arguments (no I/O, no clock), so each shape is checked byte by byte.
 */
#ifndef SERVE_API_H
#define SERVE_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* An OpenAI error object and its HTTP status:
 * {"error":{"message":...,"type":...,"param":...,"code":...}}. */
struct api_error {
	int status;                /* 400, 401, 404, 405, 413, 429, 500, 503 */
	const char *type;          /* "invalid_request_error", "authentication_error",
				    * "not_found_error", "server_error", ... */
	const char *code;          /* NULL (JSON null) or e.g. "context_length_exceeded" */
	char param[64];            /* the offending field ("messages[1].content"), "" = null */
	char message[512];
	int retry_after;           /* seconds for a Retry-After header; 0: none */
};
/* Fills e; returns -1 so validators can `return api_fail(...)`. */
int api_fail(struct api_error *e, int status, const char *type, const char *code,
	     const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

enum api_kind {
	API_CHAT,                  /* POST /v1/chat/completions */
	API_COMPLETION,            /* POST /v1/completions */
};

/* A parsed request. */
struct api_call {
	enum api_kind kind;
	struct serve_request req;  /* prompt, sampling, stops, n, logprobs: the
				    * HTTP side sets client_fd and notify */
	bool stream;
	bool include_usage;        /* stream_options.include_usage */
	char *model;               /* as the client named it (echoed back) */
};

/* /v1/completions without max_tokens: OpenAI's documented default, and
 * vLLM's (a chat without one gets what fits in --ctx). */
#define API_COMPLETION_MAX_TOKENS 16

struct api_limits {
	size_t ctx;                /* --ctx: prompt + max_tokens must fit */
	uint32_t max_tokens_default; /* when the request names none: caps what fits
				      * (and a completion's 16); 0: no cap */
	bool parse_special;        /* --parse-special: HF's behaviour for user text */
};

/* Parses body[0, len) for kind. 0 and *out (api_call_free it), or -1 with
 * e (400 naming the field: malformed JSON, wrong types, negative/NaN/out of
 * range numbers, refused features such as tools, response_format other
 * than text, images, echo; 400 context_length_exceeded saying how long the
 * prompt was and what fits). Unknown fields are ignored. */
int api_parse(enum api_kind kind, const char *body, size_t len, const struct pfx_tokenizer *t,
	      const struct api_limits *lim, struct api_call *out, struct api_error *e);
/* Frees c->model and what c->req still points to (prompt, stop strings).
 * serve_engine_submit makes those the job's, even when it fails: clear
 * c->req.prompt and c->req.nstop after calling it. NULL is fine. */
void api_call_free(struct api_call *c);

/* Each builder returns a malloc'd NUL-terminated string (NULL: out of
 * memory). id is "chatcmpl-..." / "cmpl-...", created a Unix time, model
 * the name to report. */

/* The error object. */
char *api_error_json(const struct api_error *e);
/* GET /v1/models. */
char *api_models_json(const char *model, int64_t created);
/* GET /v1/models/{model}: the model object alone (OpenAI's retrieve). */
char *api_model_json(const char *model, int64_t created);

/* The whole non-streamed response of a finished job (the HTTP side passes
 * serve_job_choice(j, 0 .. n - 1) under serve_job_lock): choices in order
 * with finish_reason, logprobs when asked (token strings from t), and usage
 * with prompt_tokens_details.cached_tokens. */
char *api_response_json(const struct api_call *c, const struct pfx_tokenizer *t,
			const char *id, int64_t created, const char *model,
			const struct serve_choice *const *choices, uint32_t n,
			const struct serve_job_usage *u);

/* Streaming: one Server-Sent Event each, "data: {...}\n\n". */
/* The first chunk of a choice: delta {"role":"assistant","content":""}
 * (chat); completions have no role chunk (NULL). */
char *api_chunk_role(const struct api_call *c, const char *id, int64_t created,
		     const char *model, uint32_t index);
/* New text of a choice (and, with logprobs, the tokens tokens[0, ntokens)
 * that produced it). */
char *api_chunk_text(const struct api_call *c, const struct pfx_tokenizer *t, const char *id,
		     int64_t created, const char *model, uint32_t index, const char *text,
		     size_t len, const struct serve_token *tokens, size_t ntokens);
/* The same for completions with logprobs, whose text_offset counts from
 * the start of the choice's text: text_offset is the length of the
 * choice's text sent before this chunk (api_chunk_text passes 0). */
char *api_chunk_text_at(const struct api_call *c, const struct pfx_tokenizer *t,
			const char *id, int64_t created, const char *model, uint32_t index,
			const char *text, size_t len, const struct serve_token *tokens,
			size_t ntokens, size_t text_offset);
/* A choice's last chunk: empty delta and its finish_reason. */
char *api_chunk_finish(const struct api_call *c, const char *id, int64_t created,
		       const char *model, uint32_t index, enum serve_finish f);
/* With include_usage: the chunk with "choices":[] and usage. */
char *api_chunk_usage(const struct api_call *c, const char *id, int64_t created,
		      const char *model, const struct serve_job_usage *u);
/* "data: [DONE]\n\n" */
extern const char api_sse_done[];

/* finish_reason's string: "stop", "length"; NULL (JSON null) while running;
 * vLLM's "abort" when cancelled, "error" when the job failed. */
const char *api_finish_reason(enum serve_finish f);

#endif
