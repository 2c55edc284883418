/* SPDX-License-Identifier: MIT */
/*
 * The prefix index.
 *
 * DESIGN. Entries live in a chained hash table keyed by (namespace, key),
 * where key is the client's chain hash (truncated in test builds), and
 * hashed under a secret of the index (bucket_of). Every
 * entry points to its parent entry and counts its children, so the set of
 * entries is a forest of prefix trees, one root per group (namespace, h0).
 * A MATCH walks the client's chain and accepts entry i only if its tokens
 * equal the client's and its parent is entry i - 1: hash keys find
 * candidates, never decide.
 *
 * Eviction keeps the forest intact by taking only leaves (no children)
 * that no lease or pin holds. Those, and only those, are on two LRU lists
 * ordered by last use (a logical clock): the daemon's and their user's. A
 * victim is then the head of a list, found in O(1) whatever the number of
 * parents, leased or pinned blocks. An entry that becomes evictable (its
 * last lease ended) is inserted by its last use; a parent whose last child
 * goes takes that child's place (a parent was used no later than its
 * child), so a chain goes leaf first, then its parent, as one unit of age.
 *
 * With a disk tier, an entry is resident (its bytes in a slot), on disk (a
 * record), both, or on its way (writing: held in memory for the tier;
 * restoring: a slot being filled from disk). New blocks queue on the dirty
 * list, oldest first, for the tier to write (write-behind: eviction from
 * memory then costs no I/O, and a kill -9 loses only what was not written
 * yet). Memory eviction then takes resident leaves of the resident forest
 * (no resident children), written ones first (they only leave memory);
 * one without a record would leave the index, lost, so a publish waits for
 * the writer instead (do_alloc), and only a writer that cannot write lets
 * one go (counted). Blocks held only on disk are on another LRU list, the
 * disk budget's, leaves only. An entry neither resident nor on
 * disk (its restore failed) is hollow: MATCH stops there, PUBLISH fills it
 * again, and it goes with its last child.
 *
 * Locking: `lock` guards everything here, stores included (their
 * callbacks run under it). Functions named do_* and idx_do_* expect it
 * held. This file is the request path, which takes the lock once per
 * call (index_impl.h); the admin work, which runs in rounds and steps
 * aside, is in index_admin.c.
 */
#include "index_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

/* How long a publish that needs memory held only by unwritten blocks
 * waits for the writer to finish one more of them, before it takes the
 * writer for stuck and drops one unwritten (counted). A batch of records
 * takes milliseconds; a stop of seconds is a broken disk. */
#define TIER_WAIT_MS 5000

/* ==== The lock ==== */

/* The lock for requests of the hot path (MATCH, RELEASE, PUBLISH). A
 * mutex is not fair: an admin command that unlocks between its rounds
 * takes it again before a woken MATCH runs (measured: a MATCH stalled for
 * a whole 750 ms eviction). Admin rounds therefore step aside while
 * requests wait (admin_yield). */
static void hot_lock(struct idx *x)
{
	/* Uncontended, nobody waits: no shared counter to touch. */
	if (!pthread_mutex_trylock(&x->lock))
		return;
	atomic_fetch_add_explicit(&x->waiting, 1, memory_order_relaxed);
	pthread_mutex_lock(&x->lock);
	atomic_fetch_sub_explicit(&x->waiting, 1, memory_order_relaxed);
}

/* ==== The index ==== */

void idx_set_tier(struct idx *x, const struct idx_tier *tier)
{
	x->tier = *tier;
}

int idx_new(uint32_t block_tokens, int key_bytes, const struct idx_limits *lim,
	    struct idx **out)
{
	if (!block_tokens || key_bytes < 1 || key_bytes > IDX_HASH_BYTES)
		return -EINVAL;
	if (sodium_init() < 0)
		return -EIO;
	struct idx *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	randombytes_buf(x->bucket_key, sizeof(x->bucket_key));
	pthread_mutex_init(&x->lock, NULL);
	pthread_cond_init(&x->spilled, NULL);
	pthread_cond_init(&x->filled, NULL);
	atomic_init(&x->waiting, 0);
	x->block_tokens = block_tokens;
	x->key_bytes = key_bytes;
	x->lim = *lim;
	x->next_lease = 1;
	*out = x;
	return 0;
}

