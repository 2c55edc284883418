/* SPDX-License-Identifier: MIT */
/*
 * The renderer: statements write to an output buffer, expressions
 * evaluate to values, with Python's semantics for operators and Jinja's
 * for names (undefined is a value until used), attributes (.x tries the
 * attribute, then the item; [x] the item, then the attribute) and scopes
 * (a for loop's body and a macro's are scopes of their own; namespace()
 * carries values out of them). Every evaluation counts a step and a
 * level of depth against the limits.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

struct scope {
	struct jdict *vars;
	struct scope *parent;
};

struct jrender {
	struct jarena *a;
	const struct jinja_limits *lim;
	jmp_buf jmp;
	int rc;
	struct pfx_error *err;
	uint64_t steps;
	int depth;
	struct scope *scope, *root;
	struct jdict *ctx;
	struct jbuf *out;
	int ctrl; /* 1: break, 2: continue, pending */
};

_Noreturn void jr_fail(struct jrender *r, int code, int line, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->rc = pfx_errorf(r->err, code, "template line %d: %s", line, msg);
	longjmp(r->jmp, 1);
}

struct jarena *jr_arena(struct jrender *r)
{
	return r->a;
}

size_t jr_max_output(struct jrender *r)
{
	return r->lim->max_output;
}

#define oom jr_oom

_Noreturn void jr_oom(struct jrender *r, int line)
{
	jr_fail(r, -E2BIG, line,
		"the render needs more than %zu MiB or nests values more than %d deep (the limits)",
		r->lim->max_memory >> 20, JV_MAX_NESTING);
}

static void enter(struct jrender *r, int line)
{
	if (++r->steps > r->lim->max_steps)
		jr_fail(r, -E2BIG, line, "the template ran more than %llu steps (the limit)",
			(unsigned long long)r->lim->max_steps);
	if (++r->depth > r->lim->max_depth)
		jr_fail(r, -E2BIG, line, "the template nests more than %d deep (the limit)",
			r->lim->max_depth);
}

static void check_buf(struct jrender *r, struct jbuf *b, int line)
{
	if (b->full) {
		if (b->n + 4096 >= b->limit) /* near the cap: it was the output limit */
			jr_fail(r, -E2BIG, line, "the output passes %zu bytes (the limit)", b->limit);
		oom(r, line);
	}
}

static void set_var(struct jrender *r, struct scope *s, const char *name, struct jv v, int line)
{
	if (jd_set(r->a, s->vars, js_cstr(name), v))
		oom(r, line);
}

static struct jv lookup(struct jrender *r, const char *name)
{
	size_t n = strlen(name);
	for (struct scope *s = r->scope; s; s = s->parent) {
		struct jv *v = jd_get(s->vars, name, n);
		if (v)
			return *v;
	}
	struct jv *v = jd_get(r->ctx, name, n);
	if (v)
		return *v;
	struct jv g;
	if (jf_global(name, &g))
		return g;
	return jv_undef(name);
}

static struct scope *push_scope(struct jrender *r, struct scope *parent, int line)
{
	struct scope *s = ja_alloc(r->a, sizeof(*s));
	if (!s || !(s->vars = jd_new(r->a)))
		oom(r, line);
	s->parent = parent;
	return s;
}

_Noreturn static void undefined(struct jrender *r, const struct jv *v, int line)
{
	if (v->name)
		jr_fail(r, -EINVAL, line, "'%s' is undefined", v->name);
	jr_fail(r, -EINVAL, line, "a value used here is undefined");
}

/* ---- attributes and items ---- */

static const char *const dict_methods[] = { "get", "items", "keys", "values", "clear", "copy",
					    "fromkeys", "pop", "popitem", "setdefault", "update",
					    NULL };
static const char *const list_methods[] = { "append", "clear", "copy", "count", "extend",
					    "index", "insert", "pop", "remove", "reverse",
					    "sort", NULL };

static bool in_list(const char *const *names, const char *name)
{
	for (int i = 0; names[i]; i++)
		if (!strcmp(names[i], name))
			return true;
	return false;
}

static struct jv method(struct jrender *r, const struct jv *obj, const char *name, int line)
{
	struct jv *self = ja_alloc(r->a, sizeof(*self));
	if (!self)
		oom(r, line);
	*self = *obj;
	return (struct jv){ .t = JV_METHOD, .u.m = { self, name } };
}

