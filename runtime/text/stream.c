/* SPDX-License-Identifier: MIT */
/*
 * Streaming decode. The ids since the last boundary (the window) are decoded
 * again at each push, and what cannot change any more is emitted: not a
 * trailing U+FFFD (an incomplete UTF-8 sequence may complete), not a
 * trailing run of <0xHH> byte tokens (ByteFallback judges a run whole), not
 * what a Strip decoder's stop would remove at the end. When
 * all of a non-empty window is final, a boundary is set: the next window
 * decodes as a continuation (no sequence-start Strip or Metaspace). So the
 * work per token is bounded by the window, and the text at the end is the
 * whole decode's. clean_up_tokenization_spaces, when the config asks for
 * it, runs on what is final as a chain of streaming replacements, one a
 * pattern in transformers' order, each holding back only a partial match.
 */
#include "tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct pfx_detok_stream {
	const struct pfx_tokenizer *t;
	bool skip, at_start, spent, fallback;
	struct tids win;
	size_t emitted; /* bytes of the window's text already given out */
	struct tbuf text, out, run;
	struct tbuf held[CLEANUP_N]; /* a partial match of each clean-up pattern */
	struct tbuf in[CLEANUP_N], next[CLEANUP_N]; /* each stage's scratch, kept */
};

int pfx_detok_stream_new(const struct pfx_tokenizer *t, unsigned flags,
			 struct pfx_detok_stream **out, struct pfx_error *err)
{
	struct pfx_detok_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return pfx_errorf(err, -ENOMEM, "detokenize stream: out of memory");
	s->t = t;
	s->skip = flags & PFX_TEXT_SKIP_SPECIAL;
	s->at_start = true;
	for (size_t i = 0; i < t->ndec; i++)
		s->fallback |= t->dec[i].kind == D_BYTEFALLBACK;
	*out = s;
	return 0;
}

static int window_text(struct pfx_detok_stream *s, bool at_end)
{
	s->text.n = 0;
	int r = decode_ids(s->t, s->win.p, s->win.n, s->skip, s->at_start, at_end, &s->text);
	if (!r && !s->text.p)
		r = tbuf_put(&s->text, "", 0);
	return r;
}

/* How much of the window's text is final. */
static size_t final_len(struct pfx_detok_stream *s)
{
	const char *w = s->text.p;
	size_t n = s->text.n;
	if (s->fallback) {
		/* The trailing run of byte tokens, whole: ByteFallback gives its
		 * bytes if they are valid UTF-8, else a U+FFFD each. */
		size_t k = s->win.n;
		while (k > 0 && is_byte_token(s->t, s->win.p[k - 1]))
			k--;
		s->run.n = 0;
		for (size_t i = k; i < s->win.n; i++) {
			char b = (char)strtol(s->t->piece[s->win.p[i]] + 3, NULL, 16);
			if (tbuf_putc(&s->run, b))
				return 0; /* out of memory: hold everything back */
		}
		size_t bytes = s->run.n;
		size_t out = bytes && utf8_invalid_at(s->run.p, bytes) == bytes ? bytes : 3 * bytes;
		n = n > out ? n - out : 0;
	}
	while (n >= 3 && !memcmp(w + n - 3, "\xef\xbf\xbd", 3))
		n -= 3;
	/* What a Strip's stop would take off at the sequence's end. */
	for (size_t k = 0; k < s->t->ndec; k++) {
		const struct decoder *d = &s->t->dec[k];
		size_t cl = d->kind == D_STRIP ? strlen(d->a) : 0;
		for (unsigned i = 0; cl && i < d->stop && n >= cl && !memcmp(w + n - cl, d->a, cl); i++)
			n -= cl;
	}
	while (n > 0 && n < s->text.n && ((unsigned char)w[n] & 0xc0) == 0x80)
		n--;
	return n;
}