void idx_free(struct idx *x)
{
	if (!x)
		return;
	for (int b = 0; b < LEASE_BUCKETS; b++)
		while (x->leases[b]) {
			struct lease *l = x->leases[b];
			x->leases[b] = l->next;
			free(l);
		}
	while (x->pins) {
		struct pin *p = x->pins;
		x->pins = p->next;
		free(p);
	}
	/* Slots go back unpunched: their arenas go with the daemon, all their
	 * pages at once, where a punch a slot took 0.3-1.8 ms of a stop
	 * (perf trace of bench/disk: 9677 of them in its daemons' stops). */
	for (size_t b = 0; b < NBUCKETS; b++)
		while (x->buckets[b]) {
			struct entry *e = x->buckets[b];
			x->buckets[b] = e->hnext;
			if (e->resident || e->restoring)
				e->g->store.free(e->g->store.ctx, e->loc, false);
			free(e);
		}
	while (x->groups) {
		struct idx_group *g = x->groups;
		x->groups = g->next;
		free(g);
	}
	while (x->users) {
		struct user *u = x->users;
		x->users = u->next;
		free(u);
	}
	pthread_cond_destroy(&x->spilled);
	pthread_cond_destroy(&x->filled);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

/* ==== LRU lists and the dirty queue (lock held) ==== */

static struct list *list_of(struct idx *x, const struct entry *e, int w)
{
	switch (w) {
	case LRU_ALL: return &x->lru;
	case LRU_USER: return &e->g->user->lru;
	case LRU_UALL: return &x->ulru;
	case LRU_UUSER: return &e->g->user->ulru;
	case LRU_DISK: return &x->disk_lru;
	default: return &x->dirty;
	}
}

static void list_unlink(struct list *L, struct entry *e, int w)
{
	struct link *k = &e->l[w];
	if (k->older)
		k->older->l[w].newer = k->newer;
	else
		L->oldest = k->newer;
	if (k->newer)
		k->newer->l[w].older = k->older;
	else
		L->newest = k->older;
	k->older = k->newer = NULL;
}

/* Puts n where o is in L; o leaves it. */
static void list_replace(struct list *L, struct entry *o, struct entry *n, int w)
{
	n->l[w] = o->l[w];
	if (n->l[w].older)
		n->l[w].older->l[w].newer = n;
	else
		L->oldest = n;
	if (n->l[w].newer)
		n->l[w].newer->l[w].older = n;
	else
		L->newest = n;
	o->l[w].older = o->l[w].newer = NULL;
}

/* Puts e right after `after` (NULL: first). */
static void list_link(struct list *L, struct entry *e, struct entry *after, int w)
{
	struct entry *before = after ? after->l[w].newer : L->oldest;
	e->l[w].older = after;
	e->l[w].newer = before;
	if (after)
		after->l[w].newer = e;
	else
		L->oldest = e;
	if (before)
		before->l[w].older = e;
	else
		L->newest = e;
}

/* Inserts e in use order, walking from the nearer end. */
static void list_insert(struct list *L, struct entry *e, int w)
{
	struct entry *after = NULL; /* e goes just after this one (NULL: first) */
	if (!L->newest || L->newest->use <= e->use) {
		after = L->newest;
	} else if (e->use <= L->oldest->use) {
		after = NULL; /* older than all: the head (the distance below would wrap) */
	} else if (e->use - L->oldest->use < L->newest->use - e->use) {
		for (struct entry *o = L->oldest; o && o->use <= e->use; o = o->l[w].newer)
			after = o;
	} else {
		after = L->newest;
		while (after && after->use > e->use)
			after = after->l[w].older;
	}
	list_link(L, e, after, w);
}

/* An entry no lease, pin or transfer holds, and that no other needs. */
static bool held(const struct entry *e)
{
	return e->leases || e->pins || e->writing || e->restoring || e->exports;
}

/* Memory may let it go: a resident leaf of what is resident, and one
 * that either has a record or continues no chain (it then leaves the
 * index); one an import holds for its children only with a record.
 * Without a tier: a leaf. */
static bool mem_evictable(const struct entry *e)
{
	return e->resident && !e->res_children && !held(e) &&
	       (e->disk || (!e->children && !e->imports));
}

/* The memory lists e is on when evictable: the first pair (LRU_ALL),
 * unless it would leave unwritten while there is a tier (LRU_UALL). */
static int mem_pair(const struct idx *x, const struct entry *e)
{
	return x->tier.drop && !e->disk ? LRU_UALL : LRU_ALL;
}

/* The disk budget may let it go: a leaf held only on disk. */
static bool disk_evictable(const struct entry *e)
{
	return e->disk && !e->resident && !e->children && !held(e) && !e->imports;
}

static void set_on(struct idx *x, struct entry *e, int w, bool want)
{
	if (want == e->on[w])
		return;
	if (want)
		list_insert(list_of(x, e, w), e, w);
	else
		list_unlink(list_of(x, e, w), e, w);
	e->on[w] = want;
}

/* Puts e on or off the LRU lists after its state changed. */
void idx_do_update(struct idx *x, struct entry *e)
{
	bool m = mem_evictable(e);
	int pair = mem_pair(x, e);
	set_on(x, e, LRU_ALL, m && pair == LRU_ALL);
	set_on(x, e, LRU_USER, m && pair == LRU_ALL);
	set_on(x, e, LRU_UALL, m && pair == LRU_UALL);
	set_on(x, e, LRU_UUSER, m && pair == LRU_UALL);
	set_on(x, e, LRU_DISK, disk_evictable(e));
}

static void do_touch(struct idx *x, struct entry *e, uint64_t now)
{
	e->use = ++x->clock;
	e->used_s = now;
	for (int w = LRU_ALL; w <= LRU_DISK; w++)
		if (e->on[w]) {
			list_unlink(list_of(x, e, w), e, w);
			list_insert(list_of(x, e, w), e, w);
		}
}

/* Queues a new resident block for the tier to write, after every block
 * queued before it: a parent is queued before its children. */
static void do_dirty(struct idx *x, struct entry *e)
{
	if (!x->tier.drop || e->on[Q_DIRTY])
		return;
	e->qseq = ++x->qseq;
	list_link(&x->dirty, e, x->dirty.newest, Q_DIRTY);
	e->on[Q_DIRTY] = true;
	x->ndirty++;
	x->tier.wake(x->tier.ctx);
}

/* Queues a block whose write failed back in its place, by when it was
 * first queued: a batch that failed goes back in its order, parents
 * before children (one at a time at the front reversed it, and the next
 * write put children on disk before their parents). */
static void do_requeue(struct idx *x, struct entry *e)
{
	struct entry *after = NULL;
	for (struct entry *o = x->dirty.oldest; o && o->qseq < e->qseq; o = o->l[Q_DIRTY].newer)
		after = o;
	list_link(&x->dirty, e, after, Q_DIRTY);
	e->on[Q_DIRTY] = true;
	x->ndirty++;
}

static void do_undirty(struct idx *x, struct entry *e)
{
	if (!e->on[Q_DIRTY])
		return;
	list_unlink(&x->dirty, e, Q_DIRTY);
	e->on[Q_DIRTY] = false;
	x->ndirty--;
}

/* ==== Entries (lock held) ==== */

/* Keyed (SipHash): keys are chain hashes anyone can compute, so an
 * unkeyed bucket would tell a user paging through LIST with cursors of
 * their choosing whether a guessed prompt of another user is cached. */
static size_t bucket_of(const struct idx *x, uint32_t ns, const uint8_t *key)
{
	uint8_t in[4 + IDX_HASH_BYTES], h[crypto_shorthash_BYTES];
	memcpy(in, &ns, 4);
	memcpy(in + 4, key, (size_t)x->key_bytes);
	crypto_shorthash(h, in, 4 + (size_t)x->key_bytes, x->bucket_key);
	uint64_t v;
	memcpy(&v, h, sizeof(v));
	return (size_t)(v & (NBUCKETS - 1));
}

struct entry *idx_do_find(const struct idx *x, uint32_t ns, const uint8_t *key)
{
	for (struct entry *e = x->buckets[bucket_of(x, ns, key)]; e; e = e->hnext)
		if (e->g->ns == ns && !memcmp(e->key, key, IDX_HASH_BYTES))
			return e;
	return NULL;
}

/* The exact test: same tokens, same parent (or same root context). */
static int do_confirms(const struct idx *x, const struct entry *e, const struct entry *parent,
		       const struct idx_group *g, const uint32_t *tokens)
{
	if (e->parent != parent)
		return 0;
	if (!parent && e->g != g)
		return 0;
	return !memcmp(e->tokens, tokens, x->block_tokens * sizeof(uint32_t));
}

static void lease_add(struct idx *x, struct entry *e)
{
	if (!e->leases++)
		x->st.leased_bytes += e->g->store.slot_bytes;
	idx_do_update(x, e);
}

static void lease_drop(struct idx *x, struct entry *e)
{
	if (!--e->leases)
		x->st.leased_bytes -= e->g->store.slot_bytes;
	idx_do_update(x, e);
}

static void do_group_gc(struct idx *x, struct idx_group *g)
{
	if (g->refs || g->blocks)
		return;
	struct idx_group **pp = &x->groups;
	while (*pp != g)
		pp = &(*pp)->next;
	*pp = g->next;
	struct user *u = g->user;
	if (g->store.hold)
		g->store.hold(g->store.ctx, -1);
	free(g);
	if (--u->groups)
		return;
	struct user **up = &x->users;
	while (*up != u)
		up = &(*up)->next;
	*up = u->next;
	free(u);
}

/* e leaves the memory lists, its counts already updated; a parent that
 * became evictable by it takes its place there (O(1), where inserting by
 * its own use walks them): the prefix was in use as long as its last
 * continuation was. */
static void do_leave_memory_lists(struct idx *x, struct entry *e)
{
	struct entry *p = e->parent;
	int k = e->on[LRU_ALL] ? LRU_ALL : e->on[LRU_UALL] ? LRU_UALL : -1;
	if (k < 0)
		return;
	if (p && !p->on[LRU_ALL] && !p->on[LRU_UALL] && mem_evictable(p) &&
	    mem_pair(x, p) == k && p->use <= e->use) {
		p->use = e->use;
		for (int w = k; w <= k + 1; w++) {
			list_replace(list_of(x, e, w), e, p, w);
			p->on[w] = true;
		}
	} else {
		for (int w = k; w <= k + 1; w++)
			list_unlink(list_of(x, e, w), e, w);
	}
	e->on[k] = e->on[k + 1] = false;
}

/* e's slot goes back to its store (punch: and its memory to the budget). */
static void do_unreside(struct idx *x, struct entry *e, bool punch)
{
	struct idx_group *g = e->g;
	e->resident = false;
	if (e->parent)
		e->parent->res_children--;
	if (!e->writing) /* else the writer reads it: idx_spilled frees it */
		g->store.free(g->store.ctx, e->loc, punch);
	x->st.blocks--;
	x->st.bytes -= g->store.slot_bytes;
	g->user->bytes -= g->store.slot_bytes;
	g->resident--;
}

static void do_reside(struct idx *x, struct entry *e, struct idx_loc loc)
{
	struct idx_group *g = e->g;
	e->loc = loc;
	e->resident = true;
	if (e->parent)
		e->parent->res_children++;
	x->st.blocks++;
	x->st.bytes += g->store.slot_bytes;
	g->user->bytes += g->store.slot_bytes;
	g->resident++;
}

/* e's record is deleted (by the tier, later) and no longer counted. */
static void do_drop_record(struct idx *x, struct entry *e)
{
	e->disk = false;
	x->tier.drop(x->tier.ctx, e->g->ns, e->hash);
	x->st.disk_blocks--;
	x->st.disk_bytes -= e->g->store.record_bytes;
}

/* Removes a removable entry; its parent may become evictable, and goes
 * too if it was hollow. Returns the nearest ancestor still in the index
 * (NULL: none): the ones it took are freed. */
struct entry *idx_do_remove(struct idx *x, struct entry *e, bool punch)
{
	for (;;) {
		struct idx_group *g = e->g;
		struct entry **pp = &x->buckets[bucket_of(x, g->ns, e->key)];
		while (*pp != e)
			pp = &(*pp)->hnext;
		*pp = e->hnext;
		struct entry *p = e->parent;
		if (p)
			p->children--;
		if (e->resident)
			do_unreside(x, e, punch);
		do_leave_memory_lists(x, e);
		set_on(x, e, LRU_DISK, false);
		do_undirty(x, e);
		if (e->disk)
			do_drop_record(x, e);
		if (p)
			idx_do_update(x, p);
		if (e->writing) {
			/* Out of the index; its slot, group and memory stay
			 * until idx_spilled, when the writer is done. */
			e->zombie = true;
			e->parent = NULL;
		} else {
			g->blocks--;
			free(e);
			do_group_gc(x, g);
		}
		if (!p || !hollow(p) || !removable(p))
			return p;
		e = p;
	}
}

/* A resident block with a record leaves memory only. */
static void do_to_disk(struct idx *x, struct entry *e, bool punch)
{
	do_unreside(x, e, punch);
	do_leave_memory_lists(x, e);
	idx_do_update(x, e);
	if (e->parent)
		idx_do_update(x, e->parent);
}

/* ==== Room: eviction, and waits for the writer (lock held; the waits drop it) ==== */

/* Evicts the oldest entry of L for group g's next block. Memory moves
 * between stores only through the budget: a victim of another store
 * gives its pages back. -ENOENT when L is empty. */
static int do_evict_from(struct idx *x, struct list *L, const struct idx_group *g)
{
	struct entry *v = L->oldest;
	if (!v)
		return -ENOENT;
	v->g->evictions++;
	x->st.evictions++;
	bool punch = v->g->store.ctx != g->store.ctx;
	if (v->disk) {
		do_to_disk(x, v, punch);
	} else {
		if (x->tier.drop)
			x->st.unwritten_evictions++;
		idx_do_remove(x, v, punch);
	}
	return 0;
}

/* TIER_WAIT_MS from now, for pthread_cond_timedwait. */
static void tier_deadline(struct timespec *until)
{
	clock_gettime(CLOCK_REALTIME, until);
	until->tv_sec += TIER_WAIT_MS / 1000;
	until->tv_nsec += (long)(TIER_WAIT_MS % 1000) * 1000000;
	if (until->tv_nsec >= 1000000000L) {
		until->tv_sec++;
		until->tv_nsec -= 1000000000L;
	}
}

/* Waits (the lock released meanwhile) until the writer ends one more
 * write, when one is under way (its block is held until then) or blocks
 * wait for a writer that can write: true then. false at once when there
 * is nothing to wait for, and after TIER_WAIT_MS without a write ending
 * (the writer is then taken for stuck until it writes one: a disk that
 * hangs in the middle of a write would otherwise cost every publish, and
 * a --disk-sync one every block, TIER_WAIT_MS of its worker). */
static bool do_wait_tier(struct idx *x)
{
	if (!x->tier.drop || x->tier_hung ||
	    !(x->nwriting || (x->ndirty && !x->tier_stuck)))
		return false;
	uint64_t seen = x->spill_ends;
	struct timespec until;
	tier_deadline(&until);
	x->tier.wake(x->tier.ctx);
	while (x->spill_ends == seen && (x->nwriting || !x->tier_stuck))
		if (pthread_cond_timedwait(&x->spilled, &x->lock, &until) == ETIMEDOUT) {
			if (x->spill_ends == seen)
				x->tier_stuck = x->tier_hung = true;
			break;
		}
	return x->spill_ends != seen;
}

/* Waits (the lock released meanwhile) until e, which another publish, a
 * restore or an import fills, is filled or has failed, at most
 * TIER_WAIT_MS (fills copy from memory or read the disk: a longer one is
 * a broken disk). */
static void do_wait_filled(struct idx *x, struct entry *e)
{
	if (!e->restoring)
		return;
	struct timespec until;
	tier_deadline(&until);
	while (e->restoring)
		if (pthread_cond_timedwait(&x->filled, &x->lock, &until) == ETIMEDOUT)
			return;
}

/* --disk-sync: waits (the lock released meanwhile) for e's record, once
 * e is queued (do_wait_tier). true: look again. */
static bool do_wait_record(struct idx *x, struct entry *e)
{
	if (e->disk || !(e->on[Q_DIRTY] || e->writing))
		return false; /* hollow, or its write failed for good */
	return do_wait_tier(x);
}

/* Room for a record of `bytes` within the disk budget: the least recently
 * used blocks held only on disk go. -ENOSPC when there are none left. */
static int do_disk_room(struct idx *x, uint64_t bytes)
{
	while (x->st.disk_bytes + bytes > x->lim.disk_budget) {
		struct entry *v = x->disk_lru.oldest;
		if (!v)
			return -ENOSPC;
		x->st.disk_evictions++;
		idx_do_remove(x, v, true);
	}
	return 0;
}

/* The writer will not write the unwritten blocks in memory: it is stuck
 * (a full disk or disk budget) and writes none now, or they are not
 * queued (their writes failed for good). Only then may one leave memory
 * unwritten. */
static bool do_tier_cannot(const struct idx *x)
{
	return !x->nwriting && (x->tier_stuck || !x->ndirty);
}

/* One block out of memory for g, from a pair of LRU lists: a written one
 * (from `written`); else, when the caller may, a wait for the writer;
 * else an unwritten one (from `unwritten`) when the writer cannot write
 * it. true: something changed, look for a slot again. */
static bool do_make_room(struct idx *x, struct list *written, struct list *unwritten,
			 const struct idx_group *g, bool may_wait)
{
	return !do_evict_from(x, written, g) || (may_wait && do_wait_tier(x)) ||
	       (do_tier_cannot(x) && !do_evict_from(x, unwritten, g));
}

/* A slot for g's next block, evicting as needed; `keep` must survive. A
 * user at their quota gives up their own blocks first; anyone's oldest
 * block goes when the budget is full. With a tier, blocks already
 * written go first; when only unwritten ones are left, a caller that may
 * wait (a publish) waits for the writer to write some (the lock is
 * released meanwhile), so that a block confirmed to its publisher leaves
 * memory only once it is on disk; a MATCH's restore gets no slot then.
 * The oldest unwritten block goes only when the writer cannot write it
 * (do_tier_cannot), counted. */
static int do_alloc(struct idx *x, struct idx_group *g, struct entry *keep,
		    struct idx_loc *loc, bool may_wait)
{
	uint64_t slot = g->store.slot_bytes;
	struct user *u = g->user;
	if (slot > x->lim.quota)
		return x->lim.quota < x->lim.budget ? -EDQUOT : -ENOSPC;
	int rc;
	/* The parent we are about to extend must not be evicted meanwhile. */
	if (keep)
		lease_add(x, keep);
	for (;;) {
		/* A user alone at a quota of the whole budget meets the budget:
		 * say so (the store's -ENOSPC below). */
		if (u->bytes + slot > x->lim.quota && x->lim.quota < x->lim.budget) {
			if (do_make_room(x, &u->lru, &u->ulru, g, may_wait))
				continue;
			rc = -EDQUOT;
			break;
		}
		if ((rc = g->store.alloc(g->store.ctx, loc)) != -ENOSPC)
			break;
		if (do_make_room(x, &x->lru, &x->ulru, g, may_wait))
			continue;
		break;
	}
	if (keep)
		lease_drop(x, keep);
	return rc;
}

/* ==== Leases (lock held) ==== */

static struct lease **do_lease_slot(struct idx *x, uint64_t id)
{
	struct lease **pp = &x->leases[id % LEASE_BUCKETS];
	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	return pp;
}

/* ==== Groups ==== */

int idx_group_get(struct idx *x, const struct idx_root *root, const uint8_t *fingerprint,
		  const struct idx_store *store, struct idx_group **out)
{
	int rc = 0;
	pthread_mutex_lock(&x->lock);
	struct idx_group *g = x->groups;
	while (g && (g->ns != root->ns || memcmp(g->h0, root->h0, IDX_HASH_BYTES)))
		g = g->next;
	if (!g) {
		struct user *u = x->users;
		while (u && u->uid != root->ns)
			u = u->next;
		if (!u && (u = calloc(1, sizeof(*u)))) {
			u->uid = root->ns;
			u->next = x->users;
			x->users = u;
		}
		if (u && (g = calloc(1, sizeof(*g)))) {
			g->ns = root->ns;
			memcpy(g->h0, root->h0, IDX_HASH_BYTES);
			memcpy(g->fp, fingerprint, PD_FP_SIZE);
			g->store = *store;
			if (store->hold)
				store->hold(store->ctx, 1);
			g->user = u;
			u->groups++;
			g->next = x->groups;
			x->groups = g;
		} else if (u && !u->groups) {
			x->users = u->next;
			free(u);
		}
	}
	if (g)
		g->refs++;
	else
		rc = -ENOMEM;
	pthread_mutex_unlock(&x->lock);
	*out = g;
	return rc;
}

bool idx_group_has_store(const struct idx_group *g, const void *store_ctx)
{
	return g->store.ctx == store_ctx; /* set once, when the group is made */
}

void idx_group_put(struct idx *x, struct idx_group *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&x->lock);
	g->refs--;
	do_group_gc(x, g);
	pthread_mutex_unlock(&x->lock);
}