static struct jv loop_attr(struct jrender *r, const struct jv *obj, const char *name, int line)
{
	const struct jloop *l = obj->u.loop;
	int64_t n = (int64_t)l->items->n, i = (int64_t)l->i;
	if (!strcmp(name, "index"))
		return jv_int(i + 1);
	if (!strcmp(name, "index0"))
		return jv_int(i);
	if (!strcmp(name, "first"))
		return jv_bool(i == 0);
	if (!strcmp(name, "last"))
		return jv_bool(i == n - 1);
	if (!strcmp(name, "length"))
		return jv_int(n);
	if (!strcmp(name, "revindex"))
		return jv_int(n - i);
	if (!strcmp(name, "revindex0"))
		return jv_int(n - i - 1);
	if (!strcmp(name, "previtem"))
		return i > 0 ? l->items->v[i - 1] : jv_undef("previtem");
	if (!strcmp(name, "nextitem"))
		return i + 1 < n ? l->items->v[i + 1] : jv_undef("nextitem");
	if (!strcmp(name, "depth"))
		return jv_int(1);
	if (!strcmp(name, "depth0"))
		return jv_int(0);
	if (!strcmp(name, "cycle"))
		return method(r, obj, "cycle", line);
	return jv_undef(name);
}

static struct jv getattr(struct jrender *r, const struct jv *obj, const char *name, int line)
{
	switch (obj->t) {
	case JV_UNDEF:
		undefined(r, obj, line);
	case JV_DICT: {
		if (in_list(dict_methods, name))
			return method(r, obj, name, line);
		struct jv *v = jd_get(obj->u.d, name, strlen(name));
		return v ? *v : jv_undef(name);
	}
	case JV_NS: {
		struct jv *v = jd_get(obj->u.d, name, strlen(name));
		return v ? *v : jv_undef(name);
	}
	case JV_STR:
		return jf_has_method(obj, name) ? method(r, obj, name, line) : jv_undef(name);
	case JV_LIST:
		return in_list(list_methods, name) ? method(r, obj, name, line) : jv_undef(name);
	case JV_LOOP:
		return loop_attr(r, obj, name, line);
	default:
		return jv_undef(name);
	}
}

/* Python's index i of a sequence of n, negative from the end; false when
 * out of range. */
static bool norm_index(int64_t i, size_t n, size_t *out)
{
	if (i < 0)
		i += (int64_t)n;
	if (i < 0 || (uint64_t)i >= n)
		return false;
	*out = (size_t)i;
	return true;
}

static struct jv char_at(struct jrender *r, struct jstr s, size_t k, int line)
{
	size_t off = ju_offset(s.s, s.n, k), len;
	ju_decode(s.s, s.n, off, &len);
	struct jbuf b;
	jb_init(&b, r->a, (size_t)-1);
	jb_sub(&b, s, off, len);
	check_buf(r, &b, line);
	return jv_str(jb_done(&b));
}

struct jv jr_getitem(struct jrender *r, const struct jv *obj, const struct jv *key, int line)
{
	if (obj->t == JV_UNDEF)
		undefined(r, obj, line);
	bool int_key = key->t == JV_INT || key->t == JV_BOOL;
	int64_t ik = key->t == JV_INT ? key->u.i : key->t == JV_BOOL ? key->u.b : 0;
	size_t i;
	switch (obj->t) {
	case JV_DICT:
	case JV_NS:
		if (key->t == JV_STR) {
			struct jv *v = jd_get(obj->u.d, key->u.s.s, key->u.s.n);
			if (v && obj->t == JV_DICT)
				return *v;
		}
		break;
	case JV_LIST:
	case JV_TUPLE:
		if (int_key)
			return norm_index(ik, obj->u.l->n, &i) ? obj->u.l->v[i] : jv_undef(NULL);
		break;
	case JV_STR:
		if (int_key)
			return norm_index(ik, ju_count(obj->u.s.s, obj->u.s.n), &i) ?
				       char_at(r, obj->u.s, i, line) :
				       jv_undef(NULL);
		break;
	default:
		break;
	}
	if (key->t == JV_STR && memchr(key->u.s.s, 0, key->u.s.n) == NULL) {
		char *name = ja_alloc(r->a, key->u.s.n + 1);
		if (!name)
			oom(r, line);
		memcpy(name, key->u.s.s, key->u.s.n);
		return getattr(r, obj, name, line);
	}
	return jv_undef(NULL);
}

