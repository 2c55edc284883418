/* SPDX-License-Identifier: MIT */
/*
 * daemon_util's calls for the Criterion suites: each one does its work or
 * fails the test with the reason (prefixd_errmsg(), the daemon's own
 * words), so a test reads as the steps it takes.
 */
#ifndef PFX_DAEMON_ASSERTS_H
#define PFX_DAEMON_ASSERTS_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon_util.h"
#include "prefixd.h"

/* td_start_args, or the test fails. */
void t_start(struct test_daemon *d, const char *const *base, const char *const *extra);
/* A daemon with 4-token blocks whose socket other users reach (group
 * nogroup, its directory 0711), plus extra (NULL-terminated); these
 * tests change uid, so they must run as root. */
void t_start_shared(struct test_daemon *d, const char *const *extra);
/* A daemon with 4-token blocks and its disk tier in dir, plus extra. */
void t_start_disk(struct test_daemon *d, const char *dir, const char *const *extra);
/* SIGTERM: the test fails, and goes on, unless the daemon stops cleanly
 * (leak-free, under LSan). */
void t_stop(struct test_daemon *d);
/* A connection with layout l, or with td_layout(model). */
struct prefixd *t_connect(const struct test_daemon *d, const struct prefixd_layout *l);
struct prefixd *t_client(const struct test_daemon *d, uint8_t model);
struct prefixd_stats t_stats(const struct test_daemon *d);
/* td_wait_leases: the test fails unless n leases are held in the end. */
void t_wait_leases(const struct test_daemon *d, uint64_t n);
/* Waits (up to `seconds`) until nothing waits to be written to disk and
 * at least `spills` records were written; the counters then. */
struct prefixd_stats t_wait_written(const struct test_daemon *d, uint64_t spills, int seconds);

/* A fresh directory /tmp/pfx-<tag>-XXXXXX for a disk tier. */
void t_disk_dir(char *dir, size_t cap, const char *tag);
/* Mounts a tmpfs of size ("160k") on dir: a small file system to fill
 * (the tests run as root). */
void t_mount_tmpfs(const char *dir, const char *size);
/* Kills d if it runs and removes dir, unmounting the tmpfs a test that
 * stopped half-way may have left on it. */
void t_disk_cleanup(struct test_daemon *d, const char *dir);

/* The suite of a file whose tests run its daemon `td` with a disk tier in
 * its directory `disk` (static struct test_daemon td; static char
 * disk[PATH_MAX]): a fresh directory before each test (t_disk_dir), and
 * after it the daemon killed if it still runs and the directory removed
 * (t_disk_cleanup). */
#define T_DISK_SUITE(suite, tag, seconds)                                      \
	static void suite##_init(void)                                         \
	{                                                                      \
		t_disk_dir(disk, sizeof(disk), tag);                           \
	}                                                                      \
	static void suite##_fini(void)                                         \
	{                                                                      \
		t_disk_cleanup(&td, disk);                                     \
	}                                                                      \
	TestSuite(suite, .init = suite##_init, .fini = suite##_fini, .timeout = seconds)

/* The most blocks t_publish_k and t_match_k take. */
#define T_MAX_BLOCKS 64
/* Publishes the n blocks of prompt k (td_prompt at TD_PROMPT_K(k)): the
 * blocks the daemon confirmed, stored or there already. A full disk
 * (-ENOSPC) is an answer; another error fails the test. */
uint32_t t_publish_k(struct prefixd *c, uint32_t k, uint32_t n);
struct t_got {
	uint32_t hit, from_disk, bad; /* bad: blocks whose bytes are wrong */
};
/* MATCHes prompt k, checks every byte attached and releases it. */
struct t_got t_match_k(struct prefixd *c, uint32_t k, uint32_t n);

/* What an EVICT (or `prefixctl evict --json`) said, against what was
 * expected; what names the case in the messages. */
void t_expect_evicted(struct prefixd_evicted e, uint64_t blocks, uint64_t bytes, uint64_t leased,
		      uint64_t pinned, uint64_t parent, const char *what);

/* Runs `PREFIXCTL --socket SOCK args file`: its exit status, its stdout
 * and stderr in out. */
int t_ctl(const struct test_daemon *d, char *out, size_t cap, const char *args, const char *file);
/* One counter of `prefixctl stats --json`. */
unsigned long long t_counter(const struct test_daemon *d, const char *key);

#endif