/* ==== MATCH and RELEASE ==== */

void idx_do_fill_block(const struct idx *x, const struct entry *e, struct idx_block *b)
{
	const struct idx_group *g = e->g;
	(void)x;
	memset(b, 0, sizeof(*b));
	b->ref = e;
	b->ns = g->ns;
	b->depth = e->depth - 1;
	memcpy(b->hash, e->hash, IDX_HASH_BYTES);
	if (e->parent)
		memcpy(b->parent, e->parent->hash, IDX_HASH_BYTES);
	memcpy(b->h0, g->h0, IDX_HASH_BYTES);
	memcpy(b->fp, g->fp, PD_FP_SIZE);
	b->tokens = e->tokens;
	b->store = g->store;
	b->loc = e->loc;
	b->sum = e->sum;
	b->resident = e->resident;
}

int idx_match(struct idx *x, struct idx_group *g, const uint8_t *hashes,
	      const uint32_t *tokens, uint32_t count, uint64_t *lease, struct idx_loc *locs,
	      uint32_t *hit, struct idx_block *fetch, uint32_t *nfetch)
{
	struct lease *l = malloc(sizeof(*l) + count * sizeof(l->blocks[0]));
	if (!l)
		return -ENOMEM;
	uint8_t key[IDX_HASH_BYTES];
	struct entry *parent = NULL;
	uint32_t n = 0, nf = 0;
	uint64_t now = now_s();
	hot_lock(x);
	for (; n < count; n++) {
		make_key(x, hashes + (size_t)n * IDX_HASH_BYTES, key);
		struct entry *e = idx_do_find(x, g->ns, key);
		const uint32_t *t = tokens + (size_t)n * x->block_tokens;
		if (!e)
			break;
		if (!do_confirms(x, e, parent, g, t)) {
			x->st.collisions++;
			break;
		}
		/* Another MATCH restores it: this one takes what comes before. */
		if (!e->resident && (!fetch || !e->disk || e->restoring))
			break;
		l->blocks[n] = e;
		parent = e;
	}
	/* Leased first, so that the slots of the restores evict none of them. */
	for (uint32_t i = 0; i < n; i++)
		lease_add(x, l->blocks[i]);
	for (uint32_t i = 0; i < n; i++) {
		struct entry *e = l->blocks[i];
		if (!e->resident) {
			struct idx_loc loc;
			/* A MATCH does not wait for the writer: its hit
			 * ends here instead. */
			if (do_alloc(x, g, NULL, &loc, false)) {
				for (uint32_t j = n; j-- > i;)
					lease_drop(x, l->blocks[j]);
				n = i;
				break;
			}
			e->loc = loc;
			e->restoring = true;
			/* The slot counts against the quota while it fills. */
			g->user->bytes += g->store.slot_bytes;
			idx_do_update(x, e);
			idx_do_fill_block(x, e, &fetch[nf]);
			fetch[nf++].pos = i;
		}
		locs[i] = e->loc;
	}
	if (nfetch)
		*nfetch = nf;
	*hit = n;
	*lease = 0;
	x->st.query_blocks += count;
	g->query_blocks += count;
	if (n) {
		for (uint32_t i = 0; i < n; i++) {
			l->blocks[i]->hits++;
			do_touch(x, l->blocks[i], now);
		}
		l->id = x->next_lease++;
		l->n = n;
		struct lease **slot = do_lease_slot(x, l->id);
		l->next = NULL;
		*slot = l;
		*lease = l->id;
		x->st.leases++;
		x->st.hits++;
		x->st.hit_blocks += n;
		g->hits++;
		g->hit_blocks += n;
		l = NULL;
	} else {
		x->st.misses++;
	}
	pthread_mutex_unlock(&x->lock);
	free(l);
	return 0;
}

