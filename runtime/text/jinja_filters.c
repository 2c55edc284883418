/* SPDX-License-Identifier: MIT */
/*
 * Jinja's filters (x | name(args)) and tests (x is name args) that chat
 * templates use, with Jinja's semantics; tojson is transformers' own
 * (json.dumps with ensure_ascii=False, not Jinja's HTML-safe one).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "jinja.h"

#define JSON_DEPTH 100

struct fargs {
	const struct jv *v, *kwv;
	const char *const *kwn;
	size_t n, nkw;
};

/* Argument i of a call, by position or by its keyword name; NULL if not
 * given. */
static const struct jv *arg(const struct fargs *a, size_t i, const char *name)
{
	if (i < a->n)
		return &a->v[i];
	for (size_t k = 0; k < a->nkw; k++)
		if (name && !strcmp(a->kwn[k], name))
			return &a->kwv[k];
	return NULL;
}

#define oom jr_oom

static struct jstr to_str(struct jrender *r, const struct jv *v, int line)
{
	if (v->t == JV_STR)
		return v->u.s;
	struct jbuf b;
	jb_init(&b, jr_arena(r), jr_max_output(r));
	jv_write_str(&b, v);
	if (b.full)
		oom(r, line);
	return jb_done(&b);
}

static struct jv str_result(struct jrender *r, struct jstr s, int line)
{
	if (!s.s)
		oom(r, line);
	return jv_str(s);
}

static int64_t length(struct jrender *r, const struct jv *v, int line)
{
	switch (v->t) {
	case JV_UNDEF: return 0;
	case JV_STR: return (int64_t)ju_count(v->u.s.s, v->u.s.n);
	case JV_LIST:
	case JV_TUPLE: return (int64_t)v->u.l->n;
	case JV_DICT: return (int64_t)v->u.d->n;
	default: jr_fail(r, -EINVAL, line, "object of type '%s' has no len()", jv_type_name(v));
	}
}

/* list(v): a list's items, a dict's keys, a string's characters. */
static struct jlist *to_list(struct jrender *r, const struct jv *v, int line)
{
	struct jarena *a = jr_arena(r);
	struct jlist *l = jl_new(a);
	if (!l)
		oom(r, line);
	switch (v->t) {
	case JV_UNDEF:
		return l;
	case JV_LIST:
	case JV_TUPLE:
		for (size_t i = 0; i < v->u.l->n; i++)
			if (jl_push(a, l, v->u.l->v[i]))
				oom(r, line);
		return l;
	case JV_DICT:
		for (size_t i = 0; i < v->u.d->n; i++)
			if (jl_push(a, l, jv_str(v->u.d->k[i])))
				oom(r, line);
		return l;
	case JV_STR:
		for (size_t i = 0; i < v->u.s.n;) {
			size_t len;
			ju_decode(v->u.s.s, v->u.s.n, i, &len);
			struct jstr c = { v->u.s.s + i, len, v->u.s.taint ? v->u.s.taint + i : NULL };
			if (jl_push(a, l, jv_str(c)))
				oom(r, line);
			i += len;
		}
		return l;
	default:
		jr_fail(r, -EINVAL, line, "'%s' object is not iterable", jv_type_name(v));
	}
}

static int64_t int_arg(struct jrender *r, const struct jv *v, int64_t dflt, const char *what,
		       int line)
{
	if (!v || v->t == JV_NONE)
		return dflt;
	if (v->t == JV_INT)
		return v->u.i;
	if (v->t == JV_BOOL)
		return v->u.b;
	jr_fail(r, -EINVAL, line, "%s must be an integer, not %s", what, jv_type_name(v));
}