/* Python's slice.indices(n) as a start, a stop and a step. */
static void slice_indices(struct jrender *r, const struct jv *a, const struct jv *b,
			  const struct jv *c, size_t n, int64_t *start, int64_t *stop,
			  int64_t *step, int line)
{
	int64_t len = (int64_t)n;
	*step = 1;
	if (c && c->t != JV_NONE) {
		if (c->t != JV_INT)
			jr_fail(r, -EINVAL, line, "a slice step must be an integer, not %s",
				jv_type_name(c));
		*step = c->u.i;
		if (!*step)
			jr_fail(r, -EINVAL, line, "a slice step cannot be zero");
	}
	const struct jv *ends[2] = { a, b };
	int64_t *out[2] = { start, stop };
	for (int k = 0; k < 2; k++) {
		const struct jv *e = ends[k];
		if (!e || e->t == JV_NONE) {
			*out[k] = *step > 0 ? (k ? len : 0) : (k ? -1 : len - 1);
			continue;
		}
		if (e->t != JV_INT && e->t != JV_BOOL)
			jr_fail(r, -EINVAL, line, "slice indices must be integers, not %s",
				jv_type_name(e));
		int64_t v = e->t == JV_INT ? e->u.i : e->u.b;
		if (v < 0) {
			v += len;
			if (v < 0)
				v = *step < 0 ? -1 : 0;
		} else if (v >= len) {
			v = *step < 0 ? len - 1 : len;
		}
		*out[k] = v;
	}
}

static struct jv slice(struct jrender *r, const struct jv *obj, const struct jv *a,
		       const struct jv *b, const struct jv *c, int line)
{
	if (obj->t == JV_UNDEF)
		undefined(r, obj, line);
	int64_t start, stop, step;
	if (obj->t == JV_LIST || obj->t == JV_TUPLE) {
		slice_indices(r, a, b, c, obj->u.l->n, &start, &stop, &step, line);
		struct jlist *l = jl_new(r->a);
		if (!l)
			oom(r, line);
		for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
			if (jl_push(r->a, l, obj->u.l->v[i]))
				oom(r, line);
		return (struct jv){ .t = obj->t, .u.l = l };
	}
	if (obj->t == JV_STR) {
		struct jstr s = obj->u.s;
		size_t n = ju_count(s.s, s.n);
		slice_indices(r, a, b, c, n, &start, &stop, &step, line);
		struct jbuf buf;
		jb_init(&buf, r->a, (size_t)-1);
		if (step == 1) {
			if (start < stop) {
				size_t from = ju_offset(s.s, s.n, (size_t)start);
				size_t to = ju_offset(s.s, s.n, (size_t)stop);
				jb_sub(&buf, s, from, to - from);
			}
		} else {
			/* code point offsets, then the chosen ones */
			size_t *off = ja_alloc(r->a, (n + 1) * sizeof(*off));
			if (!off)
				oom(r, line);
			size_t k = 0;
			for (size_t i = 0; i < s.n; i++)
				if (((unsigned char)s.s[i] & 0xc0) != 0x80)
					off[k++] = i;
			off[n] = s.n;
			for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
				jb_sub(&buf, s, off[i], off[i + 1] - off[i]);
		}
		check_buf(r, &buf, line);
		return jv_str(jb_done(&buf));
	}
	jr_fail(r, -EINVAL, line, "'%s' object cannot be sliced", jv_type_name(obj));
}

/* ---- operators ---- */

static bool numeric(const struct jv *v)
{
	return v->t == JV_INT || v->t == JV_BOOL || v->t == JV_FLOAT;
}

static double fnum(const struct jv *v)
{
	return v->t == JV_FLOAT ? v->u.f : v->t == JV_INT ? (double)v->u.i : v->u.b;
}

static int64_t inum(const struct jv *v)
{
	return v->t == JV_INT ? v->u.i : v->u.b;
}

_Noreturn static void bad_operands(struct jrender *r, const char *op, const struct jv *x,
				   const struct jv *y, int line)
{
	if (x->t == JV_UNDEF)
		undefined(r, x, line);
	if (y->t == JV_UNDEF)
		undefined(r, y, line);
	jr_fail(r, -EINVAL, line, "unsupported operand types for %s: '%s' and '%s'", op,
		jv_type_name(x), jv_type_name(y));
}

static struct jv concat_lists(struct jrender *r, const struct jv *x, const struct jv *y, int line)
{
	struct jlist *l = jl_new(r->a);
	if (!l)
		oom(r, line);
	for (int k = 0; k < 2; k++) {
		const struct jlist *src = (k ? y : x)->u.l;
		for (size_t i = 0; i < src->n; i++)
			if (jl_push(r->a, l, src->v[i]))
				oom(r, line);
	}
	return (struct jv){ .t = x->t, .u.l = l };
}

