/* SPDX-License-Identifier: MIT */
/*
 * A chat's messages rendered by the model's template and encoded: the
 * template's markers are special tokens, the contents are a user's text
 * (special-token text in them stays plain unless --parse-special).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"

#define BAD "invalid_request_error"

/* A message's role as the template sees it; NULL after a 400. OpenAI's
 * "developer" is the newer name of "system" (what templates know). */
static const char *role_of(struct json_object *m, const char *param, struct api_error *e)
{
	const char *r = NULL;
	size_t len = 0;
	if (api_read_str(m, "role", param, &r, &len, e))
		return NULL;
	if (!r) {
		api_fail(e, 400, BAD, NULL, param, "Missing required parameter: '%s'.", param);
		return NULL;
	}
	static const char *const ok[] = { "system", "user", "assistant" };
	for (size_t k = 0; k < sizeof(ok) / sizeof(ok[0]); k++)
		if (len == strlen(ok[k]) && !strcmp(r, ok[k]))
			return ok[k];
	if (len == 9 && !strcmp(r, "developer"))
		return "system";
	if ((len == 4 && !strcmp(r, "tool")) || (len == 8 && !strcmp(r, "function"))) {
		api_fail(e, 400, BAD, NULL, param,
			 "Invalid '%s': '%s' messages are not supported: this server has no "
			 "tool calling.", param, r);
		return NULL;
	}
	api_fail(e, 400, BAD, NULL, param,
		 "Invalid '%s': unknown role. Supported values are: 'system', 'developer', 'user' "
		 "and 'assistant'.", param);
	return NULL;
}

/* A part's text (a borrowed pointer), or NULL after a 400. */
static const char *part_text(struct json_object *p, const char *param, size_t *len,
			     struct api_error *e)
{
	char sub[64];
	if (!json_object_is_type(p, json_type_object)) {
		api_fail(e, 400, BAD, NULL, param,
			 "Invalid type for '%s': expected an object, but got %s instead.", param,
			 api_type_name(p));
		return NULL;
	}
	const char *type = NULL, *text = NULL;
	snprintf(sub, sizeof(sub), "%s.type", param);
	if (api_read_str(p, "type", sub, &type, NULL, e))
		return NULL;
	if (!type) {
		api_fail(e, 400, BAD, NULL, sub, "Missing required parameter: '%s'.", sub);
		return NULL;
	}
	if (strcmp(type, "text")) {
		bool image = strstr(type, "image") != NULL;
		bool audio = strstr(type, "audio") != NULL;
		api_fail(e, 400, BAD, NULL, sub,
			 "Invalid '%s': %s content parts are not supported: this server takes "
			 "text only (parts of type 'text').", sub,
			 image ? "image" : audio ? "audio" : "these");
		return NULL;
	}
	snprintf(sub, sizeof(sub), "%s.text", param);
	if (api_read_str(p, "text", sub, &text, len, e))
		return NULL;
	if (!text)
		api_fail(e, 400, BAD, NULL, sub, "Missing required parameter: '%s'.", sub);
	return text;
}

/* The content of message m: a string, or text parts joined with "\n" (as
 * vLLM joins them). *own is set when the text was allocated. */
static const char *content_of(struct json_object *m, const char *param, char **own,
			      struct api_error *e)
{
	struct json_object *c = api_member(m, "content");
	if (!c) {
		api_fail(e, 400, BAD, NULL, param, "Missing required parameter: '%s'.", param);
		return NULL;
	}
	const char *text = NULL;
	size_t len = 0;
	if (json_object_is_type(c, json_type_string)) {
		text = json_object_get_string(c);
		len = (size_t)json_object_get_string_len(c);
	} else if (json_object_is_type(c, json_type_array)) {
		size_t np = json_object_array_length(c), total = 0;
		if (!np) {
			api_fail(e, 400, BAD, NULL, param,
				 "Invalid '%s': empty array. Expected an array with minimum length 1, "
				 "but got an empty array instead.", param);
			return NULL;
		}
		char sub[96]; /* api_error keeps 63 bytes of it */
		for (size_t j = 0; j < np; j++) {
			size_t l = 0;
			snprintf(sub, sizeof(sub), "%s[%zu]", param, j);
			if (!part_text(json_object_array_get_idx(c, j), sub, &l, e))
				return NULL;
			total += l + 1;
		}
		if (!(*own = malloc(total))) {
			api_fail(e, 500, "server_error", NULL, NULL, "Out of memory reading '%s'.",
				 param);
			return NULL;
		}
		for (size_t j = 0; j < np; j++) {
			size_t l = 0;
			const char *s = part_text(json_object_array_get_idx(c, j), sub, &l, e);
			if (j)
				(*own)[len++] = '\n';
			memcpy(*own + len, s, l);
			len += l;
		}
		(*own)[len] = 0;
		text = *own;
	} else {
		api_fail(e, 400, BAD, NULL, param,
			 "Invalid type for '%s': expected a string or an array of content parts, "
			 "but got %s instead.", param, api_type_name(c));
		return NULL;
	}
	if (strlen(text) != len) {
		api_fail(e, 400, BAD, NULL, param,
			 "Invalid '%s': the text holds a NUL character (\\u0000), which a chat "
			 "message cannot carry.", param);
		return NULL;
	}
	return text;
}

