/* SPDX-License-Identifier: MIT */
/*
 * Single flight: claims and the MATCHes that wait for them.
 *
 * DESIGN. A claim is keyed as a block is, (namespace, chain key), by its
 * current key: the first block of its claimant's chain not published yet.
 * It keeps that chain's rest (the claimant's MATCH hashes), so a PUBLISH
 * of the keyed block moves it forward along the claimant's prompt, and
 * waiters of a longer common prefix wait on. Claims live in a hash table
 * keyed by SipHash with a secret (clients choose the chain keys). One
 * leaf lock guards everything here; under it only eventfd writes, which
 * cannot block (a worker's eventfd counter is read every wake-up).
 *
 * A waiter is woken by unlinking it from its claim, setting its `woken`
 * and writing its worker's eventfd; the worker then runs the MATCH again,
 * which decides anew. The worker owns the connection: flight never frees
 * or touches a connection beyond its struct flight_conn, and a connection
 * leaves (flight_conn_close) before it is freed.
 */
#include "flight.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NBUCKETS 1024

struct flight_claim {
	uint32_t ns;
	uid_t uid;                   /* whose claim it counts as */
	uint8_t *chain;              /* n hashes; the key is chain[pos] */
	uint32_t n, pos;
	struct flight_conn *owner;   /* NULL: its claimant closed */
	struct flight_claim *onext;  /* in the owner's list */
	uint64_t deadline_ms;
	bool expired;                /* counted in claims_expired */
	struct flight_conn *waiters;
	struct flight_claim *hnext;
};

struct flight_user {
	uid_t uid;
	unsigned claims, waits;
	struct flight_user *next;
};

struct flight {
	pthread_mutex_t lock;
	uint64_t timeout_ms;
	/* Read without the lock by flight_seq; written under it. The
	 * decision compares it under the lock, which orders it against the
	 * claims it guards. */
	_Atomic uint64_t seq;
	/* Claims held, written under the lock: a PUBLISH looks its blocks up
	 * only when there are any (a stale read at worst looks for nothing,
	 * or misses a claim made while it published, as if made just after). */
	_Atomic uint64_t nclaims;
	unsigned char sipkey[crypto_shorthash_KEYBYTES];
	struct flight_claim *buckets[NBUCKETS];
	struct flight_user *users;
	struct flight_stats st;
};

int flight_new(uint64_t timeout_ms, struct flight **out)
{
	struct flight *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	pthread_mutex_init(&f->lock, NULL);
	f->timeout_ms = timeout_ms;
	randombytes_buf(f->sipkey, sizeof(f->sipkey));
	*out = f;
	return 0;
}

void flight_free(struct flight *f)
{
	if (!f)
		return;
	for (size_t b = 0; b < NBUCKETS; b++)
		for (struct flight_claim *c = f->buckets[b], *next; c; c = next) {
			next = c->hnext;
			free(c->chain);
			free(c);
		}
	for (struct flight_user *u = f->users, *next; u; u = next) {
		next = u->next;
		free(u);
	}
	pthread_mutex_destroy(&f->lock);
	free(f);
}

void flight_conn_init(struct flight_conn *fc, uid_t uid)
{
	memset(fc, 0, sizeof(*fc));
	fc->uid = uid;
	fc->wake_fd = -1;
	atomic_init(&fc->woken, false);
}

uint64_t flight_seq(struct flight *f)
{
	return atomic_load(&f->seq);
}

/* ==== Under the lock ==== */

static size_t bucket_of(const struct flight *f, uint32_t ns, const uint8_t *key)
{
	uint8_t in[4 + PD_HASH_SIZE], out[crypto_shorthash_BYTES];
	memcpy(in, &ns, 4);
	memcpy(in + 4, key, PD_HASH_SIZE);
	crypto_shorthash(out, in, sizeof(in), f->sipkey);
	uint64_t h;
	memcpy(&h, out, sizeof(h));
	return h % NBUCKETS;
}

static const uint8_t *key_of(const struct flight_claim *c)
{
	return c->chain + (size_t)c->pos * PD_HASH_SIZE;
}

