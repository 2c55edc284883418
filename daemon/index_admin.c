/* SPDX-License-Identifier: MIT */
/*
 * The prefix index's admin work (index_impl.h): LIST, EVICT, PIN and
 * UNPIN, usage and stats, EXPORT, and the walk over the records that a
 * graceful restart keeps.
 *
 * LIST and EVICT take the lock for a bounded round (ROUND_ENTRIES
 * entries, ROUND_EVICT_* removals) and let it go between rounds, and
 * then step aside while requests wait for it (admin_yield), so that a
 * listing or an eviction of a full index never stalls a MATCH for long.
 * The rest is short, or (EXPORT's selection, idx_each_record) a walk that
 * a rare command or a stopping daemon may afford under one lock.
 */
#include "index_impl.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Entries one listing or eviction round looks at under the lock: a few
 * hundred microseconds at most (docs/perf/2026-11-23-admin-listing.md). */
#define ROUND_ENTRIES 4096

/* ==== Stepping aside ==== */

/* Between two admin rounds (lock not held): lets waiting requests have
 * the lock first, for at most ADMIN_YIELD_NS, so that a steady stream of
 * MATCHes cannot stop an eviction either. */
#define ADMIN_YIELD_NS 2000000
static void admin_yield(struct idx *x)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (atomic_load_explicit(&x->waiting, memory_order_relaxed)) {
		sched_yield();
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > ADMIN_YIELD_NS)
			break;
	}
}

/* ==== PIN, UNPIN, and the pins' TTLs ==== */

static struct entry *do_find_id(struct idx *x, const struct pd_id *id)
{
	uint8_t key[IDX_HASH_BYTES];
	make_key(x, id->key, key);
	return idx_do_find(x, id->uid, key);
}

static void pin_add(struct idx *x, struct entry *e)
{
	if (!e->pins++) {
		x->st.pinned_bytes += e->g->store.slot_bytes;
		e->g->pinned_bytes += e->g->store.slot_bytes;
	}
	idx_do_update(x, e);
}

static void pin_drop(struct idx *x, struct entry *e)
{
	if (!--e->pins) {
		x->st.pinned_bytes -= e->g->store.slot_bytes;
		e->g->pinned_bytes -= e->g->store.slot_bytes;
	}
	idx_do_update(x, e);
}

static void do_unpin(struct idx *x, struct pin **pp)
{
	struct pin *p = *pp;
	*pp = p->next;
	for (struct entry *e = p->e; e; e = e->parent)
		pin_drop(x, e);
	/* A chain pinned on disk whose restore failed: nothing holds it now. */
	if (hollow(p->e) && removable(p->e))
		idx_do_remove(x, p->e, true);
	x->st.pins--;
	free(p);
}

void idx_do_expire(struct idx *x)
{
	uint64_t now = now_ms();
	for (struct pin **pp = &x->pins; *pp;) {
		if ((*pp)->expires_ms && (*pp)->expires_ms <= now) {
			do_unpin(x, pp);
			x->st.pins_expired++;
		} else {
			pp = &(*pp)->next;
		}
	}
}

static const struct pin *do_pin_of(const struct idx *x, const struct entry *e)
{
	for (const struct pin *p = x->pins; p; p = p->next)
		if (p->e == e)
			return p;
	return NULL;
}

static uint64_t do_ns_pinned(const struct idx *x, uint32_t ns)
{
	uint64_t sum = 0;
	for (const struct idx_group *g = x->groups; g; g = g->next)
		if (g->ns == ns)
			sum += g->pinned_bytes;
	return sum;
}

int idx_pin(struct idx *x, const struct pd_id *id, uint32_t ttl_s, uint64_t *pinned_bytes)
{
	return idx_pin_ns(x, id, ttl_s, UINT64_MAX, pinned_bytes);
}