/* Errors of a restore that say the record itself is bad: it goes. */
static bool record_bad(int rc)
{
	return rc == -EBADMSG || rc == -EACCES || rc == -ENOTSUP || rc == -ENOENT ||
	       rc == -ENODATA;
}

void idx_restored(struct idx *x, uint64_t *lease, uint32_t *hit,
		  const struct idx_block *fetch, uint32_t nfetch, const int *ok)
{
	hot_lock(x);
	struct lease **slot = do_lease_slot(x, *lease), *l = *slot;
	uint32_t cut = l->n;
	for (uint32_t i = 0; i < nfetch; i++) {
		struct entry *e = (struct entry *)fetch[i].ref;
		struct idx_group *g = e->g;
		e->restoring = false;
		g->user->bytes -= g->store.slot_bytes; /* do_reside counts it again */
		if (cut == l->n && !ok[i]) {
			do_reside(x, e, e->loc);
			x->st.restores++;
			x->st.restore_bytes += g->store.block_bytes;
		} else {
			/* Past a failure the run is cut: its slots go back too. */
			g->store.free(g->store.ctx, e->loc, true);
			if (cut == l->n)
				for (cut = 0; l->blocks[cut] != e; cut++)
					;
			if (ok[i] && record_bad(ok[i]) && e->disk) {
				x->st.disk_corrupt++;
				do_drop_record(x, e);
			}
		}
		idx_do_update(x, e);
	}
	if (nfetch)
		pthread_cond_broadcast(&x->filled);
	/* The hit idx_match counted, as it turned out. */
	struct idx_group *g = l->blocks[0]->g;
	x->st.hit_blocks -= l->n - cut;
	g->hit_blocks -= l->n - cut;
	if (!cut) {
		x->st.hits--;
		g->hits--;
		x->st.misses++;
	}
	/* Leaf first: each block then enters the LRU after its child. */
	for (uint32_t j = l->n; j-- > cut;) {
		struct entry *e = l->blocks[j];
		lease_drop(x, e);
		if (hollow(e) && removable(e))
			idx_do_remove(x, e, true);
	}
	l->n = cut;
	*hit = cut;
	if (!cut) {
		*slot = l->next;
		x->st.leases--;
		free(l);
		*lease = 0;
	}
	pthread_mutex_unlock(&x->lock);
}

