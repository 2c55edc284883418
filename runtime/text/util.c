/* SPDX-License-Identifier: MIT */
/* The tokenizer's small tools: growable buffers, UTF-8, a string hash table,
 * the merge table and regex compilation. */
#include "tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int tbuf_put(struct tbuf *b, const void *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

int tbuf_putc(struct tbuf *b, char c)
{
	return tbuf_put(b, &c, 1);
}

void tbuf_free(struct tbuf *b)
{
	free(b->p);
	*b = (struct tbuf){ 0 };
}

int tids_put(struct tids *v, int32_t id)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 64;
		int32_t *p = realloc(v->p, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		v->p = p;
		v->cap = cap;
	}
	v->p[v->n++] = id;
	return 0;
}

size_t utf8_len(unsigned char c)
{
	return c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
}

int32_t utf8_get(const char *s, size_t *len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t l = utf8_len(u[0]);
	int32_t cp = l == 1 ? u[0] : l == 2 ? u[0] & 0x1f : l == 3 ? u[0] & 0x0f : u[0] & 0x07;
	for (size_t i = 1; i < l; i++)
		cp = (cp << 6) | (u[i] & 0x3f);
	*len = l;
	return cp;
}

size_t utf8_put(char *o, int32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

size_t utf8_invalid_at(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;
	while (i < n) {
		unsigned char c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t l;
		uint32_t min, cp;
		if (c >= 0xc2 && c <= 0xdf) {
			l = 2, min = 0x80, cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			l = 3, min = 0x800, cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			l = 4, min = 0x10000, cp = c & 0x07;
		} else {
			return i;
		}
		if (i + l > n)
			return i;
		for (size_t k = 1; k < l; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return i;
		i += l;
	}
	return n;
}

static uint64_t hash_bytes(const char *k, size_t n)
{
	return XXH3_64bits(k, n);
}

/* A slot holds the hash's high half as a tag, so a probe past other keys
 * rarely has to look at their entries. */
static int strmap_resize(struct strmap *m, size_t nslots)
{
	uint64_t *slot = calloc(nslots, sizeof(*slot));
	if (!slot)
		return -ENOMEM;
	for (size_t i = 0; i < m->n; i++) {
		uint64_t h = hash_bytes(m->ent[i].key, m->ent[i].klen);
		size_t j = h & (nslots - 1);
		while (slot[j])
			j = (j + 1) & (nslots - 1);
		slot[j] = (h & 0xffffffff00000000ull) | (i + 1);
	}
	free(m->slot);
	m->slot = slot;
	m->mask = nslots - 1;
	return 0;
}

int strmap_reserve(struct strmap *m, size_t n)
{
	size_t nslots = 1024;
	while (nslots < 2 * (n + 1))
		nslots *= 2;
	if (m->slot && nslots <= m->mask + 1)
		return 0;
	struct strmap_ent *e = realloc(m->ent, (n > m->cap ? n : m->cap) * sizeof(*e) + sizeof(*e));
	if (!e)
		return -ENOMEM;
	m->ent = e;
	if (n > m->cap)
		m->cap = n;
	return strmap_resize(m, nslots);
}

int strmap_put(struct strmap *m, const char *k, size_t klen, int32_t v)
{
	if (!m->slot || (m->n + 1) * 2 > m->mask + 1) {
		int r = strmap_resize(m, m->slot ? (m->mask + 1) * 2 : 1024);
		if (r)
			return r;
	}
	uint64_t h = hash_bytes(k, klen), tag = h & 0xffffffff00000000ull;
	size_t j = h & m->mask;
	while (m->slot[j]) {
		if ((m->slot[j] & 0xffffffff00000000ull) == tag) {
			struct strmap_ent *e = &m->ent[(m->slot[j] & 0xffffffff) - 1];
			if (e->klen == klen && !memcmp(e->key, k, klen)) {
				e->val = v; /* a later entry wins, as a Rust HashMap's collect */
				return 0;
			}
		}
		j = (j + 1) & m->mask;
	}
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 1024;
		struct strmap_ent *e = realloc(m->ent, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		m->ent = e;
		m->cap = cap;
	}
	m->ent[m->n] = (struct strmap_ent){ k, (uint32_t)klen, v };
	m->slot[j] = tag | ++m->n;
	return 0;
}

int32_t strmap_get(const struct strmap *m, const char *k, size_t klen)
{
	if (!m->slot)
		return -1;
	uint64_t h = hash_bytes(k, klen), tag = h & 0xffffffff00000000ull;
	size_t j = h & m->mask;
	while (m->slot[j]) {
		if ((m->slot[j] & 0xffffffff00000000ull) == tag) {
			const struct strmap_ent *e = &m->ent[(m->slot[j] & 0xffffffff) - 1];
			if (e->klen == klen && !memcmp(e->key, k, klen))
				return e->val;
		}
		j = (j + 1) & m->mask;
	}
	return -1;
}

void strmap_free(struct strmap *m)
{
	free(m->slot);
	free(m->ent);
	*m = (struct strmap){ 0 };
}

static size_t merge_slot(uint64_t key, size_t mask)
{
	key *= 0x9e3779b97f4a7c15ull;
	return (size_t)(key >> 20) & mask;
}

static int merges_resize(struct merge_map *m, size_t ns)
{
	struct merge_slot *slot = calloc(ns, sizeof(*slot));
	if (!slot)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; m->slot && i <= m->mask; i++) {
		if (!m->slot[i].key)
			continue;
		size_t h = merge_slot(m->slot[i].key, ns - 1);
		while (slot[h].key)
			h = (h + 1) & (ns - 1);
		slot[h] = m->slot[i];
		n++;
	}
	merges_free(m);
	m->slot = slot, m->mask = ns - 1, m->n = n;
	return 0;
}

int merges_reserve(struct merge_map *m, size_t n)
{
	size_t ns = 4096;
	while ((n + 1) * 4 > ns * 3)
		ns *= 2;
	return m->slot && ns <= m->mask + 1 ? 0 : merges_resize(m, ns);
}

int merges_put(struct merge_map *m, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
	if (!m->slot || (m->n + 1) * 4 > (m->mask + 1) * 3) {
		int r = merges_resize(m, m->slot ? (m->mask + 1) * 2 : 4096);
		if (r)
			return r;
	}
	uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
	size_t h = merge_slot(k, m->mask);
	while (m->slot[h].key && m->slot[h].key != k)
		h = (h + 1) & m->mask;
	if (!m->slot[h].key)
		m->n++;
	m->slot[h] = (struct merge_slot){ k, rank, id };
	return 0;
}

void merges_free(struct merge_map *m)
{
	free(m->slot);
	*m = (struct merge_map){ 0 };
}

pcre2_code *regex_compile(const char *pat, size_t len, bool literal, struct pfx_error *err)
{
	int ecode;
	PCRE2_SIZE eoff;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len,
				       literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP,
				       &ecode, &eoff, NULL);
	if (!re) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(ecode, msg, sizeof(msg));
		pfx_errorf(err, -EINVAL, "regex \"%.*s\": %s at offset %zu", (int)(len > 200 ? 200 : len),
			   pat, (const char *)msg, (size_t)eoff);
		return NULL;
	}
	/* JIT is an optimisation: where it is not available, matching still works. */
	(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	return re;
}

void scratch_free(struct tok_scratch *s)
{
	if (s->md)
		pcre2_match_data_free(s->md);
	tbuf_free(&s->b);
	tbuf_free(&s->c);
	free(s->bpe);
	free(s->cslot);
	free(s->cent);
	tbuf_free(&s->ckeys);
	free(s->cids.p);
}

char *arena_room(struct arena_block **a, size_t n)
{
	struct arena_block *b = *a;
	if (!b || b->cap - b->used < n + 1) {
		size_t cap = n + 1 > (1u << 20) ? n + 1 : (1u << 20);
		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->next = *a;
		b->used = 0;
		b->cap = cap;
		*a = b;
	}
	return b->data + b->used;
}

void arena_commit(struct arena_block *a, size_t n)
{
	a->data[a->used + n] = 0;
	a->used += n + 1;
}

char *arena_dup(struct arena_block **a, const char *s, size_t n)
{
	char *p = arena_room(a, n);
	if (!p)
		return NULL;
	memcpy(p, s, n);
	arena_commit(*a, n);
	return p;
}

void arena_free(struct arena_block *a)
{
	while (a) {
		struct arena_block *next = a->next;
		free(a);
		a = next;
	}
}