static struct jv do_tojson(struct jrender *r, const struct jv *v, const struct fargs *a, int line)
{
	const struct jv *ascii = arg(a, 0, "ensure_ascii"), *indent = arg(a, 1, "indent"),
			*seps = arg(a, 2, "separators"), *sort = arg(a, 3, "sort_keys");
	if (ascii && jv_truthy(ascii))
		jr_fail(r, -ENOTSUP, line, "tojson(ensure_ascii=True) is not supported");
	if (seps && seps->t != JV_NONE)
		jr_fail(r, -ENOTSUP, line, "tojson(separators=...) is not supported");
	int64_t ind = int_arg(r, indent, -1, "tojson's indent", line);
	if (ind > 64)
		jr_fail(r, -ENOTSUP, line, "tojson(indent=%lld): at most 64", (long long)ind);
	struct jbuf b;
	jb_init(&b, jr_arena(r), jr_max_output(r));
	struct pfx_error why = { "" };
	if (jv_write_json(&b, v, (int)ind, sort && jv_truthy(sort), JSON_DEPTH, &why))
		jr_fail(r, -EINVAL, line, "tojson: %s%s", why.msg,
			strcmp(why.msg, "nesting too deep") ? " is not JSON serializable" : "");
	if (b.full)
		oom(r, line);
	return jv_str(jb_done(&b));
}

/* Jinja's indent: every line but the first (unless first) gets width
 * spaces; blank lines too only with blank. */
static struct jv do_indent(struct jrender *r, const struct jv *v, const struct fargs *a, int line)
{
	struct jstr s = to_str(r, v, line);
	const struct jv *w = arg(a, 0, "width");
	struct jstr ind;
	char spaces[256];
	if (w && w->t == JV_STR) {
		ind = w->u.s;
	} else {
		int64_t n = int_arg(r, w, 4, "indent's width", line);
		if (n < 0 || n > 255)
			jr_fail(r, -ENOTSUP, line, "indent width %lld: 0 to 255", (long long)n);
		memset(spaces, ' ', (size_t)n);
		ind = (struct jstr){ spaces, (size_t)n, NULL };
	}
	bool first = arg(a, 1, "first") && jv_truthy(arg(a, 1, "first"));
	bool blank = arg(a, 2, "blank") && jv_truthy(arg(a, 2, "blank"));
	struct jbuf b;
	jb_init(&b, jr_arena(r), jr_max_output(r));
	/* lines split on \n, \r\n and \r (splitlines' common cases) */
	size_t i = 0, nline = 0;
	while (i < s.n) {
		size_t e = i;
		while (e < s.n && s.s[e] != '\n' && s.s[e] != '\r')
			e++;
		if (nline)
			jb_puts(&b, "\n");
		if ((nline || first) && (blank || e > i))
			jb_str(&b, ind);
		jb_sub(&b, s, i, e - i);
		nline++;
		i = e;
		if (i < s.n)
			i += s.s[i] == '\r' && i + 1 < s.n && s.s[i + 1] == '\n' ? 2 : 1;
	}
	if (!nline && first)
		jb_str(&b, ind);
	if (b.full)
		oom(r, line);
	return jv_str(jb_done(&b));
}

static struct jv attr_of(struct jrender *r, const struct jv *item, const struct jv *attr, int line)
{
	if (attr->t != JV_STR)
		return jr_getitem(r, item, attr, line);
	/* dotted: a.b */
	struct jv cur = *item;
	struct jstr s = attr->u.s;
	size_t from = 0;
	for (;;) {
		size_t dot = from;
		while (dot < s.n && s.s[dot] != '.')
			dot++;
		struct jv key = jv_str((struct jstr){ s.s + from, dot - from, NULL });
		cur = jr_getitem(r, &cur, &key, line);
		if (dot >= s.n)
			return cur;
		from = dot + 1;
	}
}

