/* SPDX-License-Identifier: MIT */
/*
 * The parser: tokens to a tree of statements and expressions, with
 * Jinja's grammar and operator precedence (lowest first: x if c else y,
 * or, and, not, comparisons and in, + -, ~, * / // %, **, unary - +,
 * then postfix . [] () and the filters | and tests `is` that bind
 * tightest). Children by kind:
 *   N_OUTPUT a=expr            N_IF a=cond b=then c=else (an N_IF for elif)
 *   N_FOR a=target b=iterable c=filter d=body e=else
 *   N_SET a=target b=value     N_SETBLOCK a=target b=body
 *   N_MACRO name a=params (E_NAME, or E_KWARG with its default) b=body
 *   N_BODY a=body
 *   E_ATTR a=obj name          E_INDEX a=obj b=key     E_SLICE a=obj b c d
 *   E_CALL a=callee b=args     E_FILTER/E_TEST a=operand b=args name
 *   E_BINOP/E_COMPARE/E_AND/E_OR a b op   E_NEG/E_POS/E_NOT a
 *   E_COND a=value b=cond c=else        E_LIST/E_TUPLE a=items
 *   E_DICT a=pairs (E_TUPLE a=key, b=value)   E_KWARG name a=value
 * Errors unwind by longjmp to jinja_parse: everything is in the arena.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

#define MAX_DEPTH 200 /* nesting of expressions and statements */
#define TEMPLATE_ARENA (256u << 20)

struct parser {
	struct jarena *a;
	const struct jtok *t;
	size_t n, i;
	int depth, loops;
	jmp_buf jmp;
	int rc;
	struct pfx_error *err;
};

static _Noreturn __attribute__((format(printf, 4, 5))) void fail(struct parser *P, int code,
								   int line, const char *fmt, ...)
{
	char msg[300];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	P->rc = pfx_errorf(P->err, code, "template line %d: %s", line, msg);
	longjmp(P->jmp, 1);
}

static const struct jtok *cur(struct parser *P)
{
	return &P->t[P->i];
}

static const struct jtok *next(struct parser *P)
{
	const struct jtok *t = &P->t[P->i];
	if (t->type != T_EOF)
		P->i++;
	return t;
}

static bool is_op(struct parser *P, const char *op)
{
	return cur(P)->type == T_OP && !strcmp(cur(P)->op, op);
}

