/* SPDX-License-Identifier: MIT */
/*
 * JSON in and out of templates. In: json-c documents become context
 * values. Out: transformers' tojson is Python's json.dumps(ensure_ascii=
 * False), whose spacing (", " and ": "), float spelling and escapes no C
 * library reproduces, and whose output must keep each string's
 * provenance byte by byte; so it is written here.
 */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

int jv_from_json(struct jarena *a, struct json_object *o, bool taint, struct jv *out)
{
	switch (json_object_get_type(o)) {
	case json_type_null:
		*out = jv_none();
		return 0;
	case json_type_boolean:
		*out = jv_bool(json_object_get_boolean(o));
		return 0;
	case json_type_int:
		*out = jv_int(json_object_get_int64(o));
		return 0;
	case json_type_double:
		*out = jv_float(json_object_get_double(o));
		return 0;
	case json_type_string: {
		struct jstr s = js_dup(a, json_object_get_string(o),
				       (size_t)json_object_get_string_len(o), taint);
		if (!s.s)
			return -1;
		*out = jv_str(s);
		return 0;
	}
	case json_type_array: {
		struct jlist *l = jl_new(a);
		if (!l)
			return -1;
		size_t n = json_object_array_length(o);
		for (size_t i = 0; i < n; i++) {
			struct jv v;
			if (jv_from_json(a, json_object_array_get_idx(o, i), taint, &v) ||
			    jl_push(a, l, v))
				return -1;
		}
		*out = (struct jv){ .t = JV_LIST, .u.l = l };
		return 0;
	}
	case json_type_object: {
		struct jdict *d = jd_new(a);
		if (!d)
			return -1;
		json_object_object_foreach(o, key, val)
		{
			struct jv v;
			struct jstr k = js_dup(a, key, strlen(key), false);
			if (!k.s || jv_from_json(a, val, taint, &v) || jd_set(a, d, k, v))
				return -1;
		}
		*out = (struct jv){ .t = JV_DICT, .u.d = d };
		return 0;
	}
	}
	return -1;
}

static void json_string(struct jbuf *b, struct jstr s)
{
	jb_puts(b, "\"");
	size_t run = 0; /* start of the bytes copied as they are */
	for (size_t i = 0; i < s.n; i++) {
		unsigned char c = (unsigned char)s.s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		jb_sub(b, s, run, i - run);
		char esc[8];
		switch (c) {
		case '"': strcpy(esc, "\\\""); break;
		case '\\': strcpy(esc, "\\\\"); break;
		case '\n': strcpy(esc, "\\n"); break;
		case '\r': strcpy(esc, "\\r"); break;
		case '\t': strcpy(esc, "\\t"); break;
		case '\b': strcpy(esc, "\\b"); break;
		case '\f': strcpy(esc, "\\f"); break;
		default: snprintf(esc, sizeof(esc), "\\u%04x", c); break;
		}
		jb_put(b, esc, strlen(esc), s.taint && s.taint[i]);
		run = i + 1;
	}
	jb_sub(b, s, run, s.n - run);
	jb_puts(b, "\"");
}

static void newline(struct jbuf *b, int indent, int level)
{
	jb_puts(b, "\n");
	for (int i = 0; i < indent * level; i++)
		jb_puts(b, " ");
}

static int cmp_keys(const void *x, const void *y)
{
	const struct jstr *a = *(const struct jstr *const *)x, *b = *(const struct jstr *const *)y;
	size_t n = a->n < b->n ? a->n : b->n;
	int c = memcmp(a->s, b->s, n);
	return c ? c : (a->n > b->n) - (a->n < b->n);
}

static int write_json(struct jbuf *b, const struct jv *v, int indent, bool sort, int level,
		      int depth, struct pfx_error *why)
{
	if (level > depth) {
		return pfx_errorf(why, -1, "nesting too deep");
	}
	switch (v->t) {
	case JV_NONE:
		jb_puts(b, "null");
		return 0;
	case JV_BOOL:
		jb_puts(b, v->u.b ? "true" : "false");
		return 0;
	case JV_INT:
		jv_write_repr(b, v);
		return 0;
	case JV_FLOAT:
		if (isnan(v->u.f))
			jb_puts(b, "NaN");
		else if (isinf(v->u.f))
			jb_puts(b, v->u.f > 0 ? "Infinity" : "-Infinity");
		else
			jv_write_repr(b, v);
		return 0;
	case JV_STR:
		json_string(b, v->u.s);
		return 0;
	case JV_LIST:
	case JV_TUPLE: {
		const struct jlist *l = v->u.l;
		jb_puts(b, "[");
		for (size_t i = 0; i < l->n && !b->full; i++) {
			if (i)
				jb_puts(b, indent >= 0 ? "," : ", ");
			if (indent >= 0)
				newline(b, indent, level + 1);
			if (write_json(b, &l->v[i], indent, sort, level + 1, depth, why))
				return -1;
		}
		if (indent >= 0 && l->n)
			newline(b, indent, level);
		jb_puts(b, "]");
		return 0;
	}
	case JV_DICT: {
		const struct jdict *d = v->u.d;
		const struct jstr **order = ja_alloc(b->a, (d->n + 1) * sizeof(*order));
		if (!order) {
			b->full = true;
			return 0;
		}
		for (size_t i = 0; i < d->n; i++)
			order[i] = &d->k[i];
		if (sort)
			qsort(order, d->n, sizeof(*order), cmp_keys);
		jb_puts(b, "{");
		for (size_t i = 0; i < d->n && !b->full; i++) {
			size_t k = (size_t)(order[i] - d->k);
			if (i)
				jb_puts(b, indent >= 0 ? "," : ", ");
			if (indent >= 0)
				newline(b, indent, level + 1);
			json_string(b, d->k[k]);
			jb_puts(b, ": ");
			if (write_json(b, &d->v[k], indent, sort, level + 1, depth, why))
				return -1;
		}
		if (indent >= 0 && d->n)
			newline(b, indent, level);
		jb_puts(b, "}");
		return 0;
	}
	default:
		pfx_errorf(why, -1, "%s", jv_type_name(v));
		return -1;
	}
}

int jv_write_json(struct jbuf *b, const struct jv *v, int indent, bool sort_keys, int depth,
		  struct pfx_error *why)
{
	return write_json(b, v, indent, sort_keys, 0, depth, why);
}