static struct flight_claim *do_find(struct flight *f, uint32_t ns, const uint8_t *key)
{
	for (struct flight_claim *c = f->buckets[bucket_of(f, ns, key)]; c; c = c->hnext)
		if (c->ns == ns && !memcmp(key_of(c), key, PD_HASH_SIZE))
			return c;
	return NULL;
}

/* A claim of ns whose chain holds key past its current key: its claimant
 * computes that block too. A MATCH finds blocks a PUBLISH has just
 * indexed before that PUBLISH moves the claim past them
 * (flight_published runs after the index is written, and flight_seq
 * moves only then), so the MATCH's first missing block lies ahead of the
 * claim's key and do_find misses it: without this the MATCH claimed the
 * rest again, and two clients computed it. Scans every claim, only when
 * do_find missed. */
static struct flight_claim *do_find_ahead(struct flight *f, uint32_t ns, const uint8_t *key)
{
	if (!atomic_load(&f->nclaims))
		return NULL;
	for (size_t b = 0; b < NBUCKETS; b++)
		for (struct flight_claim *c = f->buckets[b]; c; c = c->hnext) {
			if (c->ns != ns)
				continue;
			for (uint32_t j = c->pos + 1; j < c->n; j++)
				if (!memcmp(c->chain + (size_t)j * PD_HASH_SIZE, key, PD_HASH_SIZE))
					return c;
		}
	return NULL;
}

static void do_hash_link(struct flight *f, struct flight_claim *c)
{
	size_t b = bucket_of(f, c->ns, key_of(c));
	c->hnext = f->buckets[b];
	f->buckets[b] = c;
}

static void do_hash_unlink(struct flight *f, struct flight_claim *c)
{
	struct flight_claim **p = &f->buckets[bucket_of(f, c->ns, key_of(c))];
	while (*p != c)
		p = &(*p)->hnext;
	*p = c->hnext;
}

/* The user's counts; NULL when out of memory (create) or none. */
static struct flight_user *do_user(struct flight *f, uid_t uid, bool create)
{
	for (struct flight_user *u = f->users; u; u = u->next)
		if (u->uid == uid)
			return u;
	if (!create)
		return NULL;
	struct flight_user *u = calloc(1, sizeof(*u));
	if (u) {
		u->uid = uid;
		u->next = f->users;
		f->users = u;
	}
	return u;
}

static void do_user_put(struct flight *f, struct flight_user *u)
{
	if (u->claims || u->waits)
		return;
	struct flight_user **p = &f->users;
	while (*p != u)
		p = &(*p)->next;
	*p = u->next;
	free(u);
}

static void do_unlink_waiter(struct flight_conn *w)
{
	struct flight_claim *c = w->on;
	if (w->wprev)
		w->wprev->wnext = w->wnext;
	else
		c->waiters = w->wnext;
	if (w->wnext)
		w->wnext->wprev = w->wprev;
	w->on = NULL;
	w->wprev = w->wnext = NULL;
}

/* Every waiter of c runs its MATCH again (dropped: it must compute). */
static void do_wake_all(struct flight_claim *c, bool dropped)
{
	while (c->waiters) {
		struct flight_conn *w = c->waiters;
		do_unlink_waiter(w);
		w->dropped = dropped;
		/* Release: the worker that reads woken sees the unlink. */
		atomic_store_explicit(&w->woken, true, memory_order_release);
		uint64_t one = 1;
		if (w->wake_fd >= 0 && write(w->wake_fd, &one, sizeof(one)) < 0) {
			/* The counter is full: the worker has wake-ups
			 * pending already, and sees woken then. */
		}
	}
}

static void do_owner_unlink(struct flight_claim *c)
{
	struct flight_conn *o = c->owner;
	if (!o)
		return;
	struct flight_claim **p = &o->claims;
	while (*p != c)
		p = &(*p)->onext;
	*p = c->onext;
	o->nclaims--;
	c->owner = NULL;
	c->onext = NULL;
}

static void do_owner_link(struct flight_claim *c, struct flight_conn *o)
{
	c->owner = o;
	c->onext = o->claims;
	o->claims = c;
	o->nclaims++;
}

