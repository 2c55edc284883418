/* SPDX-License-Identifier: MIT */
/*
 * A text chunk without logprobs, the one a stream sends for every token,
 * written straight into its buffer: through json-c it took a tree of
 * seven objects, their hashing and a serialization, on the HTTP thread.
 * The bytes are json-c's (api_response.c's) exactly: the same fields in
 * the same order, and strings escaped as json-c escapes them with
 * JSON_C_TO_STRING_NOSLASHESCAPE ("\b\n\r\t\f", '"', '\\', other bytes
 * below 0x20 as \u00xx in lower case, the rest as they are).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"

/* Room a string takes escaped, quotes included: at most 6 bytes a byte. */
static size_t quoted_max(size_t len)
{
	return len > (SIZE_MAX - 2) / 6 ? SIZE_MAX : 6 * len + 2;
}

/* s[0, len) as a JSON string at out; the end. */
static char *quote(char *out, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	*out++ = '"';
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *e = NULL;
		switch (c) {
		case '\b': e = "\\b"; break;
		case '\n': e = "\\n"; break;
		case '\r': e = "\\r"; break;
		case '\t': e = "\\t"; break;
		case '\f': e = "\\f"; break;
		case '"': e = "\\\""; break;
		case '\\': e = "\\\\"; break;
		default: break;
		}
		if (e) {
			*out++ = e[0];
			*out++ = e[1];
		} else if (c < 0x20) {
			memcpy(out, "\\u00", 4);
			out[4] = hex[c >> 4];
			out[5] = hex[c & 15];
			out += 6;
		} else {
			*out++ = (char)c;
		}
	}
	*out++ = '"';
	return out;
}

char *api_chunk_text_plain(const struct api_call *c, const char *id, int64_t created,
			   const char *model, uint32_t index, const char *text, size_t len)
{
	bool chat = c->kind == API_CHAT;
	size_t lid = strlen(id), lmodel = strlen(model);
	size_t qt = quoted_max(len), qi = quoted_max(lid), qm = quoted_max(lmodel);
	if (qt == SIZE_MAX || qi == SIZE_MAX || qm == SIZE_MAX || qt > SIZE_MAX / 2 - qi - qm)
		return NULL;
	/* The fixed text is under 256 bytes, and so are the two numbers. */
	char *buf = malloc(qt + qi + qm + 512), *p = buf;
	if (!buf)
		return NULL;
	p += sprintf(p, "data: {\"id\":");
	p = quote(p, id, lid);
	p += sprintf(p, ",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":",
		     chat ? "chat.completion.chunk" : "text_completion", created);
	p = quote(p, model, lmodel);
	if (chat) {
		p += sprintf(p, ",\"choices\":[{\"index\":%" PRIu32 ",\"delta\":{\"content\":", index);
		p = quote(p, text, len);
		p += sprintf(p, "}");
	} else {
		p += sprintf(p, ",\"choices\":[{\"text\":");
		p = quote(p, text, len);
		p += sprintf(p, ",\"index\":%" PRIu32, index);
	}
	p += sprintf(p, ",\"logprobs\":null,\"finish_reason\":null}]%s}\n\n",
		     c->include_usage ? ",\"usage\":null" : "");
	return buf;
}
