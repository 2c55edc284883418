/* SPDX-License-Identifier: MIT */
/*
 * prefixd as a process, through libprefixd: sharing, namespaces, leases,
 * the budget, collisions, and clean shutdown. Each test runs its own daemon
 * on a private socket (tests/support/daemon_util.c).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_asserts.h"
#include "daemon_cases.h"

static struct test_daemon td;

/* A daemon with 4-token blocks and 64M, or with args. */
static void start(const char *const *args)
{
	static const char *const def[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	t_start(&td, args ? args : def, NULL);
}

Test(daemon, a_published_prefix_is_attached_by_another_client)
{
	start(NULL);
	uint32_t t[6 * TD_BLOCK_TOKENS], stored, dedup, hit;
	td_prompt(t, 6, 100);
	struct prefixd *a = t_client(&td, 1), *b = t_client(&td, 1);
	cr_assert_eq(td_publish(a, 0, t, 0, 4, &stored, &dedup), 0, "%s", prefixd_errmsg());
	cr_expect_eq(stored, 4);
	uint64_t lease;
	const void *kv[6];
	cr_assert_eq(prefixd_match(b, t, 6, &lease, &hit, kv), 0, "%s", prefixd_errmsg());
	cr_assert_eq(hit, 4, "the 4 published blocks of 6");
	cr_expect_neq(lease, 0);
	for (uint32_t i = 0; i < hit; i++)
		cr_expect(td_block_ok(t, i, kv[i]), "block %u has the publisher's bytes", i);
	/* B extends the prefix on top of its lease; A then sees all of it. */
	cr_assert_eq(td_publish(b, lease, t, 4, 2, &stored, &dedup), 0, "%s", prefixd_errmsg());
	cr_expect_eq(stored, 2);
	uint64_t lease_a;
	const void *kv_a[6];
	cr_assert_eq(prefixd_match(a, t, 6, &lease_a, &hit, kv_a), 0);
	cr_expect_eq(hit, 6);
	cr_expect(td_block_ok(t, 5, kv_a[5]));
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.hits, 2);
	cr_expect_eq(s.hit_tokens, 10 * TD_BLOCK_TOKENS);
	cr_expect_eq(s.blocks, 6);
	cr_expect_eq(s.published, 6);
	cr_expect_eq(s.leases, 2);
	cr_expect_eq(s.bytes_used, 6 * TD_BLOCK_BYTES);
	cr_expect_eq(prefixd_release(b, lease), 0);
	cr_expect_eq(prefixd_release(b, lease), -ENOENT, "a lease ends once");
	cr_expect_eq(prefixd_release(b, lease_a), -ENOENT, "A's lease is not B's to end");
	t_wait_leases(&td, 1);
	prefixd_close(a);
	prefixd_close(b);
	t_stop(&td);
}

Test(daemon, a_prompt_that_diverges_hits_only_its_common_blocks)
{
	start(NULL);
	uint32_t t[4 * TD_BLOCK_TOKENS], u[4 * TD_BLOCK_TOKENS], stored, dedup, hit;
	td_prompt(t, 4, 7);
	memcpy(u, t, sizeof(u));
	u[2 * TD_BLOCK_TOKENS + 3] = 99999; /* the last token of block 2 differs */
	struct prefixd *a = t_client(&td, 1);
	cr_assert_eq(td_publish(a, 0, t, 0, 4, &stored, &dedup), 0);
	uint64_t lease;
	const void *kv[4];
	cr_assert_eq(prefixd_match(a, u, 4, &lease, &hit, kv), 0);
	cr_expect_eq(hit, 2);
	cr_assert_eq(td_publish(a, lease, u, 2, 2, &stored, &dedup), 0, "%s", prefixd_errmsg());
	cr_expect_eq(stored, 2, "u's own blocks 2 and 3 join the tree");
	cr_assert_eq(td_publish(a, 0, t, 0, 4, &stored, &dedup), 0);
	cr_expect_eq(dedup, 4, "publishing what is there stores nothing");
	cr_expect_eq(t_stats(&td).dedup, 4);
	prefixd_close(a);
	t_stop(&td);
}