static struct jv repeat(struct jrender *r, const struct jv *seq, int64_t times, int line)
{
	if (seq->t == JV_STR) {
		struct jbuf b;
		jb_init(&b, r->a, r->lim->max_output);
		for (int64_t i = 0; i < times && !b.full; i++)
			jb_str(&b, seq->u.s);
		check_buf(r, &b, line);
		return jv_str(jb_done(&b));
	}
	struct jlist *l = jl_new(r->a);
	if (!l)
		oom(r, line);
	for (int64_t i = 0; i < times; i++)
		for (size_t k = 0; k < seq->u.l->n; k++)
			if (jl_push(r->a, l, seq->u.l->v[k]))
				oom(r, line);
	return (struct jv){ .t = seq->t, .u.l = l };
}

static struct jv int_result(struct jrender *r, bool overflow, int64_t v, int line)
{
	if (overflow)
		jr_fail(r, -ENOTSUP, line, "an integer beyond 64 bits");
	return jv_int(v);
}

static struct jv arith(struct jrender *r, const char *op, const struct jv *x, const struct jv *y,
		       int line)
{
	if (!strcmp(op, "~")) {
		struct jbuf b;
		jb_init(&b, r->a, r->lim->max_output);
		jv_write_str(&b, x);
		jv_write_str(&b, y);
		check_buf(r, &b, line);
		return jv_str(jb_done(&b));
	}
	bool ints = numeric(x) && numeric(y) && x->t != JV_FLOAT && y->t != JV_FLOAT;
	int64_t a = ints ? inum(x) : 0, b = ints ? inum(y) : 0, v;
	if (!strcmp(op, "+")) {
		if (ints)
		{
			bool of = __builtin_add_overflow(a, b, &v);
			return int_result(r, of, v, line);
		}
		if (numeric(x) && numeric(y))
			return jv_float(fnum(x) + fnum(y));
		if (x->t == JV_STR && y->t == JV_STR) {
			struct jbuf buf;
			jb_init(&buf, r->a, r->lim->max_output);
			jb_str(&buf, x->u.s);
			jb_str(&buf, y->u.s);
			check_buf(r, &buf, line);
			return jv_str(jb_done(&buf));
		}
		if ((x->t == JV_LIST || x->t == JV_TUPLE) && x->t == y->t)
			return concat_lists(r, x, y, line);
		bad_operands(r, op, x, y, line);
	}
	if (!strcmp(op, "-")) {
		if (ints)
		{
			bool of = __builtin_sub_overflow(a, b, &v);
			return int_result(r, of, v, line);
		}
		if (numeric(x) && numeric(y))
			return jv_float(fnum(x) - fnum(y));
		bad_operands(r, op, x, y, line);
	}
	if (!strcmp(op, "*")) {
		if (ints)
		{
			bool of = __builtin_mul_overflow(a, b, &v);
			return int_result(r, of, v, line);
		}
		if (numeric(x) && numeric(y))
			return jv_float(fnum(x) * fnum(y));
		const struct jv *seq = numeric(x) ? y : x, *count = numeric(x) ? x : y;
		if ((seq->t == JV_STR || seq->t == JV_LIST || seq->t == JV_TUPLE) &&
		    count->t != JV_FLOAT && numeric(count))
			return repeat(r, seq, inum(count), line);
		bad_operands(r, op, x, y, line);
	}
	if (!numeric(x) || !numeric(y)) {
		if (!strcmp(op, "%") && x->t == JV_STR)
			jr_fail(r, -ENOTSUP, line, "string formatting with %% is not supported");
		bad_operands(r, op, x, y, line);
	}
	if (!strcmp(op, "/")) {
		if (fnum(y) == 0)
			jr_fail(r, -EINVAL, line, "division by zero");
		return jv_float(fnum(x) / fnum(y));
	}
	if (!strcmp(op, "//") || !strcmp(op, "%")) {
		bool mod = op[0] == '%';
		if (ints) {
			if (!b)
				jr_fail(r, -EINVAL, line, "integer division or modulo by zero");
			if (a == INT64_MIN && b == -1)
				return int_result(r, !mod, 0, line);
			int64_t q = a / b, m = a % b;
			if (m && ((m < 0) != (b < 0))) {
				q--;
				m += b;
			}
			return jv_int(mod ? m : q);
		}
		double fa = fnum(x), fb = fnum(y);
		if (fb == 0)
			jr_fail(r, -EINVAL, line, "float division or modulo by zero");
		double m = fmod(fa, fb);
		if (m && ((m < 0) != (fb < 0)))
			m += fb;
		return jv_float(mod ? m : floor(fa / fb));
	}
	if (!strcmp(op, "**")) {
		if (ints && b >= 0) {
			int64_t p = 1;
			bool of = false;
			for (int64_t e = b, base = a; e; e >>= 1) {
				if (e & 1)
					of |= __builtin_mul_overflow(p, base, &p);
				if (e > 1)
					of |= __builtin_mul_overflow(base, base, &base);
				if (of)
					break;
			}
			return int_result(r, of, p, line);
		}
		return jv_float(pow(fnum(x), fnum(y)));
	}
	bad_operands(r, op, x, y, line);
}

