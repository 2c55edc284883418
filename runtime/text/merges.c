/* SPDX-License-Identifier: MIT */
/* tokenizer.json's BPE merges into the merge table. Each merge is three
 * vocabulary look-ups (its halves and their concatenation), random reads
 * of a table of 10^5 entries, and a large file has 3 * 10^5 of them: the
 * look-ups run on two threads, each over half the list (the vocabulary is
 * read-only by then), then the table is filled in rank order. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "load_json.h"

/* One merge: [a, b] or "a b", where a legacy string's halves may hold
 * spaces themselves: the split is the space where a, b and a+b are all in
 * the vocabulary (the repair ../shared/tokenizers/README.md describes). */
static int string_halves(const struct pfx_tokenizer *t, const char *s, size_t n, const char **a,
			 size_t *an, const char **b, size_t *bn)
{
	const char *first = memchr(s, ' ', n), *sp = NULL;
	if (!first)
		return -EINVAL;
	if (!memchr(first + 1, ' ', n - (size_t)(first + 1 - s))) {
		sp = first;
	} else {
		char tmp[1024];
		if (n >= sizeof(tmp))
			return -EINVAL;
		for (const char *c = first; c; c = memchr(c + 1, ' ', n - (size_t)(c + 1 - s))) {
			size_t l = (size_t)(c - s), r = n - l - 1;
			memcpy(tmp, s, l);
			memcpy(tmp + l, c + 1, r);
			if (strmap_get(&t->vocab, s, l) >= 0 && strmap_get(&t->vocab, c + 1, r) >= 0 &&
			    strmap_get(&t->vocab, tmp, l + r) >= 0) {
				if (sp)
					return -EINVAL; /* ambiguous */
				sp = c;
			}
		}
		if (!sp)
			return -EINVAL;
	}
	*a = s, *an = (size_t)(sp - s);
	*b = sp + 1, *bn = n - *an - 1;
	return 0;
}

static int merge_halves(const struct pfx_tokenizer *t, json_object *m, const char **a, size_t *an,
			const char **b, size_t *bn)
{
	if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2) {
		json_object *x = json_object_array_get_idx(m, 0), *y = json_object_array_get_idx(m, 1);
		if (!json_object_is_type(x, json_type_string) || !json_object_is_type(y, json_type_string))
			return -EINVAL;
		*a = json_object_get_string(x), *an = (size_t)json_object_get_string_len(x);
		*b = json_object_get_string(y), *bn = (size_t)json_object_get_string_len(y);
		return 0;
	}
	if (!json_object_is_type(m, json_type_string))
		return -EINVAL;
	return string_halves(t, json_object_get_string(m), (size_t)json_object_get_string_len(m), a, an, b, bn);
}

/* model_scan's merge i. */
static int scanned_halves(const struct pfx_tokenizer *t, const struct model_scan *s, size_t i,
			  const char **a, size_t *an, const char **b, size_t *bn)
{
	const struct scan_merge *m = &s->merges[i];
	const char *x = s->text.p + m->off;
	if (m->alen < 0)
		return string_halves(t, x, m->len, a, an, b, bn);
	*a = x, *an = (size_t)m->alen;
	*b = x + m->alen, *bn = m->len - (size_t)m->alen;
	return 0;
}

enum merge_fault { MF_NONE, MF_NOT_PAIR, MF_HALVES, MF_NOT_IN_VOCAB, MF_NOMEM };

/* The ids of merges [from, to): out[i] = {a, b, a+b}; at the first bad
 * one, its index and what is wrong. */
struct lookups {
	const struct pfx_tokenizer *t;
	json_object *merges; /* or */
	const struct model_scan *scanned;
	size_t from, to;
	int32_t (*out)[3];
	size_t bad;
	enum merge_fault fault;
};

static void *look_up(void *arg)
{
	struct lookups *l = arg;
	const struct pfx_tokenizer *t = l->t;
	size_t plen = t->prefix ? strlen(t->prefix) : 0;
	struct tbuf nb = { 0 };
	for (size_t i = l->from; i < l->to; i++) {
		const char *a, *b;
		size_t an, bn;
		l->bad = i;
		if (l->scanned ? scanned_halves(t, l->scanned, i, &a, &an, &b, &bn)
			       : merge_halves(t, json_object_array_get_idx(l->merges, i), &a, &an, &b, &bn)) {
			l->fault = MF_NOT_PAIR;
			break;
		}
		nb.n = 0;
		if (bn < plen) {
			l->fault = MF_HALVES;
			break;
		}
		/* The scan leaves the halves side by side: then a+b is there. */
		const char *ab = a;
		if (b != a + an || plen) {
			if (tbuf_put(&nb, a, an) || tbuf_put(&nb, b + plen, bn - plen)) {
				l->fault = MF_NOMEM;
				break;
			}
			ab = nb.p;
		}
		int32_t *o = l->out[i];
		o[0] = strmap_get(&t->vocab, a, an);
		o[1] = strmap_get(&t->vocab, b, bn);
		o[2] = strmap_get(&t->vocab, ab, an + bn - plen);
		if (o[0] < 0 || o[1] < 0 || o[2] < 0) {
			l->fault = MF_NOT_IN_VOCAB;
			break;
		}
	}
	tbuf_free(&nb);
	return NULL;
}

/* Below this many merges a second thread costs more than it saves. */
#define MERGES_PER_THREAD 8192

static int look_up_all(struct pfx_tokenizer *t, json_object *merges, const struct model_scan *scanned,
		       size_t n, struct pfx_error *err)
{
	int32_t(*ids)[3] = malloc((n ? n : 1) * sizeof(*ids));
	if (!ids || merges_reserve(&t->merges, n)) {
		free(ids);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	struct lookups part[2] = {
		{ t, merges, scanned, 0, n / 2, ids, 0, MF_NONE },
		{ t, merges, scanned, n / 2, n, ids, 0, MF_NONE },
	};
	pthread_t th;
	bool two = n >= 2 * MERGES_PER_THREAD && !pthread_create(&th, NULL, look_up, &part[1]);
	if (!two)
		part[0].to = n;
	look_up(&part[0]);
	if (two)
		pthread_join(th, NULL);
	/* The first bad merge in the list, whichever thread met it. */
	struct lookups *bad = part[0].fault ? &part[0] : two && part[1].fault ? &part[1] : NULL;
	if (bad) {
		size_t i = bad->bad;
		free(ids);
		switch (bad->fault) {
		case MF_NOT_PAIR:
			return pfx_errorf(err, -EINVAL, "tokenizer.json: merge %zu is not a pair of vocabulary tokens", i);
		case MF_HALVES:
			return pfx_errorf(err, -EINVAL, "tokenizer.json: merge %zu: bad halves", i);
		case MF_NOT_IN_VOCAB:
			return pfx_errorf(err, -EINVAL, "tokenizer.json: merge %zu names a token not in the vocabulary", i);
		default:
			return pfx_errorf(err, -ENOMEM, "out of memory");
		}
	}
	for (size_t i = 0; i < n; i++)
		if (merges_put(&t->merges, ids[i][0], ids[i][1], (uint32_t)i, ids[i][2])) {
			free(ids);
			return pfx_errorf(err, -ENOMEM, "out of memory");
		}
	free(ids);
	return 0;
}

int load_merges(struct pfx_tokenizer *t, json_object *merges, struct pfx_error *err)
{
	return look_up_all(t, merges, NULL, json_object_array_length(merges), err);
}

int load_scanned_merges(struct pfx_tokenizer *t, const struct model_scan *s, struct pfx_error *err)
{
	return look_up_all(t, NULL, s, s->nmerges, err);
}