Test(daemon, a_prompt_hashed_as_it_arrives_matches_like_its_tokens)
{
	start(NULL);
	uint32_t t[6 * TD_BLOCK_TOKENS + 2], stored, dedup, hit;
	td_prompt(t, 6, 300);
	t[6 * TD_BLOCK_TOKENS] = t[6 * TD_BLOCK_TOKENS + 1] = 5; /* half a block more */
	struct prefixd *a = t_client(&td, 1), *b = t_client(&td, 1);
	cr_assert_eq(td_publish(a, 0, t, 0, 6, &stored, &dedup), 0, "%s", prefixd_errmsg());
	struct prefixd_layout l = td_layout(1);
	struct prefixd_prompt *p;
	cr_assert_eq(prefixd_prompt_new(&l, &p), 0, "%s", prefixd_errmsg());
	/* Pieces that end inside blocks, as a tokenizer hands them out. */
	const size_t cuts[] = { 3, 10, 11, 26 };
	for (size_t i = 0, at = 0; i < 4; at = cuts[i++])
		cr_assert_eq(prefixd_prompt_append(p, t + at, cuts[i] - at), 0);
	cr_expect_eq(prefixd_prompt_length(p), 26);
	uint64_t lease;
	const void *kv[6];
	cr_assert_eq(prefixd_match_prompt(b, p, 6, &lease, &hit, kv), 0, "%s", prefixd_errmsg());
	cr_expect_eq(hit, 6, "its 6 full blocks");
	for (uint32_t i = 0; i < hit; i++)
		cr_expect(td_block_ok(t, i, kv[i]), "block %u", i);
	/* Room for 4 of the 6: 4 blocks, nothing written past them. */
	const void *room[5] = { 0 };
	room[4] = room;
	cr_assert_eq(prefixd_match_prompt(b, p, 4, &lease, &hit, room), 0, "%s", prefixd_errmsg());
	cr_expect_eq(hit, 4, "as many as there is room for");
	cr_expect_eq(room[4], (const void *)room, "nothing past the room given");
	/* The next question on the first two blocks. */
	prefixd_prompt_truncate(p, 2 * TD_BLOCK_TOKENS + 1);
	uint32_t q[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	cr_assert_eq(prefixd_prompt_append(p, q, 8), 0);
	cr_assert_eq(prefixd_match_prompt(b, p, 6, &lease, &hit, kv), 0);
	cr_expect_eq(hit, 2);
	struct prefixd_layout other = td_layout(2);
	struct prefixd_prompt *o;
	cr_assert_eq(prefixd_prompt_new(&other, &o), 0);
	cr_assert_eq(prefixd_prompt_append(o, t, 8), 0);
	cr_expect_eq(prefixd_match_prompt(b, o, 6, &lease, &hit, kv), -EINVAL);
	cr_expect(strstr(prefixd_errmsg(), "layout"), "%s", prefixd_errmsg());
	l.block_tokens = 3;
	cr_expect_eq(prefixd_prompt_new(&l, &o), -EINVAL, "not a power of two");
	prefixd_prompt_free(o);
	prefixd_prompt_free(p);
	prefixd_close(a);
	prefixd_close(b);
	t_stop(&td);
}

Test(daemon, a_partition_keeps_its_blocks_in_one_arena)
{
	/* 3000 blocks of 8 KiB, 23 MiB of a 64 MiB budget: one arena, so a
	 * client maps one descriptor however long its prefixes. */
	start(NULL);
	enum { N = 3000, PER = 60 }; /* td_publish takes up to 64 */
	uint32_t *t = malloc(PER * TD_BLOCK_TOKENS * sizeof(*t)), stored, dedup;
	cr_assert_not_null(t);
	struct prefixd *a = t_client(&td, 1);
	for (uint32_t i = 0; i < N; i += PER) {
		td_prompt(t, PER, 1 + i * TD_BLOCK_TOKENS);
		cr_assert_eq(td_publish(a, 0, t, 0, PER, &stored, &dedup), 0, "%s",
			     prefixd_errmsg());
		cr_expect_eq(stored, PER);
	}
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.arenas, 1);
	cr_expect_eq(s.bytes_used, (uint64_t)N * TD_BLOCK_BYTES);
	prefixd_close(a);
	free(t);
	t_stop(&td);
}

