/* SPDX-License-Identifier: MIT */
/*
 * The remote tier's writer (remote.h): the blocks of each publish queued,
 * held as an export holds them while they are encoded and signed, then
 * sent in pipelined SETs on the writer's own client.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "record.h"
#include "remote_impl.h"
#include "store.h"

/* Records in one pipelined SET, and their bytes (one record at least):
 * 16 MiB, 5 SmolLM-135M blocks, ~10 ms on a loopback or a 10 Gb/s link. */
#define WRITE_BATCH 32
#define WRITE_BYTES ((size_t)16 << 20)
/* The writer's round trips: it delays no one, so it waits longer than a
 * MATCH may (a busy Redis is not a dead one), but never less. */
#define WRITE_TIMEOUT_MS 1000

void remote_published(struct remote *r, uint32_t ns, const uint8_t *last, uint32_t n)
{
	if (!r || !r->started || !n || !remote_wants(r, ns))
		return;
	pthread_mutex_lock(&r->mu);
	if (r->q_len == QUEUE_MAX) {
		pthread_mutex_unlock(&r->mu);
		atomic_fetch_add(&r->write_drops, n);
		return;
	}
	struct job *j = &r->q[(r->q_head + r->q_len++) % QUEUE_MAX];
	j->ns = ns;
	j->n = n;
	memcpy(j->hash, last, PD_HASH_SIZE);
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

struct out_batch {
	char keys[WRITE_BATCH][REMOTE_KEY_MAX];
	const char *kp[WRITE_BATCH];
	uint8_t *vals[WRITE_BATCH];
	size_t lens[WRITE_BATCH];
	int res[WRITE_BATCH];
	uint32_t ns[WRITE_BATCH];
	uint8_t hash[WRITE_BATCH][PD_HASH_SIZE];
	uint32_t n;
	size_t bytes;
};

/* Sends the batch in one pipeline and frees its values. */
static void flush(struct remote *r, struct kv *k, struct out_batch *o)
{
	if (!o->n)
		return;
	int rc = remote_breaker_allow(r) ? 0 : -EAGAIN;
	if (!rc) {
		rc = kv_set(k, o->n, o->kp, (const uint8_t *const *)o->vals, o->lens,
			    r->cfg.ttl_s * 1000, o->res);
		/* Once more at once: a connection that broke since the last
		 * batch (a restarted Redis) is made again only by a call. SET
		 * is idempotent, and the writer delays no one. */
		if (rc)
			rc = kv_set(k, o->n, o->kp, (const uint8_t *const *)o->vals, o->lens,
				    r->cfg.ttl_s * 1000, o->res);
		remote_breaker_result(r, !rc);
	}
	for (uint32_t i = 0; i < o->n; i++) {
		if (!rc && !o->res[i]) {
			idx_mark_remote(r->x, o->ns[i], o->hash[i]);
			remote_watch_wrote(r, o->keys[i]);
			atomic_fetch_add(&r->writes, 1);
			atomic_fetch_add(&r->bytes_out, o->lens[i]);
		} else {
			atomic_fetch_add(&r->write_drops, 1);
		}
		free(o->vals[i]);
	}
	if (rc && rc != -EAGAIN) {
		static struct pd_log_limit cut;
		pd_log_limited(&cut, "remote tier: %u records not written: %s", o->n, kv_errmsg(k));
	}
	o->n = 0;
	o->bytes = 0;
}

/* Block b's record (and MAC) into a new value of the batch. */
static int encode(struct remote *r, const struct idx_block *b, struct out_batch *o)
{
	uint64_t bb = b->store.block_bytes;
	size_t size = rec_size(r->block_tokens, bb), mac = r->has_key ? MAC_BYTES : 0;
	const uint8_t *payload = store_slot(b->store.ctx, b->loc);
	if (!size || !payload)
		return -EINVAL;
	uint8_t *v = malloc(size + mac);
	if (!v)
		return -ENOMEM;
	struct rec_meta m;
	rec_meta_of(b, r->block_tokens, &m);
	int rc = rec_encode(&m, b->tokens, payload, v, size);
	if (rc < 0) {
		free(v);
		return rc;
	}
	if (mac)
		remote_mac_sign(r, v, size, v + size);
	uint32_t i = o->n++;
	remote_key(b->ns, b->fp, bb, r->block_tokens, b->hash, o->keys[i]);
	o->kp[i] = o->keys[i];
	o->ns[i] = b->ns;
	memcpy(o->hash[i], b->hash, PD_HASH_SIZE);
	o->vals[i] = v;
	o->lens[i] = size + mac;
	o->bytes += size + mac;
	return 0;
}

/* The last j->n blocks of j's chain that are in memory, into batches. */
static void write_job(struct remote *r, struct kv *k, const struct job *j, struct out_batch *o)
{
	struct pd_export sel = { .flags = PD_EXPORT_ID, .id = { .uid = j->ns } };
	memcpy(sel.id.key, j->hash, PD_HASH_SIZE);
	struct idx_block *bs;
	uint32_t n;
	if (idx_export_take(r->x, &sel, &bs, &n)) {
		atomic_fetch_add(&r->write_drops, j->n); /* gone already */
		return;
	}
	uint32_t first = n > j->n ? n - j->n : 0;
	atomic_fetch_add(&r->write_drops, j->n - (n - first));
	for (uint32_t i = first; i < n; i++) {
		/* Written behind soon after its publish: a block already
		 * evicted to disk only is left out. */
		if (!bs[i].resident || encode(r, &bs[i], o)) {
			atomic_fetch_add(&r->write_drops, 1);
			continue;
		}
		if (o->n == WRITE_BATCH || o->bytes >= WRITE_BYTES)
			flush(r, k, o);
	}
	idx_export_done(r->x, bs, n);
}

void *remote_writer(void *arg)
{
	struct remote *r = arg;
	struct out_batch *o = calloc(1, sizeof(*o));
	struct kv *k = NULL;
	char why[200];
	struct kv_opts wo = r->kv_opts;
	if (wo.timeout_ms < WRITE_TIMEOUT_MS)
		wo.timeout_ms = WRITE_TIMEOUT_MS;
	if (!o || kv_open(&wo, &k, why, sizeof(why)))
		pd_err("remote tier: the writer cannot start: %s: nothing is written",
		       o ? why : "out of memory");
	pthread_mutex_lock(&r->mu);
	while (!r->stop) {
		if (!r->q_len) {
			pthread_cond_wait(&r->cv, &r->mu);
			continue;
		}
		struct job jobs[8];
		uint32_t n = 0;
		while (r->q_len && n < 8) {
			jobs[n++] = r->q[r->q_head];
			r->q_head = (r->q_head + 1) % QUEUE_MAX;
			r->q_len--;
		}
		pthread_mutex_unlock(&r->mu);
		for (uint32_t i = 0; i < n; i++) {
			if (k && o)
				write_job(r, k, &jobs[i], o);
			else
				atomic_fetch_add(&r->write_drops, jobs[i].n);
		}
		if (k && o)
			flush(r, k, o);
		pthread_mutex_lock(&r->mu);
	}
	pthread_mutex_unlock(&r->mu);
	kv_close(k);
	free(o);
	return NULL;
}

