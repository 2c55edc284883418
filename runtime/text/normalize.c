/* SPDX-License-Identifier: MIT */
/* Normalizers: Unicode forms through utf8proc, Prepend, Replace, Strip and
 * Lowercase, applied in order to each piece of text between added tokens. */
#include "tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static bool ascii(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] >= 0x80)
			return false;
	return true;
}

static bool is_ws(int32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
	       c == 0x205f || c == 0x3000;
}

/* Replaces all non-overlapping matches of nm's pattern in io by its content. */
static int replace(const struct norm *nm, struct tok_scratch *s, struct tbuf *io)
{
	struct tbuf out = { 0 };
	size_t pos = 0;
	int r = 0;
	if (!s->md && !(s->md = pcre2_match_data_create(4, NULL)))
		return -ENOMEM;
	while (pos <= io->n) {
		int rc = pcre2_match(nm->re, (PCRE2_SPTR)io->p, io->n, pos, PCRE2_NO_UTF_CHECK, s->md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0) {
			tbuf_free(&out);
			return -EOVERFLOW;
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
		if (ov[1] == ov[0]) { /* an empty match replaces nothing */
			if (ov[0] >= io->n)
				break;
			size_t l = utf8_len((unsigned char)io->p[ov[0]]);
			r |= tbuf_put(&out, io->p + pos, ov[0] + l - pos);
			pos = ov[0] + l;
			continue;
		}
		r |= tbuf_put(&out, io->p + pos, ov[0] - pos);
		r |= tbuf_put(&out, nm->b, strlen(nm->b));
		pos = ov[1];
	}
	if (pos < io->n)
		r |= tbuf_put(&out, io->p + pos, io->n - pos);
	if (r || !out.p) {
		tbuf_free(&out);
		if (r)
			return -ENOMEM;
		io->n = 0;
		return 0;
	}
	tbuf_free(io);
	*io = out;
	return 0;
}

static int normalize_one(const struct norm *nm, struct tok_scratch *s, struct tbuf *io)
{
	switch (nm->kind) {
	case N_NFC:
	case N_NFD:
	case N_NFKC:
	case N_NFKD: {
		if (ascii(io->p, io->n))
			return 0;
		int opt = UTF8PROC_STABLE | (nm->kind == N_NFC || nm->kind == N_NFKC ? UTF8PROC_COMPOSE
										  : UTF8PROC_DECOMPOSE) |
			  (nm->kind == N_NFKC || nm->kind == N_NFKD ? UTF8PROC_COMPAT : 0);
		utf8proc_uint8_t *dst;
		utf8proc_ssize_t l = utf8proc_map((const utf8proc_uint8_t *)io->p, (utf8proc_ssize_t)io->n,
						  &dst, (utf8proc_option_t)opt);
		if (l < 0)
			return l == UTF8PROC_ERROR_NOMEM ? -ENOMEM : -EILSEQ;
		io->n = 0;
		int r = tbuf_put(io, dst, (size_t)l);
		free(dst);
		return r;
	}
	case N_PREPEND: {
		if (!io->n)
			return 0;
		size_t l = strlen(nm->a);
		if (tbuf_put(io, nm->a, l)) /* room, then shift */
			return -ENOMEM;
		memmove(io->p + l, io->p, io->n - l);
		memcpy(io->p, nm->a, l);
		return 0;
	}
	case N_REPLACE:
		return replace(nm, s, io);
	case N_STRIP: {
		size_t a = 0, b = io->n, l;
		while (nm->left && a < b && is_ws(utf8_get(io->p + a, &l)))
			a += l;
		while (nm->right && b > a) {
			size_t q = b - 1;
			while (q > a && ((unsigned char)io->p[q] & 0xc0) == 0x80)
				q--;
			if (!is_ws(utf8_get(io->p + q, &l)))
				break;
			b = q;
		}
		memmove(io->p, io->p + a, b - a);
		io->n = b - a;
		io->p[io->n] = 0;
		return 0;
	}
	case N_LOWERCASE: {
		struct tbuf out = { 0 };
		int r = 0;
		for (size_t i = 0, l; i < io->n; i += l) {
			char u[4];
			int32_t c = utf8_get(io->p + i, &l);
			if (c == 0x130) /* İ: Rust's char::to_lowercase gives two characters */
				r |= tbuf_put(&out, "i\xcc\x87", 3);
			else
				r |= tbuf_put(&out, u, utf8_put(u, utf8proc_tolower(c)));
		}
		if (r) {
			tbuf_free(&out);
			return -ENOMEM;
		}
		if (out.p) {
			tbuf_free(io);
			*io = out;
		}
		return 0;
	}
	}
	return 0;
}

int normalize(const struct pfx_tokenizer *t, struct tok_scratch *s, const char *in, size_t n,
	      struct tbuf *out)
{
	out->n = 0;
	if (tbuf_put(out, in, n))
		return -ENOMEM;
	for (size_t i = 0; i < t->nnorm; i++) {
		int r = normalize_one(&t->norm[i], s, out);
		if (r)
			return r;
	}
	return 0;
}