Test(daemon, other_models_and_salts_never_hit)
{
	start(NULL);
	uint32_t t[2 * TD_BLOCK_TOKENS], stored, dedup, hit;
	td_prompt(t, 2, 1);
	struct prefixd *a = t_client(&td, 1), *other = t_client(&td, 2), *salted;
	struct prefixd_layout l = td_layout(1);
	l.salt = "tenant-b";
	l.salt_len = 8;
	cr_assert_eq(prefixd_connect(td.sock, &l, &salted), 0);
	cr_assert_eq(td_publish(a, 0, t, 0, 2, &stored, &dedup), 0);
	uint64_t lease;
	const void *kv[2];
	cr_assert_eq(prefixd_match(other, t, 2, &lease, &hit, kv), 0);
	cr_expect_eq(hit, 0, "another model fingerprint");
	cr_assert_eq(prefixd_match(salted, t, 2, &lease, &hit, kv), 0);
	cr_expect_eq(hit, 0, "another salt");
	cr_assert_eq(td_publish(other, 0, t, 0, 2, &stored, &dedup), 0);
	cr_expect_eq(stored, 2, "the same tokens under another model are other blocks");
	prefixd_close(a);
	prefixd_close(other);
	prefixd_close(salted);
	t_stop(&td);
}

/* Runs in a child as user and group 65534 (nobody): connects, matches and
 * publishes the prompt, and asks for statistics. Exit code: bit 0 hit
 * something, bit 1 publish deduplicated, bit 2 stats allowed, 64 error. */
static int as_nobody(const uint32_t *t)
{
	gid_t g = 65534;
	if (setgroups(1, &g) || setgid(65534) || setuid(65534))
		return 64;
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	if (prefixd_connect(td.sock, &l, &c))
		return 65;
	uint64_t lease;
	uint32_t hit, stored, dedup;
	const void *kv[2];
	if (prefixd_match(c, t, 2, &lease, &hit, kv) || td_publish(c, 0, t, 0, 2, &stored, &dedup))
		return 66;
	struct prefixd_stats s;
	/* Statistics count its own blocks only. */
	int rc = (hit ? 1 : 0) | (dedup ? 2 : 0) |
		 (prefixd_stats(c, &s) || s.blocks != 2 || s.hits ? 4 : 0);
	prefixd_close(c);
	return rc;
}

Test(daemon, another_user_never_sees_or_replaces_your_prefixes)
{
	cr_assert_eq(geteuid(), 0, "this test changes uid: run it as root (the README's test command does)");
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", "--group", "65534", NULL };
	start(args);
	td_share_dir(&td); /* let the other user reach the socket */
	uint32_t t[2 * TD_BLOCK_TOKENS], stored, dedup, hit;
	td_prompt(t, 2, 500);
	struct prefixd *a = t_client(&td, 1);
	cr_assert_eq(td_publish(a, 0, t, 0, 2, &stored, &dedup), 0);
	pid_t pid = fork();
	if (pid == 0)
		_exit(as_nobody(t));
	int st;
	waitpid(pid, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) < 64, "child failed: %d", WEXITSTATUS(st));
	cr_expect_eq(WEXITSTATUS(st) & 1, 0, "root's blocks are invisible to nobody");
	cr_expect_eq(WEXITSTATUS(st) & 2, 0, "nobody's publish is its own, not a dedup of root's");
	cr_expect_eq(WEXITSTATUS(st) & 4, 0, "nobody's statistics count nobody's blocks only");
	/* Root's blocks were not replaced by nobody's. */
	uint64_t lease;
	const void *kv[2];
	cr_assert_eq(prefixd_match(a, t, 2, &lease, &hit, kv), 0);
	cr_expect_eq(hit, 2);
	cr_expect(td_block_ok(t, 0, kv[0]) && td_block_ok(t, 1, kv[1]));
	cr_expect_eq(t_stats(&td).blocks, 4, "two namespaces, two copies");
	/* A client maps whole arenas: no arena holds two users' blocks. */
	cr_expect_eq(t_stats(&td).arenas, 2, "each user's blocks in arenas of their own");
	prefixd_close(a);
	t_stop(&td);
}