static bool is_name(struct parser *P, const char *name)
{
	const struct jtok *t = cur(P);
	return t->type == T_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

static const char *describe(const struct jtok *t)
{
	switch (t->type) {
	case T_EOF: return "the end of the template";
	case T_TEXT: return "text";
	case T_VAR_BEGIN: return "'{{'";
	case T_VAR_END: return "'}}'";
	case T_BLOCK_BEGIN: return "'{%'";
	case T_BLOCK_END: return "'%}'";
	case T_NAME: return "a name";
	case T_STRING: return "a string";
	case T_INT:
	case T_FLOAT: return "a number";
	case T_OP: return t->op;
	}
	return "?";
}

static void expect_op(struct parser *P, const char *op)
{
	if (!is_op(P, op))
		fail(P, -EINVAL, cur(P)->line, "expected '%s', found %s", op, describe(cur(P)));
	next(P);
}

static void expect(struct parser *P, enum jtok_type type, const char *what)
{
	if (cur(P)->type != type)
		fail(P, -EINVAL, cur(P)->line, "expected %s, found %s", what, describe(cur(P)));
	next(P);
}

static const char *name_of(struct parser *P, const struct jtok *t)
{
	char *s = ja_alloc(P->a, t->n + 1);
	if (!s)
		fail(P, -E2BIG, t->line, "the template is too large");
	memcpy(s, t->s, t->n);
	return s;
}

static const char *expect_name(struct parser *P)
{
	if (cur(P)->type != T_NAME)
		fail(P, -EINVAL, cur(P)->line, "expected a name, found %s", describe(cur(P)));
	return name_of(P, next(P));
}

static struct jnode *node(struct parser *P, enum jnode_kind kind, int line)
{
	struct jnode *n = ja_alloc(P->a, sizeof(*n));
	if (!n)
		fail(P, -E2BIG, line, "the template is too large");
	n->kind = kind;
	n->line = line;
	return n;
}

static void enter(struct parser *P)
{
	if (++P->depth > MAX_DEPTH)
		fail(P, -E2BIG, cur(P)->line, "nested more than %d deep", MAX_DEPTH);
}

static struct jnode *expr(struct parser *P);
static struct jnode *unary(struct parser *P, bool with_filter);

/* Items up to the closing op, separated by commas (a trailing one allowed);
 * with kwargs, name=value items become E_KWARG. */
static struct jnode *items(struct parser *P, const char *close, bool kwargs)
{
	struct jnode *head = NULL, **tail = &head;
	while (!is_op(P, close)) {
		struct jnode *item;
		if (kwargs && cur(P)->type == T_NAME && P->t[P->i + 1].type == T_OP &&
		    !strcmp(P->t[P->i + 1].op, "=")) {
			item = node(P, E_KWARG, cur(P)->line);
			item->name = expect_name(P);
			next(P);
			item->a = expr(P);
		} else {
			item = expr(P);
		}
		*tail = item;
		tail = &item->next;
		if (!is_op(P, ","))
			break;
		next(P);
	}
	expect_op(P, close);
	return head;
}

static struct jnode *primary(struct parser *P)
{
	const struct jtok *t = cur(P);
	struct jnode *n;
	switch (t->type) {
	case T_NAME: {
		next(P);
		static const struct {
			const char *w;
			int v;
		} lits[] = { { "true", 1 }, { "True", 1 }, { "false", 0 },
			     { "False", 0 }, { "none", 2 }, { "None", 2 } };
		for (size_t k = 0; k < sizeof(lits) / sizeof(lits[0]); k++)
			if (t->n == strlen(lits[k].w) && !memcmp(t->s, lits[k].w, t->n)) {
				n = node(P, E_CONST, t->line);
				n->value = lits[k].v == 2 ? jv_none() : jv_bool(lits[k].v);
				return n;
			}
		n = node(P, E_NAME, t->line);
		n->name = name_of(P, t);
		return n;
	}
	case T_STRING: {
		/* adjacent literals are one string */
		struct jbuf b;
		jb_init(&b, P->a, (size_t)-1);
		while (cur(P)->type == T_STRING) {
			const struct jtok *s = next(P);
			jb_put(&b, s->s, s->n, false);
		}
		if (b.full)
			fail(P, -E2BIG, t->line, "the template is too large");
		n = node(P, E_CONST, t->line);
		n->value = jv_str(jb_done(&b));
		return n;
	}
	case T_INT:
	case T_FLOAT:
		next(P);
		n = node(P, E_CONST, t->line);
		n->value = t->type == T_INT ? jv_int(t->i) : jv_float(t->f);
		return n;
	case T_OP:
		if (!strcmp(t->op, "(")) {
			next(P);
			if (is_op(P, ")")) {
				next(P);
				return node(P, E_TUPLE, t->line);
			}
			struct jnode *first = expr(P);
			if (is_op(P, ")")) {
				next(P);
				return first;
			}
			expect_op(P, ",");
			n = node(P, E_TUPLE, t->line);
			n->a = first;
			first->next = items(P, ")", false);
			return n;
		}
		if (!strcmp(t->op, "[")) {
			next(P);
			n = node(P, E_LIST, t->line);
			n->a = items(P, "]", false);
			return n;
		}
		if (!strcmp(t->op, "{")) {
			next(P);
			n = node(P, E_DICT, t->line);
			struct jnode **tail = &n->a;
			while (!is_op(P, "}")) {
				struct jnode *pair = node(P, E_TUPLE, cur(P)->line);
				pair->a = expr(P);
				expect_op(P, ":");
				pair->b = expr(P);
				*tail = pair;
				tail = &pair->next;
				if (!is_op(P, ","))
					break;
				next(P);
			}
			expect_op(P, "}");
			return n;
		}
		break;
	default:
		break;
	}
	fail(P, -EINVAL, t->line, "unexpected %s", describe(t));
}

/* obj[...] after the '[': an index or a slice. */
static struct jnode *subscript(struct parser *P, struct jnode *obj, int line)
{
	struct jnode *parts[3] = { NULL, NULL, NULL };
	int k = 0;
	bool slice = false;
	for (;;) {
		if (!is_op(P, ":") && !is_op(P, "]"))
			parts[k] = expr(P);
		if (is_op(P, ":") && k < 2) {
			next(P);
			slice = true;
			k++;
			continue;
		}
		break;
	}
	expect_op(P, "]");
	if (!slice) {
		if (!parts[0])
			fail(P, -EINVAL, line, "an empty subscript []");
		struct jnode *n = node(P, E_INDEX, line);
		n->a = obj;
		n->b = parts[0];
		return n;
	}
	struct jnode *n = node(P, E_SLICE, line);
	n->a = obj;
	n->b = parts[0];
	n->c = parts[1];
	n->d = parts[2];
	return n;
}

static struct jnode *postfix(struct parser *P, struct jnode *n)
{
	for (;;) {
		int line = cur(P)->line;
		if (is_op(P, ".")) {
			next(P);
			struct jnode *m;
			if (cur(P)->type == T_INT) {
				m = node(P, E_INDEX, line);
				m->b = node(P, E_CONST, line);
				m->b->value = jv_int(next(P)->i);
			} else {
				m = node(P, E_ATTR, line);
				m->name = expect_name(P);
			}
			m->a = n;
			n = m;
		} else if (is_op(P, "[")) {
			next(P);
			n = subscript(P, n, line);
		} else if (is_op(P, "(")) {
			next(P);
			struct jnode *m = node(P, E_CALL, line);
			m->a = n;
			m->b = items(P, ")", true);
			n = m;
		} else {
			return n;
		}
	}
}

/* Whether a test's single argument may follow without parentheses. */
static bool starts_arg(struct parser *P)
{
	const struct jtok *t = cur(P);
	if (t->type == T_STRING || t->type == T_INT || t->type == T_FLOAT)
		return true;
	if (t->type == T_NAME)
		return !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and");
	return t->type == T_OP && (!strcmp(t->op, "[") || !strcmp(t->op, "{"));
}

static struct jnode *filters(struct parser *P, struct jnode *n)
{
	for (;;) {
		int line = cur(P)->line;
		if (is_op(P, "|")) {
			next(P);
			struct jnode *f = node(P, E_FILTER, line);
			f->name = expect_name(P);
			if (!jf_filter_known(f->name) || is_op(P, "."))
				fail(P, -ENOTSUP, line, "unknown filter '%s'", f->name);
			f->a = n;
			if (is_op(P, "(")) {
				next(P);
				f->b = items(P, ")", true);
			}
			n = f;
		} else if (is_name(P, "is")) {
			next(P);
			struct jnode *t = node(P, E_TEST, line);
			if (is_name(P, "not")) {
				next(P);
				t->negated = true;
			}
			t->name = expect_name(P);
			if (!jf_test_known(t->name))
				fail(P, -ENOTSUP, line, "unknown test '%s'", t->name);
			t->a = n;
			if (is_op(P, "(")) {
				next(P);
				t->b = items(P, ")", true);
			} else if (starts_arg(P)) {
				t->b = postfix(P, primary(P));
			}
			n = t;
		} else if (is_op(P, "(")) {
			next(P);
			struct jnode *m = node(P, E_CALL, line);
			m->a = n;
			m->b = items(P, ")", true);
			n = m;
		} else {
			return n;
		}
	}
}

static struct jnode *unary(struct parser *P, bool with_filter)
{
	enter(P);
	int line = cur(P)->line;
	struct jnode *n;
	if (is_op(P, "-") || is_op(P, "+")) {
		bool neg = is_op(P, "-");
		next(P);
		n = node(P, neg ? E_NEG : E_POS, line);
		n->a = unary(P, false);
	} else {
		n = primary(P);
	}
	n = postfix(P, n);
	if (with_filter)
		n = filters(P, n);
	P->depth--;
	return n;
}

static struct jnode *binop(struct parser *P, enum jnode_kind kind, const char *op,
			   struct jnode *l, struct jnode *r, int line)
{
	struct jnode *n = node(P, kind, line);
	snprintf(n->op, sizeof(n->op), "%s", op);
	n->a = l;
	n->b = r;
	return n;
}

static struct jnode *power(struct parser *P)
{
	struct jnode *l = unary(P, true);
	while (is_op(P, "**")) {
		int line = next(P)->line;
		l = binop(P, E_BINOP, "**", l, unary(P, true), line);
	}
	return l;
}

static struct jnode *math2(struct parser *P)
{
	struct jnode *l = power(P);
	while (is_op(P, "*") || is_op(P, "/") || is_op(P, "//") || is_op(P, "%")) {
		const struct jtok *t = next(P);
		l = binop(P, E_BINOP, t->op, l, power(P), t->line);
	}
	return l;
}

static struct jnode *concat(struct parser *P)
{
	struct jnode *l = math2(P);
	while (is_op(P, "~")) {
		int line = next(P)->line;
		l = binop(P, E_BINOP, "~", l, math2(P), line);
	}
	return l;
}

static struct jnode *math1(struct parser *P)
{
	struct jnode *l = concat(P);
	while (is_op(P, "+") || is_op(P, "-")) {
		const struct jtok *t = next(P);
		l = binop(P, E_BINOP, t->op, l, concat(P), t->line);
	}
	return l;
}

static struct jnode *compare(struct parser *P)
{
	struct jnode *l = math1(P), *result = NULL;
	for (;;) {
		const struct jtok *t = cur(P);
		const char *op = NULL;
		if (t->type == T_OP && (!strcmp(t->op, "==") || !strcmp(t->op, "!=") ||
					!strcmp(t->op, "<") || !strcmp(t->op, "<=") ||
					!strcmp(t->op, ">") || !strcmp(t->op, ">="))) {
			op = t->op;
			next(P);
		} else if (is_name(P, "in")) {
			op = "in";
			next(P);
		} else if (is_name(P, "not") && P->t[P->i + 1].type == T_NAME &&
			   P->t[P->i + 1].n == 2 && !memcmp(P->t[P->i + 1].s, "in", 2)) {
			op = "notin";
			next(P);
			next(P);
		} else {
			break;
		}
		/* a < b < c is (a < b) and (b < c) */
		struct jnode *r = math1(P);
		struct jnode *c = binop(P, E_COMPARE, op, l, r, t->line);
		result = result ? binop(P, E_AND, "and", result, c, t->line) : c;
		l = r;
	}
	return result ? result : l;
}

static struct jnode *not_expr(struct parser *P)
{
	if (is_name(P, "not")) {
		enter(P);
		int line = next(P)->line;
		struct jnode *n = node(P, E_NOT, line);
		n->a = not_expr(P);
		P->depth--;
		return n;
	}
	return compare(P);
}

static struct jnode *and_expr(struct parser *P)
{
	struct jnode *l = not_expr(P);
	while (is_name(P, "and")) {
		int line = next(P)->line;
		l = binop(P, E_AND, "and", l, not_expr(P), line);
	}
	return l;
}

static struct jnode *or_expr(struct parser *P)
{
	struct jnode *l = and_expr(P);
	while (is_name(P, "or")) {
		int line = next(P)->line;
		l = binop(P, E_OR, "or", l, and_expr(P), line);
	}
	return l;
}

static struct jnode *expr(struct parser *P)
{
	enter(P);
	struct jnode *n = or_expr(P);
	while (is_name(P, "if")) {
		int line = next(P)->line;
		struct jnode *c = node(P, E_COND, line);
		c->a = n;
		c->b = or_expr(P);
		if (is_name(P, "else")) {
			next(P);
			c->c = or_expr(P);
		}
		n = c;
	}
	P->depth--;
	return n;
}

/* An expression, or a tuple of them without parentheses (a, b). */
static struct jnode *tuple_expr(struct parser *P, bool names_only)
{
	int line = cur(P)->line;
	struct jnode *first;
	if (names_only) {
		first = node(P, E_NAME, line);
		first->name = expect_name(P);
	} else {
		first = expr(P);
	}
	if (!is_op(P, ","))
		return first;
	struct jnode *t = node(P, E_TUPLE, line);
	t->a = first;
	struct jnode **tail = &first->next;
	while (is_op(P, ",")) {
		next(P);
		if (names_only && cur(P)->type != T_NAME)
			break;
		if (!names_only && (cur(P)->type == T_VAR_END || cur(P)->type == T_BLOCK_END))
			break;
		struct jnode *item;
		if (names_only) {
			item = node(P, E_NAME, cur(P)->line);
			item->name = expect_name(P);
		} else {
			item = expr(P);
		}
		*tail = item;
		tail = &item->next;
	}
	return t;
}

static bool end_tag(struct parser *P, const char *const *ends)
{
	if (cur(P)->type != T_BLOCK_BEGIN || P->t[P->i + 1].type != T_NAME)
		return false;
	const struct jtok *t = &P->t[P->i + 1];
	for (int k = 0; ends[k]; k++)
		if (t->n == strlen(ends[k]) && !memcmp(t->s, ends[k], t->n))
			return true;
	return false;
}

static struct jnode *body(struct parser *P, const char *const *ends, const char *opener, int line);

/* After {% NAME ...: the statement through its closing tag. */
static struct jnode *statement(struct parser *P)
{
	const struct jtok *kw = cur(P);
	int line = kw->line;
	if (kw->type != T_NAME)
		fail(P, -EINVAL, line, "expected a tag name after '{%%', found %s", describe(kw));
	const char *name = name_of(P, kw);
	next(P);
	struct jnode *n;
	if (!strcmp(name, "for")) {
		n = node(P, N_FOR, line);
		n->a = tuple_expr(P, true);
		if (!is_name(P, "in"))
			fail(P, -EINVAL, cur(P)->line, "expected 'in' in a for tag, found %s",
			     describe(cur(P)));
		next(P);
		/* the iterable: no x if c else y here, `if` filters the loop */
		n->b = or_expr(P);
		if (is_name(P, "if")) {
			next(P);
			n->c = expr(P);
		}
		if (is_name(P, "recursive"))
			fail(P, -ENOTSUP, line, "recursive for loops are not supported");
		expect(P, T_BLOCK_END, "'%}'");
		P->loops++;
		static const char *const ends[] = { "else", "endfor", NULL };
		n->d = body(P, ends, "for", line);
		P->loops--;
		if (is_name(P, "else")) {
			next(P);
			expect(P, T_BLOCK_END, "'%}'");
			static const char *const ends2[] = { "endfor", NULL };
			n->e = body(P, ends2, "for", line);
		}
		next(P); /* endfor */
	} else if (!strcmp(name, "if")) {
		n = node(P, N_IF, line);
		struct jnode *cond = n;
		cond->a = expr(P);
		for (;;) {
			expect(P, T_BLOCK_END, "'%}'");
			static const char *const ends[] = { "elif", "else", "endif", NULL };
			cond->b = body(P, ends, "if", line);
			if (is_name(P, "elif")) {
				struct jnode *e = node(P, N_IF, next(P)->line);
				e->a = expr(P);
				cond->c = e;
				cond = e;
				continue;
			}
			if (is_name(P, "else")) {
				next(P);
				expect(P, T_BLOCK_END, "'%}'");
				static const char *const ends2[] = { "endif", NULL };
				cond->c = body(P, ends2, "if", line);
			}
			next(P); /* endif */
			break;
		}
	} else if (!strcmp(name, "set")) {
		struct jnode *target;
		int tl = cur(P)->line;
		if (cur(P)->type == T_NAME && P->t[P->i + 1].type == T_OP &&
		    !strcmp(P->t[P->i + 1].op, ".")) {
			target = node(P, E_ATTR, tl);
			target->a = node(P, E_NAME, tl);
			target->a->name = expect_name(P);
			next(P);
			target->name = expect_name(P);
		} else {
			target = tuple_expr(P, true);
		}
		if (is_op(P, "=")) {
			next(P);
			n = node(P, N_SET, line);
			n->a = target;
			n->b = tuple_expr(P, false);
		} else {
			if (is_op(P, "|"))
				fail(P, -ENOTSUP, line, "filtered block set ({%% set x | f %%}) is not supported");
			expect(P, T_BLOCK_END, "'=' or '%}'");
			n = node(P, N_SETBLOCK, line);
			n->a = target;
			static const char *const ends[] = { "endset", NULL };
			n->b = body(P, ends, "set", line);
			next(P);
		}
	} else if (!strcmp(name, "macro")) {
		n = node(P, N_MACRO, line);
		n->name = expect_name(P);
		expect_op(P, "(");
		n->a = items(P, ")", true);
		for (struct jnode *p = n->a; p; p = p->next)
			if (p->kind != E_NAME && p->kind != E_KWARG)
				fail(P, -EINVAL, p->line, "a macro parameter must be a name");
		expect(P, T_BLOCK_END, "'%}'");
		int loops = P->loops;
		P->loops = 0; /* break in a macro does not leave a caller's loop */
		static const char *const ends[] = { "endmacro", NULL };
		n->b = body(P, ends, "macro", line);
		P->loops = loops;
		next(P);
		if (cur(P)->type == T_NAME)
			next(P); /* {% endmacro name %} */
	} else if (!strcmp(name, "break") || !strcmp(name, "continue")) {
		if (!P->loops)
			fail(P, -EINVAL, line, "'%s' outside a for loop", name);
		n = node(P, name[0] == 'b' ? N_BREAK : N_CONTINUE, line);
	} else if (!strcmp(name, "generation")) {
		/* transformers' {% generation %}: marks assistant text, renders as is */
		expect(P, T_BLOCK_END, "'%}'");
		n = node(P, N_BODY, line);
		static const char *const ends[] = { "endgeneration", NULL };
		n->a = body(P, ends, "generation", line);
		next(P);
	} else if (!strncmp(name, "end", 3) || !strcmp(name, "else") || !strcmp(name, "elif")) {
		fail(P, -EINVAL, line, "unexpected '%s' (no open tag it closes)", name);
	} else {
		fail(P, -ENOTSUP, line, "unsupported tag '%s'", name);
	}
	expect(P, T_BLOCK_END, "'%}'");
	return n;
}

/* Statements until one of the tags ends (NULL: the template's end); stops
 * at that tag's name, its '{%' consumed. */
static struct jnode *body(struct parser *P, const char *const *ends, const char *opener, int line)
{
	enter(P);
	struct jnode *head = NULL, **tail = &head;
	for (;;) {
		const struct jtok *t = cur(P);
		struct jnode *n;
		if (t->type == T_EOF) {
			if (ends)
				fail(P, -EINVAL, line, "unclosed '%s' tag (no {%% end%s %%})", opener,
				     opener);
			break;
		}
		if (ends && end_tag(P, ends)) {
			next(P);
			break;
		}
		next(P);
		if (t->type == T_TEXT) {
			n = node(P, N_TEXT, t->line);
			n->text = (struct jstr){ .s = t->s, .n = t->n };
		} else if (t->type == T_VAR_BEGIN) {
			n = node(P, N_OUTPUT, t->line);
			n->a = tuple_expr(P, false);
			expect(P, T_VAR_END, "'}}'");
		} else if (t->type == T_BLOCK_BEGIN) {
			n = statement(P);
		} else {
			fail(P, -EINVAL, t->line, "unexpected %s", describe(t));
		}
		*tail = n;
		tail = &n->next;
	}
	P->depth--;
	return head;
}

int jinja_parse(const char *src, size_t len, struct jinja_template **out, struct pfx_error *err)
{
	*out = NULL;
	size_t bad = ju_invalid(src, len);
	if (bad != (size_t)-1)
		return pfx_errorf(err, -EINVAL, "the template is not UTF-8 (byte %zu)", bad);
	struct jinja_template *t = calloc(1, sizeof(*t));
	if (!t)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	t->arena = ja_new(TEMPLATE_ARENA);
	if (!t->arena) {
		free(t);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	struct jtoks toks;
	int rc = jinja_lex(t->arena, src, len, &toks, err);
	if (rc) {
		jinja_template_free(t);
		return rc;
	}
	struct parser P = { .a = t->arena, .t = toks.v, .n = toks.n, .err = err };
	if (setjmp(P.jmp)) {
		jinja_template_free(t);
		return P.rc;
	}
	t->body = body(&P, NULL, NULL, 1);
	*out = t;
	return 0;
}

void jinja_template_free(struct jinja_template *t)
{
	if (!t)
		return;
	ja_free(t->arena);
	free(t);
}