int idx_pin_ns(struct idx *x, const struct pd_id *id, uint32_t ttl_s, uint64_t ns_max,
	       uint64_t *pinned_bytes)
{
	int rc = 0;
	pthread_mutex_lock(&x->lock);
	idx_do_expire(x);
	struct entry *e = do_find_id(x, id);
	struct pin *p = NULL;
	uint64_t add = 0;
	if (!e) {
		rc = -ENOENT;
		goto out;
	}
	for (struct pin *q = x->pins; q && !p; q = q->next)
		if (q->e == e)
			p = q;
	if (!p) {
		for (const struct entry *a = e; a; a = a->parent)
			if (!a->pins)
				add += a->g->store.slot_bytes;
		if (x->st.pinned_bytes + add > x->lim.pin_max) {
			rc = -E2BIG;
			goto out;
		}
		if (ns_max != UINT64_MAX && do_ns_pinned(x, e->g->ns) + add > ns_max) {
			rc = -EDQUOT;
			goto out;
		}
		if (!(p = calloc(1, sizeof(*p)))) {
			rc = -ENOMEM;
			goto out;
		}
		p->e = e;
		p->next = x->pins;
		x->pins = p;
		x->st.pins++;
		for (struct entry *a = e; a; a = a->parent)
			pin_add(x, a);
	}
	p->expires_ms = ttl_s ? now_ms() + (uint64_t)ttl_s * 1000 : 0;
	add = 0;
out:
	/* A user is told of their namespace's pins only: the others' are
	 * not theirs to count. */
	*pinned_bytes = ns_max == UINT64_MAX ? x->st.pinned_bytes + add
			: e                  ? do_ns_pinned(x, e->g->ns) + add
					     : 0;
	pthread_mutex_unlock(&x->lock);
	return rc;
}

int idx_unpin(struct idx *x, const struct pd_id *id)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&x->lock);
	idx_do_expire(x);
	struct entry *e = do_find_id(x, id);
	for (struct pin **pp = &x->pins; e && *pp; pp = &(*pp)->next)
		if ((*pp)->e == e) {
			do_unpin(x, pp);
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&x->lock);
	return rc;
}

void idx_expire(struct idx *x)
{
	pthread_mutex_lock(&x->lock);
	idx_do_expire(x);
	pthread_mutex_unlock(&x->lock);
}

/* ==== Stats and usage ==== */

void idx_get_stats(struct idx *x, struct idx_stats *out)
{
	pthread_mutex_lock(&x->lock);
	idx_do_expire(x);
	*out = x->st;
	out->disk_pending = x->ndirty + x->nwriting;
	pthread_mutex_unlock(&x->lock);
}

static bool in_view(const struct idx_view *v, uint32_t ns)
{
	for (uint32_t i = 0; v && i < v->n; i++)
		if (v->ns[i] == ns)
			return true;
	return !v;
}

int idx_usage(struct idx *x, struct pd_usage **rows, uint32_t *n)
{
	return idx_usage_in(x, NULL, rows, n);
}

int idx_usage_in(struct idx *x, const struct idx_view *view, struct pd_usage **rows,
		 uint32_t *n)
{
	pthread_mutex_lock(&x->lock);
	size_t cap = 0;
	for (struct idx_group *g = x->groups; g; g = g->next)
		cap++;
	struct pd_usage *r = calloc(cap ? cap : 1, sizeof(*r));
	uint32_t k = 0;
	/* Groups of one (user, model) differ by salt or layout: one row. Past
	 * the rows a reply can carry, pairs not seen yet are left out. */
	for (struct idx_group *g = x->groups; r && g; g = g->next) {
		if (!in_view(view, g->ns))
			continue;
		uint32_t i = 0;
		while (i < k && (r[i].uid != g->ns || memcmp(r[i].fp, g->fp, PD_FP_SIZE)))
			i++;
		if (i == k) {
			if (k == PD_MAX_ROWS)
				continue;
			r[k].uid = g->ns;
			memcpy(r[k].fp, g->fp, PD_FP_SIZE);
			k++;
		}
		r[i].blocks += g->resident;
		r[i].bytes += g->resident * g->store.slot_bytes;
		r[i].pinned_bytes += g->pinned_bytes;
		r[i].hits += g->hits;
		r[i].hit_tokens += g->hit_blocks * x->block_tokens;
		r[i].query_tokens += g->query_blocks * x->block_tokens;
		r[i].evictions += g->evictions;
	}
	pthread_mutex_unlock(&x->lock);
	*rows = r;
	*n = k;
	return r ? 0 : -ENOMEM;
}