static bool contains(struct jrender *r, const struct jv *hay, const struct jv *needle, int line)
{
	switch (hay->t) {
	case JV_UNDEF:
		return false;
	case JV_STR:
		if (needle->t != JV_STR)
			jr_fail(r, -EINVAL, line, "'in <string>' requires a string, not %s",
				jv_type_name(needle));
		if (!needle->u.s.n)
			return true;
		for (size_t i = 0; i + needle->u.s.n <= hay->u.s.n; i++)
			if (!memcmp(hay->u.s.s + i, needle->u.s.s, needle->u.s.n))
				return true;
		return false;
	case JV_LIST:
	case JV_TUPLE:
		for (size_t i = 0; i < hay->u.l->n; i++)
			if (jv_equal(&hay->u.l->v[i], needle))
				return true;
		return false;
	case JV_DICT:
		return needle->t == JV_STR && jd_get(hay->u.d, needle->u.s.s, needle->u.s.n);
	default:
		jr_fail(r, -EINVAL, line, "argument of type '%s' is not iterable",
			jv_type_name(hay));
	}
}

static bool comparison(struct jrender *r, const char *op, const struct jv *x, const struct jv *y,
		       int line)
{
	if (!strcmp(op, "=="))
		return jv_equal(x, y);
	if (!strcmp(op, "!="))
		return !jv_equal(x, y);
	if (!strcmp(op, "in"))
		return contains(r, y, x, line);
	if (!strcmp(op, "notin"))
		return !contains(r, y, x, line);
	int c;
	if (!jv_compare(x, y, &c)) {
		if (x->t == JV_UNDEF)
			undefined(r, x, line);
		if (y->t == JV_UNDEF)
			undefined(r, y, line);
		jr_fail(r, -EINVAL, line, "'%s' not supported between '%s' and '%s'", op,
			jv_type_name(x), jv_type_name(y));
	}
	if (!strcmp(op, "<"))
		return c < 0;
	if (!strcmp(op, "<="))
		return c <= 0;
	if (!strcmp(op, ">"))
		return c > 0;
	return c >= 0;
}

/* ---- expressions ---- */

static struct jv eval(struct jrender *r, const struct jnode *n);

/* Evaluates a call's arguments: positional ones in args, name=value ones
 * in kwn/kwv. */
struct args {
	struct jv *v, *kwv;
	const char **kwn;
	size_t n, nkw;
};

static struct args eval_args(struct jrender *r, const struct jnode *list, int line)
{
	size_t total = 0;
	for (const struct jnode *p = list; p; p = p->next)
		total++;
	struct args a = { 0 };
	a.v = ja_alloc(r->a, (total + 1) * sizeof(*a.v));
	a.kwv = ja_alloc(r->a, (total + 1) * sizeof(*a.kwv));
	a.kwn = ja_alloc(r->a, (total + 1) * sizeof(*a.kwn));
	if (!a.v || !a.kwv || !a.kwn)
		oom(r, line);
	for (const struct jnode *p = list; p; p = p->next) {
		if (p->kind == E_KWARG) {
			a.kwn[a.nkw] = p->name;
			a.kwv[a.nkw++] = eval(r, p->a);
		} else {
			if (a.nkw)
				jr_fail(r, -EINVAL, p->line, "a positional argument after a keyword one");
			a.v[a.n++] = eval(r, p);
		}
	}
	return a;
}

static struct jv make_list(struct jrender *r, const struct jnode *n, enum jv_type t)
{
	struct jlist *l = jl_new(r->a);
	if (!l)
		oom(r, n->line);
	for (const struct jnode *p = n->a; p; p = p->next)
		if (jl_push(r->a, l, eval(r, p)))
			oom(r, n->line);
	return (struct jv){ .t = t, .u.l = l };
}