/* What the server cannot do with a message is refused, not dropped. */
static int refuse_extras(struct json_object *m, size_t i, struct api_error *e)
{
	static const char *const keys[] = { "tool_calls", "function_call", "audio" };
	char param[64];
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
		if (api_member(m, keys[k])) {
			snprintf(param, sizeof(param), "messages[%zu].%s", i, keys[k]);
			return api_fail(e, 400, BAD, NULL, param,
					"Invalid '%s': not supported by this server.", param);
		}
	return 0;
}

static int read_messages(struct json_object *messages, size_t count,
			 struct pfx_chat_message *msgs, char **own, struct api_error *e)
{
	char param[64];
	for (size_t i = 0; i < count; i++) {
		struct json_object *m = json_object_array_get_idx(messages, i);
		snprintf(param, sizeof(param), "messages[%zu]", i);
		if (!json_object_is_type(m, json_type_object))
			return api_fail(e, 400, BAD, NULL, param,
					"Invalid type for '%s': expected an object, but got %s "
					"instead.", param, api_type_name(m));
		snprintf(param, sizeof(param), "messages[%zu].role", i);
		if (!(msgs[i].role = role_of(m, param, e)))
			return -1;
		if (refuse_extras(m, i, e))
			return -1;
		snprintf(param, sizeof(param), "messages[%zu].content", i);
		if (!(msgs[i].content = content_of(m, param, &own[i], e)))
			return -1;
	}
	return 0;
}

int api_chat_prompt(struct json_object *messages, const struct pfx_tokenizer *t,
		    const struct api_limits *lim, int32_t **ids, size_t *n, struct api_error *e)
{
	if (!messages)
		return api_fail(e, 400, BAD, NULL, "messages",
				"Missing required parameter: 'messages'.");
	if (!json_object_is_type(messages, json_type_array))
		return api_fail(e, 400, BAD, NULL, "messages",
				"Invalid type for 'messages': expected an array, but got %s instead.",
				api_type_name(messages));
	size_t count = json_object_array_length(messages);
	if (!count)
		return api_fail(e, 400, BAD, NULL, "messages",
				"Invalid 'messages': empty array. Expected an array with minimum "
				"length 1, but got an empty array instead.");
	struct pfx_chat_message *msgs = calloc(count, sizeof(*msgs));
	char **own = calloc(count, sizeof(*own));
	int rc = -1;
	if (!msgs || !own) {
		api_fail(e, 500, "server_error", NULL, NULL, "Out of memory reading 'messages'.");
		goto out;
	}
	if (read_messages(messages, count, msgs, own, e))
		goto out;
	if (!pfx_tokenizer_has_chat_template(t)) {
		api_fail(e, 400, BAD, NULL, "messages",
			 "This model has no chat template, so it cannot take 'messages': send "
			 "a prompt to /v1/completions instead.");
		goto out;
	}
	struct pfx_error err = { { 0 } };
	int r = pfx_chat_encode(t, msgs, count, true, lim->parse_special ? PFX_TEXT_PARSE_SPECIAL : 0,
				ids, n, &err);
	if (r == -ENOMEM)
		api_fail(e, 500, "server_error", NULL, NULL, "Out of memory rendering the chat: %s",
			 err.msg);
	else if (r)
		api_fail(e, 400, BAD, NULL, "messages", "The chat template cannot render these "
			 "messages: %s", err.msg);
	else
		rc = 0;
out:
	for (size_t i = 0; own && i < count; i++)
		free(own[i]);
	free(own);
	free(msgs);
	return rc;
}