/* ==== LIST ==== */

static void do_row(const struct idx *x, const struct entry *e, uint64_t now,
		   struct pd_chain_row *r)
{
	const struct idx_group *g = e->g;
	memset(r, 0, sizeof(*r));
	memcpy(r->id.key, e->key, IDX_HASH_BYTES);
	r->id.uid = g->ns;
	memcpy(r->fp, g->fp, PD_FP_SIZE);
	r->blocks = e->depth;
	r->tokens = e->depth * x->block_tokens;
	r->leases = e->leases;
	r->bytes = (uint64_t)e->depth * g->store.slot_bytes;
	r->hits = e->hits;
	r->idle_s = now > e->used_s ? (uint32_t)(now - e->used_s) : 0;
	r->flags = (e->resident ? PD_CHAIN_MEMORY : 0) | (e->disk ? PD_CHAIN_DISK : 0) |
		   (e->pins ? PD_CHAIN_PINNED : 0) | (e->remote ? PD_CHAIN_REMOTE : 0);
	const struct pin *p = e->pins ? do_pin_of(x, e) : NULL;
	uint64_t ms = now_ms();
	if (p && p->expires_ms) /* whole seconds left, rounded up */
		r->pin_ttl_s = p->expires_ms > ms ? (uint32_t)((p->expires_ms - ms + 999) / 1000) : 0;
}

void idx_mark_remote(struct idx *x, uint32_t ns, const uint8_t *hash)
{
	struct pd_id id = { .uid = ns };
	memcpy(id.key, hash, IDX_HASH_BYTES);
	pthread_mutex_lock(&x->lock);
	struct entry *e = do_find_id(x, &id);
	if (e)
		e->remote = true;
	pthread_mutex_unlock(&x->lock);
}

void idx_list(struct idx *x, const struct pd_list *req, struct pd_chain_row *rows,
	      uint32_t *nrows, uint64_t *next)
{
	idx_list_in(x, req, NULL, rows, nrows, next);
}

void idx_list_in(struct idx *x, const struct pd_list *req, const struct idx_view *view,
		 struct pd_chain_row *rows, uint32_t *nrows, uint64_t *next)
{
	/* The cursor: bucket in the high half, position in its chain below. */
	uint64_t b = req->cursor >> 32, pos = req->cursor & 0xffffffffu;
	uint32_t n = 0, seen = 0;
	uint64_t i = 0;   /* where a page stops inside bucket b */
	uint64_t now = now_s();
	pthread_mutex_lock(&x->lock);
	idx_do_expire(x);
	for (; b < NBUCKETS; b++, pos = 0) {
		i = 0;
		for (const struct entry *e = x->buckets[b]; e; e = e->hnext, i++) {
			if (i < pos)
				continue;
			if (n == req->max_rows || seen == ROUND_ENTRIES)
				goto page;
			seen++;
			/* Chains end at leaves, and at pins: a pinned prefix
			 * that others continue stays visible, to unpin. */
			if (e->children && !(e->pins && do_pin_of(x, e)))
				continue;
			if ((req->flags & PD_LIST_USER) && e->g->ns != req->uid)
				continue;
			if (!in_view(view, e->g->ns))
				continue;
			if ((req->flags & PD_LIST_MODEL) && memcmp(e->g->fp, req->fp, PD_FP_SIZE))
				continue;
			do_row(x, e, now, &rows[n++]);
		}
	}
	pthread_mutex_unlock(&x->lock);
	*nrows = n;
	*next = 0;
	return;
page:
	pthread_mutex_unlock(&x->lock);
	*nrows = n;
	*next = b << 32 | i;
	/* (0, 0) is the start: a page never ends there, it always advances. */
	if (!*next)
		*next = 1;
}

