/* SPDX-License-Identifier: MIT */
/* Decoding: the ids' strings through the decoder chain, each decoder taking
 * the list of strings the previous one gave (tokenizers' decode_chain), then
 * transformers' clean_up_tokenization when the config asks for it. */
#include "tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct slist {
	struct tbuf text;
	size_t *off, *len;
	size_t n, cap;
};

static int sl_add(struct slist *l, const char *s, size_t n)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		size_t *o = realloc(l->off, cap * sizeof(*o));
		if (o)
			l->off = o;
		size_t *q = realloc(l->len, cap * sizeof(*q));
		if (q)
			l->len = q;
		if (!o || !q)
			return -ENOMEM;
		l->cap = cap;
	}
	l->off[l->n] = l->text.n;
	l->len[l->n++] = n;
	return tbuf_put(&l->text, s, n);
}

/* Appends to the last string of l. */
static int sl_cat(struct slist *l, const char *s, size_t n)
{
	l->len[l->n - 1] += n;
	return tbuf_put(&l->text, s, n);
}

static void sl_free(struct slist *l)
{
	tbuf_free(&l->text);
	free(l->off);
	free(l->len);
}

#define S(l, i) ((l)->text.p + (l)->off[i])

/* Rust's String::from_utf8_lossy: each maximal invalid prefix -> U+FFFD. */
static int lossy(struct tbuf *out, const char *s, size_t n)
{
	int r = 0;
	while (n) {
		size_t ok = utf8_invalid_at(s, n);
		r |= tbuf_put(out, s, ok);
		if (ok == n)
			break;
		s += ok, n -= ok;
		/* The longest prefix of a valid sequence counts as one error. */
		const unsigned char *u = (const unsigned char *)s;
		size_t bad = 1;
		size_t want = utf8_len(u[0]);
		if (u[0] >= 0xc2 && u[0] <= 0xf4) {
			for (size_t k = 1; k < want && k < n; k++) {
				unsigned char lo = 0x80, hi = 0xbf;
				if (k == 1) {
					if (u[0] == 0xe0)
						lo = 0xa0;
					else if (u[0] == 0xed)
						hi = 0x9f;
					else if (u[0] == 0xf0)
						lo = 0x90;
					else if (u[0] == 0xf4)
						hi = 0x8f;
				}
				if (u[k] < lo || u[k] > hi)
					break;
				bad = k + 1;
			}
		}
		r |= tbuf_put(out, "\xef\xbf\xbd", 3);
		s += bad, n -= bad;
	}
	return r ? -ENOMEM : 0;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int byte_token(const char *s, size_t n)
{
	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return -1;
	int h = hexval(s[3]), l = hexval(s[4]);
	return h < 0 || l < 0 ? -1 : h * 16 + l;
}

bool is_byte_token(const struct pfx_tokenizer *t, int32_t id)
{
	const char *p = pfx_tokenizer_piece(t, id);
	return p && byte_token(p, strlen(p)) >= 0;
}

static int replace_all(const struct decoder *d, pcre2_match_data *md, const char *s, size_t n,
		       struct tbuf *out)
{
	size_t pos = 0, cl = strlen(d->b);
	int r = 0;
	while (pos < n) {
		int rc = pcre2_match(d->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0)
			return -EOVERFLOW;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		if (ov[0] == ov[1]) {
			size_t l = utf8_len((unsigned char)s[ov[0]]);
			r |= tbuf_put(out, s + pos, ov[0] + l - pos);
			pos = ov[0] + l;
			continue;
		}
		r |= tbuf_put(out, s + pos, ov[0] - pos);
		r |= tbuf_put(out, d->b, cl);
		pos = ov[1];
	}
	if (pos < n)
		r |= tbuf_put(out, s + pos, n - pos);
	return r ? -ENOMEM : 0;
}

/* One decoder: in -> out. at_start / at_end: in begins / ends the sequence
 * (a streaming decode's windows may not); joined: in is one string, all the
 * text, so Strip's start and stop belong to the sequence's ends alone. */
static int apply(const struct decoder *d, pcre2_match_data *md, struct slist *in, struct slist *o,
		 bool at_start, bool at_end, bool joined)
{
	int r = 0;
	switch (d->kind) {
	case D_BYTELEVEL: {
		struct tbuf raw = { 0 };
		for (size_t i = 0; i < in->n && !r; i++) {
			const char *s = S(in, i);
			size_t n = in->len[i], mark = raw.n;
			bool all = true;
			for (size_t k = 0, l; k < n && all; k += l) {
				int b = bytelevel_byte(utf8_get(s + k, &l));
				if (b < 0)
					all = false;
				else
					r |= tbuf_putc(&raw, (char)b);
			}
			if (!all) { /* not ByteLevel's characters: the string as it is */
				raw.n = mark;
				r |= tbuf_put(&raw, s, n);
			}
		}
		struct tbuf txt = { 0 };
		if (!r)
			r = lossy(&txt, raw.p ? raw.p : "", raw.n);
		if (!r)
			r = sl_add(o, txt.p ? txt.p : "", txt.n);
		tbuf_free(&raw);
		tbuf_free(&txt);
		return r;
	}
	case D_BYTEFALLBACK: {
		struct tbuf bytes = { 0 };
		size_t nb = 0;
		for (size_t i = 0; i <= in->n && !r; i++) {
			int b = i < in->n ? byte_token(S(in, i), in->len[i]) : -1;
			if (b >= 0) {
				r |= tbuf_putc(&bytes, (char)b);
				nb++;
				continue;
			}
			if (nb) {
				if (utf8_invalid_at(bytes.p, bytes.n) == bytes.n) {
					r |= sl_add(o, bytes.p, bytes.n);
				} else {
					for (size_t k = 0; k < nb; k++)
						r |= sl_add(o, "\xef\xbf\xbd", 3);
				}
				bytes.n = 0;
				nb = 0;
			}
			if (i < in->n)
				r |= sl_add(o, S(in, i), in->len[i]);
		}
		tbuf_free(&bytes);
		return r ? -ENOMEM : 0;
	}
	case D_FUSE:
		r = sl_add(o, "", 0);
		for (size_t i = 0; i < in->n && !r; i++)
			r = sl_cat(o, S(in, i), in->len[i]);
		return r;
	case D_REPLACE:
		for (size_t i = 0; i < in->n && !r; i++) {
			struct tbuf t = { 0 };
			r = replace_all(d, md, S(in, i), in->len[i], &t);
			if (!r)
				r = sl_add(o, t.p ? t.p : "", t.n);
			tbuf_free(&t);
		}
		return r;
	case D_STRIP: {
		size_t cl = strlen(d->a);
		for (size_t i = 0; i < in->n && !r; i++) {
			const char *s = S(in, i);
			size_t a = 0, b = in->len[i];
			unsigned start = joined && !at_start ? 0 : d->start;
			unsigned stop = joined && !at_end ? 0 : d->stop;
			for (unsigned k = 0; k < start && b - a >= cl && !memcmp(s + a, d->a, cl); k++)
				a += cl;
			for (unsigned k = 0; k < stop && b - a >= cl && !memcmp(s + b - cl, d->a, cl); k++)
				b -= cl;
			r = sl_add(o, s + a, b - a);
		}
		return r;
	}
	case D_METASPACE: {
		size_t rl = strlen(d->repl);
		for (size_t i = 0; i < in->n && !r; i++) {
			const char *s = S(in, i);
			size_t n = in->len[i];
			r = sl_add(o, "", 0);
			for (size_t k = 0; k < n && !r;) {
				if (n - k >= rl && !memcmp(s + k, d->repl, rl)) {
					if (!(i == 0 && at_start && d->prepend))
						r = sl_cat(o, " ", 1);
					k += rl;
				} else {
					size_t l = utf8_len((unsigned char)s[k]);
					r = sl_cat(o, s + k, l);
					k += l;
				}
			}
		}
		return r;
	}
	}
	return 0;
}

int decode_ids(const struct pfx_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
	       bool at_start, bool at_end, struct tbuf *out)
{
	struct slist a = { 0 }, b = { 0 };
	int r = 0;
	for (size_t i = 0; i < n && !r; i++) {
		if (skip_special && t->special[ids[i]])
			continue;
		const char *p = t->piece[ids[i]];
		r = sl_add(&a, p, strlen(p));
	}
	if (!t->has_decoder) {
		for (size_t i = 0; i < a.n && !r; i++) {
			if ((i || !at_start) && tbuf_putc(out, ' '))
				r = -ENOMEM;
			else
				r = tbuf_put(out, S(&a, i), a.len[i]);
		}
		sl_free(&a);
		return r;
	}
	pcre2_match_data *md = NULL;
	bool joined = false;
	for (size_t k = 0; k < t->ndec && !r; k++) {
		if (t->dec[k].re && !md && !(md = pcre2_match_data_create(4, NULL))) {
			r = -ENOMEM;
			break;
		}
		b.n = 0;
		b.text.n = 0;
		r = apply(&t->dec[k], md, &a, &b, at_start, at_end, joined);
		joined |= t->dec[k].kind == D_FUSE || t->dec[k].kind == D_BYTELEVEL;
		struct slist x = a;
		a = b;
		b = x;
	}
	for (size_t i = 0; i < a.n && !r; i++)
		r = tbuf_put(out, S(&a, i), a.len[i]);
	if (md)
		pcre2_match_data_free(md);
	sl_free(&a);
	sl_free(&b);
	return r;
}

const char *const cleanup_from[CLEANUP_N] = { " .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're" };
const char *const cleanup_to[CLEANUP_N] = { ".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re" };

/* transformers' clean_up_tokenization: one str.replace after another. */
size_t cleanup_spaces(char *s, size_t n)
{
	const char *const *from = cleanup_from, *const *to = cleanup_to;
	for (size_t k = 0; k < CLEANUP_N; k++) {
		size_t fl = strlen(from[k]), tl = strlen(to[k]), w = 0;
		for (size_t i = 0; i < n;) {
			if (n - i >= fl && !memcmp(s + i, from[k], fl)) {
				memcpy(s + w, to[k], tl);
				w += tl;
				i += fl;
			} else {
				s[w++] = s[i++];
			}
		}
		n = w;
	}
	if (s)
		s[n] = 0;
	return n;
}

int pfx_detokenize(const struct pfx_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
		   char **text, size_t *len, struct pfx_error *err)
{
	*text = NULL;
	*len = 0;
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || (size_t)ids[i] >= t->nid || !t->piece[ids[i]])
			return pfx_errorf(err, -EINVAL, "detokenize: id %d (at %zu) is not a token (vocabulary of %zu)",
					  ids[i], i, t->nid);
	struct tbuf out = { 0 };
	int r = decode_ids(t, ids, n, flags & PFX_TEXT_SKIP_SPECIAL, true, true, &out);
	if (!r && !out.p)
		r = tbuf_put(&out, "", 0);
	if (r) {
		tbuf_free(&out);
		return pfx_errorf(err, r, "detokenize: %s", r == -ENOMEM ? "out of memory" : "a Replace regex failed to match (PCRE2 limit)");
	}
	if (t->cleanup)
		out.n = cleanup_spaces(out.p, out.n);
	*text = out.p;
	*len = out.n;
	return 0;
}