static struct jv eval_inner(struct jrender *r, const struct jnode *n)
{
	struct jv x, y;
	switch (n->kind) {
	case E_CONST:
		return n->value;
	case E_NAME:
		return lookup(r, n->name);
	case E_ATTR:
		x = eval(r, n->a);
		return getattr(r, &x, n->name, n->line);
	case E_INDEX:
		x = eval(r, n->a);
		y = eval(r, n->b);
		return jr_getitem(r, &x, &y, n->line);
	case E_SLICE: {
		x = eval(r, n->a);
		struct jv parts[3];
		const struct jnode *kids[3] = { n->b, n->c, n->d };
		for (int k = 0; k < 3; k++)
			parts[k] = kids[k] ? eval(r, kids[k]) : jv_none();
		return slice(r, &x, &parts[0], &parts[1], &parts[2], n->line);
	}
	case E_CALL: {
		x = eval(r, n->a);
		struct args a = eval_args(r, n->b, n->line);
		if (x.t == JV_MACRO)
			return jr_call_macro(r, x.u.macro, a.v, a.n, a.kwn, a.kwv, a.nkw, n->line);
		if (x.t == JV_FUNC || x.t == JV_METHOD)
			return jf_call(r, &x, a.v, a.n, a.kwn, a.kwv, a.nkw, n->line);
		if (x.t == JV_UNDEF && n->a->kind == E_NAME)
			jr_fail(r, -ENOTSUP, n->line, "unknown function '%s'", n->a->name);
		if (x.t == JV_UNDEF && n->a->kind == E_ATTR)
			jr_fail(r, -ENOTSUP, n->line, "unknown method '%s' of this value", n->a->name);
		jr_fail(r, -EINVAL, n->line, "'%s' object is not callable", jv_type_name(&x));
	}
	case E_FILTER: {
		x = eval(r, n->a);
		struct args a = eval_args(r, n->b, n->line);
		return jf_filter(r, n->name, x, a.v, a.n, a.kwn, a.kwv, a.nkw, n->line);
	}
	case E_TEST: {
		x = eval(r, n->a);
		struct args a = eval_args(r, n->b, n->line);
		return jv_bool(jf_test(r, n->name, &x, a.v, a.n, n->line) != n->negated);
	}
	case E_NEG:
	case E_POS:
		x = eval(r, n->a);
		if (!numeric(&x)) {
			if (x.t == JV_UNDEF)
				undefined(r, &x, n->line);
			jr_fail(r, -EINVAL, n->line, "bad operand type for unary %s: '%s'",
				n->kind == E_NEG ? "-" : "+", jv_type_name(&x));
		}
		if (n->kind == E_POS)
			return x.t == JV_BOOL ? jv_int(x.u.b) : x;
		if (x.t == JV_FLOAT)
			return jv_float(-x.u.f);
		return int_result(r, inum(&x) == INT64_MIN, -inum(&x), n->line);
	case E_NOT:
		x = eval(r, n->a);
		return jv_bool(!jv_truthy(&x));
	case E_AND:
		x = eval(r, n->a);
		return jv_truthy(&x) ? eval(r, n->b) : x;
	case E_OR:
		x = eval(r, n->a);
		return jv_truthy(&x) ? x : eval(r, n->b);
	case E_BINOP:
		x = eval(r, n->a);
		y = eval(r, n->b);
		return arith(r, n->op, &x, &y, n->line);
	case E_COMPARE:
		x = eval(r, n->a);
		y = eval(r, n->b);
		return jv_bool(comparison(r, n->op, &x, &y, n->line));
	case E_COND:
		x = eval(r, n->b);
		if (jv_truthy(&x))
			return eval(r, n->a);
		return n->c ? eval(r, n->c) : jv_undef(NULL);
	case E_LIST:
		return make_list(r, n, JV_LIST);
	case E_TUPLE:
		return make_list(r, n, JV_TUPLE);
	case E_DICT: {
		struct jdict *d = jd_new(r->a);
		if (!d)
			oom(r, n->line);
		for (const struct jnode *p = n->a; p; p = p->next) {
			x = eval(r, p->a);
			if (x.t != JV_STR)
				jr_fail(r, -ENOTSUP, p->line, "a dict key that is not a string (%s)",
					jv_type_name(&x));
			if (jd_set(r->a, d, x.u.s, eval(r, p->b)))
				oom(r, n->line);
		}
		return (struct jv){ .t = JV_DICT, .u.d = d };
	}
	case E_KWARG:
		jr_fail(r, -EINVAL, n->line, "a keyword argument outside a call");
	default:
		jr_fail(r, -EINVAL, n->line, "a statement where an expression belongs");
	}
}

static struct jv eval(struct jrender *r, const struct jnode *n)
{
	enter(r, n->line);
	struct jv v = eval_inner(r, n);
	r->depth--;
	return v;
}

/* ---- statements ---- */

static void exec_list(struct jrender *r, const struct jnode *n);

