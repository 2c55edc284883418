/* SPDX-License-Identifier: MIT */
/*
 * The BPE model on one word: its characters (or ByteLevel bytes) become
 * symbols, then the lowest-ranked mergeable pair is merged until none is
 * left. Pairs wait in a binary heap keyed by (rank, position), as
 * tokenizers' Word::merge_all keeps them: each merge pushes at most two new
 * pairs and stale entries are dropped when popped, so a word of n symbols
 * costs O(n log n) however long it is (a piece with no pre-tokenizer can be
 * a paragraph).
 */
#include "tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the others for 256 + their rank among the others. */
int32_t bytelevel_char(unsigned char b)
{
	if (b <= ' ')
		return 256 + b; /* 0..32 are the first 33 others */
	if (b >= 0x7f && b <= 0xa0)
		return b + 162; /* 127..160: the next 34 */
	if (b == 0xad)
		return 323; /* the last */
	return b;
}

int bytelevel_byte(int32_t cp)
{
	if ((cp >= '!' && cp <= '~') || (cp >= 0xa1 && cp <= 0xac) || (cp >= 0xae && cp <= 0xff))
		return cp;
	int n = cp - 256;
	if (n < 0 || n > 67)
		return -1;
	return n <= 32 ? n : n <= 66 ? n + 94 : 0xad;
}

struct sym {
	int32_t id, prev, next;
	uint32_t len; /* 0: merged away */
};
struct hent {
	uint32_t rank, pos;
	int32_t id;
};

static bool before(struct hent a, struct hent b)
{
	return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(struct hent *h, size_t *n, struct hent e)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!before(e, h[p]))
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = e;
}

static struct hent heap_pop(struct hent *h, size_t *n)
{
	struct hent top = h[0], e = h[--*n];
	size_t i = 0, m = *n;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= m)
			break;
		if (c + 1 < m && before(h[c + 1], h[c]))
			c++;
		if (!before(h[c], e))
			break;
		h[i] = h[c];
		i = c;
	}
	if (m)
		h[i] = e;
	return top;
}

static bool merge_get(const struct merge_map *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id)
{
	if (!m->slot)
		return false;
	uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
	size_t h = (size_t)((k * 0x9e3779b97f4a7c15ull) >> 20) & m->mask;
	while (m->slot[h].key) {
		if (m->slot[h].key == k) {
			*rank = m->slot[h].rank;
			*id = m->slot[h].id;
			return true;
		}
		h = (h + 1) & m->mask;
	}
	return false;
}

/* Room for n symbols and 2n heap entries in the scratch. */
static int room(struct tok_scratch *s, size_t n, struct sym **sy, struct hent **h)
{
	size_t need = n * sizeof(struct sym) + 2 * n * sizeof(struct hent) + 16;
	if (need > s->bpecap) {
		size_t cap = s->bpecap ? s->bpecap : 4096;
		while (cap < need)
			cap *= 2;
		void *p = realloc(s->bpe, cap);
		if (!p)
			return -ENOMEM;
		s->bpe = p;
		s->bpecap = cap;
	}
	*sy = s->bpe;
	*h = (struct hent *)((char *)s->bpe + ((n * sizeof(struct sym) + 15) & ~(size_t)15));
	return 0;
}

static void add_sym(struct sym *sy, size_t *n, int32_t id, uint32_t len)
{
	sy[*n] = (struct sym){ id, (int32_t)*n - 1, (int32_t)*n + 1, len };
	(*n)++;
}

/* The symbols of a word that is not plain ByteLevel bytes: characters
 * (with the subword prefix and suffix), byte_fallback, unk. */
