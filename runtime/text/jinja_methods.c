/* SPDX-License-Identifier: MIT */
/*
 * Methods of Python objects the templates call (str.startswith, dict.get,
 * ...) and the global functions transformers' environment has (range,
 * namespace, raise_exception, strftime_now, dict). Methods that would
 * modify an object are refused, as the immutable sandbox refuses them; a
 * Python method the interpreter lacks is refused by its name.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"

enum { G_RANGE, G_NAMESPACE, G_RAISE, G_DICT, G_STRFTIME };

static const char *const globals[] = {
	[G_RANGE] = "range",	     [G_NAMESPACE] = "namespace",  [G_RAISE] = "raise_exception",
	[G_DICT] = "dict",	     [G_STRFTIME] = "strftime_now",
};

bool jf_global(const char *name, struct jv *out)
{
	for (int i = 0; i < (int)(sizeof(globals) / sizeof(globals[0])); i++)
		if (!strcmp(globals[i], name)) {
			*out = (struct jv){ .t = JV_FUNC, .u.fn = i };
			return true;
		}
	return false;
}

/* Every method of Python's str, so that one the interpreter lacks is
 * named as such rather than taken for an undefined attribute. */
static const char *const str_methods[] = {
	"capitalize", "casefold", "center",	"count",      "encode",	  "endswith",
	"expandtabs", "find",	  "format",	"format_map", "index",	  "isalnum",
	"isalpha",    "isascii",  "isdecimal",	"isdigit",    "isidentifier", "islower",
	"isnumeric",  "isprintable", "isspace", "istitle",    "isupper",  "join",
	"ljust",      "lower",	  "lstrip",	"maketrans",  "partition", "removeprefix",
	"removesuffix", "replace", "rfind",	"rindex",     "rjust",	  "rpartition",
	"rsplit",     "rstrip",	  "split",	"splitlines", "startswith", "strip",
	"swapcase",   "title",	  "translate",	"upper",      "zfill",	  NULL,
};

bool jf_has_method(const struct jv *v, const char *name)
{
	if (v->t != JV_STR)
		return false;
	for (int i = 0; str_methods[i]; i++)
		if (!strcmp(str_methods[i], name))
			return true;
	return false;
}

#define oom jr_oom

static const struct jv *arg(const struct jv *args, size_t n, const char *const *kwn,
			    const struct jv *kwv, size_t nkw, size_t i, const char *name)
{
	if (i < n)
		return &args[i];
	for (size_t k = 0; k < nkw; k++)
		if (name && !strcmp(kwn[k], name))
			return &kwv[k];
	return NULL;
}

static struct jstr str_arg(struct jrender *r, const struct jv *v, const char *method, int line)
{
	if (!v || v->t != JV_STR)
		jr_fail(r, -EINVAL, line, "str.%s needs a string argument%s%s", method,
			v ? ", not " : "", v ? jv_type_name(v) : "");
	return v->u.s;
}

static bool affix(struct jstr s, struct jstr p, bool end)
{
	return p.n <= s.n && !memcmp(s.s + (end ? s.n - p.n : 0), p.s, p.n);
}