static void assign(struct jrender *r, const struct jnode *target, struct jv v, int line)
{
	if (target->kind == E_NAME) {
		set_var(r, r->scope, target->name, v, line);
		return;
	}
	if (target->kind == E_ATTR) {
		struct jv ns = lookup(r, target->a->name);
		if (ns.t != JV_NS)
			jr_fail(r, -EINVAL, line, "cannot set '%s.%s': '%s' is not a namespace()",
				target->a->name, target->name, target->a->name);
		if (jv_reaches(&v, ns.u.d, 0))
			jr_fail(r, -EINVAL, line, "cannot set '%s.%s' to a value that holds %s itself",
				target->a->name, target->name, target->a->name);
		if (jd_set(r->a, ns.u.d, js_cstr(target->name), v))
			oom(r, line);
		return;
	}
	/* a, b = pair */
	size_t want = 0;
	for (const struct jnode *p = target->a; p; p = p->next)
		want++;
	if ((v.t != JV_LIST && v.t != JV_TUPLE) || v.u.l->n != want)
		jr_fail(r, -EINVAL, line, "cannot unpack %s into %zu names", jv_type_name(&v), want);
	size_t i = 0;
	for (const struct jnode *p = target->a; p; p = p->next)
		set_var(r, r->scope, p->name, v.u.l->v[i++], line);
}

/* What a for loop iterates: lists as they are, a dict's keys, a string's
 * characters; undefined is empty. */
static struct jlist *iterable(struct jrender *r, const struct jv *v, int line)
{
	struct jlist *l;
	switch (v->t) {
	case JV_LIST:
	case JV_TUPLE:
		return v->u.l;
	case JV_UNDEF:
		if (!(l = jl_new(r->a)))
			oom(r, line);
		return l;
	case JV_DICT:
		if (!(l = jl_new(r->a)))
			oom(r, line);
		for (size_t i = 0; i < v->u.d->n; i++)
			if (jl_push(r->a, l, jv_str(v->u.d->k[i])))
				oom(r, line);
		return l;
	case JV_STR: {
		if (!(l = jl_new(r->a)))
			oom(r, line);
		size_t n = ju_count(v->u.s.s, v->u.s.n);
		for (size_t i = 0; i < n; i++)
			if (jl_push(r->a, l, char_at(r, v->u.s, i, line)))
				oom(r, line);
		return l;
	}
	default:
		jr_fail(r, -EINVAL, line, "'%s' object is not iterable", jv_type_name(v));
	}
}

static void exec_for(struct jrender *r, const struct jnode *n)
{
	struct jv seq = eval(r, n->b);
	struct jlist *items = iterable(r, &seq, n->line);
	struct scope *saved = r->scope;
	r->scope = push_scope(r, saved, n->line);
	if (n->c) { /* {% for x in xs if cond %}: the loop sees only the kept items */
		struct jlist *kept = jl_new(r->a);
		if (!kept)
			oom(r, n->line);
		for (size_t i = 0; i < items->n; i++) {
			assign(r, n->a, items->v[i], n->line);
			struct jv c = eval(r, n->c);
			if (jv_truthy(&c) && jl_push(r->a, kept, items->v[i]))
				oom(r, n->line);
		}
		items = kept;
		r->scope = push_scope(r, saved, n->line);
	}
	struct jloop *loop = ja_alloc(r->a, sizeof(*loop));
	if (!loop)
		oom(r, n->line);
	loop->items = items;
	for (size_t i = 0; i < items->n; i++) {
		enter(r, n->line); /* an iteration is a step, its body empty or not */
		r->depth--;
		loop->i = i;
		set_var(r, r->scope, "loop", (struct jv){ .t = JV_LOOP, .u.loop = loop }, n->line);
		assign(r, n->a, items->v[i], n->line);
		exec_list(r, n->d);
		if (r->ctrl == 1) {
			r->ctrl = 0;
			break;
		}
		r->ctrl = 0;
	}
	r->scope = saved;
	if (!items->n && n->e)
		exec_list(r, n->e);
}

static struct jstr capture(struct jrender *r, const struct jnode *body, int line)
{
	struct jbuf b, *saved = r->out;
	jb_init(&b, r->a, r->lim->max_output);
	r->out = &b;
	exec_list(r, body);
	r->out = saved;
	check_buf(r, &b, line);
	return jb_done(&b);
}