static int char_symbols(const struct pfx_tokenizer *t, struct tok_scratch *s, const char *w,
			size_t n, struct sym *sy, size_t *ns)
{
	struct tbuf *b = &s->c;
	int32_t unk = -1;
	uint32_t unk_len = 0;
	for (size_t i = 0, l; i < n; i += l) {
		l = utf8_len((unsigned char)w[i]);
		b->n = 0;
		if (i && t->prefix && tbuf_put(b, t->prefix, strlen(t->prefix)))
			return -ENOMEM;
		if (tbuf_put(b, w + i, l))
			return -ENOMEM;
		if (i + l == n && t->suffix && tbuf_put(b, t->suffix, strlen(t->suffix)))
			return -ENOMEM;
		int32_t id = strmap_get(&t->vocab, b->p, b->n);
		if (id >= 0) {
			if (unk >= 0)
				add_sym(sy, ns, unk, unk_len);
			unk = -1;
			add_sym(sy, ns, id, (uint32_t)l);
			continue;
		}
		if (t->byte_fallback) {
			bool all = true;
			for (size_t k = 0; k < b->n; k++)
				all &= t->byte_id[(unsigned char)b->p[k]] >= 0;
			if (all) {
				/* As tokenizers: a pending unk waits past these. */
				for (size_t k = 0; k < b->n; k++)
					add_sym(sy, ns, t->byte_id[(unsigned char)b->p[k]], 1);
				continue;
			}
		}
		if (t->unk_id >= 0) {
			if (unk >= 0 && t->fuse_unk) {
				unk_len += (uint32_t)l;
			} else {
				if (unk >= 0)
					add_sym(sy, ns, unk, unk_len);
				unk = t->unk_id;
				unk_len = (uint32_t)l;
			}
		}
	}
	if (unk >= 0)
		add_sym(sy, ns, unk, unk_len);
	return 0;
}

#define CACHE_SLOTS 8192 /* a power of two */
#define CACHE_MAX 4096	  /* entries, so slots stay half empty */
#define CACHE_KEY 48	  /* longer words are rare and not worth it */
#define CACHE_AFTER 32	  /* words before a call bothers with a cache */

static uint64_t word_hash(const char *w, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)w[i]) * 0x100000001b3ull;
	return h ^ (h >> 31);
}

/* The cached ids of w, or NULL; *slot is where it would go. */
static const struct cache_ent *cache_find(const struct tok_scratch *s, const char *w, size_t n,
					  uint64_t h, size_t *slot)
{
	size_t i = (size_t)h & (CACHE_SLOTS - 1);
	while (s->cslot[i]) {
		const struct cache_ent *e = &s->cent[s->cslot[i] - 1];
		if (e->hash == h && e->klen == n && !memcmp(s->ckeys.p + e->key, w, n))
			return e;
		i = (i + 1) & (CACHE_SLOTS - 1);
	}
	*slot = i;
	return NULL;
}

static int bpe_merge(const struct pfx_tokenizer *t, struct tok_scratch *s, const char *w, size_t n,
		     struct tids *out);

int bpe_word(const struct pfx_tokenizer *t, struct tok_scratch *s, const char *w, size_t n,
	     struct tids *out)
{
	if (!n)
		return 0;
	if (n > CACHE_KEY || ++s->words < CACHE_AFTER)
		return bpe_merge(t, s, w, n, out);
	if (!s->cslot) {
		s->cslot = calloc(CACHE_SLOTS, sizeof(*s->cslot));
		s->cent = malloc(CACHE_MAX * sizeof(*s->cent));
		if (!s->cslot || !s->cent)
			return -ENOMEM;
	}
	uint64_t h = word_hash(w, n);
	size_t slot;
	const struct cache_ent *e = cache_find(s, w, n, h, &slot);
	if (e) {
		for (uint32_t i = 0; i < e->nids; i++)
			if (tids_put(out, s->cids.p[e->ids + i]))
				return -ENOMEM;
		return 0;
	}
	size_t first = out->n;
	int r = bpe_merge(t, s, w, n, out);
	if (r || s->ncent == CACHE_MAX)
		return r;
	struct cache_ent ne = { h, (uint32_t)s->ckeys.n, (uint32_t)n, (uint32_t)s->cids.n,
				(uint32_t)(out->n - first) };
	if (tbuf_put(&s->ckeys, w, n))
		return -ENOMEM;
	for (size_t i = first; i < out->n; i++)
		if (tids_put(&s->cids, out->p[i]))
			return -ENOMEM;
	s->cent[s->ncent++] = ne;
	s->cslot[slot] = (uint32_t)s->ncent;
	return 0;
}