static void do_claim_free(struct flight *f, struct flight_claim *c, bool dropped)
{
	do_hash_unlink(f, c);
	do_owner_unlink(c);
	do_wake_all(c, dropped);
	struct flight_user *u = do_user(f, c->uid, false);
	if (u) {
		u->claims--;
		do_user_put(f, u);
	}
	free(c->chain);
	free(c);
	atomic_fetch_sub(&f->nclaims, 1);
}

static void do_expired(struct flight *f, struct flight_claim *c)
{
	if (!c->expired) {
		c->expired = true;
		f->st.expired++;
	}
}

/* The claim follows the chain a from its key on. false: out of memory. */
static bool do_set_chain(struct flight *f, struct flight_claim *c, const struct flight_ask *a)
{
	uint8_t *chain = malloc((size_t)a->n * PD_HASH_SIZE);
	if (!chain)
		return false;
	memcpy(chain, a->hashes, (size_t)a->n * PD_HASH_SIZE);
	if (c->chain)
		do_hash_unlink(f, c);
	free(c->chain);
	c->chain = chain;
	c->n = a->n;
	c->pos = 0;
	do_hash_link(f, c);
	return true;
}

/* ==== Requests ==== */

enum flight_verdict flight_decide(struct flight *f, struct flight_conn *fc,
				  const struct flight_ask *a, uint64_t now_ms,
				  uint64_t *wake_at_ms)
{
	enum flight_verdict v = FLIGHT_NONE;
	pthread_mutex_lock(&f->lock);
	if (atomic_load(&f->seq) != a->seq) {
		v = FLIGHT_RETRY;
		goto out;
	}
	struct flight_claim *c = do_find(f, a->ns, a->hashes);
	if (!c)
		c = do_find_ahead(f, a->ns, a->hashes);
	if (c && c->owner == fc) {
		/* Its own claim, asked again: renewed, on this chain. */
		do_set_chain(f, c, a);
		c->deadline_ms = now_ms + f->timeout_ms;
		v = FLIGHT_CLAIMED;
		goto out;
	}
	if (c && c->owner && now_ms < c->deadline_ms) {
		struct flight_user *u = a->may_wait ? do_user(f, fc->uid, true) : NULL;
		if (!u || (!fc->counted && u->waits >= FLIGHT_USER_WAITS)) {
			if (u)
				do_user_put(f, u);
			goto out;
		}
		if (!fc->counted) {
			u->waits++;
			fc->counted = true;
		}
		fc->on = c;
		fc->wprev = NULL;
		fc->wnext = c->waiters;
		if (c->waiters)
			c->waiters->wprev = fc;
		c->waiters = fc;
		atomic_store_explicit(&fc->woken, false, memory_order_relaxed);
		*wake_at_ms = c->deadline_ms;
		v = FLIGHT_WAIT;
		goto out;
	}
	if (c)
		do_expired(f, c); /* its claimant closed or is late */
	if (!a->may_claim || fc->nclaims >= FLIGHT_CONN_CLAIMS)
		goto out;
	struct flight_user *u = do_user(f, fc->uid, true);
	if (!u)
		goto out;
	if (u->claims >= FLIGHT_USER_CLAIMS) {
		do_user_put(f, u);
		goto out;
	}
	if (c) {
		/* Inherited: the claim, its waiters and its place stay. */
		if (!do_set_chain(f, c, a))
			goto out;
		do_owner_unlink(c);
		struct flight_user *old = do_user(f, c->uid, false);
		if (old) {
			old->claims--;
			do_user_put(f, old);
		}
		c->uid = fc->uid;
		u->claims++;
		do_owner_link(c, fc);
		c->deadline_ms = now_ms + f->timeout_ms;
		c->expired = false;
		f->st.inherited++;
		v = FLIGHT_INHERITED;
		goto out;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		do_user_put(f, u);
		goto out;
	}
	c->ns = a->ns;
	if (!do_set_chain(f, c, a)) {
		free(c);
		do_user_put(f, u);
		goto out;
	}
	c->uid = fc->uid;
	u->claims++;
	do_owner_link(c, fc);
	c->deadline_ms = now_ms + f->timeout_ms;
	atomic_fetch_add(&f->nclaims, 1);
	f->st.claims++;
	v = FLIGHT_CLAIMED;
out:
	pthread_mutex_unlock(&f->lock);
	return v;
}

