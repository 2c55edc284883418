/* SPDX-License-Identifier: MIT */
/*
 * A Jinja interpreter with the semantics transformers renders chat
 * templates with (ImmutableSandboxedEnvironment, trim_blocks,
 * lstrip_blocks, loopcontrols, its tojson and raise_exception), written
 * for chat templates: no C Jinja library is packaged, and the subset real
 * templates use is small.
 *
 * Strings carry provenance: a per-byte taint (NULL when no byte is
 * tainted) that filters, methods, slicing and concatenation keep, so the
 * renderer can say which output bytes came from message contents.
 *
 * Every value of a render lives in one arena with a size limit; errors
 * inside a render unwind to jinja_render (longjmp), which frees nothing
 * but the arena. The lexer, parser and renderer bound their recursion,
 * steps and output (struct jinja_limits), so no template can hang or
 * exhaust memory.
 */
#ifndef PFX_JINJA_H
#define PFX_JINJA_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pfx_error.h"

struct json_object;

/* ---- arena ---- */

struct jarena;
struct jarena *ja_new(size_t limit);
void ja_free(struct jarena *a);
/* Zeroed memory, or NULL past the arena's limit (or on a size overflow). */
void *ja_alloc(struct jarena *a, size_t size);
size_t ja_used(const struct jarena *a);

/* ---- strings and values ---- */

struct jstr {
	const char *s;
	size_t n;
	const uint8_t *taint; /* n flags, or NULL: no byte tainted */
};

enum jv_type {
	JV_UNDEF,
	JV_NONE,
	JV_BOOL,
	JV_INT,
	JV_FLOAT,
	JV_STR,
	JV_LIST,
	JV_TUPLE, /* a list that prints as (a, b) */
	JV_DICT,
	JV_NS,	   /* namespace(): a dict whose attributes can be set */
	JV_MACRO,
	JV_FUNC,   /* a global function (range, namespace, ...) */
	JV_METHOD, /* a method bound to its object */
	JV_LOOP,
};

struct jlist;
struct jdict;
struct jnode;
struct jloop;

struct jv {
	enum jv_type t;
	union {
		bool b;
		int64_t i;
		double f;
		struct jstr s;
		struct jlist *l;
		struct jdict *d;
		const struct jnode *macro;
		int fn;
		struct {
			const struct jv *self;
			const char *name;
		} m;
		struct jloop *loop;
	} u;
	const char *name; /* JV_UNDEF: the missing name, for errors (may be NULL) */
};

/* Containers nest at most this deep (jl_push and jd_set refuse more), so
 * printing, comparing and serialising them cannot exhaust the stack. */
#define JV_MAX_NESTING 64

struct jlist {
	size_t n, cap;
	struct jv *v;
	int depth; /* of nesting below it */
};

struct jdict {
	size_t n, cap;
	struct jstr *k;
	struct jv *v;
	int depth;
};

struct jloop {
	const struct jlist *items;
	size_t i;
};

static inline struct jv jv_undef(const char *name)
{
	return (struct jv){ .t = JV_UNDEF, .name = name };
}
static inline struct jv jv_none(void)
{
	return (struct jv){ .t = JV_NONE };
}
static inline struct jv jv_bool(bool b)
{
	return (struct jv){ .t = JV_BOOL, .u.b = b };
}
static inline struct jv jv_int(int64_t i)
{
	return (struct jv){ .t = JV_INT, .u.i = i };
}
static inline struct jv jv_float(double f)
{
	return (struct jv){ .t = JV_FLOAT, .u.f = f };
}
static inline struct jv jv_str(struct jstr s)
{
	return (struct jv){ .t = JV_STR, .u.s = s };
}

/* Constructors return NULL (or a string with s NULL) past the arena limit;
 * jl_push and jd_set -1 there and past JV_MAX_NESTING. */
struct jlist *jl_new(struct jarena *a);
int jl_push(struct jarena *a, struct jlist *l, struct jv v);
struct jdict *jd_new(struct jarena *a);
/* Sets key to v, replacing an existing key; keeps insertion order. */
int jd_set(struct jarena *a, struct jdict *d, struct jstr key, struct jv v);
/* Whether v holds d (a namespace about to take v: no cycles). */
bool jv_reaches(const struct jv *v, const struct jdict *d, int depth);
/* The value of key, or NULL. */
struct jv *jd_get(const struct jdict *d, const char *key, size_t n);
struct jstr js_dup(struct jarena *a, const char *s, size_t n, bool taint);
struct jstr js_cstr(const char *s); /* not copied: s must outlive the render */

/* The context value of a JSON document (json-c): objects become dicts,
 * arrays lists; strings are tainted when taint is set. NULL past the
 * arena's limit. */
