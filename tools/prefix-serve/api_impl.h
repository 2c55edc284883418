/* SPDX-License-Identifier: MIT */
/*
 * Inside the API layer: reading a request's fields with a 400 that names
 * the field, the two prompt builders, and writing JSON without losing an
 * allocation failure (json-c returns NULL for out of memory and for JSON
 * null alike, so a writer keeps a flag instead).
 */
#ifndef SERVE_API_IMPL_H
#define SERVE_API_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "api.h"

/* ==== Reading fields (api_fields.c) ==== */

/* o's member key, or NULL when it is absent or JSON null (OpenAI treats
 * both as "use the default"). */
struct json_object *api_member(struct json_object *o, const char *key);

/* Each reader: 0 and *out set when the field is there, 0 and *out left
 * alone when it is absent or null, -1 with a 400 naming param when it has
 * the wrong type or is out of range. *set (may be NULL) says whether it was
 * there. */
int api_read_bool(struct json_object *o, const char *key, const char *param, bool *out,
		  bool *set, struct api_error *e);
/* A JSON integer (or a number with no fraction) in [lo, hi]. json-c
 * saturates integers past 64 bits, so a saturated value is out of range
 * whenever hi < INT64_MAX (and lo > INT64_MIN). */
int api_read_int(struct json_object *o, const char *key, const char *param, int64_t lo,
		 int64_t hi, int64_t *out, bool *set, struct api_error *e);
/* A finite number in [lo, hi] (lo excluded when lo_open). */
int api_read_num(struct json_object *o, const char *key, const char *param, double lo,
		 bool lo_open, double hi, double *out, bool *set, struct api_error *e);
/* A string; *len its bytes (a JSON string may hold "\u0000"). */
int api_read_str(struct json_object *o, const char *key, const char *param, const char **out,
		 size_t *len, struct api_error *e);
/* JSON's name for v's type, as the messages say it ("a string"). */
const char *api_type_name(struct json_object *v);

/* ==== Prompts ==== */

/* messages -> the chat template -> ids (api_chat.c). */
int api_chat_prompt(struct json_object *messages, const struct pfx_tokenizer *t,
		    const struct api_limits *lim, int32_t **ids, size_t *n, struct api_error *e);
/* A completion's prompt: a string, a list of ids, or a list of one of
 * those (api_prompt.c). */
int api_completion_prompt(struct json_object *prompt, const struct pfx_tokenizer *t,
			  const struct api_limits *lim, int32_t **ids, size_t *n,
			  struct api_error *e);

/* ==== Writing JSON (api_json.c) ==== */

struct jw {
	bool oom;
};
struct json_object *jw_obj(struct jw *w);
struct json_object *jw_arr(struct jw *w);
struct json_object *jw_str(struct jw *w, const char *s);
struct json_object *jw_strn(struct jw *w, const char *s, size_t len);
struct json_object *jw_int(struct jw *w, int64_t v);
struct json_object *jw_bool(struct jw *w, bool v);
/* A logprob as the fewest digits that read back as the same float, in
 * Python's repr style as OpenAI prints it ("-0.31725305", "0.0",
 * "-5.4669687e-05"); a non-finite one as vLLM clamps it (-9999.0), since
 * JSON has no infinity. */
struct json_object *jw_logprob(struct jw *w, float v);
/* Adds v (taken, also on failure) as o[k]; a NULL v or o is out of memory. */
void jw_put(struct jw *w, struct json_object *o, const char *k, struct json_object *v);
/* o[k] = null. */
void jw_put_null(struct jw *w, struct json_object *o, const char *k);
/* o[k] = s, or null when s is NULL. */
void jw_put_str_or_null(struct jw *w, struct json_object *o, const char *k, const char *s);
/* Appends v (taken) to the array a. */
void jw_push(struct jw *w, struct json_object *a, struct json_object *v);
/* Serializes root (taken) compactly, without escaping '/', as a malloc'd
 * string; as one Server-Sent Event ("data: ...\n\n") when sse. NULL when
 * anything along the way ran out of memory. */
char *jw_finish(struct jw *w, struct json_object *root, bool sse);

/* ==== A text chunk without logprobs (api_chunk.c) ==== */

/* What api_chunk_text_at gives when the request asked for no logprobs,
 * byte for byte, built without json-c. NULL when out of memory. */
char *api_chunk_text_plain(const struct api_call *c, const char *id, int64_t created,
			   const char *model, uint32_t index, const char *text, size_t len);

/* ==== Logprobs (api_logprobs.c) ==== */

/* Chat's {"content":[{"token","logprob","bytes","top_logprobs"}]} of
 * tokens[0, n). */
struct json_object *api_chat_logprobs(struct jw *w, const struct pfx_tokenizer *t,
				      const struct serve_token *tokens, size_t n);
/* Completions' {"tokens","token_logprobs","top_logprobs","text_offset"}
 * of tokens[0, n), the first token's text at offset. */
struct json_object *api_completion_logprobs(struct jw *w, const struct pfx_tokenizer *t,
					    const struct serve_token *tokens, size_t n,
					    size_t offset);

#endif