/* select/reject/selectattr/rejectattr */
static struct jv do_select(struct jrender *r, const struct jv *v, const struct fargs *a,
			   bool want, bool by_attr, int line)
{
	struct jlist *items = to_list(r, v, line), *out = jl_new(jr_arena(r));
	if (!out)
		oom(r, line);
	size_t k = 0;
	const struct jv *attr = NULL;
	if (by_attr) {
		attr = arg(a, k++, NULL);
		if (!attr)
			jr_fail(r, -EINVAL, line, "selectattr/rejectattr need an attribute");
	}
	const struct jv *test = arg(a, k++, NULL);
	if (test && test->t != JV_STR)
		jr_fail(r, -EINVAL, line, "a test name must be a string");
	char name[64] = "";
	if (test) {
		snprintf(name, sizeof(name), "%.*s", (int)test->u.s.n, test->u.s.s);
		if (!jf_test_known(name))
			jr_fail(r, -ENOTSUP, line, "unknown test '%s'", name);
	}
	size_t nrest = a->n > k ? a->n - k : 0;
	for (size_t i = 0; i < items->n; i++) {
		struct jv x = attr ? attr_of(r, &items->v[i], attr, line) : items->v[i];
		bool ok = test ? jf_test(r, name, &x, a->v + k, nrest, line) : jv_truthy(&x);
		if (ok == want && jl_push(jr_arena(r), out, items->v[i]))
			oom(r, line);
	}
	return (struct jv){ .t = JV_LIST, .u.l = out };
}

static struct jv do_map(struct jrender *r, const struct jv *v, const struct fargs *a, int line)
{
	struct jlist *items = to_list(r, v, line), *out = jl_new(jr_arena(r));
	if (!out)
		oom(r, line);
	const struct jv *attr = arg(a, a->n, "attribute"), *dflt = arg(a, a->n, "default");
	char name[64] = "";
	if (!attr) {
		const struct jv *f = arg(a, 0, NULL);
		if (!f || f->t != JV_STR || f->u.s.n >= sizeof(name))
			jr_fail(r, -EINVAL, line, "map needs a filter name or attribute=");
		snprintf(name, sizeof(name), "%.*s", (int)f->u.s.n, f->u.s.s);
		if (!jf_filter_known(name))
			jr_fail(r, -ENOTSUP, line, "unknown filter '%s'", name);
	}
	for (size_t i = 0; i < items->n; i++) {
		struct jv x;
		if (attr) {
			x = attr_of(r, &items->v[i], attr, line);
			if (x.t == JV_UNDEF && dflt)
				x = *dflt;
		} else {
			x = jf_filter(r, name, items->v[i], a->v + 1, a->n - 1, NULL, NULL, 0, line);
		}
		if (jl_push(jr_arena(r), out, x))
			oom(r, line);
	}
	return (struct jv){ .t = JV_LIST, .u.l = out };
}

static struct jv do_join(struct jrender *r, const struct jv *v, const struct fargs *a, int line)
{
	struct jlist *items = to_list(r, v, line);
	const struct jv *sep = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
	struct jstr d = sep ? to_str(r, sep, line) : (struct jstr){ "", 0, NULL };
	struct jbuf b;
	jb_init(&b, jr_arena(r), jr_max_output(r));
	for (size_t i = 0; i < items->n; i++) {
		if (i)
			jb_str(&b, d);
		struct jv x = attr ? attr_of(r, &items->v[i], attr, line) : items->v[i];
		jv_write_str(&b, &x);
	}
	if (b.full)
		oom(r, line);
	return jv_str(jb_done(&b));
}

static const char *const filters[] = {
	"abs",	  "capitalize", "count",   "d",	     "default", "first",  "float",
	"indent", "int",	"items",   "join",   "last",	"length", "list",
	"lower",  "map",	"reject",  "rejectattr", "replace", "reverse", "safe",
	"select", "selectattr", "string",  "title",  "tojson",	"trim",	  "upper",
	NULL,
};

bool jf_filter_known(const char *name)
{
	for (int i = 0; filters[i]; i++)
		if (!strcmp(filters[i], name))
			return true;
	return false;
}