int idx_release(struct idx *x, uint64_t lease)
{
	hot_lock(x);
	struct lease **pp = do_lease_slot(x, lease), *l = *pp;
	if (l) {
		*pp = l->next;
		/* Leaf first: each block then enters the LRU after its child.
		 * One left hollow while leased (a fill that failed after a
		 * publish found it) goes with its lease: its ancestors are
		 * still leased here, so a removal stops below them. */
		for (uint32_t i = l->n; i-- > 0;) {
			struct entry *e = l->blocks[i];
			lease_drop(x, e);
			if (hollow(e) && removable(e))
				idx_do_remove(x, e, true);
		}
		x->st.leases--;
	}
	pthread_mutex_unlock(&x->lock);
	free(l);
	return l ? 0 : -ENOENT;
}

void idx_uncount_miss(struct idx *x, struct idx_group *g, uint32_t count)
{
	pthread_mutex_lock(&x->lock);
	x->st.misses--;
	x->st.query_blocks -= count;
	g->query_blocks -= count;
	pthread_mutex_unlock(&x->lock);
}

void idx_uncount_match(struct idx *x, struct idx_group *g, uint32_t count, uint32_t hit)
{
	pthread_mutex_lock(&x->lock);
	x->st.query_blocks -= count;
	g->query_blocks -= count;
	if (hit) {
		x->st.hits--;
		x->st.hit_blocks -= hit;
		g->hits--;
		g->hit_blocks -= hit;
	} else {
		x->st.misses--;
	}
	pthread_mutex_unlock(&x->lock);
}

