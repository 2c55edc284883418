/* SPDX-License-Identifier: MIT */
/*
 * The remote tier (remote.h): flags and secrets, the circuit breaker,
 * start and stop, counters. The writer is remote_write.c, a MATCH's
 * lookups remote_fetch.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "remote_impl.h"

/* The breaker opens after this many failures in a row, for a backoff that
 * doubles from BACKOFF_MIN_MS up to BACKOFF_MAX_MS while probes fail. */
#define BREAKER_FAILS 3
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 10000
#define SECRET_MAX 4096

static int64_t mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
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
	snprintf(out, REMOTE_KEY_MAX, REMOTE_KEY_PREFIX "%u:%s:%llu:%u:%s", (unsigned)ns, f,
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
bool remote_breaker_allow(struct remote *r)
{
	if (atomic_load(&r->fails) < BREAKER_FAILS)
		return true;
	if (mono_ms() < atomic_load(&r->open_until_ms))
		return false;
	bool idle = false;
	return atomic_compare_exchange_strong(&r->probing, &idle, true);
}

void remote_breaker_result(struct remote *r, bool ok)
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

int remote_start(struct remote *r, struct idx *x)
{
	r->x = x;
	int rc = remote_watch_start(r);
	if (rc)
		return rc;
	rc = -pthread_create(&r->thread, NULL, remote_writer, r);
	r->started = !rc;
	if (!rc)
		pd_log("remote tier: %s%s%s, records %s, the %s go remote, %u ms a lookup at most%s",
		       r->cfg.cluster ? "a Redis Cluster from " : "Redis at ", r->cfg.seeds[0],
		       r->cfg.n_seeds > 1 ? " and other seeds" : "",
		       r->has_key ? "signed (--remote-key-file)"
				  : "unsigned: every writer to this Redis is trusted",
		       r->cfg.all_users ? "shared and every user's namespaces" : "shared namespace's blocks",
		       (unsigned)r->cfg.timeout_ms, r->cfg.ttl_s ? ", with a TTL" : "");
	if (!rc && !r->index)
		pd_log("remote tier: no index of Redis's keys (--remote-index off): every miss asks Redis");
	return rc;
}

void remote_close(struct remote *r)
{
	if (!r)
		return;
	/* The watcher first: its callbacks use the index, the writer too. */
	remote_watch_stop(r);
	if (r->started) {
		pthread_mutex_lock(&r->mu);
		r->stop = true;
		pthread_cond_signal(&r->cv);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->thread, NULL);
	}
	remote_watch_free(r);
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
	out->index_skips = atomic_load(&r->index_skips);
	if (r->index) {
		struct remote_index_stats s;
		remote_index_stats(r->index, &s);
		out->index_live = s.live;
		out->index_keys = s.keys;
	}
}
