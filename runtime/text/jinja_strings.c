/* SPDX-License-Identifier: MIT */
/*
 * Python's str operations the templates call (strip, split, replace, the
 * case mappings), on UTF-8 with the provenance of each byte kept: a
 * character made from a tainted one is tainted.
 */
#include <string.h>
#include <utf8proc.h>

#include "jinja.h"

static struct jstr sub(struct jstr s, size_t i, size_t n)
{
	return (struct jstr){ .s = s.s + i, .n = n, .taint = s.taint ? s.taint + i : NULL };
}

static bool in_set(int32_t c, const struct jstr *chars)
{
	if (!chars)
		return ju_isspace(c);
	for (size_t i = 0; i < chars->n;) {
		size_t len;
		if (ju_decode(chars->s, chars->n, i, &len) == c)
			return true;
		i += len;
	}
	return false;
}

struct jstr js_strip(struct jstr s, const struct jstr *chars, enum js_side side)
{
	size_t from = 0, to = s.n;
	if (side != JS_RIGHT)
		while (from < to) {
			size_t len;
			if (!in_set(ju_decode(s.s, s.n, from, &len), chars))
				break;
			from += len;
		}
	if (side != JS_LEFT)
		while (to > from) {
			size_t start = to - 1, len;
			while (start > from && ((unsigned char)s.s[start] & 0xc0) == 0x80)
				start--;
			if (!in_set(ju_decode(s.s, s.n, start, &len), chars))
				break;
			to = start;
		}
	return sub(s, from, to - from);
}

static bool is_cased(int32_t c)
{
	utf8proc_category_t k = utf8proc_category(c);
	return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

static bool title_sep(int32_t c)
{
	return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || ju_isspace(c);
}

struct jstr js_case(struct jarena *a, struct jstr s, enum js_case how)
{
	struct jbuf b;
	jb_init(&b, a, (size_t)-1);
	bool prev_cased = false, start = true;
	for (size_t i = 0; i < s.n;) {
		size_t len;
		int32_t c = ju_decode(s.s, s.n, i, &len), m;
		switch (how) {
		case JC_UPPER: m = utf8proc_toupper(c); break;
		case JC_LOWER: m = utf8proc_tolower(c); break;
		case JC_TITLE:
			m = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c);
			prev_cased = is_cased(c);
			break;
		case JC_CAPITALIZE:
			m = i == 0 ? utf8proc_totitle(c) : utf8proc_tolower(c);
			break;
		default: /* Jinja's title: upper after a run of -, blanks or ([{< */
			if (title_sep(c)) {
				m = c;
				start = true;
			} else {
				m = start ? utf8proc_toupper(c) : utf8proc_tolower(c);
				start = false;
			}
			break;
		}
		char enc[4];
		int k = ju_encode(m, enc);
		jb_put(&b, enc, (size_t)k, s.taint && s.taint[i]);
		i += len;
	}
	if (b.full)
		return (struct jstr){ 0 };
	return jb_done(&b);
}

size_t js_find(struct jstr s, struct jstr needle, size_t from)
{
	if (needle.n > s.n)
		return (size_t)-1;
	for (size_t i = from; i + needle.n <= s.n; i++)
		if (!memcmp(s.s + i, needle.s, needle.n))
			return i;
	return (size_t)-1;
}

static bool push_str(struct jarena *a, struct jlist *l, struct jstr s)
{
	return !jl_push(a, l, jv_str(s));
}

struct jlist *js_split(struct jarena *a, struct jstr s, const struct jstr *sep, int64_t maxsplit)
{
	struct jlist *l = jl_new(a);
	if (!l)
		return NULL;
	if (sep) {
		size_t from = 0;
		for (int64_t k = 0; maxsplit < 0 || k < maxsplit; k++) {
			size_t at = js_find(s, *sep, from);
			if (at == (size_t)-1)
				break;
			if (!push_str(a, l, sub(s, from, at - from)))
				return NULL;
			from = at + sep->n;
		}
		return push_str(a, l, sub(s, from, s.n - from)) ? l : NULL;
	}
	/* runs of whitespace; none at either end makes an empty piece */
	size_t i = 0;
	int64_t k = 0;
	for (;;) {
		size_t len;
		while (i < s.n && ju_isspace(ju_decode(s.s, s.n, i, &len)))
			i += len;
		if (i >= s.n)
			break;
		if (maxsplit >= 0 && k == maxsplit) {
			return push_str(a, l, sub(s, i, s.n - i)) ? l : NULL;
		}
		size_t start = i;
		while (i < s.n && !ju_isspace(ju_decode(s.s, s.n, i, &len)))
			i += len;
		if (!push_str(a, l, sub(s, start, i - start)))
			return NULL;
		k++;
	}
	return l;
}

struct jstr js_replace(struct jarena *a, struct jstr s, struct jstr old, struct jstr rep,
		       int64_t count, size_t limit)
{
	struct jbuf b;
	jb_init(&b, a, limit);
	size_t from = 0;
	int64_t done = 0;
	if (!old.n) {
		/* between every character and at both ends */
		for (size_t i = 0;; done++) {
			if (count >= 0 && done >= count) {
				jb_sub(&b, s, i, s.n - i);
				break;
			}
			jb_str(&b, rep);
			if (i >= s.n || b.full)
				break;
			size_t len;
			ju_decode(s.s, s.n, i, &len);
			jb_sub(&b, s, i, len);
			i += len;
		}
	} else {
		for (; count < 0 || done < count; done++) {
			size_t at = js_find(s, old, from);
			if (at == (size_t)-1 || b.full)
				break;
			jb_sub(&b, s, from, at - from);
			jb_str(&b, rep);
			from = at + old.n;
		}
		jb_sub(&b, s, from, s.n - from);
	}
	if (b.full)
		return (struct jstr){ 0 };
	return jb_done(&b);
}
