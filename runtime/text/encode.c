/* SPDX-License-Identifier: MIT */
/* Encoding: added tokens first (on the raw text, then on the normalised
 * pieces between them), each piece normalised and pre-tokenised on its own,
 * BPE on each word, then what the post-processor adds. */
#include "tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct enc {
	const struct pfx_tokenizer *t;
	struct tok_scratch s;
	struct tids out;
	const struct pfx_text_span *plain;
	size_t nplain;
	bool parse_special;
};

static bool overlaps_user(const struct enc *e, size_t a, size_t b)
{
	for (size_t i = 0; i < e->nplain; i++)
		if (a < e->plain[i].start + e->plain[i].len && e->plain[i].start < b)
			return true;
	return false;
}

/* text[a, b) of the input, between raw added tokens. */
static int piece(struct enc *e, const char *text, size_t a, size_t b)
{
	const struct pfx_tokenizer *t = e->t;
	const char *p = text + a;
	size_t n = b - a;
	struct tbuf norm = { 0 };
	int r = 0;
	if (t->nnorm) {
		if ((r = normalize(t, &e->s, p, n, &norm))) {
			tbuf_free(&norm);
			return r;
		}
		p = norm.p ? norm.p : "";
		n = norm.n;
	}
	/* Offsets of normalised text no longer map to the input: a piece that
	 * touches a user's span is a user's all through. */
	static const struct pfx_text_span all = { 0, (size_t)-1 };
	bool user = overlaps_user(e, a, b);
	size_t pos = 0;
	struct added_match m;
	while (!r && pos < n &&
	       added_next(t, &t->normed, p, n, pos, pos, &all, user ? 1 : 0, 0, e->parse_special, &m)) {
		if (m.start > pos)
			r = pretokenize_encode(t, &e->s, p + pos, m.start - pos, a == 0 && pos == 0, &e->out);
		if (!r)
			r = tids_put(&e->out, m.id);
		pos = m.end;
	}
	if (!r && pos < n)
		r = pretokenize_encode(t, &e->s, p + pos, n - pos, a == 0 && pos == 0, &e->out);
	tbuf_free(&norm);
	return r;
}

int pfx_tokenize_spans(const struct pfx_tokenizer *t, const char *text, size_t len,
		       const struct pfx_text_span *plain, size_t nplain, unsigned flags,
		       int32_t **ids, size_t *n, struct pfx_error *err)
{
	*ids = NULL;
	*n = 0;
	if ((!text && len) || (!plain && nplain))
		return pfx_errorf(err, -EINVAL, "tokenize: no text, or no spans");
	size_t bad = utf8_invalid_at(text, len);
	if (bad < len)
		return pfx_errorf(err, -EILSEQ, "tokenize: invalid UTF-8 at byte offset %zu (0x%02x)", bad,
				  (unsigned char)text[bad]);
	for (size_t i = 0; i < nplain; i++)
		if (plain[i].start > len || plain[i].len > len - plain[i].start ||
		    (i && plain[i].start < plain[i - 1].start + plain[i - 1].len))
			return pfx_errorf(err, -EINVAL, "tokenize: span %zu [%zu, +%zu) is outside the text or out of order",
					  i, plain[i].start, plain[i].len);
	struct enc e = { .t = t, .plain = plain, .nplain = nplain,
			 .parse_special = flags & PFX_TEXT_PARSE_SPECIAL };
	int r = 0;
	bool add = flags & PFX_TEXT_ADD_SPECIAL;
	for (size_t i = 0; add && !r && i < t->post.npre; i++)
		r = tids_put(&e.out, t->post.pre[i]);
	size_t pos = 0;
	struct added_match m;
	while (!r && pos < len &&
	       added_next(t, &t->raw, text, len, pos, pos, plain, nplain, 0, e.parse_special, &m)) {
		if (m.start > pos)
			r = piece(&e, text, pos, m.start);
		if (!r)
			r = tids_put(&e.out, m.id);
		pos = m.end;
	}
	if (!r && pos < len)
		r = piece(&e, text, pos, len);
	for (size_t i = 0; add && !r && i < t->post.nsuf; i++)
		r = tids_put(&e.out, t->post.suf[i]);
	scratch_free(&e.s);
	if (r) {
		free(e.out.p);
		return pfx_errorf(err, r, "tokenize: %s", r == -ENOMEM ? "out of memory"
						  : r == -EOVERFLOW ? "a regex of the tokenizer hit a PCRE2 limit on this text"
								    : "failed");
	}
	if (!e.out.p && !(e.out.p = malloc(sizeof(int32_t)))) /* *ids is never NULL on success */
		return pfx_errorf(err, -ENOMEM, "tokenize: out of memory");
	*ids = e.out.p;
	*n = e.out.n;
	return 0;
}

int pfx_tokenize(const struct pfx_tokenizer *t, const char *text, size_t len, unsigned flags,
		 int32_t **ids, size_t *n, struct pfx_error *err)
{
	struct pfx_text_span all = { 0, len };
	return pfx_tokenize_spans(t, text, len, &all, 1, flags, ids, n, err);
}
