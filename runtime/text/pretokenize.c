/* SPDX-License-Identifier: MIT */
/* Pre-tokenizers: each cuts every piece of the text into smaller pieces (and
 * Metaspace and ByteLevel's prefix space rewrite them), as tokenizers'
 * PreTokenizedString::split does; the last pieces are the BPE words. */
#include "tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

struct piece {
	size_t off, len;
	bool first; /* begins at the start of the whole input */
};

struct pieces {
	struct tbuf text;
	struct piece *p;
	size_t n, cap;
};

static int add_piece(struct pieces *ps, const char *s, size_t n, bool first)
{
	if (!n)
		return 0; /* empty pieces are dropped, as tokenizers does */
	if (ps->n == ps->cap) {
		size_t cap = ps->cap ? ps->cap * 2 : 64;
		struct piece *p = realloc(ps->p, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		ps->p = p;
		ps->cap = cap;
	}
	ps->p[ps->n++] = (struct piece){ ps->text.n, n, first };
	return tbuf_put(&ps->text, s, n);
}

/* A match list covering a piece: [start, end) and whether it matched. */
struct mt {
	size_t a, b;
	bool m;
};
struct mts {
	struct mt *v;
	size_t n, cap;
};

static int mt_add(struct mts *l, size_t a, size_t b, bool m)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct mt *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = (struct mt){ a, b, m };
	return 0;
}

static int regex_matches(const pcre2_code *re, struct tok_scratch *s, const char *str, size_t n,
			 struct mts *l)
{
	size_t prev = 0, pos = 0;
	int r = 0;
	if (!s->md && !(s->md = pcre2_match_data_create(4, NULL)))
		return -ENOMEM;
	while (pos < n) {
		int rc = pcre2_match(re, (PCRE2_SPTR)str, n, pos, PCRE2_NO_UTF_CHECK, s->md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0)
			return -EOVERFLOW; /* e.g. the JIT's stack: never a silent short split */
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
		if (ov[1] == ov[0]) {
			pos = ov[0] + utf8_len((unsigned char)str[ov[0]]);
			continue;
		}
		if (prev != ov[0])
			r |= mt_add(l, prev, ov[0], false);
		r |= mt_add(l, ov[0], ov[1], true);
		prev = pos = ov[1];
	}
	if (prev != n)
		r |= mt_add(l, prev, n, false);
	return r ? -ENOMEM : 0;
}

static bool is_ws(int32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
	       c == 0x205f || c == 0x3000;
}