/* ==== PUBLISH and IMPORT ==== */

/* Files a new entry e (zeroed) for a block after `parent` (NULL: g's
 * root): its names, tokens and place in the forest, last used now. */
static void do_link(struct idx *x, struct entry *e, struct idx_group *g,
		    struct entry *parent, const uint8_t *key, const uint8_t *hash,
		    const uint32_t *t, uint64_t now)
{
	memcpy(e->key, key, IDX_HASH_BYTES);
	memcpy(e->hash, hash, IDX_HASH_BYTES);
	memcpy(e->tokens, t, x->block_tokens * sizeof(uint32_t));
	e->g = g;
	e->parent = parent;
	e->depth = parent ? parent->depth + 1 : 1;
	size_t b = bucket_of(x, g->ns, e->key);
	e->hnext = x->buckets[b];
	x->buckets[b] = e;
	if (parent) {
		parent->children++;
		idx_do_update(x, parent);
	}
	e->use = ++x->clock;
	e->used_s = now;
	g->blocks++;
}

/* The parent block b names, as its chain was: in g, one block shallower,
 * with that hash. true and *parent (NULL at depth 0), or false when it is
 * not there. */
static bool do_parent_of(const struct idx *x, const struct idx_group *g,
			 const struct idx_block *b, struct entry **parent)
{
	uint8_t pkey[IDX_HASH_BYTES];
	*parent = NULL;
	if (!b->depth)
		return true;
	make_key(x, b->parent, pkey);
	struct entry *p = idx_do_find(x, g->ns, pkey);
	if (!p || p->g != g || p->depth != b->depth || memcmp(p->hash, b->parent, IDX_HASH_BYTES))
		return false;
	*parent = p;
	return true;
}

/* Takes block i's place after `parent` (NULL: g's root) unless it is
 * there: 0 and *out its entry, *dedup whether it was there. A new place is
 * an entry that is filling (`restoring`: MATCH stops before it, nothing
 * evicts it) with a slot in e->loc, for do_publish to fill without the
 * lock. -EEXIST (its key is another prompt's), do_alloc's -ENOSPC or
 * -EDQUOT, or -ENOMEM. */
static int do_reserve(struct idx *x, struct idx_group *g, struct entry *parent,
		      const uint8_t *hash, const uint32_t *t, uint64_t now, bool may_wait,
		      struct entry **out, bool *dedup)
{
	uint8_t key[IDX_HASH_BYTES];
	make_key(x, hash, key);
	struct entry *e = idx_do_find(x, g->ns, key);
	*dedup = false;
	if (e && !do_confirms(x, e, parent, g, t)) {
		x->st.collisions++;
		return -EEXIST;
	}
	if (e && (e->resident || e->restoring)) {
		*dedup = true;
		do_touch(x, e, now);
		*out = e;
		return 0;
	}
	struct idx_loc loc;
	if (e)
		lease_add(x, e); /* it stays while its slot is found */
	int rc = do_alloc(x, g, parent, &loc, may_wait);
	if (e)
		lease_drop(x, e);
	if (rc)
		return rc;
	/* do_alloc may have waited for the writer without the lock: another
	 * publish or a restore may have filed or filled the block since. */
	if (!e && (e = idx_do_find(x, g->ns, key)) && !do_confirms(x, e, parent, g, t)) {
		g->store.free(g->store.ctx, loc, true);
		x->st.collisions++;
		return -EEXIST;
	}
	if (e && (e->resident || e->restoring)) {
		g->store.free(g->store.ctx, loc, true);
		*dedup = true;
		do_touch(x, e, now);
		*out = e;
		return 0;
	}
	if (!e) {
		if (!(e = calloc(1, sizeof(struct entry) + x->block_tokens * sizeof(uint32_t)))) {
			g->store.free(g->store.ctx, loc, true);
			return -ENOMEM;
		}
		do_link(x, e, g, parent, key, hash, t, now);
	}
	/* A new block, or one held only on disk or hollow: the publisher's
	 * bytes are as good as a restore. Its slot counts against the
	 * user's quota from now on (do_publish moves it to do_reside's). */
	e->loc = loc;
	e->restoring = true;
	g->user->bytes += g->store.slot_bytes;
	idx_do_update(x, e);
	*out = e;
	return 0;
}

/* A block a PUBLISH placed: found there, or `mine` to fill at loc. */
struct placed {
	struct idx_loc loc;
	bool mine, filled;
};

/*
 * The lease a PUBLISH asked for (idx_publish_leased): `from`'s blocks, then
 * chain[0, n), whose leases were taken as they were placed. 0 when the
 * publish placed nothing or `from` is gone; every lease taken is then
 * given back.
 */
static uint64_t do_lease_chain(struct idx *x, uint64_t from, struct entry **chain, uint32_t n)
{
	const struct lease *f = from ? *do_lease_slot(x, from) : NULL;
	uint32_t nf = f ? f->n : 0;
	struct lease *l = n && (f || !from) ? malloc(sizeof(*l) + (nf + n) * sizeof(l->blocks[0])) : NULL;
	if (!l) {
		for (uint32_t i = n; i-- > 0;)
			lease_drop(x, chain[i]);
		return 0;
	}
	for (uint32_t i = 0; i < nf; i++)
		lease_add(x, l->blocks[i] = f->blocks[i]);
	memcpy(l->blocks + nf, chain, n * sizeof(chain[0]));
	l->n = nf + n;
	l->id = x->next_lease++;
	l->next = NULL;
	*do_lease_slot(x, l->id) = l;
	x->st.leases++;
	return l->id;
}

/* Copies the blocks of [0, *end) that are mine and not yet filled, in
 * order, without the lock (held on entry and on return). A failed copy
 * ends the run there: *end and *end_rc say where and why. */
static void do_fill(struct idx *x, struct placed *p, uint32_t *end, int *end_rc,
		    int (*fill)(void *ctx, uint32_t i, struct idx_loc loc), void *ctx)
{
	pthread_mutex_unlock(&x->lock);
	for (uint32_t i = 0; i < *end; i++) {
		if (!p[i].mine || p[i].filled)
			continue;
		int rc = fill(ctx, i, p[i].loc);
		if (rc) {
			*end = i;
			*end_rc = rc;
			break;
		}
		p[i].filled = true;
	}
	hot_lock(x);
}

