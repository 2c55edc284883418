/* SPDX-License-Identifier: MIT */
/* Writing JSON with json-c, keeping track of allocation failures. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"

static struct json_object *got(struct jw *w, struct json_object *o)
{
	if (!o)
		w->oom = true;
	return o;
}

struct json_object *jw_obj(struct jw *w)
{
	return got(w, json_object_new_object());
}

struct json_object *jw_arr(struct jw *w)
{
	return got(w, json_object_new_array());
}

struct json_object *jw_str(struct jw *w, const char *s)
{
	return jw_strn(w, s, s ? strlen(s) : 0);
}

struct json_object *jw_strn(struct jw *w, const char *s, size_t len)
{
	if (len > INT_MAX) {
		w->oom = true;
		return NULL;
	}
	return got(w, json_object_new_string_len(s ? s : "", (int)len));
}

struct json_object *jw_int(struct jw *w, int64_t v)
{
	return got(w, json_object_new_int64(v));
}

struct json_object *jw_bool(struct jw *w, bool v)
{
	return got(w, json_object_new_boolean(v));
}

/* Python's repr of a float32's shortest round-trip digits: positional
 * from 1e-4 to 1e16 ("-0.31725305", "-1000.0", "0.0"), else exponential
 * with two exponent digits at least ("-5.4669687e-05"). */
static void float_repr(float v, char *out, size_t cap)
{
	char e[32];
	for (int p = 1; p <= 9; p++) {
		snprintf(e, sizeof(e), "%.*e", p - 1, (double)v);
		if (strtof(e, NULL) == v)
			break;
	}
	bool neg = e[0] == '-';
	const char *s = e + neg;
	char d[16];
	int nd = 0;
	for (; *s && *s != 'e'; s++)
		if (*s >= '0' && *s <= '9' && nd < (int)sizeof(d))
			d[nd++] = *s;
	int x = *s ? atoi(s + 1) : 0;
	while (nd > 1 && d[nd - 1] == '0')
		nd--;
	size_t at = 0;
#define PUT(c) (at + 1 < cap ? (void)(out[at++] = (c)) : (void)0)
	if (neg)
		PUT('-');
	if (x < -4 || x >= 16) {
		PUT(d[0]);
		if (nd > 1)
			PUT('.');
		for (int i = 1; i < nd; i++)
			PUT(d[i]);
		at += (size_t)snprintf(out + at, cap - at, "e%c%02d", x < 0 ? '-' : '+', abs(x));
		return;
	}
	if (x < 0) {
		PUT('0');
		PUT('.');
		for (int i = 0; i < -x - 1; i++)
			PUT('0');
		for (int i = 0; i < nd; i++)
			PUT(d[i]);
	} else {
		for (int i = 0; i <= x; i++)
			PUT(i < nd ? d[i] : '0');
		PUT('.');
		if (nd <= x + 1)
			PUT('0');
		for (int i = x + 1; i < nd; i++)
			PUT(d[i]);
	}
#undef PUT
	out[at] = 0;
}

struct json_object *jw_logprob(struct jw *w, float v)
{
	char s[48];
	if (!isfinite(v))
		v = -9999.0f;
	float_repr(v, s, sizeof(s));
	return got(w, json_object_new_double_s((double)v, s));
}

void jw_put(struct jw *w, struct json_object *o, const char *k, struct json_object *v)
{
	if (!o || !v || json_object_object_add(o, k, v)) {
		w->oom = true;
		json_object_put(v);
	}
}

void jw_put_null(struct jw *w, struct json_object *o, const char *k)
{
	if (!o || json_object_object_add(o, k, NULL))
		w->oom = true;
}

void jw_put_str_or_null(struct jw *w, struct json_object *o, const char *k, const char *s)
{
	if (s)
		jw_put(w, o, k, jw_str(w, s));
	else
		jw_put_null(w, o, k);
}

void jw_push(struct jw *w, struct json_object *a, struct json_object *v)
{
	if (!a || !v || json_object_array_add(a, v)) {
		w->oom = true;
		json_object_put(v);
	}
}

char *jw_finish(struct jw *w, struct json_object *root, bool sse)
{
	char *out = NULL;
	if (!w->oom && root) {
		size_t len = 0;
		const char *s = json_object_to_json_string_length(
			root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
		static const char pre[] = "data: ", post[] = "\n\n";
		size_t extra = sse ? sizeof(pre) - 1 + sizeof(post) - 1 : 0;
		if (s && (out = malloc(len + extra + 1))) {
			size_t at = 0;
			if (sse) {
				memcpy(out, pre, sizeof(pre) - 1);
				at = sizeof(pre) - 1;
			}
			memcpy(out + at, s, len);
			at += len;
			if (sse) {
				memcpy(out + at, post, sizeof(post) - 1);
				at += sizeof(post) - 1;
			}
			out[at] = 0;
		}
	}
	json_object_put(root);
	return out;
}