static struct jv str_method(struct jrender *r, struct jstr s, const char *name,
			    const struct jv *args, size_t n, const char *const *kwn,
			    const struct jv *kwv, size_t nkw, int line)
{
	struct jarena *a = jr_arena(r);
#define ARG(i, kw) arg(args, n, kwn, kwv, nkw, i, kw)
	if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
		const struct jv *p = ARG(0, NULL);
		bool end = name[0] == 'e';
		if (ARG(1, NULL))
			jr_fail(r, -ENOTSUP, line, "str.%s with start/end is not supported", name);
		if (p && p->t == JV_TUPLE) {
			for (size_t i = 0; i < p->u.l->n; i++)
				if (affix(s, str_arg(r, &p->u.l->v[i], name, line), end))
					return jv_bool(true);
			return jv_bool(false);
		}
		return jv_bool(affix(s, str_arg(r, p, name, line), end));
	}
	if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
		const struct jv *c = ARG(0, "chars");
		struct jstr cs = { 0 };
		if (c && c->t != JV_NONE)
			cs = str_arg(r, c, name, line);
		enum js_side side = name[0] == 'l' ? JS_LEFT : name[0] == 'r' ? JS_RIGHT : JS_BOTH;
		return jv_str(js_strip(s, cs.s ? &cs : NULL, side));
	}
	if (!strcmp(name, "split")) {
		const struct jv *sep = ARG(0, "sep"), *max = ARG(1, "maxsplit");
		struct jstr ss = { 0 };
		if (sep && sep->t != JV_NONE) {
			ss = str_arg(r, sep, name, line);
			if (!ss.n)
				jr_fail(r, -EINVAL, line, "str.split: empty separator");
		}
		int64_t m = -1;
		if (max) {
			if (max->t != JV_INT)
				jr_fail(r, -EINVAL, line, "str.split's maxsplit must be an integer");
			m = max->u.i;
		}
		struct jlist *l = js_split(a, s, ss.s ? &ss : NULL, m);
		if (!l)
			oom(r, line);
		return (struct jv){ .t = JV_LIST, .u.l = l };
	}
	if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") ||
	    !strcmp(name, "capitalize")) {
		enum js_case how = name[0] == 'u' ? JC_UPPER : name[0] == 'l' ? JC_LOWER :
				   name[0] == 't' ? JC_TITLE : JC_CAPITALIZE;
		struct jstr out = js_case(a, s, how);
		if (!out.s)
			oom(r, line);
		return jv_str(out);
	}
	if (!strcmp(name, "replace")) {
		struct jstr old = str_arg(r, ARG(0, NULL), name, line);
		struct jstr rep = str_arg(r, ARG(1, NULL), name, line);
		const struct jv *c = ARG(2, "count");
		int64_t count = c && c->t == JV_INT ? c->u.i : -1;
		struct jstr out = js_replace(a, s, old, rep, count, jr_max_output(r));
		if (!out.s)
			oom(r, line);
		return jv_str(out);
	}
	if (!strcmp(name, "find") || !strcmp(name, "count")) {
		struct jstr needle = str_arg(r, ARG(0, NULL), name, line);
		if (ARG(1, NULL))
			jr_fail(r, -ENOTSUP, line, "str.%s with start/end is not supported", name);
		if (name[0] == 'f') {
			size_t at = js_find(s, needle, 0);
			return jv_int(at == (size_t)-1 ? -1 : (int64_t)ju_count(s.s, at));
		}
		if (!needle.n)
			return jv_int((int64_t)ju_count(s.s, s.n) + 1);
		int64_t k = 0;
		for (size_t at = 0; (at = js_find(s, needle, at)) != (size_t)-1; at += needle.n)
			k++;
		return jv_int(k);
	}
	if (!strcmp(name, "join")) {
		const struct jv *items = ARG(0, NULL);
		if (!items || (items->t != JV_LIST && items->t != JV_TUPLE))
			jr_fail(r, -EINVAL, line, "str.join needs a list");
		struct jbuf b;
		jb_init(&b, a, jr_max_output(r));
		for (size_t i = 0; i < items->u.l->n; i++) {
			if (i)
				jb_str(&b, s);
			jb_str(&b, str_arg(r, &items->u.l->v[i], name, line));
		}
		if (b.full)
			oom(r, line);
		return jv_str(jb_done(&b));
	}
#undef ARG
	jr_fail(r, -ENOTSUP, line, "str method '%s' is not supported", name);
}

static struct jv call_method(struct jrender *r, const struct jv *self, const char *name,
			     const struct jv *args, size_t n, const char *const *kwn,
			     const struct jv *kwv, size_t nkw, int line)
{
	struct jarena *a = jr_arena(r);
	if (self->t == JV_STR)
		return str_method(r, self->u.s, name, args, n, kwn, kwv, nkw, line);
	if (self->t == JV_LOOP) { /* loop.cycle(a, b, ...) */
		if (!n)
			jr_fail(r, -EINVAL, line, "loop.cycle needs arguments");
		return args[self->u.loop->i % n];
	}
	if (self->t == JV_DICT) {
		const struct jdict *d = self->u.d;
		if (!strcmp(name, "get")) {
			const struct jv *k = arg(args, n, kwn, kwv, nkw, 0, NULL);
			const struct jv *dflt = arg(args, n, kwn, kwv, nkw, 1, NULL);
			if (!k)
				jr_fail(r, -EINVAL, line, "dict.get needs a key");
			struct jv *v = k->t == JV_STR ? jd_get(d, k->u.s.s, k->u.s.n) : NULL;
			return v ? *v : dflt ? *dflt : jv_none();
		}
		if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
			struct jlist *l = jl_new(a);
			if (!l)
				oom(r, line);
			for (size_t i = 0; i < d->n; i++) {
				struct jv v = name[0] == 'k' ? jv_str(d->k[i]) : d->v[i];
				if (name[0] == 'i') {
					struct jlist *pair = jl_new(a);
					if (!pair || jl_push(a, pair, jv_str(d->k[i])) ||
					    jl_push(a, pair, d->v[i]))
						oom(r, line);
					v = (struct jv){ .t = JV_TUPLE, .u.l = pair };
				}
				if (jl_push(a, l, v))
					oom(r, line);
			}
			return (struct jv){ .t = JV_LIST, .u.l = l };
		}
		if (!strcmp(name, "copy") || !strcmp(name, "fromkeys"))
			jr_fail(r, -ENOTSUP, line, "dict method '%s' is not supported", name);
		jr_fail(r, -EINVAL, line, "dict.%s would modify a value the template may only read",
			name);
	}
	if (self->t == JV_LIST) {
		if (!strcmp(name, "count") || !strcmp(name, "index") || !strcmp(name, "copy"))
			jr_fail(r, -ENOTSUP, line, "list method '%s' is not supported", name);
		jr_fail(r, -EINVAL, line, "list.%s would modify a value the template may only read",
			name);
	}
	jr_fail(r, -ENOTSUP, line, "method '%s' of %s is not supported", name, jv_type_name(self));
}