struct jv jr_call_macro(struct jrender *r, const struct jnode *m, const struct jv *args, size_t n,
			const char *const *kwn, const struct jv *kwv, size_t nkw, int line)
{
	enter(r, line);
	struct scope *saved = r->scope;
	struct scope *s = push_scope(r, r->root, line);
	size_t np = 0;
	for (const struct jnode *p = m->a; p; p = p->next, np++) {
		const char *name = p->name;
		struct jv v = jv_undef(name);
		bool set = false;
		if (np < n) {
			v = args[np];
			set = true;
		}
		for (size_t k = 0; k < nkw; k++)
			if (!strcmp(kwn[k], name)) {
				if (set)
					jr_fail(r, -EINVAL, line, "macro '%s' got '%s' twice", m->name,
						name);
				v = kwv[k];
				set = true;
			}
		if (!set && p->kind == E_KWARG) {
			r->scope = s;
			v = eval(r, p->a);
			r->scope = saved;
		}
		set_var(r, s, name, v, line);
	}
	if (n > np)
		jr_fail(r, -EINVAL, line, "macro '%s' takes at most %zu arguments, %zu given", m->name,
			np, n);
	for (size_t k = 0; k < nkw; k++)
		if (!jd_get(s->vars, kwn[k], strlen(kwn[k])))
			jr_fail(r, -EINVAL, line, "macro '%s' has no parameter '%s'", m->name, kwn[k]);
	r->scope = s;
	int ctrl = r->ctrl;
	struct jstr out = capture(r, m->b, line);
	r->ctrl = ctrl;
	r->scope = saved;
	r->depth--;
	return jv_str(out);
}

static void exec_one(struct jrender *r, const struct jnode *n)
{
	struct jv v;
	switch (n->kind) {
	case N_TEXT:
		jb_str(r->out, n->text);
		check_buf(r, r->out, n->line);
		return;
	case N_OUTPUT:
		v = eval(r, n->a);
		if (v.t == JV_MACRO || v.t == JV_FUNC || v.t == JV_METHOD || v.t == JV_LOOP)
			jr_fail(r, -ENOTSUP, n->line, "printing a %s is not supported", jv_type_name(&v));
		jv_write_str(r->out, &v);
		check_buf(r, r->out, n->line);
		return;
	case N_IF:
		for (; n && n->kind == N_IF; n = n->c) {
			v = eval(r, n->a);
			if (jv_truthy(&v)) {
				exec_list(r, n->b);
				return;
			}
			if (n->c && n->c->kind != N_IF) {
				exec_list(r, n->c);
				return;
			}
		}
		return;
	case N_FOR:
		exec_for(r, n);
		return;
	case N_SET:
		assign(r, n->a, eval(r, n->b), n->line);
		return;
	case N_SETBLOCK:
		assign(r, n->a, jv_str(capture(r, n->b, n->line)), n->line);
		return;
	case N_MACRO:
		set_var(r, r->scope, n->name, (struct jv){ .t = JV_MACRO, .u.macro = n }, n->line);
		return;
	case N_BREAK:
		r->ctrl = 1;
		return;
	case N_CONTINUE:
		r->ctrl = 2;
		return;
	case N_BODY:
		exec_list(r, n->a);
		return;
	default:
		jr_fail(r, -EINVAL, n->line, "an expression where a statement belongs");
	}
}

static void exec_list(struct jrender *r, const struct jnode *n)
{
	for (; n && !r->ctrl; n = n->next) {
		enter(r, n->line);
		exec_one(r, n);
		r->depth--;
	}
}

int jinja_render(const struct jinja_template *t, struct jdict *ctx, struct jarena *a,
		 const struct jinja_limits *lim, char **out, size_t *len, uint8_t **taint,
		 struct pfx_error *err)
{
	*out = NULL;
	*len = 0;
	if (taint)
		*taint = NULL;
	struct jrender r = { .a = a, .lim = lim, .err = err, .ctx = ctx };
	struct jbuf b;
	jb_init(&b, a, lim->max_output);
	r.out = &b;
	if (setjmp(r.jmp))
		return r.rc;
	r.root = r.scope = push_scope(&r, NULL, 1);
	exec_list(&r, t->body);
	struct jstr s = jb_done(&b);
	char *o = malloc(s.n + 1);
	uint8_t *tt = taint && s.taint ? malloc(s.n ? s.n : 1) : NULL;
	if (!o || (taint && s.taint && !tt)) {
		free(o);
		free(tt);
		return pfx_errorf(err, -ENOMEM, "out of memory for the rendered template");
	}
	memcpy(o, s.s, s.n);
	o[s.n] = 0;
	if (tt)
		memcpy(tt, s.taint, s.n);
	*out = o;
	*len = s.n;
	if (taint)
		*taint = tt;
	return 0;
}
