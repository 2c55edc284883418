/* SPDX-License-Identifier: MIT */
/* Whole-buffer JSON parsing with json-c. */
#include "json_buf.h"

#include <errno.h>
#include <limits.h>

int json_parse_object(const char *buf, size_t n, json_object **out, struct pfx_error *err)
{
	if (n > INT_MAX)
		return pfx_errorf(err, -EINVAL, "too large");
	json_tokener *tok = json_tokener_new();
	if (!tok)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	json_object *o = json_tokener_parse_ex(tok, buf, (int)n);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!o || jerr != json_tokener_success) {
		json_object_put(o);
		return pfx_errorf(err, -EINVAL, "%s",
				  jerr == json_tokener_continue ? "unexpected end of JSON"
								: json_tokener_error_desc(jerr));
	}
	if (!json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return pfx_errorf(err, -EINVAL, "not a JSON object");
	}
	for (size_t i = end; i < n; i++) {
		char c = buf[i];
		if (c != ' ' && c != '\n' && c != '\t' && c != '\r' && c != 0) {
			json_object_put(o);
			return pfx_errorf(err, -EINVAL, "trailing bytes after the JSON object");
		}
	}
	*out = o;
	return 0;
}
