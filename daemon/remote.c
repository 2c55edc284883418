/* SPDX-License-Identifier: MIT */
/*
 * The remote tier (remote.h): flags and secrets, the writer thread, the
 * MATCH's lookup, the circuit breaker.
 */
#include "remote.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "groups.h"
#include "record.h"
#include "remote/kv.h"
#include "store.h"

/* Blocks waiting to be written (jobs of one publish each): past it, a
 * publish's blocks are dropped, never waited for. */
#define QUEUE_MAX 256
/* Records in one pipelined SET, and their bytes (one record at least).
 * Each round trip must fit in --remote-timeout: 16 MiB is 5 SmolLM-135M
 * blocks, ~10 ms on a loopback or a 10 Gb/s link, where a whole 2048-token
 * prefix (94 MB) in one would not fit the default 50 ms. */
#define WRITE_BATCH 32
#define WRITE_BYTES ((size_t)16 << 20)
/* Records asked for in one pipelined GET, and the bytes they may hold. */
#define FETCH_MAX 64
#define FETCH_BYTES ((uint64_t)16 << 20)
/* The breaker opens after this many failures in a row, for a backoff that
 * doubles from BACKOFF_MIN_MS up to BACKOFF_MAX_MS while probes fail. */
#define BREAKER_FAILS 3
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 10000
/* The MAC: keyed BLAKE2b-256 (a MAC by construction, RFC 7693), four
 * times the speed of HMAC-SHA-512-256 here (0.47 against 0.12 GB/s on a
 * loaded 2-core Xeon): on every byte of every record fetched, it bounds
 * the remote tier's throughput. */
#define MAC_BYTES 32
/* The writer's round trips: it delays no one, so it waits longer than a
 * MATCH may (a busy Redis is not a dead one), but never less. */
#define WRITE_TIMEOUT_MS 1000
#define SECRET_MAX 4096

struct job {
	uint32_t ns, n;
	uint8_t hash[PD_HASH_SIZE];
};

struct remote {
	struct remote_cfg cfg;
	uint32_t block_tokens;
	bool has_key;
	uint8_t key[crypto_generichash_KEYBYTES];
	char *password;
	struct kv_opts kv_opts;
	pthread_key_t tls;          /* each MATCH thread's own client */
	bool tls_made;

	struct idx *x;
	pthread_t thread;
	bool started;
	pthread_mutex_t mu;         /* guards the queue and stop; a leaf */
	pthread_cond_t cv;
	struct job q[QUEUE_MAX];
	uint32_t q_head, q_len;
	bool stop;

	/* The breaker, shared by every thread. */
	_Atomic uint32_t fails;
	_Atomic int64_t open_until_ms;
	_Atomic uint32_t backoff_ms;
	_Atomic bool probing;

	_Atomic uint64_t hits, misses, bytes_in, bytes_out, writes, write_drops, errors,
		bad_checksum, bad_foreign, bad_mac, breaker_opens, skipped, fetch_us;
};

static int64_t mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static uint64_t mono_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

static void hex(char *out, const uint8_t *p, size_t n)
{
	static const char d[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[p[i] >> 4];
		out[2 * i + 1] = d[p[i] & 15];
	}
	out[2 * n] = 0;
}

void remote_key(uint32_t ns, const uint8_t *fp, uint64_t block_bytes, uint32_t block_tokens,
		const uint8_t *hash, char out[REMOTE_KEY_MAX])
{
	char f[2 * PD_FP_SIZE + 1], h[2 * PD_HASH_SIZE + 1];
	hex(f, fp, PD_FP_SIZE);
	hex(h, hash, PD_HASH_SIZE);
	snprintf(out, REMOTE_KEY_MAX, "pfx1:%u:%s:%llu:%u:%s", (unsigned)ns, f,
		 (unsigned long long)block_bytes, (unsigned)block_tokens, h);
}

/* ==== Flags and secrets ==== */

/* A thread's client, at its exit. */
static void kv_free(void *k)
{
	kv_close(k);
}

/* The first line of a secret file (a regular file of ours, unreadable by
 * others) into buf, NUL-terminated; *len its bytes. 0 or -errno, why set. */
