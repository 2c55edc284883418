/* SPDX-License-Identifier: MIT */
/*
 * Values as Python sees them in a template: lists, dicts, strings with
 * their provenance, str() and repr(), truth, equality and order.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "jinja.h"

struct jlist *jl_new(struct jarena *a)
{
	return ja_alloc(a, sizeof(struct jlist));
}

static int depth_of(const struct jv *v)
{
	if (v->t == JV_LIST || v->t == JV_TUPLE)
		return v->u.l->depth + 1;
	if (v->t == JV_DICT || v->t == JV_NS)
		return v->u.d->depth + 1;
	return 0;
}

static bool reaches(const struct jv *v, const struct jdict *d, int depth, long *budget)
{
	if (depth > JV_MAX_NESTING + 1 || --*budget < 0)
		return true; /* too big to tell: taken as a cycle, refused */
	if (v->t == JV_LIST || v->t == JV_TUPLE) {
		for (size_t i = 0; i < v->u.l->n; i++)
			if (reaches(&v->u.l->v[i], d, depth + 1, budget))
				return true;
	} else if (v->t == JV_DICT || v->t == JV_NS) {
		if (v->u.d == d)
			return true;
		for (size_t i = 0; i < v->u.d->n; i++)
			if (reaches(&v->u.d->v[i], d, depth + 1, budget))
				return true;
	}
	return false;
}

bool jv_reaches(const struct jv *v, const struct jdict *d, int depth)
{
	long budget = 1000000;
	return reaches(v, d, depth, &budget);
}

int jl_push(struct jarena *a, struct jlist *l, struct jv v)
{
	int d = depth_of(&v);
	if (d > JV_MAX_NESTING)
		return -1;
	if (d > l->depth)
		l->depth = d;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 4;
		struct jv *nv = ja_alloc(a, cap * sizeof(*nv));
		if (!nv)
			return -1;
		if (l->n)
			memcpy(nv, l->v, l->n * sizeof(*nv));
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = v;
	return 0;
}

struct jdict *jd_new(struct jarena *a)
{
	return ja_alloc(a, sizeof(struct jdict));
}

struct jv *jd_get(const struct jdict *d, const char *key, size_t n)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].n == n && !memcmp(d->k[i].s, key, n))
			return &d->v[i];
	return NULL;
}

int jd_set(struct jarena *a, struct jdict *d, struct jstr key, struct jv v)
{
	int dv = depth_of(&v);
	if (dv > JV_MAX_NESTING)
		return -1;
	if (dv > d->depth)
		d->depth = dv;
	struct jv *old = jd_get(d, key.s, key.n);
	if (old) {
		*old = v;
		return 0;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 4;
		struct jstr *nk = ja_alloc(a, cap * sizeof(*nk));
		struct jv *nv = ja_alloc(a, cap * sizeof(*nv));
		if (!nk || !nv)
			return -1;
		if (d->n) {
			memcpy(nk, d->k, d->n * sizeof(*nk));
			memcpy(nv, d->v, d->n * sizeof(*nv));
		}
		d->k = nk;
		d->v = nv;
		d->cap = cap;
	}
	d->k[d->n] = key;
	d->v[d->n++] = v;
	return 0;
}

struct jstr js_dup(struct jarena *a, const char *s, size_t n, bool taint)
{
	struct jstr r = { 0 };
	char *p = ja_alloc(a, n + 1);
	uint8_t *t = taint && n ? ja_alloc(a, n) : NULL;
	if (!p || (taint && n && !t))
		return r;
	memcpy(p, s, n);
	if (t)
		memset(t, 1, n);
	r.s = p;
	r.n = n;
	r.taint = t;
	return r;
}

struct jstr js_cstr(const char *s)
{
	return (struct jstr){ .s = s, .n = strlen(s) };
}

/* ---- building strings ---- */

void jb_init(struct jbuf *b, struct jarena *a, size_t limit)
{
	*b = (struct jbuf){ .a = a, .limit = limit };
}

static bool jb_grow(struct jbuf *b, size_t more)
{
	if (b->full)
		return false;
	if (more > b->limit || b->n > b->limit - more) {
		b->full = true;
		return false;
	}
	if (b->n + more <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < b->n + more)
		cap *= 2;
	char *s = ja_alloc(b->a, cap + 1);
	uint8_t *t = b->taint ? ja_alloc(b->a, cap) : NULL;
	if (!s || (b->taint && !t)) {
		b->full = true;
		return false;
	}
	if (b->n) {
		memcpy(s, b->s, b->n);
		if (t)
			memcpy(t, b->taint, b->n);
	}
	b->s = s;
	b->taint = t;
	b->cap = cap;
	return true;
}