/* ==== EVICT ==== */

static int selected(const struct entry *e, const struct pd_evict *sel, const uint32_t *ns,
		    uint64_t now)
{
	if (ns && e->g->ns != *ns)
		return 0;
	switch (sel->by) {
	case PD_EVICT_MODEL: return !memcmp(e->g->fp, sel->key, PD_FP_SIZE);
	case PD_EVICT_USER: return e->g->ns == sel->uid;
	case PD_EVICT_IDLE: return now >= e->used_s && now - e->used_s >= sel->idle_s;
	default: return 1;
	}
}

/* Returns idx_do_remove's: the nearest ancestor left. */
static struct entry *do_admin_remove(struct idx *x, struct entry *e,
				     struct pd_evict_reply *out)
{
	out->blocks++;
	out->bytes += e->g->store.slot_bytes;
	x->st.admin_evictions++;
	return idx_do_remove(x, e, true);
}

/* What one round of an admin eviction may remove before it lets MATCHes
 * have the lock: each removal punches pages out (3.5 us for 8 KiB to
 * ~450 us for a 2.9 MB block, docs/perf/2026-11-22-punch-holes.md), so a round stays near
 * half a millisecond. */
#define ROUND_EVICT_BLOCKS 64
#define ROUND_EVICT_BYTES (1u << 20)

struct evict_round {
	const struct pd_evict *sel;
	const uint32_t *ns;         /* only this namespace's blocks; NULL: any */
	uint64_t now;
	uint64_t blocks, bytes;     /* removed this round */
	int has_pending;            /* a chain to go on with next round */
	struct pd_id pending;
	int has_kept;               /* the first block a chain's walk kept */
	struct pd_id kept;
	struct pd_evict_reply *out;
};

static void set_id(struct pd_id *id, const struct entry *e)
{
	memcpy(id->key, e->key, IDX_HASH_BYTES);
	id->uid = e->g->ns;
}

static int round_full(const struct evict_round *r)
{
	return r->blocks >= ROUND_EVICT_BLOCKS || r->bytes >= ROUND_EVICT_BYTES;
}

/* Evicts e and then its selected ancestors as they become leaves; when the
 * round is full, the next one is left pending (by id: it may be gone when
 * the next round comes). */
static void do_evict_chain(struct idx *x, struct entry *e, struct evict_round *r)
{
	while (e && removable(e) && selected(e, r->sel, r->ns, r->now)) {
		if (round_full(r)) {
			set_id(&r->pending, e);
			r->has_pending = 1;
			return;
		}
		r->blocks++;
		r->bytes += e->g->store.slot_bytes;
		/* Not e->parent: a hollow parent goes with e. */
		e = do_admin_remove(x, e, r->out);
	}
	if (e) {
		set_id(&r->kept, e);
		r->has_kept = 1;
	}
}

/* One round over buckets [*b, ...): selected evictable leaves, with their
 * chains, until ROUND_ENTRIES were looked at or the round is full. */
