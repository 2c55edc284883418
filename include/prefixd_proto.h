/* SPDX-License-Identifier: MIT */
/*
 * Facts of the prefixd protocol that its public API shows too: sizes and
 * limits that the daemon, libprefixd and the model runtime must agree on,
 * and the list of the daemon's counters. One list, so that the wire
 * encoder and decoder, struct prefixd_stats, prefixctl's labels and the
 * Prometheus names can never disagree. Installed with prefixd.h.
 */
#ifndef PREFIXD_PROTO_H
#define PREFIXD_PROTO_H

#define PREFIXD_HASH_BYTES 32            /* BLAKE2b-256: chain hashes and ids */
#define PREFIXD_FINGERPRINT_BYTES 32     /* a model's fingerprint */
#define PREFIXD_MAX_SALT 64
#define PREFIXD_DEFAULT_BLOCK_TOKENS 64  /* prefixd --block-tokens and the runtime's default */
#define PREFIXD_MAX_BLOCK_TOKENS 4096
/* KV layouts: a block is [layer][k|v][kv_head][token][head_dim] of f32,
 * f16 or bf16 elements. The layout is part of the chain root, so blocks of
 * different element types never share a chain. */
#define PREFIXD_LAYOUT_F32 1
#define PREFIXD_LAYOUT_F16 2
#define PREFIXD_LAYOUT_BF16 3
/* The user (namespace) of the chains in the shared namespace (prefixd
 * --shared-group): (uid_t)-1, which no user has. */
#define PREFIXD_SHARED_USER 0xffffffffu

/*
 * The daemon's counters, in their order on the wire (new ones go at the
 * end): X(field, kind, help). kind is "counter" (only grows while the
 * daemon runs) or "gauge" (a current value).
 */
#define PREFIXD_COUNTERS(X)                                                            \
	X(hits, counter, "MATCH requests with a hit")                                  \
	X(misses, counter, "MATCH requests without a hit")                             \
	X(hit_tokens, counter, "prompt tokens served from the cache")                  \
	X(blocks, gauge, "blocks cached")                                              \
	X(bytes_used, gauge, "bytes of cached blocks in memory")                       \
	X(budget, gauge, "memory budget in bytes")                                     \
	X(published, counter, "blocks published")                                     \
	X(dedup, counter, "blocks published that were there already")                  \
	X(evictions, counter, "blocks evicted to make room")                           \
	X(connections, gauge, "connections open")                                     \
	X(leases, gauge, "leases held")                                                \
	X(matches, counter, "MATCH requests")                                          \
	X(errors, counter, "requests refused")                                         \
	X(arenas, gauge, "shared-memory arenas")                                       \
	X(collisions, counter, "hash collisions caught")                               \
	X(query_tokens, counter, "prompt tokens asked for (full blocks)")              \
	X(quota, gauge, "most bytes one user's blocks may hold")                       \
	X(pin_max, gauge, "most bytes pins may hold")                                  \
	X(pinned_bytes, gauge, "bytes of pinned blocks")                               \
	X(pins, gauge, "pinned chains")                                                \
	X(idle_bytes, gauge, "bytes of blocks no lease holds")                         \
	X(refused_blocks, counter, "blocks not stored: budget or quota full")          \
	X(admin_evictions, counter, "blocks evicted by prefixctl evict")               \
	X(pins_expired, counter, "pins whose TTL ended")                               \
	X(disk_blocks, gauge, "blocks with a record on disk")                         \
	X(disk_bytes, gauge, "bytes of records on disk")                               \
	X(disk_budget, gauge, "disk budget in bytes (0: no disk tier)")               \
	X(spills, counter, "records written to disk")                                  \
	X(restores, counter, "blocks read back from disk")                             \
	X(restore_bytes, counter, "KV bytes read back from disk")                      \
	X(disk_corrupt, counter, "records that failed a check: dropped, never served") \
	X(disk_evictions, counter, "records deleted to keep within the disk budget")   \
	X(disk_pending, gauge, "blocks waiting to be written to disk")                \
	X(unwritten_evictions, counter, "blocks evicted before their record was written (lost)") \
	X(claims, counter, "claims made by a MATCH (single flight)")                   \
	X(waits, counter, "MATCH requests that waited for another's claim")            \
	X(wait_ms, counter, "milliseconds MATCH requests waited, in all")              \
	X(claims_inherited, counter, "claims passed to a waiter")                      \
	X(claims_expired, counter, "claims that ended without their blocks")          \
	X(remote_hits, counter, "blocks fetched from Redis, checked and served") \
	X(remote_misses, counter, "remote lookups that found no next block")           \
	X(remote_bytes_in, counter, "bytes of records read from the remote tier")      \
	X(remote_bytes_out, counter, "bytes of records written to the remote tier")    \
	X(remote_writes, counter, "records written to the remote tier")               \
	X(remote_write_drops, counter, "blocks not written to Redis (queue full, Redis down)") \
	X(remote_errors, counter, "round trips to the remote tier that failed")       \
	X(remote_bad_checksum, counter, "remote values that are no intact record: dropped") \
	X(remote_bad_foreign, counter, "remote records of another block or model: dropped") \
	X(remote_bad_mac, counter, "remote records without a valid MAC: dropped")     \
	X(remote_breaker_opens, counter, "times the remote tier's circuit breaker opened") \
	X(remote_skipped, counter, "remote lookups skipped while the breaker was open") \
	X(remote_us, counter, "microseconds MATCHes spent on the remote tier") \
	X(remote_index_skips, counter, "remote lookups not made: Redis holds no such key") \
	X(remote_index_live, gauge, "1 while the index of Redis's keys is trusted") \
	X(remote_index_keys, gauge, "keys in the index of Redis's keys")

#endif