Test(daemon, a_killed_client_releases_its_leases)
{
	start(NULL);
	uint32_t t[2 * TD_BLOCK_TOKENS], stored, dedup;
	td_prompt(t, 2, 3);
	struct prefixd *a = t_client(&td, 1);
	cr_assert_eq(td_publish(a, 0, t, 0, 2, &stored, &dedup), 0);
	int ready[2];
	cr_assert_eq(pipe(ready), 0);
	pid_t pid = fork();
	if (pid == 0) {
		struct prefixd_layout l = td_layout(1);
		struct prefixd *c;
		uint64_t lease;
		uint32_t hit;
		const void *kv[2];
		if (prefixd_connect(td.sock, &l, &c) || prefixd_match(c, t, 2, &lease, &hit, kv) || hit != 2)
			_exit(1);
		char ok = 1;
		if (write(ready[1], &ok, 1) != 1)
			_exit(1);
		pause();
	}
	char ok = 0;
	cr_assert_eq(read(ready[0], &ok, 1), 1);
	cr_expect_eq(t_stats(&td).leases, 1, "the child holds a lease");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	uint64_t leases = 1;
	for (int i = 0; i < 200 && (leases = t_stats(&td).leases); i++)
		usleep(10000);
	cr_expect_eq(leases, 0, "the daemon released the dead client's lease");
	close(ready[0]);
	close(ready[1]);
	prefixd_close(a);
	t_stop(&td);
}

Test(daemon, the_budget_holds_and_leased_blocks_are_never_evicted)
{
	/* 1 MiB: 128 blocks of 8 KiB. */
	const char *args[] = { "--block-tokens", "4", "--memory", "1M", NULL };
	start(args);
	struct prefixd *a = t_client(&td, 1), *b = t_client(&td, 1);
	uint32_t big[64 * TD_BLOCK_TOKENS], stored, dedup, hit;
	td_prompt(big, 64, 1);
	cr_assert_eq(td_publish(a, 0, big, 0, 64, &stored, &dedup), 0);
	uint32_t big2[64 * TD_BLOCK_TOKENS];
	td_prompt(big2, 64, 100000);
	cr_assert_eq(td_publish(a, 0, big2, 0, 64, &stored, &dedup), 0);
	uint64_t lease, lease2;
	const void *kv[64];
	cr_assert_eq(prefixd_match(b, big, 64, &lease, &hit, kv), 0);
	cr_assert_eq(hit, 64);
	cr_assert_eq(prefixd_match(b, big2, 64, &lease2, &hit, kv), 0);
	cr_assert_eq(hit, 64);
	/* Everything is leased: a new block has nowhere to go. */
	uint32_t t[TD_BLOCK_TOKENS * 8];
	td_prompt(t, 8, 900000);
	int prc = td_publish(a, 0, t, 0, 1, &stored, &dedup);
	cr_expect_eq(prc, -ENOSPC, "rc %d: %s", prc, prefixd_errmsg());
	cr_expect(strstr(prefixd_errmsg(), "budget"), "a clear message: %s", prefixd_errmsg());
	cr_assert_eq(prefixd_match(b, big, 64, &lease, &hit, kv), 0);
	for (uint32_t i = 0; i < 64; i++)
		cr_expect(td_block_ok(big, i, kv[i]), "leased block %u untouched", i);
	/* Once big2 is released its leaves go, newest prompt in. */
	cr_assert_eq(prefixd_release(b, lease2), 0);
	t_wait_leases(&td, 2); /* b still holds big twice */
	cr_assert_eq(td_publish(a, 0, t, 0, 8, &stored, &dedup), 0, "%s", prefixd_errmsg());
	cr_expect_eq(stored, 8);
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.evictions, 8);
	cr_expect_leq(s.bytes_used, s.budget);
	cr_expect_eq(s.blocks, 128);
	/* Eviction took big2's leaves: its first 56 blocks still hit. */
	cr_assert_eq(prefixd_match(a, big2, 64, &lease2, &hit, kv), 0);
	cr_expect_eq(hit, 56);
	prefixd_close(a);
	prefixd_close(b);
	t_stop(&td);
}

