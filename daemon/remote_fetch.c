/* SPDX-License-Identifier: MIT */
/*
 * A MATCH's lookups in the remote tier (remote.h): the chain's next keys
 * in pipelined GETs on the worker's own client, each value checked whole
 * (size, MAC, record, chain, tokens) before it is imported, as soon as it
 * has come: checking block i overlaps Redis sending block i + 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "daemon.h"
#include "groups.h"
#include "record.h"
#include "remote_impl.h"
#include "store.h"

/* Records asked for in one call, and the bytes they may hold: 64 MiB, 22
 * SmolLM-135M blocks. The timeout is of a round that moves no byte
 * (kv.h), so a large fetch that keeps flowing goes on: it is work the
 * client would otherwise do, slower. Each node has FETCH_WINDOW bytes of
 * records asked for and unanswered at most (3 SmolLM blocks; 2 records
 * at least): Redis copies a pipeline's replies whole before it sends the
 * first, so rounds of 5 GETs at once kept the fetch waiting 3-14 ms a
 * round with Redis idle between rounds (docs/perf/2026-11-30-remote-fetch-2.md).
 * Values taken as they come, the client holds one or two of them, so
 * the rounds are long: a round's end still costs a round trip. */
#define FETCH_MAX 64
#define FETCH_BYTES ((uint64_t)64 << 20)
#define FETCH_WINDOW ((uint64_t)8 << 20)
#define FETCH_POOL ((uint64_t)48 << 20)

static uint64_t mono_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

/* The calling thread's client, made on first use. */
static struct kv *thread_kv(struct remote *r)
{
	struct kv *k = pthread_getspecific(r->tls);
	char why[200];
	if (k)
		return k;
	if (kv_open(&r->kv_opts, &k, why, sizeof(why))) {
		static struct pd_log_limit cut;
		pd_log_limited(&cut, "remote tier: %s", why);
		return NULL;
	}
	pthread_setspecific(r->tls, k);
	return k;
}

/*
 * Checks the value of block pos of a's chain: its size, its MAC (with a
 * key), the record (checksums, the block, model and namespace asked for),
 * its depth, parent and tokens. 0 and *m, else the counter it goes to
 * bumped, and -errno with *why.
 */
static int check_value(struct remote *r, const struct remote_ask *a, uint32_t pos,
		       const uint8_t *v, size_t len, struct rec_meta *m, const char **why)
{
	size_t size = rec_size(r->block_tokens, a->block_bytes);
	size_t mac = r->has_key ? MAC_BYTES : 0;
	if (mac && len == size) {
		*why = "it is not signed (written by a daemon without the key)";
		atomic_fetch_add(&r->bad_mac, 1);
		return -EACCES;
	}
	if (len != size + mac) {
		*why = "its size is not a record's (cut short, or of another kind)";
		atomic_fetch_add(&r->bad_checksum, 1);
		return -EBADMSG;
	}
	if (mac && !remote_mac_ok(r, v, size, v + size)) {
		*why = "its MAC is not valid (forged, or signed with another key)";
		atomic_fetch_add(&r->bad_mac, 1);
		return -EACCES;
	}
	struct idx_root root = { .ns = a->ns };
	memcpy(root.h0, a->h0, PD_HASH_SIZE);
	const uint8_t *hash = a->hashes + (size_t)pos * PD_HASH_SIZE;
	struct rec_expect want = { r->block_tokens, a->block_bytes, &root, a->fp, hash };
	int rc = rec_check(v, size, &want, m, why);
	if (rc == -EACCES) {
		atomic_fetch_add(&r->bad_foreign, 1);
		return rc;
	}
	if (rc) {
		atomic_fetch_add(&r->bad_checksum, 1);
		return -EBADMSG;
	}
	const uint8_t *parent = pos ? hash - PD_HASH_SIZE : NULL;
	bool chain = m->depth == pos &&
		     (parent ? !memcmp(m->parent, parent, PD_HASH_SIZE) : true);
	for (uint32_t t = 0; chain && t < r->block_tokens; t++)
		chain = pd_token_at(m->tokens, r->block_tokens, 0, t) ==
			a->tokens[(size_t)pos * r->block_tokens + t];
	if (!chain) {
		*why = "it is another block of the chain, or of another prompt";
		atomic_fetch_add(&r->bad_foreign, 1);
		return -EACCES;
	}
	return 0;
}