int jv_from_json(struct jarena *a, struct json_object *o, bool taint, struct jv *out);

/* ---- string building (used by the renderer and the filters) ---- */

struct jbuf {
	struct jarena *a;
	char *s;
	uint8_t *taint; /* allocated at the first tainted byte */
	size_t n, cap, limit;
	bool full; /* a write would pass limit or the arena's */
};
void jb_init(struct jbuf *b, struct jarena *a, size_t limit);
void jb_put(struct jbuf *b, const char *s, size_t n, bool taint);
void jb_puts(struct jbuf *b, const char *s);
/* Appends s with its taint. */
void jb_str(struct jbuf *b, struct jstr s);
/* s[i, i + n) with its taint. */
void jb_sub(struct jbuf *b, struct jstr s, size_t i, size_t n);
struct jstr jb_done(struct jbuf *b);

/* Python's str(v) (None, True, 1.5, ['a'], {'k': 1}; undefined is ""),
 * appended to b. */
void jv_write_str(struct jbuf *b, const struct jv *v);
/* Python's repr(v). */
void jv_write_repr(struct jbuf *b, const struct jv *v);
/* json.dumps(v, ensure_ascii=False, indent, sort_keys) as transformers'
 * tojson: 0, or -1 for a value JSON cannot hold (its type in why). */
int jv_write_json(struct jbuf *b, const struct jv *v, int indent, bool sort_keys, int depth,
		  struct pfx_error *why);
bool jv_truthy(const struct jv *v);
/* Python ==. */
bool jv_equal(const struct jv *x, const struct jv *y);
/* Python <: -1, 0 or 1 in *cmp, or false when the types do not order. */
bool jv_compare(const struct jv *x, const struct jv *y, int *cmp);
const char *jv_type_name(const struct jv *v);

/* ---- UTF-8 and Python's str ---- */

/* Python's str.isspace() for one code point. */
bool ju_isspace(int32_t c);
/* The code point at s[i] (valid UTF-8 assumed) and its length in *len. */
int32_t ju_decode(const char *s, size_t n, size_t i, size_t *len);
size_t ju_count(const char *s, size_t n); /* code points */
/* Byte offset of code point k (k <= count). */
size_t ju_offset(const char *s, size_t n, size_t k);
/* First invalid byte offset, or (size_t)-1 when s is valid UTF-8. */
size_t ju_invalid(const char *s, size_t n);
int ju_encode(int32_t c, char out[4]);

/* ---- lexer and parser ---- */

struct jinja_template;

/* Parses src (UTF-8) into *out. -EINVAL for a syntax error, -ENOTSUP for
 * a construct the interpreter lacks, both naming the template line. */
int jinja_parse(const char *src, size_t len, struct jinja_template **out, struct pfx_error *err);
void jinja_template_free(struct jinja_template *t);

struct jinja_limits {
	size_t max_output; /* bytes rendered */
	size_t max_memory; /* bytes of the render's arena */
	uint64_t max_steps; /* statements and expressions evaluated */
	int max_depth;	    /* nesting of evaluation, macro calls included */
};

/* Renders t with ctx (a dict whose values live in arena a, which the
 * render also allocates from) into *out (malloc'd, NUL-terminated) of
 * *len bytes and, when taint is not NULL, *taint (malloc'd, *len flags, or
 * NULL when nothing is tainted). raise_exception(msg) is -EINVAL with msg,
 * a missing filter, test, method or tag -ENOTSUP, a limit -E2BIG; all name
 * the template line. */
int jinja_render(const struct jinja_template *t, struct jdict *ctx, struct jarena *a,
		 const struct jinja_limits *lim, char **out, size_t *len, uint8_t **taint,
		 struct pfx_error *err);

/* ---- internals shared by the lexer, parser and evaluator ---- */

enum jtok_type {
	T_EOF,
	T_TEXT,	       /* template data between tags */
	T_VAR_BEGIN,   /* {{ */
	T_VAR_END,     /* }} */
	T_BLOCK_BEGIN, /* {% */
	T_BLOCK_END,   /* %} */
	T_NAME,
	T_STRING, /* value unescaped */
	T_INT,
	T_FLOAT,
	T_OP, /* op holds it: "+", "//", "==", ... */
};

struct jtok {
	enum jtok_type type;
	int line;
	const char *s; /* T_TEXT, T_NAME, T_STRING: the text (arena) */
	size_t n;
	int64_t i;
	double f;
	char op[3];
};

struct jtoks {
	struct jtok *v;
	size_t n;
};