struct jv jf_filter(struct jrender *r, const char *name, struct jv v, const struct jv *args,
		    size_t n, const char *const *kwn, const struct jv *kwv, size_t nkw, int line)
{
	struct fargs a = { args, kwv, kwn, n, nkw };
	struct jarena *ar = jr_arena(r);
	if (!strcmp(name, "default") || !strcmp(name, "d")) {
		const struct jv *dv = arg(&a, 0, "default_value"), *b = arg(&a, 1, "boolean");
		bool use = v.t == JV_UNDEF || (b && jv_truthy(b) && !jv_truthy(&v));
		if (!use)
			return v;
		return dv ? *dv : jv_str((struct jstr){ "", 0, NULL });
	}
	if (!strcmp(name, "trim")) {
		const struct jv *chars = arg(&a, 0, "chars");
		struct jstr cs = chars && chars->t != JV_NONE ? to_str(r, chars, line) : (struct jstr){ 0 };
		return jv_str(js_strip(to_str(r, &v, line), cs.s ? &cs : NULL, JS_BOTH));
	}
	if (!strcmp(name, "length") || !strcmp(name, "count"))
		return jv_int(length(r, &v, line));
	if (!strcmp(name, "tojson"))
		return do_tojson(r, &v, &a, line);
	if (!strcmp(name, "items")) {
		if (v.t == JV_UNDEF)
			return (struct jv){ .t = JV_LIST, .u.l = to_list(r, &v, line) };
		if (v.t != JV_DICT)
			jr_fail(r, -EINVAL, line, "items: '%s' is not a mapping", jv_type_name(&v));
		struct jlist *l = jl_new(ar);
		if (!l)
			oom(r, line);
		for (size_t i = 0; i < v.u.d->n; i++) {
			struct jlist *pair = jl_new(ar);
			if (!pair || jl_push(ar, pair, jv_str(v.u.d->k[i])) ||
			    jl_push(ar, pair, v.u.d->v[i]) ||
			    jl_push(ar, l, (struct jv){ .t = JV_TUPLE, .u.l = pair }))
				oom(r, line);
		}
		return (struct jv){ .t = JV_LIST, .u.l = l };
	}
	if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") ||
	    !strcmp(name, "capitalize")) {
		enum js_case how = name[0] == 'u' ? JC_UPPER : name[0] == 'l' ? JC_LOWER :
				   name[0] == 't' ? JC_JINJA_TITLE : JC_CAPITALIZE;
		return str_result(r, js_case(ar, to_str(r, &v, line), how), line);
	}
	if (!strcmp(name, "join"))
		return do_join(r, &v, &a, line);
	if (!strcmp(name, "string"))
		return jv_str(to_str(r, &v, line));
	if (!strcmp(name, "safe"))
		return v;
	if (!strcmp(name, "list"))
		return (struct jv){ .t = JV_LIST, .u.l = to_list(r, &v, line) };
	if (!strcmp(name, "first") || !strcmp(name, "last")) {
		struct jlist *l = to_list(r, &v, line);
		if (!l->n)
			return jv_undef(NULL);
		return l->v[name[0] == 'f' ? 0 : l->n - 1];
	}
	if (!strcmp(name, "reverse")) {
		if (v.t == JV_STR) {
			struct jlist *chars = to_list(r, &v, line);
			struct jbuf b;
			jb_init(&b, ar, (size_t)-1);
			for (size_t i = chars->n; i-- > 0;)
				jb_str(&b, chars->v[i].u.s);
			if (b.full)
				oom(r, line);
			return jv_str(jb_done(&b));
		}
		struct jlist *l = to_list(r, &v, line);
		for (size_t i = 0; i < l->n / 2; i++) {
			struct jv t = l->v[i];
			l->v[i] = l->v[l->n - 1 - i];
			l->v[l->n - 1 - i] = t;
		}
		return (struct jv){ .t = JV_LIST, .u.l = l };
	}
	if (!strcmp(name, "replace")) {
		const struct jv *old = arg(&a, 0, "old"), *rep = arg(&a, 1, "new");
		if (!old || !rep)
			jr_fail(r, -EINVAL, line, "replace needs the old and the new string");
		int64_t count = int_arg(r, arg(&a, 2, "count"), -1, "replace's count", line);
		return str_result(r, js_replace(ar, to_str(r, &v, line), to_str(r, old, line),
						to_str(r, rep, line), count, jr_max_output(r)),
				  line);
	}
	if (!strcmp(name, "abs")) {
		if (v.t == JV_FLOAT)
			return jv_float(fabs(v.u.f));
		if (v.t == JV_INT && v.u.i != INT64_MIN)
			return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
		if (v.t == JV_BOOL)
			return jv_int(v.u.b);
		jr_fail(r, -EINVAL, line, "bad operand type for abs(): '%s'", jv_type_name(&v));
	}
	if (!strcmp(name, "int") || !strcmp(name, "float")) {
		bool is_int = name[0] == 'i';
		const struct jv *dv = arg(&a, 0, "default");
		struct jv dflt = dv ? *dv : is_int ? jv_int(0) : jv_float(0);
		if (v.t == JV_INT || v.t == JV_BOOL)
			return is_int ? jv_int(v.t == JV_INT ? v.u.i : v.u.b) :
					jv_float(v.t == JV_INT ? (double)v.u.i : v.u.b);
		if (v.t == JV_FLOAT)
			return is_int ? (isfinite(v.u.f) && fabs(v.u.f) < 9.2e18 ? jv_int((int64_t)v.u.f) : dflt) : v;
		if (v.t != JV_STR)
			return dflt;
		struct jstr s = js_strip(v.u.s, NULL, JS_BOTH);
		char buf[64];
		if (!s.n || s.n >= sizeof(buf))
			return dflt;
		memcpy(buf, s.s, s.n);
		buf[s.n] = 0;
		char *end;
		if (is_int) {
			long long x = strtoll(buf, &end, 10);
			if (*end) {
				double f = strtod(buf, &end);
				return *end || !isfinite(f) || fabs(f) >= 9.2e18 ? dflt : jv_int((int64_t)f);
			}
			return jv_int(x);
		}
		double f = strtod(buf, &end);
		return *end ? dflt : jv_float(f);
	}
	if (!strcmp(name, "indent"))
		return do_indent(r, &v, &a, line);
	if (!strcmp(name, "select") || !strcmp(name, "reject"))
		return do_select(r, &v, &a, name[0] == 's', false, line);
	if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
		return do_select(r, &v, &a, name[0] == 's', true, line);
	if (!strcmp(name, "map"))
		return do_map(r, &v, &a, line);
	jr_fail(r, -ENOTSUP, line, "unknown filter '%s'", name);
}

