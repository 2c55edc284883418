/* SPDX-License-Identifier: MIT */
/* OpenAI's error object: {"error":{"message","type","param","code"}}. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api_impl.h"

int api_fail(struct api_error *e, int status, const char *type, const char *code,
	     const char *param, const char *fmt, ...)
{
	e->status = status;
	e->type = type;
	e->code = code;
	e->retry_after = 0;
	snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return -1;
}

char *api_error_json(const struct api_error *e)
{
	struct jw w = { 0 };
	struct json_object *root = jw_obj(&w), *err = jw_obj(&w);
	jw_put(&w, err, "message", jw_strn(&w, e->message, strnlen(e->message, sizeof(e->message))));
	jw_put(&w, err, "type", jw_str(&w, e->type ? e->type : "server_error"));
	size_t plen = strnlen(e->param, sizeof(e->param));
	if (plen)
		jw_put(&w, err, "param", jw_strn(&w, e->param, plen));
	else
		jw_put_null(&w, err, "param");
	jw_put_str_or_null(&w, err, "code", e->code);
	jw_put(&w, root, "error", err);
	return jw_finish(&w, root, false);
}