/* Tokenises src (already checked as UTF-8) into toks (arena a). */
int jinja_lex(struct jarena *a, const char *src, size_t len, struct jtoks *toks,
	      struct pfx_error *err);

enum jnode_kind {
	/* statements */
	N_TEXT,
	N_OUTPUT,
	N_IF,
	N_FOR,
	N_SET,
	N_SETBLOCK,
	N_MACRO,
	N_BREAK,
	N_CONTINUE,
	N_BODY, /* a generation block: its body rendered as is */
	/* expressions */
	E_CONST,
	E_NAME,
	E_ATTR,
	E_INDEX,
	E_SLICE,
	E_CALL,
	E_FILTER,
	E_TEST,
	E_NEG,
	E_POS,
	E_NOT,
	E_BINOP, /* op: + - * / // % ** ~ */
	E_AND,
	E_OR,
	E_COMPARE, /* op: == != < <= > >= in notin */
	E_COND,
	E_LIST,
	E_TUPLE,
	E_DICT,
	E_KWARG, /* name=value in a call's arguments */
};

struct jnode {
	enum jnode_kind kind;
	int line;
	char op[6];
	const char *name; /* E_NAME, E_ATTR, E_FILTER, E_TEST, E_KWARG, N_MACRO */
	struct jstr text; /* N_TEXT */
	struct jv value;  /* E_CONST */
	/* Children by role: a, b, c, d as each kind documents in the parser;
	 * list: a linked list through next (bodies, arguments). */
	struct jnode *a, *b, *c, *d, *e;
	struct jnode *next;
	bool negated; /* E_TEST: is not */
	bool has_step; /* E_SLICE */
};

struct jinja_template {
	struct jarena *arena;
	struct jnode *body;
};

/* Filters, tests, methods and global functions (jinja_filters.c). The
 * evaluator's state is opaque to them but for errors and allocation. */
struct jrender;
_Noreturn void jr_fail(struct jrender *r, int code, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* -E2BIG: the arena's limit (or JV_MAX_NESTING) passed. */
_Noreturn void jr_oom(struct jrender *r, int line);
struct jarena *jr_arena(struct jrender *r);
size_t jr_max_output(struct jrender *r);
/* obj[key] as Jinja's getitem: the item, else the attribute named key. */
struct jv jr_getitem(struct jrender *r, const struct jv *obj, const struct jv *key, int line);
/* Calls macro m with the arguments. */
struct jv jr_call_macro(struct jrender *r, const struct jnode *m, const struct jv *args, size_t n,
			const char *const *kwn, const struct jv *kwv, size_t nkw, int line);

struct jv jf_filter(struct jrender *r, const char *name, struct jv v, const struct jv *args,
		    size_t n, const char *const *kwn, const struct jv *kwv, size_t nkw, int line);
bool jf_test(struct jrender *r, const char *name, const struct jv *v, const struct jv *args,
	     size_t n, int line);
/* The method name of v (a JV_METHOD), or false when v's type has none. */
bool jf_has_method(const struct jv *v, const char *name);
struct jv jf_call(struct jrender *r, const struct jv *callee, const struct jv *args, size_t n,
		  const char *const *kwn, const struct jv *kwv, size_t nkw, int line);
/* A global function by name (JV_FUNC), or false. */
bool jf_global(const char *name, struct jv *out);
/* Whether a filter or test of that name exists (checked when parsing, as
 * Jinja does when it compiles). */
bool jf_filter_known(const char *name);
bool jf_test_known(const char *name);

/* Python's str operations on a string with its taint (jinja_strings.c);
 * results are allocated from a, NULL .s past its limit. */
enum js_side { JS_BOTH, JS_LEFT, JS_RIGHT };
/* str.strip(chars) (chars NULL: whitespace). */
struct jstr js_strip(struct jstr s, const struct jstr *chars, enum js_side side);
/* str.upper(), lower(), title(), capitalize(); Jinja's title filter. */
enum js_case { JC_UPPER, JC_LOWER, JC_TITLE, JC_CAPITALIZE, JC_JINJA_TITLE };
struct jstr js_case(struct jarena *a, struct jstr s, enum js_case how);
/* str.split(sep, maxsplit) (sep NULL: runs of whitespace). */
struct jlist *js_split(struct jarena *a, struct jstr s, const struct jstr *sep, int64_t maxsplit);
/* str.replace(old, new, count) (count < 0: all). */
struct jstr js_replace(struct jarena *a, struct jstr s, struct jstr old, struct jstr rep,
		       int64_t count, size_t limit);
/* The byte offset of needle in s from byte from, or (size_t)-1. */
size_t js_find(struct jstr s, struct jstr needle, size_t from);

#endif