static int bpe_merge(const struct pfx_tokenizer *t, struct tok_scratch *s, const char *w, size_t n,
		     struct tids *out)
{
	bool plain_bytes = t->byte_level && !t->prefix && !t->suffix;
	if (t->byte_level && (t->ignore_merges || !plain_bytes)) {
		/* The word as the vocabulary spells it. */
		struct tbuf *b = &s->b;
		b->n = 0;
		for (size_t i = 0; i < n; i++) {
			char u[4];
			if (tbuf_put(b, u, utf8_put(u, bytelevel_char((unsigned char)w[i]))))
				return -ENOMEM;
		}
		if (t->ignore_merges) {
			int32_t id = strmap_get(&t->vocab, b->p, b->n);
			if (id >= 0)
				return tids_put(out, id);
		}
		if (!plain_bytes) {
			w = b->p;
			n = b->n;
		}
	} else if (t->ignore_merges) {
		int32_t id = strmap_get(&t->vocab, w, n);
		if (id >= 0)
			return tids_put(out, id);
	}
	struct sym *sy;
	struct hent *h;
	/* At most a symbol a byte, the subword prefix and suffix included. */
	size_t extra = (t->prefix ? strlen(t->prefix) * n : 0) + (t->suffix ? strlen(t->suffix) : 0);
	if (room(s, n + extra + 2, &sy, &h))
		return -ENOMEM;
	size_t ns = 0, nh = 0;
	if (plain_bytes) {
		for (size_t i = 0; i < n; i++) {
			int32_t id = t->byte_id[(unsigned char)w[i]];
			if (id >= 0)
				add_sym(sy, &ns, id, 1);
			else if (t->unk_id >= 0)
				add_sym(sy, &ns, t->unk_id, 1);
			/* else dropped, as tokenizers drops a byte its vocabulary lacks */
		}
	} else {
		int r = char_symbols(t, s, w, n, sy, &ns);
		if (r)
			return r;
	}
	if (!ns)
		return 0;
	sy[ns - 1].next = -1;
	for (size_t i = 0; i + 1 < ns; i++) {
		uint32_t rank;
		int32_t id;
		if (merge_get(&t->merges, sy[i].id, sy[i + 1].id, &rank, &id))
			heap_push(h, &nh, (struct hent){ rank, (uint32_t)i, id });
	}
	while (nh) {
		struct hent top = heap_pop(h, &nh);
		struct sym *cur = &sy[top.pos];
		if (!cur->len || cur->next < 0)
			continue;
		struct sym *right = &sy[cur->next];
		uint32_t rank;
		int32_t id;
		if (!merge_get(&t->merges, cur->id, right->id, &rank, &id) || id != top.id)
			continue; /* stale: one side merged since */
		cur->id = top.id;
		cur->len += right->len;
		right->len = 0;
		cur->next = right->next;
		if (cur->next >= 0)
			sy[cur->next].prev = (int32_t)top.pos;
		/* Each merge adds at most two entries: the heap stays within 2n. */
		if (cur->prev >= 0 && merge_get(&t->merges, sy[cur->prev].id, cur->id, &rank, &id))
			heap_push(h, &nh, (struct hent){ rank, (uint32_t)cur->prev, id });
		if (cur->next >= 0 && merge_get(&t->merges, cur->id, sy[cur->next].id, &rank, &id))
			heap_push(h, &nh, (struct hent){ rank, top.pos, id });
	}
	for (int32_t i = 0; i >= 0; i = sy[i].next)
		if (tids_put(out, sy[i].id))
			return -ENOMEM;
	return 0;
}