bool flight_unpark(struct flight *f, struct flight_conn *fc)
{
	pthread_mutex_lock(&f->lock);
	if (fc->on)
		do_unlink_waiter(fc);
	bool dropped = fc->dropped;
	fc->dropped = false;
	atomic_store_explicit(&fc->woken, false, memory_order_relaxed);
	pthread_mutex_unlock(&f->lock);
	return dropped;
}

void flight_count_wait(struct flight *f)
{
	pthread_mutex_lock(&f->lock);
	f->st.waits++;
	pthread_mutex_unlock(&f->lock);
}

static void do_wait_end(struct flight *f, struct flight_conn *fc)
{
	if (fc->on)
		do_unlink_waiter(fc);
	if (!fc->counted)
		return;
	fc->counted = false;
	struct flight_user *u = do_user(f, fc->uid, false);
	if (u) {
		u->waits--;
		do_user_put(f, u);
	}
}

void flight_wait_done(struct flight *f, struct flight_conn *fc, uint64_t waited_ms)
{
	pthread_mutex_lock(&f->lock);
	do_wait_end(f, fc);
	f->st.wait_ms += waited_ms;
	pthread_mutex_unlock(&f->lock);
}

void flight_conn_close(struct flight *f, struct flight_conn *fc)
{
	pthread_mutex_lock(&f->lock);
	do_wait_end(f, fc);
	while (fc->claims) {
		struct flight_claim *c = fc->claims;
		do_expired(f, c);
		if (!c->waiters) {
			do_claim_free(f, c, false);
			continue;
		}
		/* Orphaned: its waiters run again, and the first that
		 * claims inherits it. */
		do_owner_unlink(c);
		c->deadline_ms = 0;
		do_wake_all(c, false);
	}
	pthread_mutex_unlock(&f->lock);
}

void flight_published(struct flight *f, uint32_t ns, const uint8_t *hashes, uint32_t count,
		      uint64_t now_ms)
{
	bool moved = false;
	if (!atomic_load(&f->nclaims))
		return;
	pthread_mutex_lock(&f->lock);
	for (uint32_t i = 0; i < count; i++) {
		struct flight_claim *c = do_find(f, ns, hashes + (size_t)i * PD_HASH_SIZE);
		if (!c)
			continue;
		uint32_t j = c->pos, k = i;
		while (j < c->n && k < count &&
		       !memcmp(c->chain + (size_t)j * PD_HASH_SIZE, hashes + (size_t)k * PD_HASH_SIZE,
			       PD_HASH_SIZE))
			j++, k++;
		moved = true;
		if (j == c->n) {
			do_claim_free(f, c, false); /* its whole chain is cached */
		} else {
			do_hash_unlink(f, c);
			c->pos = j;
			do_hash_link(f, c);
			if (c->owner)
				c->deadline_ms = now_ms + f->timeout_ms;
			do_wake_all(c, false);
		}
		i = k - 1;
	}
	if (moved)
		atomic_fetch_add(&f->seq, 1);
	pthread_mutex_unlock(&f->lock);
}

void flight_dropped(struct flight *f, uint32_t ns, const uint8_t *key)
{
	if (!atomic_load(&f->nclaims))
		return;
	pthread_mutex_lock(&f->lock);
	struct flight_claim *c = do_find(f, ns, key);
	if (c) {
		do_claim_free(f, c, true);
		atomic_fetch_add(&f->seq, 1);
	}
	pthread_mutex_unlock(&f->lock);
}

void flight_expire(struct flight *f, uint64_t now_ms)
{
	pthread_mutex_lock(&f->lock);
	for (size_t b = 0; b < NBUCKETS; b++)
		for (struct flight_claim *c = f->buckets[b], *next; c; c = next) {
			next = c->hnext;
			if (c->waiters || (c->owner && now_ms < c->deadline_ms))
				continue;
			do_expired(f, c);
			do_claim_free(f, c, false);
		}
	pthread_mutex_unlock(&f->lock);
}

void flight_get_stats(struct flight *f, struct flight_stats *out)
{
	pthread_mutex_lock(&f->lock);
	*out = f->st;
	pthread_mutex_unlock(&f->lock);
}