Test(daemon, filling_past_the_budget_evicts_least_recently_used)
{
	const char *args[] = { "--block-tokens", "4", "--memory", "1M", NULL };
	start(args);
	struct prefixd *a = t_client(&td, 1);
	uint32_t t[4 * TD_BLOCK_TOKENS], stored, dedup, hit;
	for (uint32_t p = 0; p < 100; p++) {
		td_prompt(t, 4, p * 1000);
		cr_assert_eq(td_publish(a, 0, t, 0, 4, &stored, &dedup), 0, "prompt %u: %s", p,
			     prefixd_errmsg());
		struct prefixd_stats s = t_stats(&td);
		cr_assert_leq(s.bytes_used, s.budget, "after prompt %u", p);
	}
	cr_expect_eq(t_stats(&td).blocks, 128);
	cr_expect_eq(t_stats(&td).evictions, 400 - 128);
	uint64_t lease;
	const void *kv[4];
	td_prompt(t, 4, 99 * 1000);
	cr_assert_eq(prefixd_match(a, t, 4, &lease, &hit, kv), 0);
	cr_expect_eq(hit, 4, "the newest prompt is whole");
	td_prompt(t, 4, 0);
	cr_assert_eq(prefixd_match(a, t, 4, &lease, &hit, kv), 0);
	cr_expect_eq(hit, 0, "the oldest is gone");
	prefixd_close(a);
	t_stop(&td);
}

Test(daemon, hash_collisions_are_detected_and_never_served)
{
	/* 1-byte keys: 256 of them for 600 one-block prompts. */
	const char *args[] = { "--block-tokens", "4", "--memory", "64M", "--test-key-bytes", "1", NULL };
	start(args);
	struct prefixd *a = t_client(&td, 1);
	enum { N = 600 };
	static int stored_ok[N];
	uint32_t t[TD_BLOCK_TOKENS], stored, dedup, hit, kept = 0, refused = 0;
	for (uint32_t p = 0; p < N; p++) {
		td_prompt(t, 1, p * 10);
		cr_assert_eq(td_publish(a, 0, t, 0, 1, &stored, &dedup), 0);
		stored_ok[p] = stored == 1;
		kept += stored;
		refused += !stored;
	}
	cr_expect_leq(kept, 256, "a key holds one block");
	cr_expect_gt(refused, N - 256 - 1, "600 prompts cannot fit 256 keys");
	cr_expect_eq(t_stats(&td).collisions, refused, "each refusal was a detected collision");
	for (uint32_t p = 0; p < N; p++) {
		uint64_t lease;
		const void *kv[1];
		td_prompt(t, 1, p * 10);
		cr_assert_eq(prefixd_match(a, t, 1, &lease, &hit, kv), 0);
		cr_expect_eq(hit, (uint32_t)stored_ok[p], "prompt %u", p);
		if (hit) {
			cr_expect(td_block_ok(t, 0, kv[0]), "prompt %u gets its own KV", p);
			prefixd_release(a, lease);
		}
	}
	prefixd_close(a);
	t_stop(&td);
}