/* ---- tests ---- */

static const char *const tests[] = {
	"defined", "undefined", "none",	    "boolean", "false",	 "true",   "integer", "float",
	"number",  "string",	"mapping",  "iterable", "sequence", "callable", "odd",  "even",
	"divisibleby", "eq",	"equalto",  "==",      "ne",	 "!=",	   "lt",      "lessthan",
	"<",	   "le",	"<=",	    "gt",      "greaterthan", ">", "ge",      ">=",
	"in",	   "sameas",	"lower",    "upper",   NULL,
};

bool jf_test_known(const char *name)
{
	for (int i = 0; tests[i]; i++)
		if (!strcmp(tests[i], name))
			return true;
	return false;
}

static bool cmp_test(struct jrender *r, const char *name, const struct jv *v, const struct jv *o,
		     int line)
{
	int c;
	if (!jv_compare(v, o, &c))
		jr_fail(r, -EINVAL, line, "test '%s': '%s' and '%s' do not compare", name,
			jv_type_name(v), jv_type_name(o));
	if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<"))
		return c < 0;
	if (!strcmp(name, "le") || !strcmp(name, "<="))
		return c <= 0;
	if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">"))
		return c > 0;
	return c >= 0;
}

static bool str_case_test(const struct jv *v, bool upper)
{
	if (v->t != JV_STR)
		return false;
	bool cased = false;
	for (size_t i = 0; i < v->u.s.n;) {
		size_t len;
		int32_t c = ju_decode(v->u.s.s, v->u.s.n, i, &len);
		i += len;
		int32_t lo = utf8proc_tolower(c), up = utf8proc_toupper(c);
		if (lo == up)
			continue;
		cased = true;
		if ((upper && c != up) || (!upper && c != lo))
			return false;
	}
	return cased;
}

