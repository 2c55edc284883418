/* SPDX-License-Identifier: MIT */
/* Whole-buffer JSON parsing with json-c. */
#include "json_buf.h"

#include <errno.h>
#include <limits.h>

int json_parse_object(const char *buf, size_t n, json_object **out, const char **why)
{
	if (n > INT_MAX) {
		*why = "too large";
		return -EINVAL;
	}
	json_tokener *tok = json_tokener_new();
	if (!tok) {
		*why = "out of memory";
		return -ENOMEM;
	}
	json_object *o = json_tokener_parse_ex(tok, buf, (int)n);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!o || jerr != json_tokener_success) {
		*why = jerr == json_tokener_continue ? "unexpected end of JSON" : json_tokener_error_desc(jerr);
		json_object_put(o);
		return -EINVAL;
	}
	if (!json_object_is_type(o, json_type_object)) {
		*why = "not a JSON object";
		json_object_put(o);
		return -EINVAL;
	}
	for (size_t i = end; i < n; i++) {
		char c = buf[i];
		if (c != ' ' && c != '\n' && c != '\t' && c != '\r' && c != 0) {
			*why = "trailing bytes after the JSON object";
			json_object_put(o);
			return -EINVAL;
		}
	}
	*out = o;
	return 0;
}
