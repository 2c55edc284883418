/* SPDX-License-Identifier: MIT */
/*
 * The lexer, as Jinja's with transformers' settings: newlines normalised
 * and the template's one trailing newline dropped (keep_trailing_newline
 * off); {%- -%} {{- -}} {#- -#} strip whitespace; trim_blocks drops the
 * newline after a block or comment tag, lstrip_blocks the blanks before
 * one on its line, unless the tag says + ; {% raw %} passes text through.
 * Data between tags comes out as T_TEXT tokens with all that applied.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

#define MAX_NESTING 256 /* open brackets inside one tag */

struct lexer {
	struct jarena *a;
	const char *s;
	size_t n, pos;
	int line;
	struct jtok *v;
	size_t nv, cap;
	struct pfx_error *err;
	int rc;
};

static __attribute__((format(printf, 4, 5))) int fail(struct lexer *L, int code, int line,
							    const char *fmt, ...)
{
	char msg[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	L->rc = pfx_errorf(L->err, code, "template line %d: %s", line, msg);
	return L->rc;
}

static struct jtok *emit(struct lexer *L, enum jtok_type type, int line)
{
	if (L->nv == L->cap) {
		size_t cap = L->cap ? 2 * L->cap : 64;
		struct jtok *v = ja_alloc(L->a, cap * sizeof(*v));
		if (!v) {
			fail(L, -E2BIG, line, "%s", "the template is too large");
			return NULL;
		}
		if (L->nv)
			memcpy(v, L->v, L->nv * sizeof(*v));
		L->v = v;
		L->cap = cap;
	}
	struct jtok *t = &L->v[L->nv++];
	memset(t, 0, sizeof(*t));
	t->type = type;
	t->line = line;
	return t;
}

static void advance(struct lexer *L, size_t to)
{
	for (; L->pos < to; L->pos++)
		L->line += L->s[L->pos] == '\n';
}

/* Python's \s at s[i]: the length of the whitespace character there, or 0. */
static size_t space_at(const char *s, size_t n, size_t i)
{
	if (i >= n)
		return 0;
	size_t len;
	int32_t c = ju_decode(s, n, i, &len);
	return ju_isspace(c) ? len : 0;
}

static size_t skip_space(const char *s, size_t n, size_t i)
{
	for (size_t k; (k = space_at(s, n, i)); i += k)
		;
	return i;
}

/* Text [from, to), stripped as the tag that follows it asks (sign is '-',
 * '+' or 0); lstrip applies before block and comment tags. */
static int data(struct lexer *L, size_t from, size_t to, char sign, bool lstrip, bool line_starting)
{
	int line = L->line;
	if (sign == '-') {
		/* rstrip: keep through the last non-whitespace character */
		size_t end = from;
		for (size_t i = from; i < to;) {
			size_t len;
			int32_t c = ju_decode(L->s, to, i, &len);
			i += len;
			if (!ju_isspace(c))
				end = i;
		}
		to = end;
	} else if (sign != '+' && lstrip) {
		size_t l = to;
		while (l > from && L->s[l - 1] != '\n')
			l--;
		if (l > from || line_starting) {
			size_t k = l;
			while (k < to && (L->s[k] == ' ' || L->s[k] == '\t'))
				k++;
			if (k == to)
				to = l;
		}
	}
	if (to > from) {
		struct jtok *t = emit(L, T_TEXT, line);
		if (!t)
			return L->rc;
		t->s = L->s + from;
		t->n = to - from;
	}
	return 0;
}

static bool starts(const struct lexer *L, size_t i, const char *w)
{
	size_t k = strlen(w);
	return i + k <= L->n && !memcmp(L->s + i, w, k);
}

static int hexval(const char *s, int k, int32_t *out)
{
	uint32_t v = 0; /* 8 digits fit; the caller refuses what is past U+10FFFF */
	for (int i = 0; i < k; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
			c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return -1;
		v = v * 16 + (uint32_t)d;
	}
	*out = v > 0x10ffff ? 0x110000 : (int32_t)v;
	return 0;
}

/* A string literal at L->pos (quote q) into t, unescaped as Python's
 * unicode-escape codec does. */
static int string(struct lexer *L, struct jtok *t)
{
	char q = L->s[L->pos];
	size_t i = L->pos + 1, end = i;
	while (end < L->n && L->s[end] != q)
		end += L->s[end] == '\\' ? 2 : 1;
	if (end >= L->n)
		return fail(L, -EINVAL, t->line, "%s", "unterminated string literal");
	char *out = ja_alloc(L->a, end - i + 1);
	if (!out)
		return fail(L, -E2BIG, t->line, "%s", "the template is too large");
	size_t o = 0;
	while (i < end) {
		char c = L->s[i];
		if (c != '\\') {
			out[o++] = c;
			i++;
			continue;
		}
		char e = L->s[i + 1];
		const char *simple = strchr("\\'\"abfnrtv", e);
		if (e && simple) {
			static const char map[] = "\\'\"\a\b\f\n\r\t\v";
			out[o++] = map[simple - "\\'\"abfnrtv"];
			i += 2;
		} else if (e == '\n') {
			i += 2;
		} else if (e >= '0' && e <= '7') {
			int32_t v = 0;
			size_t k = i + 1;
			for (int d = 0; d < 3 && k < end && L->s[k] >= '0' && L->s[k] <= '7'; d++, k++)
				v = v * 8 + (L->s[k] - '0');
			o += (size_t)ju_encode(v, out + o);
			i = k;
		} else if (e == 'x' || e == 'u' || e == 'U') {
			int k = e == 'x' ? 2 : e == 'u' ? 4 : 8;
			int32_t v;
			if (i + 2 + (size_t)k > end || hexval(L->s + i + 2, k, &v))
				return fail(L, -EINVAL, t->line, "truncated \\%s escape in a string literal",
					    e == 'x' ? "x" : e == 'u' ? "u" : "U");
			if ((v >= 0xd800 && v <= 0xdfff) || v > 0x10ffff)
				return fail(L, -EINVAL, t->line, "%s",
					    "a string literal escapes a surrogate or no code point");
			o += (size_t)ju_encode(v, out + o);
			i += 2 + (size_t)k;
		} else if (e == 'N') {
			return fail(L, -ENOTSUP, t->line, "%s", "\\N{...} escapes are not supported");
		} else {
			out[o++] = '\\';
			i++;
		}
	}
	t->s = out;
	t->n = o;
	advance(L, end + 1);
	return 0;
}

static int number(struct lexer *L, struct jtok *t)
{
	size_t i = L->pos;
	char buf[64];
	size_t b = 0;
	bool is_float = false;
	while (i < L->n && ((L->s[i] >= '0' && L->s[i] <= '9') || (L->s[i] == '_' && i + 1 < L->n &&
								       L->s[i + 1] >= '0' && L->s[i + 1] <= '9'))) {
		if (L->s[i] != '_' && b < sizeof(buf) - 8)
			buf[b++] = L->s[i];
		i++;
	}
	bool after_dot = L->pos > 0 && L->s[L->pos - 1] == '.';
	if (!after_dot && i + 1 < L->n && L->s[i] == '.' && L->s[i + 1] >= '0' && L->s[i + 1] <= '9') {
		is_float = true;
		buf[b++] = L->s[i++];
		while (i < L->n && ((L->s[i] >= '0' && L->s[i] <= '9') || L->s[i] == '_')) {
			if (L->s[i] != '_' && b < sizeof(buf) - 6)
				buf[b++] = L->s[i];
			i++;
		}
	}
	if (!after_dot && i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
		size_t k = i + 1;
		if (k < L->n && (L->s[k] == '+' || L->s[k] == '-'))
			k++;
		if (k < L->n && L->s[k] >= '0' && L->s[k] <= '9') {
			is_float = true;
			buf[b++] = 'e';
			for (size_t j = i + 1; j < k; j++)
				buf[b++] = L->s[j];
			i = k;
			while (i < L->n && L->s[i] >= '0' && L->s[i] <= '9') {
				if (b < sizeof(buf) - 1)
					buf[b++] = L->s[i];
				i++;
			}
		}
	}
	buf[b] = 0;
	if (is_float) {
		t->type = T_FLOAT;
		t->f = strtod(buf, NULL);
	} else {
		errno = 0;
		t->type = T_INT;
		t->i = strtoll(buf, NULL, 10);
		if (errno == ERANGE || b >= sizeof(buf) - 8)
			return fail(L, -ENOTSUP, t->line, "%s", "an integer literal beyond 64 bits");
	}
	advance(L, i);
	return 0;
}

static const char *const ops[] = { "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%",
				   "~",	 "[",  "]",  "(",  ")",	 "{",  "}", "<", ">", "=", ".",
				   ":",	 "|",  ",",  ";",  NULL };

/* Tokens of a {{ }} or {% %} whose opener ends at L->pos, through its
 * closer; *line_starting says whether the closer ended with a newline. */
static int tag(struct lexer *L, bool block, int open_line, bool *line_starting)
{
	char stack[MAX_NESTING];
	int depth = 0;
	for (;;) {
		advance(L, skip_space(L->s, L->n, L->pos));
		if (L->pos >= L->n)
			return fail(L, -EINVAL, open_line, "unterminated '%s' tag (the template ends)",
				    block ? "{%" : "{{");
		size_t p = L->pos;
		if (!depth) {
			const char *end = block ? "%}" : "}}";
			size_t closer = 0;
			char sign = 0;
			if (starts(L, p, end)) {
				closer = p + 2;
			} else if ((L->s[p] == '-' || (block && L->s[p] == '+')) && starts(L, p + 1, end)) {
				closer = p + 3;
				sign = L->s[p];
			}
			if (closer) {
				struct jtok *t = emit(L, block ? T_BLOCK_END : T_VAR_END, L->line);
				if (!t)
					return L->rc;
				if (sign == '-')
					closer = skip_space(L->s, L->n, closer);
				else if (block && !sign && closer < L->n && L->s[closer] == '\n')
					closer++;
				*line_starting = closer > 0 && L->s[closer - 1] == '\n';
				advance(L, closer);
				return 0;
			}
		}
		char c = L->s[p];
		struct jtok *t = emit(L, T_NAME, L->line);
		if (!t)
			return L->rc;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
			size_t e = p;
			while (e < L->n && ((L->s[e] >= 'a' && L->s[e] <= 'z') ||
					    (L->s[e] >= 'A' && L->s[e] <= 'Z') ||
					    (L->s[e] >= '0' && L->s[e] <= '9') || L->s[e] == '_'))
				e++;
			t->s = L->s + p;
			t->n = e - p;
			advance(L, e);
			continue;
		}
		if (c == '\'' || c == '"') {
			t->type = T_STRING;
			if (string(L, t))
				return L->rc;
			continue;
		}
		if (c >= '0' && c <= '9') {
			if (number(L, t))
				return L->rc;
			continue;
		}
		const char *op = NULL;
		for (int k = 0; ops[k]; k++)
			if (starts(L, p, ops[k])) {
				op = ops[k];
				break;
			}
		if (!op) {
			char what[8] = { 0 };
			size_t len;
			ju_decode(L->s, L->n, p, &len);
			memcpy(what, L->s + p, len < 5 ? len : 4);
			return fail(L, -EINVAL, L->line, "unexpected character '%s'", what);
		}
		t->type = T_OP;
		strcpy(t->op, op);
		if (strchr("([{", op[0]) && !op[1]) {
			if (depth == MAX_NESTING)
				return fail(L, -E2BIG, L->line, "%s", "brackets nested too deep");
			stack[depth++] = op[0];
		} else if (strchr(")]}", op[0]) && !op[1]) {
			char want = op[0] == ')' ? '(' : op[0] == ']' ? '[' : '{';
			if (!depth || stack[depth - 1] != want)
				return fail(L, -EINVAL, L->line, "unexpected '%s'", op);
			depth--;
		}
		advance(L, p + strlen(op));
	}
}