static void do_evict_round(struct idx *x, uint64_t *b, struct evict_round *r)
{
	r->blocks = r->bytes = 0;
	if (r->has_pending) {
		r->has_pending = 0;
		do_evict_chain(x, do_find_id(x, &r->pending), r);
	}
	uint32_t seen = 0;
	while (*b < NBUCKETS && seen < ROUND_ENTRIES && !round_full(r)) {
		/* Leaves only, so that no chain's walk up frees one of them. */
		struct entry *found[64];
		uint32_t n = 0;
		int more = 0;
		for (struct entry *e = x->buckets[*b]; e; e = e->hnext, seen++) {
			if (!removable(e) || !selected(e, r->sel, r->ns, r->now))
				continue;
			if (n == 64) {
				more = 1; /* this bucket again: what is left of it */
				break;
			}
			found[n++] = e;
		}
		for (uint32_t i = 0; i < n && !r->has_pending; i++)
			do_evict_chain(x, found[i], r);
		if (r->has_pending)
			return; /* found[] past it are rescanned next round */
		if (!more)
			(*b)++;
	}
}

static void do_count_kept(const struct entry *e, struct pd_evict_reply *out)
{
	if (e->leases || e->imports) /* an import holds it like a lease */
		out->kept_leased++;
	else if (e->pins)
		out->kept_pinned++;
	else
		out->kept_parent++;
}

int idx_evict(struct idx *x, const struct pd_evict *sel, struct pd_evict_reply *out)
{
	return idx_evict_ns(x, sel, NULL, out);
}

int idx_evict_ns(struct idx *x, const struct pd_evict *sel, const uint32_t *ns,
		 struct pd_evict_reply *out)
{
	memset(out, 0, sizeof(*out));
	uint64_t now = now_s();
	struct evict_round r = { .sel = sel, .ns = ns, .now = now, .out = out };
	uint64_t b = 0;
	if (sel->by == PD_EVICT_ID) {
		/* The chain's own blocks, leaf up; a block another chain
		 * continues stays for it. */
		r.pending.uid = sel->uid;
		memcpy(r.pending.key, sel->key, IDX_HASH_BYTES);
		pthread_mutex_lock(&x->lock);
		r.has_pending = do_find_id(x, &r.pending) != NULL;
		pthread_mutex_unlock(&x->lock);
		if (!r.has_pending)
			return -ENOENT;
		b = NBUCKETS;
	}
	/* Rounds over the buckets, so that MATCHes get the lock in between. */
	while (b < NBUCKETS || r.has_pending) {
		pthread_mutex_lock(&x->lock);
		idx_do_expire(x);
		do_evict_round(x, &b, &r);
		pthread_mutex_unlock(&x->lock);
		admin_yield(x);
	}
	if (sel->by == PD_EVICT_ID) {
		pthread_mutex_lock(&x->lock);
		for (const struct entry *e = r.has_kept ? do_find_id(x, &r.kept) : NULL; e;
		     e = e->parent)
			do_count_kept(e, out);
		pthread_mutex_unlock(&x->lock);
		return 0;
	}
	/* What stays of the selection, and why. */
	for (b = 0; b < NBUCKETS;) {
		pthread_mutex_lock(&x->lock);
		for (uint32_t seen = 0; b < NBUCKETS && seen < ROUND_ENTRIES; b++)
			for (const struct entry *e = x->buckets[b]; e; e = e->hnext, seen++)
				if (selected(e, sel, ns, now))
					do_count_kept(e, out);
		pthread_mutex_unlock(&x->lock);
		admin_yield(x);
	}
	return 0;
}

/* ==== Whole-index walks: EXPORT, and the records a restart keeps ==== */

static bool export_selected(const struct entry *e, const struct pd_export *sel)
{
	if (!e->resident && !e->disk)
		return false; /* hollow, or on its way back from disk */
	if ((sel->flags & PD_EXPORT_USER) && e->g->ns != sel->uid)
		return false;
	return !(sel->flags & PD_EXPORT_MODEL) || !memcmp(e->g->fp, sel->fp, PD_FP_SIZE);
}

static int push_block(const struct idx *x, const struct entry *e, struct idx_block **v,
		      size_t *k, size_t *cap)
{
	if (*k == *cap) {
		struct idx_block *m = realloc(*v, 2 * *cap * sizeof(**v));
		if (!m)
			return -ENOMEM;
		*v = m;
		*cap *= 2;
	}
	idx_do_fill_block(x, e, &(*v)[(*k)++]);
	return 0;
}