Test(daemon, the_daemon_rejects_layouts_it_cannot_store)
{
	start(NULL);
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	l.block_tokens = 8;
	l.block_bytes = 8192;
	cr_expect_eq(prefixd_connect(td.sock, &l, &c), -EINVAL);
	cr_expect(strstr(prefixd_errmsg(), "--block-tokens"), "says what to do: %s", prefixd_errmsg());
	l.block_tokens = 4;
	l.block_bytes = 1ull << 30;
	cr_expect_eq(prefixd_connect(td.sock, &l, &c), -ENOSPC, "a block larger than the budget");
	l.block_bytes = 8190;
	cr_expect_eq(prefixd_connect(td.sock, &l, &c), -EINVAL, "not whole f32 per token");
	t_stop(&td);
}

/* Waits until only the admin connection is open. */
static void settle(struct prefixd *adm)
{
	struct prefixd_stats s = { .connections = 2 };
	for (int i = 0; i < 200 && !prefixd_stats(adm, &s) && s.connections != 1; i++)
		usleep(10000);
	cr_assert_eq(s.connections, 1);
}

Test(daemon, no_descriptor_or_lease_outlives_its_client)
{
	start(NULL);
	uint32_t t[4 * TD_BLOCK_TOKENS], stored, dedup, hit;
	td_prompt(t, 4, 42);
	struct prefixd *adm, *a = t_client(&td, 1);
	cr_assert_eq(prefixd_connect(td.sock, NULL, &adm), 0);
	cr_assert_eq(td_publish(a, 0, t, 0, 4, &stored, &dedup), 0);
	prefixd_close(a);
	settle(adm);
	int base = td_open_fds(&td);
	for (int i = 0; i < 20; i++) {
		struct prefixd *c = t_client(&td, 1);
		uint64_t lease;
		const void *kv[4];
		cr_assert_eq(prefixd_match(c, t, 4, &lease, &hit, kv), 0);
		cr_assert_eq(hit, 4);
		cr_assert_eq(td_publish(c, lease, t, 4, 0, &stored, &dedup), 0);
		prefixd_close(c);
	}
	settle(adm);
	cr_expect_eq(td_open_fds(&td), base, "descriptors back to %d", base);
	struct prefixd_stats s;
	cr_assert_eq(prefixd_stats(adm, &s), 0);
	cr_expect_eq(s.leases, 0);
	cr_expect_eq(s.hits, 20);
	prefixd_close(adm);
	t_stop(&td);
}

Test(daemon, many_clients_at_once_keep_every_invariant)
{
	char why[256];
	cr_expect_eq(case_daemon_many_clients(why, sizeof(why)), 0, "%s", why);
}