/* {% raw %} ... {% endraw %}: the opener ends at L->pos. */
static int raw(struct lexer *L, int open_line, bool *line_starting)
{
	for (size_t i = L->pos; i + 1 < L->n; i++) {
		if (L->s[i] != '{' || L->s[i + 1] != '%')
			continue;
		size_t k = i + 2;
		char sign = 0;
		if (k < L->n && (L->s[k] == '-' || L->s[k] == '+'))
			sign = L->s[k++];
		k = skip_space(L->s, L->n, k);
		if (!starts(L, k, "endraw"))
			continue;
		k = skip_space(L->s, L->n, k + 6);
		size_t closer = 0;
		char esign = 0;
		if (starts(L, k, "%}"))
			closer = k + 2;
		else if ((L->s[k] == '-' || L->s[k] == '+') && starts(L, k + 1, "%}"))
			esign = L->s[k], closer = k + 3;
		if (!closer)
			continue;
		if (data(L, L->pos, i, sign, true, *line_starting))
			return L->rc;
		if (esign == '-')
			closer = skip_space(L->s, L->n, closer);
		else if (!esign && closer < L->n && L->s[closer] == '\n')
			closer++;
		*line_starting = L->s[closer - 1] == '\n';
		advance(L, closer);
		return 0;
	}
	return fail(L, -EINVAL, open_line, "%s", "unterminated raw block (no {% endraw %})");
}