static struct jv range(struct jrender *r, const struct jv *args, size_t n, int line)
{
	int64_t v[3] = { 0, 0, 1 };
	if (n < 1 || n > 3)
		jr_fail(r, -EINVAL, line, "range takes 1 to 3 integers, %zu given", n);
	for (size_t i = 0; i < n; i++) {
		if (args[i].t != JV_INT && args[i].t != JV_BOOL)
			jr_fail(r, -EINVAL, line, "range needs integers, not %s", jv_type_name(&args[i]));
		int64_t x = args[i].t == JV_INT ? args[i].u.i : args[i].u.b;
		if (n == 1)
			v[1] = x;
		else
			v[i] = x;
	}
	if (!v[2])
		jr_fail(r, -EINVAL, line, "range's step cannot be zero");
	struct jarena *a = jr_arena(r);
	struct jlist *l = jl_new(a);
	if (!l)
		oom(r, line);
	/* the length first, so a huge range fails before it is built */
	__int128 len = v[2] > 0 ? ((__int128)v[1] - v[0] + v[2] - 1) / v[2] :
				  ((__int128)v[0] - v[1] - v[2] - 1) / -v[2];
	if (len > 0 && (uint64_t)len > (uint64_t)SIZE_MAX / sizeof(struct jv) / 4)
		oom(r, line);
	if (len > 0 && !(l->v = ja_alloc(a, (size_t)len * sizeof(struct jv))))
		oom(r, line);
	l->cap = len > 0 ? (size_t)len : 0;
	for (__int128 x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2])
		l->v[l->n++] = jv_int((int64_t)x);
	return (struct jv){ .t = JV_LIST, .u.l = l };
}

static struct jv call_global(struct jrender *r, int fn, const struct jv *args, size_t n,
			     const char *const *kwn, const struct jv *kwv, size_t nkw, int line)
{
	struct jarena *a = jr_arena(r);
	switch (fn) {
	case G_RANGE:
		return range(r, args, n, line);
	case G_RAISE: {
		struct jbuf b;
		jb_init(&b, a, 300);
		for (size_t i = 0; i < n; i++)
			jv_write_str(&b, &args[i]);
		struct jstr s = jb_done(&b);
		jr_fail(r, -EINVAL, line, "the template raised an exception: %.*s", (int)s.n, s.s);
	}
	case G_NAMESPACE:
	case G_DICT: {
		struct jdict *d = jd_new(a);
		if (!d)
			oom(r, line);
		for (size_t i = 0; i < n; i++) {
			if (args[i].t != JV_DICT && args[i].t != JV_NS)
				jr_fail(r, -EINVAL, line, "%s takes a mapping or name=value arguments",
					globals[fn]);
			for (size_t k = 0; k < args[i].u.d->n; k++)
				if (jd_set(a, d, args[i].u.d->k[k], args[i].u.d->v[k]))
					oom(r, line);
		}
		for (size_t k = 0; k < nkw; k++)
			if (jd_set(a, d, js_cstr(kwn[k]), kwv[k]))
				oom(r, line);
		return (struct jv){ .t = fn == G_NAMESPACE ? JV_NS : JV_DICT, .u.d = d };
	}
	case G_STRFTIME: {
		if (n != 1 || args[0].t != JV_STR || args[0].u.s.n > 200)
			jr_fail(r, -EINVAL, line, "strftime_now takes one format string");
		char fmt[256], out[512];
		snprintf(fmt, sizeof(fmt), "%.*s", (int)args[0].u.s.n, args[0].u.s.s);
		time_t now = time(NULL);
		struct tm tm;
		localtime_r(&now, &tm);
		/* the template's own format, as Python's datetime.strftime takes it */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
		size_t len = strftime(out, sizeof(out), fmt, &tm);
#pragma GCC diagnostic pop
		struct jstr s = js_dup(a, out, len, false);
		if (!s.s)
			oom(r, line);
		return jv_str(s);
	}
	}
	jr_fail(r, -ENOTSUP, line, "unknown function");
}

struct jv jf_call(struct jrender *r, const struct jv *callee, const struct jv *args, size_t n,
		  const char *const *kwn, const struct jv *kwv, size_t nkw, int line)
{
	if (callee->t == JV_FUNC)
		return call_global(r, callee->u.fn, args, n, kwn, kwv, nkw, line);
	return call_method(r, callee->u.m.self, callee->u.m.name, args, n, kwn, kwv, nkw, line);
}