/*
 * Stores blocks [0, count) after parent, the lock held on entry and
 * released on return: their places are taken under the lock, their bytes
 * copied without it (a 32-block PUBLISH of 2.9 MB blocks held it for
 * 60-80 ms, and every MATCH waited: bench/disk), and they become visible
 * under it again. The publish ends at the first block that cannot be
 * placed or copied; what it placed past there is undone. Every block
 * found is leased while the lock is out, so it stays; with lease_out,
 * the chain up to the end is leased after `from`'s. Without may_wait (a
 * MATCH's import) no slot waits for the disk writer (do_alloc).
 *
 * A block found while another publish or a restore still fills it counts
 * as found once that fill is done: the publisher is answered only when a
 * MATCH would attach what it was told is there (answered at once, a
 * process that publishes a shared prompt and matches it next missed it).
 * The wait is short: fills copy from the daemon's own memory or disk,
 * never from a peer. If that fill failed, the block is hollow and this
 * publish fills it with its own bytes instead (its blocks below would
 * otherwise hang under a hole no MATCH crosses).
 */
static int do_publish(struct idx *x, struct idx_group *g, struct entry *parent,
		      const uint8_t *hashes, const uint32_t *tokens, uint32_t count,
		      int (*fill)(void *ctx, uint32_t i, struct idx_loc loc), void *ctx,
		      uint32_t *stored, uint32_t *dedup, uint64_t from, uint64_t *lease_out,
		      bool may_wait)
{
	uint64_t now = now_s();
	uint32_t placed = 0;
	struct placed *p = calloc(count ? count : 1, sizeof(*p));
	struct entry **chain = malloc((count ? count : 1) * sizeof(*chain));
	if (!p || !chain) {
		pthread_mutex_unlock(&x->lock);
		free(p);
		free(chain);
		return -ENOMEM;
	}
	int end_rc = 0;
	for (struct entry *at = parent; placed < count; placed++) {
		bool there;
		struct entry *e;
		end_rc = do_reserve(x, g, at, hashes + (size_t)placed * IDX_HASH_BYTES,
				    tokens + (size_t)placed * x->block_tokens, now, may_wait, &e, &there);
		if (end_rc == -ENOSPC || end_rc == -EDQUOT)
			x->st.refused_blocks += count - placed;
		if (end_rc)
			break;
		p[placed] = (struct placed){ e->loc, !there, false };
		lease_add(x, chain[placed] = e);
		at = e;
	}
	uint32_t end = placed;
	for (bool retake = true; retake;) {
		do_fill(x, p, &end, &end_rc, fill, ctx);
		for (uint32_t i = 0; i < end; i++)
			if (!p[i].mine)
				do_wait_filled(x, chain[i]);
		retake = false;
		for (uint32_t i = 0; i < end; i++) {
			if (p[i].mine || !hollow(chain[i]))
				continue;
			bool there;
			struct entry *e;
			int rc = do_reserve(x, g, i ? chain[i - 1] : parent,
					    hashes + (size_t)i * IDX_HASH_BYTES,
					    tokens + (size_t)i * x->block_tokens, now, may_wait, &e,
					    &there);
			if (rc) {
				end = i;
				end_rc = rc;
				break;
			}
			if (!there) {
				p[i] = (struct placed){ e->loc, true, false };
				retake = true;
			}
		}
	}
	bool filled = false;
	for (uint32_t i = 0; i < placed; i++) {
		struct entry *e = chain[i];
		if (!p[i].mine) {
			*dedup += i < end;
			x->st.dedup += i < end;
			continue;
		}
		e->restoring = false;
		filled = true;
		g->user->bytes -= g->store.slot_bytes;
		if (i < end) {
			do_reside(x, e, p[i].loc);
			if (!e->disk)
				do_dirty(x, e);
			do_touch(x, e, now);
			x->st.published++;
			(*stored)++;
		} else {
			g->store.free(g->store.ctx, p[i].loc, true);
		}
		idx_do_update(x, e);
		if (e->parent)
			idx_do_update(x, e->parent);
	}
	if (filled)
		pthread_cond_broadcast(&x->filled);
	/* --disk-sync: the publisher hears of its blocks once they are on
	 * disk (or the writer cannot write them: a full disk, said in the
	 * log). The chain stays leased meanwhile. */
	for (uint32_t i = 0; x->tier.sync && i < end; i++)
		while (do_wait_record(x, chain[i]))
			;
	for (uint32_t i = placed; i-- > end;)
		lease_drop(x, chain[i]);
	if (lease_out) {
		*lease_out = do_lease_chain(x, from, chain, end);
	} else {
		for (uint32_t i = end; i-- > 0;)
			lease_drop(x, chain[i]);
	}
	/* What failed leaves nothing behind. The blocks form one chain, so
	 * removing its last takes the hollow ones above with it (only the
	 * last can be a leaf). */
	if (placed > end && hollow(chain[placed - 1]) && removable(chain[placed - 1]))
		idx_do_remove(x, chain[placed - 1], true);
	pthread_mutex_unlock(&x->lock);
	free(p);
	free(chain);
	return end_rc;
}

int idx_publish(struct idx *x, struct idx_group *g, uint64_t lease,
		const uint8_t *hashes, const uint32_t *tokens, uint32_t count,
		int (*fill)(void *ctx, uint32_t i, struct idx_loc loc), void *ctx,
		uint32_t *stored, uint32_t *dedup)
{
	return idx_publish_leased(x, g, lease, hashes, tokens, count, fill, ctx, stored, dedup,
				  NULL);
}

int idx_publish_leased(struct idx *x, struct idx_group *g, uint64_t lease,
		       const uint8_t *hashes, const uint32_t *tokens, uint32_t count,
		       int (*fill)(void *ctx, uint32_t i, struct idx_loc loc), void *ctx,
		       uint32_t *stored, uint32_t *dedup, uint64_t *lease_out)
{
	*stored = *dedup = 0;
	if (lease_out)
		*lease_out = 0;
	hot_lock(x);
	idx_do_expire(x);
	struct entry *parent = NULL;
	if (lease) {
		struct lease *l = *do_lease_slot(x, lease);
		if (!l) {
			pthread_mutex_unlock(&x->lock);
			return -ENOENT;
		}
		parent = l->blocks[l->n - 1];
	}
	return do_publish(x, g, parent, hashes, tokens, count, fill, ctx, stored, dedup, lease,
			  lease_out, true);
}

