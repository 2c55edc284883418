/* SPDX-License-Identifier: MIT */
/*
 * A completion's prompt: a string (encoded with the tokenizer's BOS/EOS as
 * vLLM does; special-token text stays plain unless --parse-special), or a
 * list of token ids, or a list holding one of those. A list of several
 * prompts (OpenAI's batch) is refused: one prompt per request.
 */
#include <errno.h>
#include <stdlib.h>

#include "api_impl.h"

#define BAD "invalid_request_error"

static int empty(struct api_error *e)
{
	return api_fail(e, 400, BAD, NULL, "prompt", "Invalid 'prompt': the prompt is empty.");
}

static int from_text(struct json_object *p, const struct pfx_tokenizer *t,
		     const struct api_limits *lim, int32_t **ids, size_t *n, struct api_error *e)
{
	size_t len = (size_t)json_object_get_string_len(p);
	if (!len)
		return empty(e);
	struct pfx_error err = { { 0 } };
	unsigned flags = PFX_TEXT_ADD_SPECIAL | (lim->parse_special ? PFX_TEXT_PARSE_SPECIAL : 0);
	int r = pfx_tokenize(t, json_object_get_string(p), len, flags, ids, n, &err);
	if (r == -ENOMEM)
		return api_fail(e, 500, "server_error", NULL, NULL,
				"Out of memory encoding the prompt: %s", err.msg);
	if (r)
		return api_fail(e, 400, BAD, NULL, "prompt", "Invalid 'prompt': %s", err.msg);
	return 0;
}

static int from_ids(struct json_object *p, const struct pfx_tokenizer *t, int32_t **ids,
		    size_t *n, struct api_error *e)
{
	size_t count = json_object_array_length(p);
	size_t vocab = pfx_tokenizer_vocab_size(t);
	if (!count)
		return empty(e);
	int32_t *v = malloc(count * sizeof(*v));
	if (!v)
		return api_fail(e, 500, "server_error", NULL, NULL, "Out of memory reading 'prompt'.");
	for (size_t i = 0; i < count; i++) {
		struct json_object *x = json_object_array_get_idx(p, i);
		int64_t id = -1;
		if (!json_object_is_type(x, json_type_int) ||
		    (id = json_object_get_int64(x)) < 0 || (uint64_t)id >= vocab) {
			free(v);
			return api_fail(e, 400, BAD, NULL, "prompt",
					"Invalid 'prompt': item %zu is not a token id of this model "
					"(an integer from 0 to %zu).", i, vocab - 1);
		}
		v[i] = (int32_t)id;
	}
	*ids = v;
	*n = count;
	return 0;
}

int api_completion_prompt(struct json_object *prompt, const struct pfx_tokenizer *t,
			  const struct api_limits *lim, int32_t **ids, size_t *n,
			  struct api_error *e)
{
	if (!prompt)
		return api_fail(e, 400, BAD, NULL, "prompt", "Missing required parameter: 'prompt'.");
	if (json_object_is_type(prompt, json_type_string))
		return from_text(prompt, t, lim, ids, n, e);
	if (!json_object_is_type(prompt, json_type_array))
		return api_fail(e, 400, BAD, NULL, "prompt",
				"Invalid type for 'prompt': expected a string or an array, but got %s "
				"instead.", api_type_name(prompt));
	size_t count = json_object_array_length(prompt);
	if (!count)
		return empty(e);
	struct json_object *first = json_object_array_get_idx(prompt, 0);
	if (json_object_is_type(first, json_type_int))
		return from_ids(prompt, t, ids, n, e);
	if (count > 1)
		return api_fail(e, 400, BAD, NULL, "prompt",
				"Invalid 'prompt': %zu prompts in one request; this server takes one "
				"prompt per request.", count);
	if (json_object_is_type(first, json_type_string))
		return from_text(first, t, lim, ids, n, e);
	if (json_object_is_type(first, json_type_array))
		return from_ids(first, t, ids, n, e);
	return api_fail(e, 400, BAD, NULL, "prompt",
			"Invalid type for 'prompt[0]': expected a string or an array of token ids, "
			"but got %s instead.", api_type_name(first));
}
