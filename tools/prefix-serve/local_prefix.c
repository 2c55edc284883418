/* SPDX-License-Identifier: MIT */
/* The process's own frozen prompts (local_prefix.h). A few entries at
 * most (the budget holds whole prompts), so lookups scan them. */
#include "local_prefix.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct entry {
	struct pfx_session *s;
	int32_t *tokens;          /* (len) */
	size_t len;
	uint64_t used;            /* the clock at the last find or put */
};

struct local_prefix {
	struct entry *e;
	size_t n, cap;
	size_t bytes, budget, B, per_token;
	uint64_t clock;
};

int local_prefix_new(size_t budget, size_t block_tokens, size_t bytes_per_token,
		     struct local_prefix **out)
{
	struct local_prefix *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->budget = budget;
	l->B = block_tokens;
	l->per_token = bytes_per_token;
	*out = l;
	return 0;
}

static void drop(struct local_prefix *l, size_t i)
{
	pfx_session_free(l->e[i].s);
	free(l->e[i].tokens);
	l->bytes -= l->e[i].len * l->per_token;
	l->e[i] = l->e[--l->n];
}

void local_prefix_free(struct local_prefix *l)
{
	if (!l)
		return;
	while (l->n)
		drop(l, l->n - 1);
	free(l->e);
	free(l);
}

static size_t common(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
	size_t n = na < nb ? na : nb, i = 0;
	while (i < n && a[i] == b[i])
		i++;
	return i;
}

struct pfx_session *local_prefix_find(struct local_prefix *l, const int32_t *p, size_t n,
				      size_t max, size_t *len)
{
	size_t best = 0, at = 0;
	for (size_t i = 0; i < l->n; i++) {
		size_t c = common(l->e[i].tokens, l->e[i].len, p, n < max ? n : max);
		c -= c % l->B;
		if (c > best) {
			best = c;
			at = i;
		}
	}
	*len = best;
	if (!best)
		return NULL;
	l->e[at].used = ++l->clock;
	return l->e[at].s;
}

int local_prefix_put(struct local_prefix *l, struct pfx_session *s, const int32_t *p, size_t len,
		     struct pfx_error *err)
{
	size_t bytes = len * l->per_token;
	if (!len || bytes > l->budget)
		return 0;
	/* An entry holding all of p's blocks already: keep it. Entries that
	 * are a part of p's are superseded. */
	for (size_t i = 0; i < l->n; i++) {
		size_t c = common(l->e[i].tokens, l->e[i].len, p, len);
		if (c == len) {
			l->e[i].used = ++l->clock;
			return 0;
		}
		if (c == l->e[i].len)
			drop(l, i--);
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		struct entry *e = realloc(l->e, cap * sizeof(*e));
		if (!e)
			return pfx_errorf(err, -ENOMEM, "out of memory");
		l->e = e;
		l->cap = cap;
	}
	struct entry e = { .len = len, .used = ++l->clock };
	e.tokens = malloc(len * sizeof(*e.tokens));
	if (!e.tokens)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	memcpy(e.tokens, p, len * sizeof(*p));
	int rc = pfx_session_fork_prefix(s, len, &e.s, err);
	if (rc) {
		free(e.tokens);
		return rc;
	}
	while (l->bytes + bytes > l->budget) {
		size_t lru = 0;
		for (size_t i = 1; i < l->n; i++)
			if (l->e[i].used < l->e[lru].used)
				lru = i;
		drop(l, lru);
	}
	l->e[l->n++] = e;
	l->bytes += bytes;
	return 0;
}

size_t local_prefix_bytes(const struct local_prefix *l) { return l->bytes; }
size_t local_prefix_count(const struct local_prefix *l) { return l->n; }