/*
 * store_fill_copy, with the slot's pages asked for in one call first: a
 * fresh slot's pages otherwise come one fault at a time as the copy
 * writes them, the largest part of a fetch into a daemon that just
 * started (61 against 73 ms of thread CPU for 94 MB of records here,
 * docs/perf/2026-11-29-remote-fetch.md). A kernel without
 * MADV_POPULATE_WRITE (before 5.14) says EINVAL: the copy faults as before.
 */
static int fill_slot(void *ctx, uint32_t i, struct idx_loc loc)
{
	const struct store_copy *f = ctx;
	uint8_t *dst = store_slot(f->store, loc);
	if (dst)
		madvise(dst, f->len, MADV_POPULATE_WRITE);
	return store_fill_copy(ctx, i, loc);
}

/* A round's blocks, taken in chain order as their values come. */
struct round {
	struct remote *r;
	const struct remote_ask *a;
	uint32_t from, n;
	char (*names)[REMOTE_KEY_MAX];
	uint32_t *tokens;
	struct idx_held held;
	uint32_t got;  /* imported: blocks [from, from + got) */
	bool stopped;  /* a block failed: nothing after it is taken */
};

/* Checks and imports the value of block from + i: false when it ends the
 * hit (dropped and counted, or no room). */
static bool take_value(struct round *o, uint32_t i, const uint8_t *v, size_t len)
{
	struct remote *r = o->r;
	const struct remote_ask *a = o->a;
	atomic_fetch_add(&r->bytes_in, len);
	struct rec_meta m;
	const char *why = NULL;
	if (check_value(r, a, o->from + i, v, len, &m, &why)) {
		static struct pd_log_limit cut;
		pd_log_limited(&cut, "remote tier: the value of %s: %s: dropped, the client computes the block again",
			       o->names[i], why ? why : "bad record");
		return false;
	}
	struct idx_block b;
	if (groups_record_block(&m, r->block_tokens, o->tokens, &b, &why)) {
		atomic_fetch_add(&r->bad_checksum, 1);
		return false;
	}
	b.ns = a->ns;
	struct store_copy f = { a->store, v + m.payload_off, m.payload };
	bool dedup;
	if (idx_import(a->x, a->g, &b, fill_slot, &f, &dedup, &o->held))
		return false;
	idx_mark_remote(a->x, a->ns, b.hash);
	atomic_fetch_add(&r->hits, 1);
	return true;
}

/* kv_get_each's callback: the next block of the chain is taken while the
 * values after it still arrive, and its room in the client's buffer goes
 * to the next; one that comes before its parent is kept for the end of
 * the call, and once a block failed none after it is wanted. */
static bool on_value(void *ctx, uint32_t i, const uint8_t *v, size_t len)
{
	struct round *o = ctx;
	if (o->stopped)
		return true;
	if (i != o->got)
		return false;
	if (take_value(o, i, v, len))
		o->got++;
	else
		o->stopped = true;
	return true;
}

