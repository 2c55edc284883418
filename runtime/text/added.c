/* SPDX-License-Identifier: MIT */
/* Added tokens: found in the text before anything else, leftmost and, at one
 * place, longest first (as tokenizers' Aho-Corasick in LeftmostLongest mode),
 * honouring lstrip, rstrip and single_word; special ones only where the text
 * is not a user's or the caller asks for Hugging Face's behaviour. */
#include "tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int by_first_then_longest(const void *x, const void *y, void *arg)
{
	const struct pfx_tokenizer *t = arg;
	const struct added *a = &t->added[*(const uint32_t *)x];
	const struct added *b = &t->added[*(const uint32_t *)y];
	unsigned char ca = (unsigned char)a->content[0], cb = (unsigned char)b->content[0];
	if (ca != cb)
		return ca < cb ? -1 : 1;
	if (a->len != b->len)
		return a->len > b->len ? -1 : 1;
	return *(const uint32_t *)x < *(const uint32_t *)y ? -1 : 1;
}

static int build_set(struct pfx_tokenizer *t, struct added_set *set, bool normalized)
{
	set->idx = malloc((t->nadded + 1) * sizeof(*set->idx));
	if (!set->idx)
		return -ENOMEM;
	set->n = 0;
	for (size_t i = 0; i < t->nadded; i++)
		if (t->added[i].normalized == normalized)
			set->idx[set->n++] = (uint32_t)i;
	qsort_r(set->idx, set->n, sizeof(*set->idx), by_first_then_longest, t);
	size_t k = 0;
	for (int c = 0; c <= 256; c++) {
		while (c < 256 && k < set->n && (unsigned char)t->added[set->idx[k]].content[0] < c)
			k++;
		set->first[c] = (uint32_t)k;
	}
	set->first[256] = (uint32_t)set->n;
	return 0;
}

int added_index(struct pfx_tokenizer *t, struct pfx_error *err)
{
	/* A normalized token is looked for in normalised text, so in its
	 * normalised form (neox's runs of spaces stay what they are). */
	struct tok_scratch s = { 0 };
	for (size_t i = 0; i < t->nadded; i++) {
		struct added *a = &t->added[i];
		if (!a->normalized || !t->nnorm)
			continue;
		struct tbuf out = { 0 };
		int r = normalize(t, &s, a->content, a->len, &out);
		if (r || !out.n) {
			tbuf_free(&out);
			scratch_free(&s);
			return pfx_errorf(err, r ? r : -EINVAL, "tokenizer.json: added token %s normalises to nothing",
					  a->content);
		}
		free(a->content);
		a->content = out.p;
		a->len = out.n;
	}
	scratch_free(&s);
	if (build_set(t, &t->raw, false) || build_set(t, &t->normed, true))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	return 0;
}

static bool is_ws(int32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
	       c == 0x205f || c == 0x3000;
}

static bool is_word(int32_t c)
{
	if (c == '_')
		return true;
	utf8proc_category_t k = utf8proc_category(c);
	return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
	       (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

/* The code point that ends s[0, n). */
static int32_t last_cp(const char *s, size_t n, size_t *start)
{
	size_t i = n;
	while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
		i--;
	if (i > 0)
		i--;
	size_t l;
	*start = i;
	return utf8_get(s + i, &l);
}

/* Whether [a, b) of the whole text may be a special token: not inside a
 * user's span (or parse_special). */
static bool allowed(const struct pfx_text_span *plain, size_t nplain, size_t a, size_t b)
{
	for (size_t i = 0; i < nplain; i++)
		if (a < plain[i].start + plain[i].len && plain[i].start < b)
			return false;
	return true;
}

bool added_next(const struct pfx_tokenizer *t, const struct added_set *set, const char *s,
		size_t n, size_t from, size_t prev_end, const struct pfx_text_span *plain,
		size_t nplain, size_t base, bool parse_special, struct added_match *m)
{
	if (!set->n)
		return false;
	size_t p = from;
	while (p < n) {
		unsigned char c = (unsigned char)s[p];
		uint32_t lo = set->first[c], hi = set->first[c + 1];
		const struct added *hit = NULL;
		for (uint32_t k = lo; k < hi; k++) {
			const struct added *a = &t->added[set->idx[k]];
			if (a->len <= n - p && !memcmp(s + p, a->content, a->len)) {
				hit = a;
				break;
			}
		}
		if (!hit) {
			p++;
			continue;
		}
		size_t start = p, end = p + hit->len;
		/* A skipped match is passed over whole, as the automaton's
		 * non-overlapping search does. */
		p = end;
		if (hit->special && !parse_special && !allowed(plain, nplain, base + start, base + end))
			continue;
		if (hit->single_word) {
			size_t l, q;
			bool before = start > 0 && is_word(last_cp(s, start, &q));
			bool after = end < n && is_word(utf8_get(s + end, &l));
			if (before || after)
				continue;
		}
		if (hit->lstrip) {
			size_t q;
			while (start > prev_end && is_ws(last_cp(s, start, &q)))
				start = q;
		}
		if (hit->rstrip) {
			size_t l;
			while (end < n && is_ws(utf8_get(s + end, &l)))
				end += l;
		}
		m->start = start;
		m->end = end;
		m->id = hit->id;
		return true;
	}
	return false;
}