static int read_secret(const char *flag, const char *path, char *buf, size_t cap, size_t *len,
		       char *why, size_t why_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st)) {
		int e = errno;
		snprintf(why, why_len, "%s %s: %s", flag, path, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	int rc = 0;
	if (!S_ISREG(st.st_mode))
		snprintf(why, why_len, "%s %s: not a regular file", flag, path), rc = -EINVAL;
	else if (st.st_uid != geteuid() && st.st_uid != 0)
		snprintf(why, why_len, "%s %s: owned by uid %u, neither prefixd's user nor root", flag,
			 path, (unsigned)st.st_uid), rc = -EPERM;
	else if (st.st_mode & 077)
		snprintf(why, why_len, "%s %s: other users may read or write it (mode %03o): chmod 600 it",
			 flag, path, (unsigned)(st.st_mode & 0777)), rc = -EPERM;
	ssize_t n = rc ? 0 : read(fd, buf, cap - 1);
	close(fd);
	if (rc)
		return rc;
	if (n < 0) {
		snprintf(why, why_len, "%s %s: %s", flag, path, strerror(errno));
		return -EIO;
	}
	buf[n] = 0;
	size_t l = strcspn(buf, "\r\n");
	buf[l] = 0;
	if (!l) {
		snprintf(why, why_len, "%s %s: its first line is empty", flag, path);
		return -EINVAL;
	}
	*len = l;
	return 0;
}

int remote_open(const struct remote_cfg *cfg, uint32_t block_tokens, struct remote **out,
		char *why, size_t why_len)
{
	*out = NULL;
	if (!cfg->n_seeds) {
		snprintf(why, why_len, "--remote: give the Redis to use (redis://HOST:PORT or unix:PATH)");
		return -EINVAL;
	}
	if (cfg->n_seeds > 1 && !cfg->cluster) {
		snprintf(why, why_len, "--remote given %u times: several servers are the seeds of a Redis Cluster; add --remote-cluster",
			 (unsigned)cfg->n_seeds);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < cfg->n_seeds; i++) {
		char w[200];
		if (kv_parse_seed(cfg->seeds[i], w, sizeof(w))) {
			snprintf(why, why_len, "--remote '%s': %s", cfg->seeds[i], w);
			return -EINVAL;
		}
	}
	struct remote *r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(why, why_len, "out of memory");
		return -ENOMEM;
	}
	r->cfg = *cfg;
	r->block_tokens = block_tokens;
	atomic_store(&r->backoff_ms, BACKOFF_MIN_MS);
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	char *buf = malloc(SECRET_MAX);
	size_t len;
	int rc = buf ? 0 : -ENOMEM;
	if (!rc && cfg->key_file &&
	    !(rc = read_secret("--remote-key-file", cfg->key_file, buf, SECRET_MAX, &len, why,
			       why_len))) {
		/* Any secret of enough entropy: hashed to the MAC's key size. */
		if (len < 32) {
			snprintf(why, why_len, "--remote-key-file %s: the key is %zu bytes; it needs 32 at least (e.g. head -c 32 /dev/urandom | base64 > FILE)",
				 cfg->key_file, len);
			rc = -EINVAL;
		} else {
			crypto_generichash(r->key, sizeof(r->key), (const uint8_t *)buf, len, NULL, 0);
			r->has_key = true;
		}
		sodium_memzero(buf, SECRET_MAX);
	}
	if (!rc && cfg->auth_file &&
	    !(rc = read_secret("--remote-auth-file", cfg->auth_file, buf, SECRET_MAX, &len, why,
			       why_len)) &&
	    !(r->password = strdup(buf)))
		rc = -ENOMEM;
	if (buf)
		sodium_memzero(buf, SECRET_MAX);
	free(buf);
	r->kv_opts = (struct kv_opts){ r->cfg.seeds, r->cfg.n_seeds, r->cfg.cluster, r->password,
				       r->cfg.timeout_ms };
	/* A client now only to check the options: each thread makes its own. */
	struct kv *k = NULL;
	char w[200];
	if (!rc && (rc = kv_open(&r->kv_opts, &k, w, sizeof(w))))
		snprintf(why, why_len, "--remote: %s", w);
	kv_close(k);
	if (!rc && (rc = -pthread_key_create(&r->tls, kv_free)))
		snprintf(why, why_len, "out of thread keys");
	r->tls_made = !rc;
	if (rc) {
		if (rc == -ENOMEM)
			snprintf(why, why_len, "out of memory");
		remote_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

bool remote_wants(const struct remote *r, uint32_t ns)
{
	return r && (ns == PD_NS_SHARED || r->cfg.all_users);
}

/* ==== The breaker ==== */

/* Whether a call may go to Redis now: always while it answers; while the
 * breaker is open, none until the backoff ends, then one probe at a time. */
static bool breaker_allow(struct remote *r)
{
	if (atomic_load(&r->fails) < BREAKER_FAILS)
		return true;
	if (mono_ms() < atomic_load(&r->open_until_ms))
		return false;
	bool idle = false;
	return atomic_compare_exchange_strong(&r->probing, &idle, true);
}

static void breaker_result(struct remote *r, bool ok)
{
	if (ok) {
		if (atomic_exchange(&r->fails, 0) >= BREAKER_FAILS)
			pd_log("remote tier: Redis answers again");
		atomic_store(&r->backoff_ms, BACKOFF_MIN_MS);
		atomic_store(&r->probing, false);
		return;
	}
	atomic_fetch_add(&r->errors, 1);
	uint32_t f = atomic_fetch_add(&r->fails, 1) + 1;
	if (f < BREAKER_FAILS)
		return;
	uint32_t b = atomic_load(&r->backoff_ms);
	atomic_store(&r->open_until_ms, mono_ms() + b);
	atomic_store(&r->backoff_ms, b * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : b * 2);
	if (f == BREAKER_FAILS) {
		atomic_fetch_add(&r->breaker_opens, 1);
		pd_log("remote tier: Redis does not answer: no lookups for %u ms, then a probe (the backoff grows while it fails)",
		       (unsigned)b);
	}
	atomic_store(&r->probing, false);
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

/* ==== The writer ==== */

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
	int rc = breaker_allow(r) ? 0 : -EAGAIN;
	if (!rc) {
		rc = kv_set(k, o->n, o->kp, (const uint8_t *const *)o->vals, o->lens,
			    r->cfg.ttl_s * 1000, o->res);
		/* Once more at once: a connection that broke since the last
		 * batch (a restarted Redis) is made again only by a call. SET
		 * is idempotent, and the writer delays no one. */
		if (rc)
			rc = kv_set(k, o->n, o->kp, (const uint8_t *const *)o->vals, o->lens,
				    r->cfg.ttl_s * 1000, o->res);
		breaker_result(r, !rc);
	}
	for (uint32_t i = 0; i < o->n; i++) {
		if (!rc && !o->res[i]) {
			idx_mark_remote(r->x, o->ns[i], o->hash[i]);
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
		crypto_generichash(v + size, MAC_BYTES, v, size, r->key, sizeof(r->key));
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

static void *writer(void *arg)
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

int remote_start(struct remote *r, struct idx *x)
{
	r->x = x;
	int rc = -pthread_create(&r->thread, NULL, writer, r);
	r->started = !rc;
	if (!rc)
		pd_log("remote tier: %s%s%s, records %s, the %s go remote, %u ms a lookup at most%s",
		       r->cfg.cluster ? "a Redis Cluster from " : "Redis at ", r->cfg.seeds[0],
		       r->cfg.n_seeds > 1 ? " and other seeds" : "",
		       r->has_key ? "signed (--remote-key-file)"
				  : "unsigned: every writer to this Redis is trusted",
		       r->cfg.all_users ? "shared and every user's namespaces" : "shared namespace's blocks",
		       (unsigned)r->cfg.timeout_ms, r->cfg.ttl_s ? ", with a TTL" : "");
	return rc;
}

void remote_close(struct remote *r)
{
	if (!r)
		return;
	if (r->started) {
		pthread_mutex_lock(&r->mu);
		r->stop = true;
		pthread_cond_signal(&r->cv);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->thread, NULL);
	}
	if (r->tls_made) {
		/* The calling thread's own client, if it made one. */
		kv_close(pthread_getspecific(r->tls));
		pthread_key_delete(r->tls);
	}
	if (r->password) {
		sodium_memzero(r->password, strlen(r->password));
		free(r->password);
	}
	sodium_memzero(r->key, sizeof(r->key));
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

/* ==== Lookups ==== */

struct fill_ctx {
	struct store *store;
	const uint8_t *payload;
	uint64_t len;
};

static int fill_from_value(void *ctx, uint32_t i, struct idx_loc loc)
{
	struct fill_ctx *f = ctx;
	(void)i;
	uint8_t *dst = store_slot(f->store, loc);
	if (!dst)
		return -EINVAL;
	memcpy(dst, f->payload, f->len);
	return 0;
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
	uint8_t want_mac[MAC_BYTES];
	if (mac)
		crypto_generichash(want_mac, MAC_BYTES, v, size, r->key, sizeof(r->key));
	if (mac && sodium_memcmp(want_mac, v + size, MAC_BYTES)) {
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

/* One pipelined GET of blocks [from, from + n): how many were imported. */
static uint32_t fetch_round(struct remote *r, struct kv *k, const struct remote_ask *a,
			    uint32_t from, uint32_t n, bool *more)
{
	char (*names)[REMOTE_KEY_MAX] = malloc((size_t)n * REMOTE_KEY_MAX);
	const char *keys[FETCH_MAX] = { 0 };
	const uint8_t *vals[FETCH_MAX];
	size_t lens[FETCH_MAX];
	int res[FETCH_MAX];
	uint32_t *tokens = malloc(r->block_tokens * sizeof(uint32_t));
	*more = false;
	if (!names || !tokens) {
		free(names);
		free(tokens);
		return 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		remote_key(a->ns, a->fp, a->block_bytes, r->block_tokens,
			   a->hashes + (size_t)(from + i) * PD_HASH_SIZE, names[i]);
		keys[i] = names[i];
	}
	int rc = kv_get(k, n, keys, vals, lens, res);
	/* Every key answered, found or not: Redis is fine. */
	breaker_result(r, !rc);
	if (rc) {
		static struct pd_log_limit cut;
		pd_log_limited(&cut, "remote tier: a lookup failed (%s): a miss", kv_errmsg(k));
	}
	uint32_t got = 0;
	/* A MATCH never waits for the disk writer: a block with no room
	 * ends the hit, as a restore's does. */
	struct idx_held held = { .no_wait = true };
	for (uint32_t i = 0; i < n; i++) {
		if (res[i] == -ENOENT) {
			if (!got && from == a->from)
				atomic_fetch_add(&r->misses, 1);
			break;
		}
		if (res[i])
			break;
		atomic_fetch_add(&r->bytes_in, lens[i]);
		struct rec_meta m;
		const char *why = NULL;
		if (check_value(r, a, from + i, vals[i], lens[i], &m, &why)) {
			static struct pd_log_limit cut;
			pd_log_limited(&cut, "remote tier: the value of %s: %s: dropped, the client computes the block again",
				       names[i], why ? why : "bad record");
			break;
		}
		struct idx_block b;
		if (groups_record_block(&m, r->block_tokens, tokens, &b, &why)) {
			atomic_fetch_add(&r->bad_checksum, 1);
			break;
		}
		b.ns = a->ns;
		struct fill_ctx f = { a->store, vals[i] + m.payload_off, m.payload };
		bool dedup;
		if (idx_import(a->x, a->g, &b, fill_from_value, &f, &dedup, &held))
			break;
		idx_mark_remote(a->x, a->ns, b.hash);
		atomic_fetch_add(&r->hits, 1);
		got++;
	}
	idx_import_end(a->x, &held);
	*more = got == n;
	free(names);
	free(tokens);
	return got;
}

uint32_t remote_fetch(struct remote *r, const struct remote_ask *a)
{
	if (!r || a->from >= a->count || !remote_wants(r, a->ns))
		return 0;
	if (!breaker_allow(r)) {
		atomic_fetch_add(&r->skipped, 1);
		return 0;
	}
	struct kv *k = thread_kv(r);
	if (!k) {
		breaker_result(r, false);
		return 0;
	}
	uint64_t t0 = mono_us();
	size_t size = rec_size(r->block_tokens, a->block_bytes);
	uint32_t per = size ? (uint32_t)(FETCH_BYTES / size) : 0, got = 0;
	per = per < 1 ? 1 : per > FETCH_MAX ? FETCH_MAX : per;
	bool more = true;
	/* Rounds of as many records as FETCH_BYTES hold, while each finds all
	 * it asked for; each round bounded by the timeout. */
	for (uint32_t from = a->from; more && from < a->count; from += per) {
		uint32_t n = a->count - from < per ? a->count - from : per;
		got += fetch_round(r, k, a, from, n, &more);
		if (more && from + n < a->count && !breaker_allow(r))
			break;
	}
	atomic_fetch_add(&r->fetch_us, mono_us() - t0);
	return got;
}

void remote_get_stats(struct remote *r, struct remote_stats *out)
{
	*out = (struct remote_stats){ 0 };
	if (!r)
		return;
	out->hits = atomic_load(&r->hits);
	out->misses = atomic_load(&r->misses);
	out->bytes_in = atomic_load(&r->bytes_in);
	out->bytes_out = atomic_load(&r->bytes_out);
	out->writes = atomic_load(&r->writes);
	out->write_drops = atomic_load(&r->write_drops);
	out->errors = atomic_load(&r->errors);
	out->bad_checksum = atomic_load(&r->bad_checksum);
	out->bad_foreign = atomic_load(&r->bad_foreign);
	out->bad_mac = atomic_load(&r->bad_mac);
	out->breaker_opens = atomic_load(&r->breaker_opens);
	out->skipped = atomic_load(&r->skipped);
	out->fetch_us = atomic_load(&r->fetch_us);
}