bool jf_test(struct jrender *r, const char *name, const struct jv *v, const struct jv *args,
	     size_t n, int line)
{
	const struct jv *o = n ? &args[0] : NULL;
	if (!strcmp(name, "defined"))
		return v->t != JV_UNDEF;
	if (!strcmp(name, "undefined"))
		return v->t == JV_UNDEF;
	if (!strcmp(name, "none"))
		return v->t == JV_NONE;
	if (!strcmp(name, "boolean"))
		return v->t == JV_BOOL;
	if (!strcmp(name, "false"))
		return v->t == JV_BOOL && !v->u.b;
	if (!strcmp(name, "true"))
		return v->t == JV_BOOL && v->u.b;
	if (!strcmp(name, "integer"))
		return v->t == JV_INT;
	if (!strcmp(name, "float"))
		return v->t == JV_FLOAT;
	if (!strcmp(name, "number"))
		return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
	if (!strcmp(name, "string"))
		return v->t == JV_STR;
	if (!strcmp(name, "mapping"))
		return v->t == JV_DICT;
	if (!strcmp(name, "iterable"))
		return v->t == JV_STR || v->t == JV_LIST || v->t == JV_TUPLE || v->t == JV_DICT ||
		       v->t == JV_UNDEF;
	if (!strcmp(name, "sequence"))
		return v->t == JV_STR || v->t == JV_LIST || v->t == JV_TUPLE || v->t == JV_DICT ||
		       v->t == JV_UNDEF;
	if (!strcmp(name, "callable"))
		return v->t == JV_MACRO || v->t == JV_FUNC || v->t == JV_METHOD;
	if (!strcmp(name, "odd") || !strcmp(name, "even")) {
		if (v->t != JV_INT && v->t != JV_BOOL)
			jr_fail(r, -EINVAL, line, "test '%s' needs an integer, not %s", name,
				jv_type_name(v));
		int64_t x = v->t == JV_INT ? v->u.i : v->u.b;
		return (x % 2 != 0) == (name[0] == 'o');
	}
	if (!strcmp(name, "lower") || !strcmp(name, "upper"))
		return str_case_test(v, name[0] == 'u');
	if (!o)
		jr_fail(r, -EINVAL, line, "test '%s' needs an argument", name);
	if (!strcmp(name, "divisibleby")) {
		if (v->t != JV_INT || o->t != JV_INT || !o->u.i)
			jr_fail(r, -EINVAL, line, "divisibleby needs integers (and not 0)");
		return o->u.i == -1 || v->u.i % o->u.i == 0;
	}
	if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "=="))
		return jv_equal(v, o);
	if (!strcmp(name, "ne") || !strcmp(name, "!="))
		return !jv_equal(v, o);
	if (!strcmp(name, "sameas")) {
		if (v->t != o->t)
			return false;
		if (v->t == JV_LIST || v->t == JV_TUPLE)
			return v->u.l == o->u.l;
		if (v->t == JV_DICT || v->t == JV_NS)
			return v->u.d == o->u.d;
		return jv_equal(v, o);
	}
	if (!strcmp(name, "in")) {
		if (o->t == JV_STR && v->t == JV_STR)
			return js_find(o->u.s, v->u.s, 0) != (size_t)-1;
		if (o->t == JV_LIST || o->t == JV_TUPLE) {
			for (size_t i = 0; i < o->u.l->n; i++)
				if (jv_equal(&o->u.l->v[i], v))
					return true;
			return false;
		}
		if (o->t == JV_DICT)
			return v->t == JV_STR && jd_get(o->u.d, v->u.s.s, v->u.s.n);
		jr_fail(r, -EINVAL, line, "test 'in': '%s' is not a container", jv_type_name(o));
	}
	if (jf_test_known(name))
		return cmp_test(r, name, v, o, line);
	jr_fail(r, -ENOTSUP, line, "unknown test '%s'", name);
}