Test(daemon, bad_command_lines_say_what_is_wrong)
{
	char out[8192]; /* --help is over 4 KiB */
	static const struct {
		const char *args;
		const char *says;
	} cases[] = {
		{ "--memory 12Q", "--memory" },
		{ "--memory 1K", "at least 64K" },
		{ "--memory 1.5", "--memory" },  /* a fraction of a byte */
		{ "--memory .5G", "--memory" },
		{ "--memory 1.G", "--memory" },
		{ "--memory 1.5.0G", "--memory" },
		{ "--memory 64T", "or --force to start anyway" },
		{ "--block-tokens 48", "power of two" },
		{ "--threads 0", "--threads" },
		{ "--group no-such-group-here", "no group" },
		{ "--shared-group no-such-group-here", "--shared-group: no group" },
		{ "--shared-publishers 60001", "--shared-publishers: only with --shared-group" },
		{ "--shared-group 60100 --shared-publishers 60001,no-such-user-here",
		  "--shared-publishers: no user 'no-such-user-here'" },
		{ "--bogus", "unknown" },
		{ "extra", "unexpected argument" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cr_expect_eq(td_sh(out, sizeof(out), "%s --socket /nonexistent/x %s", PREFIXD_EXE, cases[i].args), 2,
			     "%s", cases[i].args);
		cr_expect(strstr(out, cases[i].says), "%s: %s", cases[i].args, out);
	}
	cr_expect_eq(td_sh(out, sizeof(out), "%s --help", PREFIXD_EXE), 0);
	cr_expect(strstr(out, "--memory SIZE"), "%s", out);
	cr_expect(strstr(out, "--force"), "%s", out);
	/* Options for the test suite are not the user's. */
	cr_expect(!strstr(out, "test-key-bytes") && !strstr(out, "TESTS ONLY"), "%s", out);
	cr_expect_eq(td_sh(out, sizeof(out), "%s --socket /nonexistent/dir/x stats", PREFIXCTL), 1);
	cr_expect(strstr(out, "cannot connect"), "%s", out);
	cr_expect_eq(td_sh(out, sizeof(out), "%s frobnicate", PREFIXCTL), 2);
	cr_expect(strstr(out, "unknown command"), "%s", out);
}

/* 1.5G is a size as 1536M is; the daemon's budget says what it read. */
Test(daemon, sizes_may_have_decimals)
{
	static const struct {
		const char *memory;
		uint64_t bytes;
	} cases[] = { { "1.5M", 3ull << 19 }, { "1.25MiB", 5ull << 18 }, { "0.1M", 104857 },
		      { "100.5K", 102912 } };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[] = { "--block-tokens", "4", "--memory", cases[i].memory, NULL };
		start(args);
		struct prefixd *c = t_client(&td, 1);
		struct prefixd_limits l;
		cr_expect_eq(prefixd_limits(c, &l), 0, "%s", prefixd_errmsg());
		cr_expect_eq(l.budget, cases[i].bytes, "--memory %s: %llu bytes", cases[i].memory,
			     (unsigned long long)l.budget);
		prefixd_close(c);
		t_stop(&td);
	}
}

Test(daemon, a_live_socket_or_a_file_is_never_taken_over)
{
	start(NULL);
	char out[4096];
	cr_expect_eq(td_sh(out, sizeof(out), "%s --socket %s", PREFIXD_EXE, td.sock), 1);
	cr_expect(strstr(out, "another prefixd is serving"), "%s", out);
	cr_expect(strstr(out, " error prefixd: another"), "logged as an error: %s", out);
	char file[PATH_MAX + 16];
	snprintf(file, sizeof(file), "%s/file", td.dir);
	FILE *f = fopen(file, "w");
	cr_assert(f);
	fputs("precious", f);
	fclose(f);
	cr_expect_eq(td_sh(out, sizeof(out), "%s --socket %s", PREFIXD_EXE, file), 1);
	cr_expect(strstr(out, "not a socket"), "%s", out);
	struct stat st;
	cr_expect_eq(stat(file, &st), 0, "the file is still there");
	unlink(file);
	/* The refused daemon's liveness probe was a connection: the running one
	 * counts it until it has read the hangup, so wait for only ours. */
	struct prefixd *adm;
	cr_assert_eq(prefixd_connect(td.sock, NULL, &adm), 0, "the running daemon still serves: %s",
		     prefixd_errmsg());
	settle(adm);
	prefixd_close(adm);
	t_stop(&td);
}

Test(daemon, a_connection_holds_a_bounded_number_of_leases)
{
	start(NULL);
	uint32_t t[TD_BLOCK_TOKENS], stored, dedup, hit;
	td_prompt(t, 1, 77);
	struct prefixd *a = t_client(&td, 1);
	cr_assert_eq(td_publish(a, 0, t, 0, 1, &stored, &dedup), 0);
	uint64_t lease, last = 0;
	const void *kv[1];
	int i = 0;
	while (i < 2000 && !prefixd_match(a, t, 1, &lease, &hit, kv)) {
		last = lease;
		i++;
	}
	cr_expect_eq(i, 1024, "1024 leases, then a refusal");
	cr_expect(strstr(prefixd_errmsg(), "release some"), "%s", prefixd_errmsg());
	cr_expect_eq(prefixd_release(a, last), 0);
	cr_expect_eq(prefixd_match(a, t, 1, &lease, &hit, kv), 0, "room again after a release");
	prefixd_close(a);
	t_stop(&td);
}
