/* SPDX-License-Identifier: MIT */
/*
 * The remote tier's parts (remote.h): remote.c (flags, secrets, the
 * breaker, start and stop), remote_write.c (the writer), remote_fetch.c
 * (a MATCH's lookups) share this.
 */
#ifndef PD_REMOTE_IMPL_H
#define PD_REMOTE_IMPL_H

#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "remote.h"
#include "remote/kv.h"
#include "remote/kv_watch.h"
#include "remote_index.h"

/* Blocks waiting to be written (jobs of one publish each): past it, a
 * publish's blocks are dropped, never waited for. */
#define QUEUE_MAX 256
/* The MAC that follows a signed record (remote_mac.c says why it is
 * sound): a random nonce, then the Poly1305 tag of the record under a
 * one-time key derived from the daemon's key and the nonce. It runs on
 * every byte of every record fetched: keyed BLAKE2b, 2.7 times slower,
 * bounded the remote tier's throughput. */
#define MAC_NONCE_BYTES 16
#define MAC_BYTES (MAC_NONCE_BYTES + crypto_onetimeauth_BYTES)

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

	/* Which keys Redis holds (remote_watch.c); NULL: --remote-index off. */
	struct remote_index *index;
	struct kv_watch *watch;

	_Atomic uint64_t index_skips,
		hits, misses, bytes_in, bytes_out, writes, write_drops, errors,
		bad_checksum, bad_foreign, bad_mac, breaker_opens, skipped, fetch_us;
};


/* Whether a call may go to Redis now (the breaker), and how it went. */
bool remote_breaker_allow(struct remote *r);
void remote_breaker_result(struct remote *r, bool ok);
/* The MAC of the record rec[0, len) into mac (a fresh nonce each call),
 * and whether mac is a valid one of it (remote_mac.c). */
void remote_mac_sign(const struct remote *r, const uint8_t *rec, size_t len,
		     uint8_t mac[MAC_BYTES]);
bool remote_mac_ok(const struct remote *r, const uint8_t *rec, size_t len,
		   const uint8_t mac[MAC_BYTES]);
/* The writer thread (remote_write.c). */
void *remote_writer(void *arg);

/* The index and its watcher (remote_watch.c): started (0 or -errno; off
 * is 0), stopped (no callback after it), freed (after the writer). */
int remote_watch_start(struct remote *r);
void remote_watch_stop(struct remote *r);
void remote_watch_free(struct remote *r);
/* A record the writer's SET put in Redis (acknowledged). */
void remote_watch_wrote(struct remote *r, const char *key);
/* Whether the index, live, says Redis holds no record of a's first block
 * (counted): then a MATCH need not ask. */
bool remote_watch_rules_out(struct remote *r, const struct remote_ask *a);

#endif