/* A {% raw %} opener at p ({%, sign, raw, %} or -%}): its end, or 0. */
static size_t raw_opener(const struct lexer *L, size_t p, char *esign)
{
	size_t k = p + 2;
	if (k < L->n && (L->s[k] == '-' || L->s[k] == '+'))
		k++;
	k = skip_space(L->s, L->n, k);
	if (!starts(L, k, "raw"))
		return 0;
	k = skip_space(L->s, L->n, k + 3);
	if (starts(L, k, "%}")) {
		*esign = 0;
		return k + 2;
	}
	if (L->s[k] == '-' && starts(L, k + 1, "%}")) {
		*esign = '-';
		return skip_space(L->s, L->n, k + 3);
	}
	return 0;
}

int jinja_lex(struct jarena *a, const char *src, size_t len, struct jtoks *toks,
	      struct pfx_error *err)
{
	/* Newlines: \r\n and \r become \n, and one trailing newline goes. */
	char *s = ja_alloc(a, len + 1);
	if (!s)
		return pfx_errorf(err, -E2BIG, "the template is too large");
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			s[n++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			s[n++] = src[i];
		}
	}
	if (n && s[n - 1] == '\n')
		n--;
	struct lexer L = { .a = a, .s = s, .n = n, .line = 1, .err = err };
	bool line_starting = true;
	while (L.pos < n) {
		/* the next {{, {% or {# */
		size_t p = L.pos;
		while (p + 1 < n && !(s[p] == '{' && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#')))
			p++;
		if (p + 1 >= n) {
			if (data(&L, L.pos, n, 0, false, line_starting))
				return L.rc;
			advance(&L, n);
			break;
		}
		char kind = s[p + 1];
		char sign = p + 2 < n && (s[p + 2] == '-' || s[p + 2] == '+') ? s[p + 2] : 0;
		char esign = 0;
		size_t raw_end = kind == '%' ? raw_opener(&L, p, &esign) : 0;
		if (data(&L, L.pos, p, sign, kind != '{', line_starting))
			return L.rc;
		advance(&L, p);
		int open_line = L.line;
		if (raw_end) {
			advance(&L, raw_end);
			line_starting = s[raw_end - 1] == '\n';
			if (raw(&L, open_line, &line_starting))
				return L.rc;
			continue;
		}
		advance(&L, p + 2 + (sign != 0));
		if (kind == '#') {
			size_t e = L.pos;
			while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}'))
				e++;
			if (e + 1 >= n)
				return fail(&L, -EINVAL, open_line, "%s", "unterminated comment '{#'");
			size_t closer = e + 2;
			char csign = e > L.pos && (s[e - 1] == '-' || s[e - 1] == '+') ? s[e - 1] : 0;
			if (csign == '-')
				closer = skip_space(s, n, closer);
			else if (!csign && closer < n && s[closer] == '\n')
				closer++;
			line_starting = s[closer - 1] == '\n';
			advance(&L, closer);
			continue;
		}
		if (!emit(&L, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, open_line))
			return L.rc;
		if (tag(&L, kind == '%', open_line, &line_starting))
			return L.rc;
	}
	if (!emit(&L, T_EOF, L.line))
		return L.rc;
	toks->v = L.v;
	toks->n = L.nv;
	return 0;
}