static void jb_taint(struct jbuf *b, size_t from, size_t n, const uint8_t *src, bool all)
{
	if (!b->taint) {
		if (!all && !src)
			return;
		if (!all) {
			size_t k = 0;
			while (k < n && !src[k])
				k++;
			if (k == n)
				return;
		}
		b->taint = ja_alloc(b->a, b->cap ? b->cap : 1);
		if (!b->taint) {
			b->full = true;
			return;
		}
	}
	if (all)
		memset(b->taint + from, 1, n);
	else if (src)
		memcpy(b->taint + from, src, n);
	else
		memset(b->taint + from, 0, n);
}

void jb_put(struct jbuf *b, const char *s, size_t n, bool taint)
{
	if (!n || !jb_grow(b, n))
		return;
	memcpy(b->s + b->n, s, n);
	jb_taint(b, b->n, n, NULL, taint);
	b->n += n;
}

void jb_puts(struct jbuf *b, const char *s)
{
	jb_put(b, s, strlen(s), false);
}

void jb_sub(struct jbuf *b, struct jstr s, size_t i, size_t n)
{
	if (!n || !jb_grow(b, n))
		return;
	memcpy(b->s + b->n, s.s + i, n);
	jb_taint(b, b->n, n, s.taint ? s.taint + i : NULL, false);
	b->n += n;
}

void jb_str(struct jbuf *b, struct jstr s)
{
	jb_sub(b, s, 0, s.n);
}

struct jstr jb_done(struct jbuf *b)
{
	if (!b->s)
		return (struct jstr){ .s = "", .n = 0 };
	b->s[b->n] = 0;
	return (struct jstr){ .s = b->s, .n = b->n, .taint = b->taint };
}

/* ---- str() and repr() ---- */

