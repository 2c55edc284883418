/* SPDX-License-Identifier: MIT */
/*
 * Streaming decode. The ids since the last boundary (the window) are decoded
 * again at each push, and what cannot change any more is emitted: not a
 * trailing U+FFFD (an incomplete UTF-8 sequence may complete), not a
 * trailing run of <0xHH> byte tokens (ByteFallback judges a run whole), not
 * a space near the end when clean_up_tokenization_spaces may eat it. When
 * all of a non-empty window is final, a boundary is set: the next window
 * decodes as a continuation (no sequence-start Strip or Metaspace). So the
 * work per token is bounded by the window, and the text at the end is the
 * whole decode's.
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
	struct tbuf text;
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

static int window_text(struct pfx_detok_stream *s)
{
	s->text.n = 0;
	int r = decode_ids(s->t, s->win.p, s->win.n, s->skip, s->at_start, &s->text);
	if (!r && !s->text.p)
		r = tbuf_put(&s->text, "", 0);
	if (!r && s->t->cleanup)
		s->text.n = cleanup_spaces(s->text.p, s->text.n);
	return r;
}

/* How much of the window's text is final. */
static size_t final_len(struct pfx_detok_stream *s)
{
	const char *w = s->text.p;
	size_t n = s->text.n;
	if (s->fallback) {
		size_t k = s->win.n, bytes = 0;
		char run[64];
		while (k > 0 && is_byte_token(s->t, s->win.p[k - 1]) && bytes < sizeof(run))
			k--, bytes++;
		for (size_t i = 0; i < bytes; i++) {
			const char *p = s->t->piece[s->win.p[k + i]];
			run[i] = (char)strtol(p + 3, NULL, 16);
		}
		size_t out = utf8_invalid_at(run, bytes) == bytes ? bytes : 3 * bytes;
		n = n > out ? n - out : 0;
	}
	while (n >= 3 && !memcmp(w + n - 3, "\xef\xbf\xbd", 3))
		n -= 3;
	if (s->t->cleanup)
		for (size_t i = n > 5 ? n - 5 : 0; i < n; i++)
			if (w[i] == ' ') {
				n = i;
				break;
			}
	while (n > 0 && n < s->text.n && ((unsigned char)w[n] & 0xc0) == 0x80)
		n--;
	return n;
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
	if (tids_put(&s->win, id) || window_text(s))
		return pfx_errorf(err, -ENOMEM, "detokenize stream: out of memory");
	size_t n = final_len(s);
	if (n > s->emitted) {
		*piece = s->text.p + s->emitted;
		*len = n - s->emitted;
		s->emitted = n;
	}
	if (n == s->text.n && n > 0) {
		/* All final: the next window continues from here. The text
		 * stays valid until the next call, which overwrites it. */
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
	if (window_text(s))
		return pfx_errorf(err, -ENOMEM, "detokenize stream: out of memory");
	if (s->text.n > s->emitted) {
		*piece = s->text.p + s->emitted;
		*len = s->text.n - s->emitted;
	}
	return 0;
}

void pfx_detok_stream_free(struct pfx_detok_stream *s)
{
	if (!s)
		return;
	free(s->win.p);
	tbuf_free(&s->text);
	free(s);
}