static bool is_numeric(int32_t c)
{
	if (c < 0x80)
		return c >= '0' && c <= '9';
	utf8proc_category_t k = utf8proc_category(c);
	return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

static bool is_punct(int32_t c)
{
	if (c < 0x80)
		return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
		       (c >= 123 && c <= 126);
	utf8proc_category_t k = utf8proc_category(c);
	return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* Every character for which pred holds is a match of its own. */
static int char_matches(bool (*pred)(int32_t), const char *str, size_t n, struct mts *l)
{
	size_t last = 0, len;
	int r = 0;
	for (size_t i = 0; i < n; i += len) {
		if (pred(utf8_get(str + i, &len))) {
			if (last < i)
				r |= mt_add(l, last, i, false);
			r |= mt_add(l, i, i + len, true);
			last = i + len;
		}
	}
	if (last < n)
		r |= mt_add(l, last, n, false);
	return r ? -ENOMEM : 0;
}

/* tokenizers' SplitDelimiterBehavior over a match list. */
static int split_by(struct mts *l, enum split_behavior b, bool invert, const char *str, bool first,
		    struct pieces *out)
{
	if (invert)
		for (size_t i = 0; i < l->n; i++)
			l->v[i].m = !l->v[i].m;
	size_t k = 0;
	switch (b) {
	case B_REMOVED:
		for (size_t i = 0; i < l->n; i++)
			if (!l->v[i].m)
				l->v[k++] = l->v[i];
		break;
	case B_ISOLATED:
		k = l->n;
		break;
	case B_PREV: {
		bool prev = false;
		for (size_t i = 0; i < l->n; i++) {
			if (l->v[i].m && !prev && k)
				l->v[k - 1].b = l->v[i].b;
			else
				l->v[k++] = l->v[i];
			prev = l->v[i].m;
		}
		break;
	}
	case B_NEXT: {
		bool prev = false;
		size_t j = l->n;
		for (size_t i = l->n; i-- > 0;) {
			if (l->v[i].m && !prev && j < l->n)
				l->v[j].a = l->v[i].a;
			else
				l->v[--j] = l->v[i];
			prev = l->v[i].m;
		}
		memmove(l->v, l->v + j, (l->n - j) * sizeof(*l->v));
		k = l->n - j;
		break;
	}
	case B_CONTIGUOUS: {
		bool prev = false;
		for (size_t i = 0; i < l->n; i++) {
			if (l->v[i].m == prev && k)
				l->v[k - 1].b = l->v[i].b;
			else
				l->v[k++] = l->v[i];
			prev = l->v[i].m;
		}
		break;
	}
	}
	for (size_t i = 0; i < k; i++)
		if (add_piece(out, str + l->v[i].a, l->v[i].b - l->v[i].a, first && l->v[i].a == 0))
			return -ENOMEM;
	return 0;
}

static int metaspace(const struct pretok *p, struct tok_scratch *s, const char *str, size_t n,
		     bool first, struct pieces *out, struct mts *l)
{
	struct tbuf *b = &s->c;
	size_t rl = strlen(p->repl);
	b->n = 0;
	int r = 0;
	bool starts = n >= rl ? !memcmp(str, p->repl, rl) : false;
	if (n && str[0] == ' ')
		starts = true;
	if ((p->prepend == 2 || (p->prepend == 1 && first)) && !starts)
		r |= tbuf_put(b, p->repl, rl);
	for (size_t i = 0; i < n; i++)
		r |= str[i] == ' ' ? tbuf_put(b, p->repl, rl) : tbuf_putc(b, str[i]);
	if (r)
		return -ENOMEM;
	if (!p->flag)
		return add_piece(out, b->p, b->n, first);
	for (size_t i = 0, len; i < b->n; i += len) {
		len = utf8_len((unsigned char)b->p[i]);
		if (len == rl && !memcmp(b->p + i, p->repl, rl)) {
			if (mt_add(l, i, i + len, true))
				return -ENOMEM;
		} else if (l->n && !l->v[l->n - 1].m) {
			l->v[l->n - 1].b = i + len;
		} else if (mt_add(l, i, i + len, false)) {
			return -ENOMEM;
		}
	}
	return split_by(l, B_NEXT, false, b->p, first, out);
}

static int apply(const struct pretok *p, struct tok_scratch *s, const char *str, size_t n,
		 bool first, struct pieces *out)
{
	struct mts l = { 0 };
	int r = 0;
	switch (p->kind) {
	case P_BYTELEVEL:
		if (p->flag && (!n || str[0] != ' ')) {
			struct tbuf *b = &s->c;
			b->n = 0;
			if (tbuf_putc(b, ' ') || tbuf_put(b, str, n))
				return -ENOMEM;
			str = b->p;
			n = b->n;
		}
		if (!p->re)
			return add_piece(out, str, n, first);
		r = regex_matches(p->re, s, str, n, &l);
		if (!r)
			r = split_by(&l, B_ISOLATED, false, str, first, out);
		break;
	case P_SPLIT:
		r = regex_matches(p->re, s, str, n, &l);
		if (!r)
			r = split_by(&l, p->behavior, p->invert, str, first, out);
		break;
	case P_WHITESPACE:
		r = regex_matches(p->re, s, str, n, &l);
		if (!r)
			r = split_by(&l, B_REMOVED, true, str, first, out);
		break;
	case P_WSSPLIT:
		r = char_matches(is_ws, str, n, &l);
		if (!r)
			r = split_by(&l, B_REMOVED, false, str, first, out);
		break;
	case P_DIGITS:
		r = char_matches(is_numeric, str, n, &l);
		if (!r)
			r = split_by(&l, p->flag ? B_ISOLATED : B_CONTIGUOUS, false, str, first, out);
		break;
	case P_PUNCT:
		r = char_matches(is_punct, str, n, &l);
		if (!r)
			r = split_by(&l, p->behavior, false, str, first, out);
		break;
	case P_METASPACE:
		r = metaspace(p, s, str, n, first, out, &l);
		break;
	}
	free(l.v);
	return r;
}

int pretokenize_encode(const struct pfx_tokenizer *t, struct tok_scratch *s, const char *text,
		       size_t n, bool at_start, struct tids *out)
{
	if (!t->npre)
		return bpe_word(t, s, text, n, out);
	struct pieces a = { 0 }, b = { 0 };
	int r = add_piece(&a, text, n, at_start);
	for (size_t k = 0; !r && k < t->npre; k++) {
		b.n = 0;
		b.text.n = 0;
		for (size_t i = 0; !r && i < a.n; i++)
			r = apply(&t->pre[k], s, a.text.p + a.p[i].off, a.p[i].len, a.p[i].first, &b);
		struct pieces x = a;
		a = b;
		b = x;
	}
	for (size_t i = 0; !r && i < a.n; i++)
		r = bpe_word(t, s, a.text.p + a.p[i].off, a.p[i].len, out);
	tbuf_free(&a.text);
	tbuf_free(&b.text);
	free(a.p);
	free(b.p);
	return r;
}