/* Python's repr of a float: the shortest string that reads back as f. */
static void write_float(struct jbuf *b, double f)
{
	if (isnan(f)) {
		jb_puts(b, "nan");
		return;
	}
	if (isinf(f)) {
		jb_puts(b, f < 0 ? "-inf" : "inf");
		return;
	}
	char e[40];
	for (int p = 1; p <= 17; p++) {
		snprintf(e, sizeof(e), "%.*e", p - 1, f);
		if (strtod(e, NULL) == f)
			break;
	}
	/* e is [-]d[.ddd]e[+-]XX: split into sign, digits and exponent. */
	char digits[24];
	int nd = 0, neg = e[0] == '-';
	const char *p = e + neg;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			digits[nd++] = *p;
	int exp = atoi(p + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	char out[64];
	int o = 0;
	if (neg)
		out[o++] = '-';
	if (exp < -4 || exp >= 16) {
		out[o++] = digits[0];
		if (nd > 1) {
			out[o++] = '.';
			memcpy(out + o, digits + 1, nd - 1);
			o += nd - 1;
		}
		o += snprintf(out + o, sizeof(out) - o, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
	} else if (exp < 0) {
		out[o++] = '0';
		out[o++] = '.';
		for (int k = 0; k < -exp - 1; k++)
			out[o++] = '0';
		memcpy(out + o, digits, nd);
		o += nd;
	} else {
		for (int k = 0; k <= exp; k++)
			out[o++] = k < nd ? digits[k] : '0';
		out[o++] = '.';
		if (nd > exp + 1) {
			memcpy(out + o, digits + exp + 1, nd - exp - 1);
			o += nd - exp - 1;
		} else {
			out[o++] = '0';
		}
	}
	jb_put(b, out, o, false);
}

static void write_str_repr(struct jbuf *b, struct jstr s)
{
	bool sq = memchr(s.s, '\'', s.n) != NULL, dq = memchr(s.s, '"', s.n) != NULL;
	char q = sq && !dq ? '"' : '\'';
	jb_put(b, &q, 1, false);
	for (size_t i = 0; i < s.n;) {
		size_t len;
		int32_t c = ju_decode(s.s, s.n, i, &len);
		bool t = s.taint && s.taint[i];
		char esc[12];
		if (c == q || c == '\\')
			snprintf(esc, sizeof(esc), "\\%c", (char)c);
		else if (c == '\n')
			snprintf(esc, sizeof(esc), "\\n");
		else if (c == '\r')
			snprintf(esc, sizeof(esc), "\\r");
		else if (c == '\t')
			snprintf(esc, sizeof(esc), "\\t");
		else if (c < 0x20 || (c >= 0x7f && c <= 0xa0))
			snprintf(esc, sizeof(esc), "\\x%02x", (unsigned)c);
		else {
			jb_sub(b, s, i, len);
			i += len;
			continue;
		}
		jb_put(b, esc, strlen(esc), t);
		i += len;
	}
	jb_put(b, &q, 1, false);
}

static void write_items(struct jbuf *b, const struct jv *v, size_t n)
{
	for (size_t i = 0; i < n && !b->full; i++) {
		if (i)
			jb_puts(b, ", ");
		jv_write_repr(b, &v[i]);
	}
}

void jv_write_repr(struct jbuf *b, const struct jv *v)
{
	char num[32];
	switch (v->t) {
	case JV_STR:
		write_str_repr(b, v->u.s);
		return;
	case JV_LIST:
		jb_puts(b, "[");
		write_items(b, v->u.l->v, v->u.l->n);
		jb_puts(b, "]");
		return;
	case JV_TUPLE:
		jb_puts(b, "(");
		write_items(b, v->u.l->v, v->u.l->n);
		jb_puts(b, v->u.l->n == 1 ? ",)" : ")");
		return;
	case JV_NS:
		jb_puts(b, "<Namespace ");
		/* fall through */
	case JV_DICT:
		jb_puts(b, "{");
		for (size_t i = 0; i < v->u.d->n && !b->full; i++) {
			if (i)
				jb_puts(b, ", ");
			write_str_repr(b, v->u.d->k[i]);
			jb_puts(b, ": ");
			jv_write_repr(b, &v->u.d->v[i]);
		}
		jb_puts(b, v->t == JV_NS ? "}>" : "}");
		return;
	case JV_UNDEF:
		jb_puts(b, "Undefined");
		return;
	case JV_NONE:
		jb_puts(b, "None");
		return;
	case JV_BOOL:
		jb_puts(b, v->u.b ? "True" : "False");
		return;
	case JV_INT:
		snprintf(num, sizeof(num), "%lld", (long long)v->u.i);
		jb_puts(b, num);
		return;
	case JV_FLOAT:
		write_float(b, v->u.f);
		return;
	case JV_MACRO:
		jb_puts(b, "<Macro>");
		return;
	case JV_FUNC:
	case JV_METHOD:
		jb_puts(b, "<function>");
		return;
	case JV_LOOP:
		jb_puts(b, "<LoopContext>");
		return;
	}
}

void jv_write_str(struct jbuf *b, const struct jv *v)
{
	if (v->t == JV_STR)
		jb_str(b, v->u.s);
	else if (v->t != JV_UNDEF)
		jv_write_repr(b, v);
}

/* ---- truth, equality, order ---- */

bool jv_truthy(const struct jv *v)
{
	switch (v->t) {
	case JV_UNDEF:
	case JV_NONE:
		return false;
	case JV_BOOL:
		return v->u.b;
	case JV_INT:
		return v->u.i != 0;
	case JV_FLOAT:
		return v->u.f != 0;
	case JV_STR:
		return v->u.s.n != 0;
	case JV_LIST:
	case JV_TUPLE:
		return v->u.l->n != 0;
	case JV_DICT:
		return v->u.d->n != 0;
	default:
		return true;
	}
}

static bool is_num(const struct jv *v)
{
	return v->t == JV_BOOL || v->t == JV_INT || v->t == JV_FLOAT;
}

static double num(const struct jv *v)
{
	return v->t == JV_FLOAT ? v->u.f : v->t == JV_INT ? (double)v->u.i : v->u.b;
}

static int64_t inum(const struct jv *v)
{
	return v->t == JV_INT ? v->u.i : v->u.b;
}

/* Shared sublists make a value a DAG that can hold 2^64 paths in 64
 * levels: comparisons give up (unequal) after this many. */
#define EQUAL_BUDGET 100000

static bool equal(const struct jv *x, const struct jv *y, long *budget);

bool jv_equal(const struct jv *x, const struct jv *y)
{
	long budget = EQUAL_BUDGET;
	return equal(x, y, &budget);
}

static bool equal(const struct jv *x, const struct jv *y, long *budget)
{
	if (--*budget < 0)
		return false;
	if (is_num(x) && is_num(y)) {
		if (x->t != JV_FLOAT && y->t != JV_FLOAT)
			return inum(x) == inum(y);
		return num(x) == num(y);
	}
	if (x->t != y->t)
		return false;
	switch (x->t) {
	case JV_UNDEF:
	case JV_NONE:
		return true;
	case JV_STR:
		return x->u.s.n == y->u.s.n && !memcmp(x->u.s.s, y->u.s.s, x->u.s.n);
	case JV_LIST:
	case JV_TUPLE:
		if (x->u.l == y->u.l)
			return true;
		if (x->u.l->n != y->u.l->n)
			return false;
		for (size_t i = 0; i < x->u.l->n; i++)
			if (!equal(&x->u.l->v[i], &y->u.l->v[i], budget))
				return false;
		return true;
	case JV_DICT:
	case JV_NS:
		if (x->u.d->n != y->u.d->n)
			return false;
		for (size_t i = 0; i < x->u.d->n; i++) {
			struct jv *o = jd_get(y->u.d, x->u.d->k[i].s, x->u.d->k[i].n);
			if (!o || !equal(&x->u.d->v[i], o, budget))
				return false;
		}
		return true;
	case JV_MACRO:
		return x->u.macro == y->u.macro;
	case JV_FUNC:
		return x->u.fn == y->u.fn;
	default:
		return false;
	}
}

bool jv_compare(const struct jv *x, const struct jv *y, int *cmp)
{
	if (is_num(x) && is_num(y)) {
		if (x->t != JV_FLOAT && y->t != JV_FLOAT) {
			int64_t a = inum(x), b = inum(y);
			*cmp = (a > b) - (a < b);
		} else {
			double a = num(x), b = num(y);
			*cmp = (a > b) - (a < b);
		}
		return true;
	}
	if (x->t == JV_STR && y->t == JV_STR) {
		size_t n = x->u.s.n < y->u.s.n ? x->u.s.n : y->u.s.n;
		int c = memcmp(x->u.s.s, y->u.s.s, n);
		*cmp = c ? (c > 0) - (c < 0) : (x->u.s.n > y->u.s.n) - (x->u.s.n < y->u.s.n);
		return true;
	}
	if ((x->t == JV_LIST || x->t == JV_TUPLE) && x->t == y->t) {
		for (size_t i = 0; i < x->u.l->n && i < y->u.l->n; i++) {
			if (jv_equal(&x->u.l->v[i], &y->u.l->v[i]))
				continue;
			return jv_compare(&x->u.l->v[i], &y->u.l->v[i], cmp);
		}
		*cmp = (x->u.l->n > y->u.l->n) - (x->u.l->n < y->u.l->n);
		return true;
	}
	return false;
}

const char *jv_type_name(const struct jv *v)
{
	static const char *const names[] = {
		[JV_UNDEF] = "Undefined", [JV_NONE] = "NoneType", [JV_BOOL] = "bool",
		[JV_INT] = "int",	  [JV_FLOAT] = "float",	  [JV_STR] = "str",
		[JV_LIST] = "list",	  [JV_TUPLE] = "tuple",	  [JV_DICT] = "dict",
		[JV_NS] = "Namespace",	  [JV_MACRO] = "Macro",	  [JV_FUNC] = "function",
		[JV_METHOD] = "method",	  [JV_LOOP] = "LoopContext",
	};
	return names[v->t];
}

/* ---- UTF-8 ---- */

bool ju_isspace(int32_t c)
{
	if (c < 0x80)
		return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
	const utf8proc_property_t *p = utf8proc_get_property(c);
	return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
	       p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

int32_t ju_decode(const char *s, size_t n, size_t i, size_t *len)
{
	utf8proc_int32_t c;
	utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
	if (k <= 0) { /* not reached on checked input; one byte keeps callers moving */
		*len = 1;
		return (unsigned char)s[i];
	}
	*len = (size_t)k;
	return c;
}

size_t ju_count(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xc0) != 0x80;
	return k;
}

size_t ju_offset(const char *s, size_t n, size_t k)
{
	size_t i = 0;
	for (; i < n; i++)
		if (((unsigned char)s[i] & 0xc0) != 0x80 && k-- == 0)
			return i;
	return n;
}

size_t ju_invalid(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		utf8proc_int32_t c;
		utf8proc_ssize_t k =
			utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
		if (k <= 0)
			return i;
		i += (size_t)k;
	}
	return (size_t)-1;
}

int ju_encode(int32_t c, char out[4])
{
	return (int)utf8proc_encode_char(c, (utf8proc_uint8_t *)out);
}
