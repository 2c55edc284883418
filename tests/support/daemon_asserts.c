/* SPDX-License-Identifier: MIT */
#include "daemon_asserts.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void t_start(struct test_daemon *d, const char *const *base, const char *const *extra)
{
	cr_assert_eq(td_start_args(d, base, extra), 0);
}

void t_start_shared(struct test_daemon *d, const char *const *extra)
{
	cr_assert_eq(geteuid(), 0, "these tests change uid: run them as root");
	static const char *const base[] = { "--block-tokens", "4", "--group", "65534", NULL };
	cr_assert_eq(td_start_args(d, base, extra), 0);
	cr_assert_eq(td_share_dir(d), 0, "let other users reach the socket");
}

void t_start_disk(struct test_daemon *d, const char *dir, const char *const *extra)
{
	const char *base[] = { "--block-tokens", "4", "--disk-dir", dir, NULL };
	t_start(d, base, extra);
}

void t_stop(struct test_daemon *d)
{
	cr_expect_eq(td_stop(d), 0, "prefixd stops cleanly on SIGTERM, leak-free under LSan");
}

struct prefixd *t_connect(const struct test_daemon *d, const struct prefixd_layout *l)
{
	struct prefixd *c;
	cr_assert_eq(prefixd_connect(d->sock, l, &c), 0, "%s", prefixd_errmsg());
	return c;
}

struct prefixd *t_client(const struct test_daemon *d, uint8_t model)
{
	struct prefixd_layout l = td_layout(model);
	return t_connect(d, &l);
}

struct prefixd_stats t_stats(const struct test_daemon *d)
{
	struct prefixd_stats s;
	cr_assert_eq(td_stats(d, &s), 0, "%s", prefixd_errmsg());
	return s;
}

void t_wait_leases(const struct test_daemon *d, uint64_t n)
{
	uint64_t now = td_wait_leases(d, n);
	cr_assert_eq(now, n, "%llu leases held, not %llu", (unsigned long long)now,
		     (unsigned long long)n);
}

struct prefixd_stats t_wait_written(const struct test_daemon *d, uint64_t spills, int seconds)
{
	struct prefixd_stats s;
	for (int i = 0; i < seconds * 100; i++) {
		s = t_stats(d);
		if (!s.disk_pending && s.spills >= spills)
			return s;
		usleep(10000);
	}
	cr_assert_fail("%llu blocks still wait to be written, %llu of %llu written",
		       (unsigned long long)s.disk_pending, (unsigned long long)s.spills,
		       (unsigned long long)spills);
	return s;
}

void t_disk_dir(char *dir, size_t cap, const char *tag)
{
	snprintf(dir, cap, "/tmp/pfx-%s-XXXXXX", tag);
	cr_assert(mkdtemp(dir), "mkdtemp %s: %s", dir, strerror(errno));
}

void t_mount_tmpfs(const char *dir, const char *size)
{
	char out[4096];
	cr_assert_eq(td_sh(out, sizeof(out), "mount -t tmpfs -o size=%s prefixd-test '%s'", size, dir),
		     0, "these tests run as root, who may mount a small tmpfs: %s", out);
}

void t_disk_cleanup(struct test_daemon *d, const char *dir)
{
	char out[4096];
	if (d->pid)
		td_kill(d);
	td_sh(out, sizeof(out), "mountpoint -q '%s' && umount '%s'; rm -rf '%s'", dir, dir, dir);
}

uint32_t t_publish_k(struct prefixd *c, uint32_t k, uint32_t n)
{
	uint32_t t[T_MAX_BLOCKS * TD_BLOCK_TOKENS], stored = 0, dedup = 0;
	cr_assert_leq(n, T_MAX_BLOCKS);
	td_prompt(t, n, TD_PROMPT_K(k));
	int rc = td_publish(c, 0, t, 0, n, &stored, &dedup);
	cr_assert(rc == 0 || rc == -ENOSPC, "prompt %u: %s", k, prefixd_errmsg());
	return stored + dedup;
}

struct t_got t_match_k(struct prefixd *c, uint32_t k, uint32_t n)
{
	uint32_t t[T_MAX_BLOCKS * TD_BLOCK_TOKENS];
	const void *kv[T_MAX_BLOCKS];
	uint64_t lease;
	struct t_got g = { 0 };
	cr_assert_leq(n, T_MAX_BLOCKS);
	td_prompt(t, n, TD_PROMPT_K(k));
	/* Odd prompts through the call of earlier releases, which says how
	 * many came from disk through a thread-local: both stay right. */
	if (k % 2) {
		cr_assert_eq(prefixd_match(c, t, n, &lease, &g.hit, kv), 0, "%s", prefixd_errmsg());
		g.from_disk = prefixd_match_from_disk();
	} else {
		cr_assert_eq(prefixd_match2(c, t, n, &lease, &g.hit, &g.from_disk, kv), 0, "%s",
			     prefixd_errmsg());
	}
	for (uint32_t i = 0; i < g.hit; i++)
		g.bad += !td_block_ok(t, i, kv[i]);
	if (lease)
		cr_assert_eq(prefixd_release(c, lease), 0);
	return g;
}

void t_expect_evicted(struct prefixd_evicted e, uint64_t blocks, uint64_t bytes, uint64_t leased,
		      uint64_t pinned, uint64_t parent, const char *what)
{
	cr_expect_eq(e.blocks, blocks, "%s: %llu blocks evicted, not %llu", what,
		     (unsigned long long)e.blocks, (unsigned long long)blocks);
	cr_expect_eq(e.bytes, bytes, "%s: %llu bytes evicted, not %llu", what,
		     (unsigned long long)e.bytes, (unsigned long long)bytes);
	cr_expect_eq(e.kept_leased, leased, "%s: %llu kept leased, not %llu", what,
		     (unsigned long long)e.kept_leased, (unsigned long long)leased);
	cr_expect_eq(e.kept_pinned, pinned, "%s: %llu kept pinned, not %llu", what,
		     (unsigned long long)e.kept_pinned, (unsigned long long)pinned);
	cr_expect_eq(e.kept_parent, parent, "%s: %llu kept as parents, not %llu", what,
		     (unsigned long long)e.kept_parent, (unsigned long long)parent);
}

int t_ctl(const struct test_daemon *d, char *out, size_t cap, const char *args, const char *file)
{
	return td_sh(out, cap, "%s --socket %s %s %s", PREFIXCTL, d->sock, args, file);
}

unsigned long long t_counter(const struct test_daemon *d, const char *key)
{
	char cmd[2 * PATH_MAX + 64], want[64];
	snprintf(cmd, sizeof(cmd), "%s --socket %s stats --json", PREFIXCTL, d->sock);
	FILE *p = popen(cmd, "r");
	cr_assert(p);
	static char out[1 << 16];
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	cr_assert_eq(pclose(p), 0, "prefixctl failed: %s", out);
	snprintf(want, sizeof(want), "\"%s\":", key);
	const char *at = strstr(out, want);
	cr_assert(at, "no %s in %s", key, out);
	return strtoull(at + strlen(want), NULL, 10);
}