/* Stage k of the clean-up on d[0, n) (final text), into s->out. */
static int clean(struct pfx_detok_stream *s, int k, const char *d, size_t n, bool flush)
{
	if (k == CLEANUP_N || !s->t->cleanup)
		return tbuf_put(&s->out, d, n);
	struct tbuf *h = &s->held[k];
	if (!h->n && !memchr(d, ' ', n)) /* every pattern starts with a space */
		return clean(s, k + 1, d, n, flush);
	struct tbuf buf = s->in[k], next = s->next[k];
	buf.n = next.n = 0;
	int r = tbuf_put(&buf, h->p, h->n) | tbuf_put(&buf, d, n);
	h->n = 0;
	const char *pat = cleanup_from[k], *rep = cleanup_to[k];
	size_t pl = strlen(pat), seg = 0, i = 0;
	while (!r && i < buf.n) {
		if (buf.n - i >= pl) {
			if (!memcmp(buf.p + i, pat, pl)) {
				r |= tbuf_put(&next, buf.p + seg, i - seg) | tbuf_put(&next, rep, strlen(rep));
				i += pl;
				seg = i;
				continue;
			}
		} else if (!flush && !memcmp(buf.p + i, pat, buf.n - i)) {
			break; /* may match when more text comes */
		}
		i++;
	}
	if (!r) {
		r |= tbuf_put(&next, buf.p + seg, i - seg);
		r |= tbuf_put(h, buf.p + i, buf.n - i);
	}
	s->in[k] = buf;
	s->next[k] = next;
	if (!r)
		r = clean(s, k + 1, next.p ? next.p : "", next.n, flush);
	return r ? -ENOMEM : 0;
}

int pfx_detok_stream_push(struct pfx_detok_stream *s, int32_t id, const char **piece, size_t *len,
			  struct pfx_error *err)
{
	*piece = "";
	*len = 0;
	if (s->spent)
		return pfx_errorf(err, -EINVAL, "detokenize stream: pushed after finish");
	if (id < 0 || (size_t)id >= s->t->nid || !s->t->piece[id])
		return pfx_errorf(err, -EINVAL, "detokenize stream: id %d is not a token (vocabulary of %zu)", id,
				  s->t->nid);
	if (tids_put(&s->win, id) || window_text(s, false))
		return pfx_errorf(err, -ENOMEM, "detokenize stream: out of memory");
	size_t n = final_len(s);
	s->out.n = 0;
	if (n > s->emitted) {
		if (clean(s, 0, s->text.p + s->emitted, n - s->emitted, false))
			return pfx_errorf(err, -ENOMEM, "detokenize stream: out of memory");
		s->emitted = n;
	}
	if (s->out.n) {
		*piece = s->out.p;
		*len = s->out.n;
	}
	if (n == s->text.n && n > 0) {
		/* All final: the next window continues from here. */
		s->win.n = 0;
		s->emitted = 0;
		s->at_start = false;
	}
	return 0;
}

int pfx_detok_stream_finish(struct pfx_detok_stream *s, const char **piece, size_t *len,
			    struct pfx_error *err)
{
	*piece = "";
	*len = 0;
	if (s->spent)
		return pfx_errorf(err, -EINVAL, "detokenize stream: finished twice");
	s->spent = true;
	if (window_text(s, true))
		return pfx_errorf(err, -ENOMEM, "detokenize stream: out of memory");
	s->out.n = 0;
	if (clean(s, 0, s->text.p + s->emitted, s->text.n - s->emitted, true))
		return pfx_errorf(err, -ENOMEM, "detokenize stream: out of memory");
	if (s->out.n) {
		*piece = s->out.p;
		*len = s->out.n;
	}
	return 0;
}

void pfx_detok_stream_free(struct pfx_detok_stream *s)
{
	if (!s)
		return;
	free(s->win.p);
	tbuf_free(&s->text);
	tbuf_free(&s->out);
	tbuf_free(&s->run);
	for (int k = 0; k < CLEANUP_N; k++) {
		tbuf_free(&s->held[k]);
		tbuf_free(&s->in[k]);
		tbuf_free(&s->next[k]);
	}
	free(s);
}