static int by_depth(const void *a, const void *b)
{
	const struct idx_block *x = a, *y = b;
	return (x->depth > y->depth) - (x->depth < y->depth);
}

int idx_export_take(struct idx *x, const struct pd_export *sel, struct idx_block **out,
		    uint32_t *n)
{
	int rc = 0;
	size_t k = 0, cap = 64;
	struct idx_block *v = malloc(cap * sizeof(*v));
	*out = NULL;
	*n = 0;
	if (!v)
		return -ENOMEM;
	pthread_mutex_lock(&x->lock);
	if (sel->flags & PD_EXPORT_ID) {
		struct entry *last = do_find_id(x, &sel->id);
		if (!last) {
			rc = -ENOENT;
			goto out;
		}
		/* Its chain, leaf first (sorted below). */
		for (struct entry *e = last; e && !rc; e = e->parent)
			if (export_selected(e, sel))
				rc = push_block(x, e, &v, &k, &cap);
	} else {
		for (size_t b = 0; b < NBUCKETS && !rc; b++)
			for (struct entry *e = x->buckets[b]; e && !rc; e = e->hnext)
				if (export_selected(e, sel))
					rc = push_block(x, e, &v, &k, &cap);
	}
	if (rc)
		goto out;
	for (size_t i = 0; i < k; i++) {
		struct entry *e = (struct entry *)v[i].ref;
		e->exports++;
		idx_do_update(x, e);
	}
out:
	pthread_mutex_unlock(&x->lock);
	if (rc) {
		free(v);
		return rc;
	}
	qsort(v, k, sizeof(*v), by_depth);
	*out = v;
	*n = (uint32_t)k;
	return 0;
}

void idx_export_done(struct idx *x, struct idx_block *b, uint32_t n)
{
	pthread_mutex_lock(&x->lock);
	for (uint32_t i = 0; i < n; i++) {
		struct entry *e = (struct entry *)b[i].ref;
		e->exports--;
		idx_do_update(x, e);
	}
	/* One whose restore failed meanwhile goes now that nothing holds it;
	 * looked up again, deepest first, since a removal takes hollow
	 * parents with it. */
	for (uint32_t i = n; i-- > 0;) {
		uint8_t key[IDX_HASH_BYTES];
		make_key(x, b[i].hash, key);
		struct entry *e = idx_do_find(x, b[i].ns, key);
		if (e == b[i].ref && hollow(e) && removable(e))
			idx_do_remove(x, e, true);
	}
	pthread_mutex_unlock(&x->lock);
	free(b);
}

int idx_each_record(struct idx *x, int (*fn)(void *ctx, const struct idx_block *b),
		    void *ctx)
{
	int rc = 0;
	struct idx_block b;
	pthread_mutex_lock(&x->lock);
	idx_do_expire(x);
	uint64_t now = now_s(), ms = now_ms();
	for (size_t k = 0; k < NBUCKETS && !rc; k++)
		for (struct entry *e = x->buckets[k]; e && !rc; e = e->hnext)
			if (e->disk) {
				idx_do_fill_block(x, e, &b);
				b.hits = e->hits;
				b.use = e->use;
				b.idle_s = now > e->used_s ? now - e->used_s : 0;
				const struct pin *p = e->pins ? do_pin_of(x, e) : NULL;
				b.pin_end = p != NULL;
				if (p && p->expires_ms) /* whole seconds, rounded up, at least 1 */
					b.pin_ttl_s = p->expires_ms > ms
							      ? (uint32_t)((p->expires_ms - ms + 999) / 1000)
							      : 1;
				rc = fn(ctx, &b);
			}
	pthread_mutex_unlock(&x->lock);
	return rc;
}