/* One pipelined GET of blocks [from, from + n): how many were imported. */
static uint32_t fetch_round(struct remote *r, struct kv *k, const struct remote_ask *a,
			    uint32_t from, uint32_t n, bool *more)
{
	struct round o = { .r = r, .a = a, .from = from, .n = n,
			   /* A MATCH never waits for the disk writer: a block
			    * with no room ends the hit, as a restore's does. */
			   .held = { .no_wait = true } };
	o.names = malloc((size_t)n * REMOTE_KEY_MAX);
	o.tokens = malloc(r->block_tokens * sizeof(uint32_t));
	const char *keys[FETCH_MAX] = { 0 };
	const uint8_t *vals[FETCH_MAX];
	size_t lens[FETCH_MAX];
	int res[FETCH_MAX];
	*more = false;
	if (!o.names || !o.tokens) {
		free(o.names);
		free(o.tokens);
		return 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		remote_key(a->ns, a->fp, a->block_bytes, r->block_tokens,
			   a->hashes + (size_t)(from + i) * PD_HASH_SIZE, o.names[i]);
		keys[i] = o.names[i];
	}
	size_t size = rec_size(r->block_tokens, a->block_bytes);
	uint64_t w = size ? (FETCH_WINDOW + size - 1) / size : n;
	int rc = kv_get_each(k, n, keys, vals, lens, res, w < 2 ? 2 : (uint32_t)(w < n ? w : n),
			     on_value, &o);
	/* Every key answered, found or not: Redis is fine. */
	remote_breaker_result(r, !rc);
	if (rc) {
		static struct pd_log_limit cut;
		pd_log_limited(&cut, "remote tier: a lookup failed (%s): a miss", kv_errmsg(k));
	}
	/* What the call did not take as it came: the block where it stopped,
	 * a miss, an error, or values that came out of order. */
	for (uint32_t i = o.got; !o.stopped && i < n; i++) {
		if (res[i] == -ENOENT) {
			if (!o.got && from == a->from)
				atomic_fetch_add(&r->misses, 1);
			break;
		}
		if (res[i] || !take_value(&o, i, vals[i], lens[i]))
			break;
		o.got++;
	}
	idx_import_end(a->x, &o.held);
	*more = o.got == n;
	free(o.names);
	free(o.tokens);
	return o.got;
}

uint32_t remote_fetch(struct remote *r, const struct remote_ask *a)
{
	if (!r || a->from >= a->count || !remote_wants(r, a->ns))
		return 0;
	/* Known absent: a miss that costs nothing (the index never decides
	 * what is served, only whether to ask). */
	if (remote_watch_rules_out(r, a)) {
		atomic_fetch_add(&r->misses, 1);
		return 0;
	}
	if (!remote_breaker_allow(r)) {
		atomic_fetch_add(&r->skipped, 1);
		return 0;
	}
	struct kv *k = thread_kv(r);
	if (!k) {
		remote_breaker_result(r, false);
		return 0;
	}
	uint64_t t0 = mono_us();
	size_t size = rec_size(r->block_tokens, a->block_bytes);
	uint32_t per = size ? (uint32_t)(FETCH_BYTES / size) : 0, got = 0;
	per = per < 1 ? 1 : per > FETCH_MAX ? FETCH_MAX : per;
	/* Slots kept populated ahead, from now on (store.c): the pages the
	 * blocks go into are written before the next fetch, or on the other
	 * CPU while Redis sends and this thread checks. Without the thread
	 * the fetch faults its slots itself, as before. */
	uint64_t pool = size ? FETCH_POOL / size : 0;
	if (store_pool(a->store, pool < 2 ? 2 : (uint32_t)pool)) {
		static struct pd_log_limit cut;
		pd_log_limited(&cut, "remote tier: no thread to populate slots ahead: fetches fault their own");
	}
	bool more = true;
	/* Rounds of as many records as FETCH_BYTES hold, while each finds all
	 * it asked for; each round bounded by the timeout. */
	for (uint32_t from = a->from; more && from < a->count; from += per) {
		uint32_t n = a->count - from < per ? a->count - from : per;
		got += fetch_round(r, k, a, from, n, &more);
		if (more && from + n < a->count && !remote_breaker_allow(r))
			break;
	}
	atomic_fetch_add(&r->fetch_us, mono_us() - t0);
	return got;
}