int idx_import(struct idx *x, struct idx_group *g, const struct idx_block *b,
	       int (*fill)(void *ctx, uint32_t i, struct idx_loc loc), void *ctx, bool *dedup,
	       struct idx_held *h)
{
	struct entry *parent;
	uint32_t stored = 0, there = 0;
	uint64_t lease = 0;
	if (h->n == h->cap) {
		uint32_t cap = h->cap ? 2 * h->cap : 256;
		void **m = realloc(h->e, cap * sizeof(*m));
		if (!m)
			return -ENOMEM;
		h->e = m;
		h->cap = cap;
	}
	hot_lock(x);
	if (!do_parent_of(x, g, b, &parent)) {
		pthread_mutex_unlock(&x->lock);
		return -ENOENT;
	}
	/* A lease on the block until it is held: from its publish on, it
	 * is never without one or the other. */
	int rc = do_publish(x, g, parent, b->hash, b->tokens, 1, fill, ctx, &stored, &there, 0,
			    &lease, !h->no_wait);
	*dedup = there;
	if (lease) {
		hot_lock(x);
		const struct lease *l = *do_lease_slot(x, lease);
		struct entry *e = l->blocks[l->n - 1];
		e->imports++;
		h->e[h->n++] = e;
		idx_do_update(x, e);
		pthread_mutex_unlock(&x->lock);
		idx_release(x, lease);
	}
	return rc;
}

void idx_import_end(struct idx *x, struct idx_held *h)
{
	pthread_mutex_lock(&x->lock);
	/* Children first: each then enters the LRU lists before its parent. */
	for (uint32_t i = h->n; i-- > 0;) {
		struct entry *e = h->e[i];
		e->imports--;
		idx_do_update(x, e);
		if (hollow(e) && removable(e))
			idx_do_remove(x, e, true);
	}
	pthread_mutex_unlock(&x->lock);
	free(h->e);
	*h = (struct idx_held){ 0 };
}

/* ==== The disk tier: spill, and load at start ==== */

uint32_t idx_spill_take(struct idx *x, struct idx_block *out, uint32_t max,
			uint64_t max_bytes)
{
	uint32_t n = 0;
	uint64_t bytes = 0;
	pthread_mutex_lock(&x->lock);
	for (struct entry *e = x->dirty.oldest, *next; n < max && e; e = next) {
		next = e->l[Q_DIRTY].newer;
		/* A parent is written before its children (in this batch, the
		 * tier renames a child's record only after its parent's): a
		 * record without its parent is deleted at the next start. */
		struct entry *p = e->parent;
		if (p && !p->disk && !p->writing) {
			if (p->on[Q_DIRTY] || p->restoring)
				continue; /* it comes first */
			/* Its parent will not be written (its write failed for
			 * good): neither is this block, which stays in memory. */
			do_undirty(x, e);
			idx_do_update(x, e);
			continue;
		}
		if (n && (bytes >= max_bytes || e->g->store.record_bytes > max_bytes - bytes))
			break;
		bytes += e->g->store.record_bytes;
		if (do_disk_room(x, e->g->store.record_bytes)) {
			x->tier_stuck = true; /* a publish must not wait for it */
			pthread_cond_broadcast(&x->spilled);
			break; /* the disk holds what memory holds too: wait */
		}
		do_undirty(x, e);
		e->writing = true;
		x->nwriting++;
		x->st.disk_bytes += e->g->store.record_bytes;
		idx_do_update(x, e);
		idx_do_fill_block(x, e, &out[n++]);
	}
	pthread_mutex_unlock(&x->lock);
	return n;
}

void idx_spilled(struct idx *x, const struct idx_block *b, int rc)
{
	pthread_mutex_lock(&x->lock);
	struct entry *e = (struct entry *)b->ref;
	e->writing = false;
	x->nwriting--;
	x->spill_ends++;
	/* A full disk: a publish that needs memory no longer waits for it. */
	x->tier_stuck = rc == -ENOSPC;
	x->tier_hung = false;
	pthread_cond_broadcast(&x->spilled);
	if (e->zombie) {
		/* Removed while it was written: what it held goes now. */
		struct idx_group *g = e->g;
		g->store.free(g->store.ctx, e->loc, true);
		x->st.disk_bytes -= g->store.record_bytes;
		if (!rc)
			x->tier.drop(x->tier.ctx, g->ns, e->hash);
		g->blocks--;
		free(e);
		do_group_gc(x, g);
		pthread_mutex_unlock(&x->lock);
		return;
	}
	if (!rc) {
		e->disk = true;
		e->sum = b->sum;
		x->st.disk_blocks++;
		x->st.spills++;
	} else {
		x->st.disk_bytes -= e->g->store.record_bytes;
		if (rc == -ENOSPC) /* in line again, where it was */
			do_requeue(x, e);
	}
	idx_do_update(x, e);
	pthread_mutex_unlock(&x->lock);
}

uint64_t idx_dirty(struct idx *x)
{
	pthread_mutex_lock(&x->lock);
	uint64_t n = x->ndirty;
	pthread_mutex_unlock(&x->lock);
	return n;
}

int idx_load(struct idx *x, struct idx_group *g, const struct idx_block *b)
{
	uint8_t key[IDX_HASH_BYTES];
	struct entry *parent;
	int rc = 0;
	make_key(x, b->hash, key);
	struct entry *e = calloc(1, sizeof(struct entry) + x->block_tokens * sizeof(uint32_t));
	if (!e)
		return -ENOMEM;
	pthread_mutex_lock(&x->lock);
	if (idx_do_find(x, g->ns, key)) {
		rc = -EEXIST;
		goto out;
	}
	if (!do_parent_of(x, g, b, &parent)) {
		rc = -ENOENT;
		goto out;
	}
	if (x->st.disk_bytes + g->store.record_bytes > x->lim.disk_budget) {
		rc = -ENOSPC;
		goto out;
	}
	e->sum = b->sum;
	e->disk = true;
	uint64_t now = now_s();
	do_link(x, e, g, parent, key, b->hash, b->tokens, b->idle_s < now ? now - b->idle_s : 0);
	e->hits = b->hits;
	if (b->use) {
		/* Its place among what the last run used: the clock runs on
		 * from the latest, so that what is used now is newer. */
		e->use = b->use;
		if (x->clock < b->use)
			x->clock = b->use;
	}
	idx_do_update(x, e);
	x->st.disk_blocks++;
	x->st.disk_bytes += g->store.record_bytes;
	e = NULL;
out:
	pthread_mutex_unlock(&x->lock);
	free(e);
	return rc;
}

void idx_count_corrupt(struct idx *x, uint64_t n)
{
	pthread_mutex_lock(&x->lock);
	x->st.disk_corrupt += n;
	pthread_mutex_unlock(&x->lock);
}
