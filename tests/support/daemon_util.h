/* SPDX-License-Identifier: MIT */
/*
 * A private prefixd for one test or benchmark: its own temporary directory
 * and socket, its log in that directory (shown when it does not stop
 * cleanly). Plain C, no Criterion, so the ThreadSanitizer driver and the
 * benchmarks use it too.
 */
#ifndef PFX_DAEMON_UTIL_H
#define PFX_DAEMON_UTIL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "prefixd.h"

struct test_daemon {
	pid_t pid;
	char dir[PATH_MAX];
	char sock[PATH_MAX + 16];
	char log[PATH_MAX + 16];
};

/* Starts PREFIXD_EXE --socket DIR/sock plus args (NULL-terminated) and
 * waits until it accepts connections. 0, or -1 with the reason on stderr. */
int td_start(struct test_daemon *d, const char *const *args);
/* td_start with base's arguments, then extra's (NULL-terminated lists,
 * either may be NULL; 32 arguments in all at most). */
int td_start_args(struct test_daemon *d, const char *const *base, const char *const *extra);
/* Lets other users reach the socket of a daemon started with --group: its
 * directory becomes 0711. 0 or -errno. */
int td_share_dir(const struct test_daemon *d);
/* Runs a shell command: its stdout and stderr in out, its exit status
 * (128 + signal when killed, -1 when it could not run). */
int td_sh(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The whole of a file (a log, say; the first 256 KiB) in a static buffer
 * that the next call overwrites; "" when it cannot be read. */
const char *td_read_file(const char *path);
/* The same with the socket named DIR/name. */
int td_start_named(struct test_daemon *d, const char *name, const char *const *args);
/* td_start, trying to connect every 100 us: *ms, the time from fork to
 * the first connection accepted. */
int td_start_timed(struct test_daemon *d, const char *const *args, double *ms);
/* SIGTERM, then the exit status (128 + signal when killed). Prints the
 * daemon's log when the status is not 0, and removes the directory. */
int td_stop(struct test_daemon *d);
/* SIGKILL (a crash): no clean stop, nothing printed; removes the
 * directory as td_stop does. */
void td_kill(struct test_daemon *d);
/* Descriptors the daemon has open. */
int td_open_fds(const struct test_daemon *d);

/* A small synthetic layout for protocol-level tests: 4-token blocks of
 * 8 KiB; start the daemon with --block-tokens 4. */
#define TD_BLOCK_TOKENS 4
#define TD_BLOCK_BYTES 8192
struct prefixd_layout td_layout(uint8_t model);
/* KV of block b of a prompt: a pattern that depends on the block's
 * tokens and on every token before them. */
void td_fill_block(const uint32_t *tokens, uint32_t b, void *kv);
/* Whether kv is exactly what td_fill_block makes. */
int td_block_ok(const uint32_t *tokens, uint32_t b, const void *kv);
/* A connection to sock with td_layout(model), or NULL with "connect: "
 * and libprefixd's reason in why (for threads, which cannot fail a
 * Criterion test). */
struct prefixd *td_connect(const char *sock, uint8_t model, char *why, size_t cap);
/* The daemon's counters over a connection of its own: 0, or the error of
 * libprefixd (prefixd_errmsg() says why). */
int td_stats(const struct test_daemon *d, struct prefixd_stats *out);
/* RELEASE is one-way: another connection sees it once the daemon has read
 * it. Waits (up to 5 s) until n leases are held in all; the leases held
 * when it stopped waiting. */
uint64_t td_wait_leases(const struct test_daemon *d, uint64_t n);
/* A process's resident memory (VmRSS), in bytes; 0 when unknown. */
uint64_t td_rss(pid_t pid);
/* A prompt of nblocks blocks: tokens base, base + 1, ... */
void td_prompt(uint32_t *t, uint32_t nblocks, uint32_t base);
/* The first token of prompt k, whose tokens (up to a million) no other
 * k's prompt has: td_prompt(t, n, TD_PROMPT_K(k)). */
#define TD_PROMPT_K(k) (1000000u * ((uint32_t)(k) + 1))
/* Seconds on the monotonic clock. */
double td_now_s(void);
/* Whether the daemon's log holds the text what. */
int td_log_has(const struct test_daemon *d, const char *what);
/* Publishes blocks [first, first + n) of tokens with generated KV. */
int td_publish(struct prefixd *c, uint64_t lease, const uint32_t *tokens, uint32_t first,
	       uint32_t n, uint32_t *stored, uint32_t *dedup);

#endif
