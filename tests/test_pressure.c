/* SPDX-License-Identifier: MIT */
/*
 * The disk tier under pressure (issues 33 and 24): publishes that need
 * more than --memory lose no confirmed block, writes after a full disk
 * keep parents before children, --disk-sync answers once records are on
 * disk, and an import larger than memory lands whole (or says what it
 * could not land).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon_asserts.h"
#include "record.h"

#define BT TD_BLOCK_TOKENS
#define REC_BYTES (4096 + TD_BLOCK_BYTES) /* a record of one test block */
#define MAXB 64

static struct test_daemon td;
static char disk[PATH_MAX];

T_DISK_SUITE(pressure, "pressure", 240);

/* MATCHes prompt k (with restores): the run attached, every byte checked. */
static uint32_t match(struct prefixd *c, uint32_t k, uint32_t n)
{
	struct t_got g = t_match_k(c, k, n);
	cr_assert_eq(g.bad, 0, "prompt %u: %u blocks of wrong bytes", k, g.bad);
	return g.hit;
}

/* ==== No block evicted before it is written ==== */

#define PUBLISHERS 3
#define PROMPTS 8   /* each publisher's */
#define BLOCKS 16   /* a prompt's */

struct publisher {
	const char *sock;
	uint32_t first;
	uint32_t confirmed[PROMPTS];
	char why[160];
};

static void *publisher(void *arg)
{
	struct publisher *p = arg;
	struct prefixd *c = td_connect(p->sock, 1, p->why, sizeof(p->why));
	if (!c)
		return NULL;
	for (uint32_t k = 0; k < PROMPTS; k++) {
		uint32_t t[BLOCKS * BT], stored = 0, dedup = 0;
		td_prompt(t, BLOCKS, TD_PROMPT_K(p->first + k));
		int rc = td_publish(c, 0, t, 0, BLOCKS, &stored, &dedup);
		if (rc && rc != -ENOSPC) {
			snprintf(p->why, sizeof(p->why), "publish: %s", prefixd_errmsg());
			break;
		}
		p->confirmed[k] = stored + dedup;
	}
	prefixd_close(c);
	return NULL;
}

Test(pressure, concurrent_publishes_past_memory_lose_no_confirmed_block)
{
	/* 64 slots of 8 KiB; three publishers of 8 x 16 blocks: 6 x memory. */
	const char *args[] = { "--memory", "512K", "--disk-budget", "64M", NULL };
	t_start_disk(&td, disk, args);
	struct publisher p[PUBLISHERS];
	pthread_t t[PUBLISHERS];
	for (int i = 0; i < PUBLISHERS; i++) {
		p[i] = (struct publisher){ .sock = td.sock, .first = (uint32_t)i * PROMPTS };
		cr_assert_eq(pthread_create(&t[i], NULL, publisher, &p[i]), 0);
	}
	uint64_t confirmed = 0;
	for (int i = 0; i < PUBLISHERS; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(p[i].why[0], 0, "%s", p[i].why);
		for (int k = 0; k < PROMPTS; k++)
			confirmed += p[i].confirmed[k];
	}
	cr_expect_gt(confirmed, PUBLISHERS * PROMPTS * BLOCKS / 2, "most blocks are stored");
	struct prefixd_stats s = t_wait_written(&td, 0, 20);
	cr_expect_eq(s.unwritten_evictions, 0, "no block left memory before it was written");
	cr_expect_eq(s.spills, s.published, "every block published was written: %llu of %llu",
		     (unsigned long long)s.spills, (unsigned long long)s.published);
	cr_assert_eq(td_stop(&td), 0);
	/* Everything confirmed is served again after a restart. */
	t_start_disk(&td, disk, args);
	struct prefixd *c = t_client(&td, 1);
	for (int i = 0; i < PUBLISHERS; i++)
		for (uint32_t k = 0; k < PROMPTS; k++)
			cr_expect_geq(match(c, p[i].first + k, BLOCKS), p[i].confirmed[k],
				      "prompt %u: %u blocks confirmed", p[i].first + k,
				      p[i].confirmed[k]);
	prefixd_close(c);
	cr_assert_eq(td_stop(&td), 0);
}

Test(pressure, a_full_disk_drops_unwritten_blocks_only_when_memory_needs_them_and_counts_them)
{
	/* 160 KiB of file system (13 records) and 16 slots of memory. */
	char out[4096];
	t_mount_tmpfs(disk, "160k");
	const char *args[] = { "--memory", "128K", "--disk-budget", "10M", NULL };
	t_start_disk(&td, disk, args);
	struct prefixd *c = t_client(&td, 1);
	uint32_t confirmed = 0;
	for (uint32_t k = 0; k < 6; k++)
		confirmed += t_publish_k(c, k, 8);
	cr_expect_eq(confirmed, 48, "a full disk does not stop publishes");
	struct prefixd_stats s = t_stats(&td);
	cr_expect_gt(s.unwritten_evictions, 0, "some blocks could not be written, nor kept");
	cr_expect_eq(s.unwritten_evictions + s.spills + s.disk_pending, s.published,
		     "each block is written, waiting, or counted lost: %llu + %llu + %llu of %llu",
		     (unsigned long long)s.unwritten_evictions, (unsigned long long)s.spills,
		     (unsigned long long)s.disk_pending, (unsigned long long)s.published);
	char prom[2 * PATH_MAX];
	snprintf(prom, sizeof(prom), "%s --socket %s stats --prometheus | grep unwritten", PREFIXCTL, td.sock);
	cr_assert_eq(td_sh(out, sizeof(out), "%s", prom), 0, "%s", out);
	char want[96];
	snprintf(want, sizeof(want), "prefixd_disk_unwritten_evictions_total %llu",
		 (unsigned long long)s.unwritten_evictions);
	cr_expect(strstr(out, want), "%s in:\n%s", want, out);
	snprintf(prom, sizeof(prom), "%s --socket %s stats | grep 'before their record was written'", PREFIXCTL, td.sock);
	cr_assert_eq(td_sh(out, sizeof(out), "%s", prom), 0, "%s", out);
	snprintf(want, sizeof(want), "(lost)  %llu", (unsigned long long)s.unwritten_evictions);
	cr_expect(strstr(out, want), "%s in:\n%s", want, out);
	prefixd_close(c);
	cr_assert_eq(td_stop(&td), 0);
	cr_expect_eq(td_sh(out, sizeof(out), "umount '%s'", disk), 0, "%s", out);
}

/* ==== Parents before children ==== */

/* Records in the directory (how many), and which of prompt k's blocks
 * they are, by their first token. */
static uint32_t records_of(uint32_t k, bool have[MAXB])
{
	uint32_t n = 0;
	memset(have, 0, MAXB * sizeof(bool));
	DIR *d = opendir(disk);
	cr_assert(d);
	for (struct dirent *e; (e = readdir(d));) {
		size_t len = strlen(e->d_name);
		if (len < 4 || strcmp(e->d_name + len - 4, ".rec"))
			continue;
		char p[PATH_MAX + 256];
		snprintf(p, sizeof(p), "%s/%s", disk, e->d_name);
		n++;
		uint8_t head[4096];
		int fd = open(p, O_RDONLY);
		cr_assert_geq(fd, 0);
		ssize_t r = pread(fd, head, sizeof(head), 0);
		close(fd);
		struct rec_meta m;
		if (r != (ssize_t)sizeof(head) || rec_check_head(head, sizeof(head), NULL, &m, NULL))
			continue;
		uint32_t first = pd_token_at(m.tokens, BT, 0, 0);
		if (first / 1000000 == k + 1 && first % 1000000 / BT < MAXB)
			have[first % 1000000 / BT] = true;
	}
	closedir(d);
	return n;
}

Test(pressure, after_a_full_disk_records_are_written_parents_first)
{
	char out[4096];
	t_mount_tmpfs(disk, "1m");
	const char *args[] = { "--memory", "1M", "--disk-budget", "10M", NULL };
	t_start_disk(&td, disk, args);
	/* Nothing left of the file system. */
	td_sh(out, sizeof(out), "dd if=/dev/zero of='%s/filler' bs=4k 2>&1", disk);
	struct prefixd *c = t_client(&td, 1);
	cr_assert_eq(t_publish_k(c, 0, 30), 30);
	for (int i = 0; i < 500 && !td_log_has(&td, "is full: blocks stay in memory only"); i++)
		usleep(10000);
	cr_assert(td_log_has(&td, "is full: blocks stay in memory only"));
	/* Room for 10 records: the writer tries again within a second. */
	struct stat st;
	char filler[PATH_MAX + 16];
	snprintf(filler, sizeof(filler), "%s/filler", disk);
	cr_assert_eq(stat(filler, &st), 0);
	cr_assert_eq(truncate(filler, st.st_size - 10 * REC_BYTES), 0);
	struct prefixd_stats s = t_stats(&td);
	for (int i = 0; i < 1000 && s.spills < 10; i++) {
		usleep(10000);
		s = t_stats(&td);
	}
	cr_assert_gt(s.spills, 0, "the writer wrote again");
	prefixd_close(c);
	td_kill(&td);
	bool have[MAXB];
	uint32_t n = records_of(0, have);
	cr_expect_gt(n, 0, "records were written once there was room");
	for (uint32_t b = 1; b < 30; b++)
		cr_expect(!have[b] || have[b - 1], "block %u's record is there, its parent's is not", b);
	/* Room again, and a restart: every record is served. */
	unlink(filler);
	t_start_disk(&td, disk, args);
	cr_expect_eq(t_stats(&td).disk_blocks, n, "no record dropped for want of its parent");
	c = t_client(&td, 1);
	cr_expect_eq(match(c, 0, 30), n, "the records written are the chain's first");
	prefixd_close(c);
	cr_assert_eq(td_stop(&td), 0);
	cr_expect_eq(td_sh(out, sizeof(out), "umount '%s'", disk), 0, "%s", out);
}

/* ==== --disk-sync ==== */

Test(pressure, disk_sync_answers_a_publish_once_its_records_are_on_disk)
{
	const char *args[] = { "--memory", "1M", "--disk-sync", NULL };
	for (uint32_t round = 0; round < 4; round++) {
		t_start_disk(&td, disk, args);
		struct prefixd *c = t_client(&td, 1);
		cr_assert_eq(t_publish_k(c, round, 32), 32);
		/* Killed the moment the answer came: nothing may be lost. */
		td_kill(&td);
		prefixd_close(c);
		t_start_disk(&td, disk, args);
		c = t_client(&td, 1);
		for (uint32_t k = 0; k <= round; k++)
			cr_expect_eq(match(c, k, 32), 32, "round %u: prompt %u", round, k);
		struct prefixd_stats s = t_stats(&td);
		cr_expect_eq(s.disk_blocks, 32 * (round + 1));
		prefixd_close(c);
		cr_assert_eq(td_stop(&td), 0);
	}
}

Test(pressure, disk_sync_needs_a_disk_dir)
{
	char out[4096];
	int rc = td_sh(out, sizeof(out), "%s --disk-sync --socket %s/s", PREFIXD_EXE, disk);
	cr_expect_eq(rc, 2, "%s", out);
	cr_expect(strstr(out, "--disk-sync: only with --disk-dir"), "%s", out);
}

/* ==== An import larger than memory ==== */

#define CHAINS 4
#define CHAIN 62 /* blocks: four chains are 248, memory holds 128 */

Test(pressure, an_import_larger_than_memory_lands_every_block)
{
	char a[PATH_MAX + 8], b[PATH_MAX + 8], file[PATH_MAX + 16], out[4096];
	snprintf(a, sizeof(a), "%s/a", disk);
	snprintf(b, sizeof(b), "%s/b", disk);
	snprintf(file, sizeof(file), "%s/all.pfx", disk);
	const char *args[] = { "--memory", "1M", NULL };
	t_start_disk(&td, a, args);
	struct prefixd *c = t_client(&td, 1);
	for (uint32_t k = 0; k < CHAINS; k++)
		cr_assert_eq(t_publish_k(c, k, CHAIN), CHAIN);
	t_wait_written(&td, 0, 20);
	prefixd_close(c);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "export", file), 0, "%s", out);
	cr_expect(strstr(out, "exported 248 blocks"), "%s", out);
	cr_assert_eq(td_stop(&td), 0);

	/* A fresh daemon of the same size. */
	t_start_disk(&td, b, args);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "import", file), 0, "%s", out);
	cr_expect(strstr(out, "imported 248 blocks"), "%s", out);
	cr_expect(strstr(out, "0 without a parent, 0 refused"), "%s", out);
	/* Memory is full of imported blocks until they are written: a MATCH
	 * does not wait for the writer to make room for its restores. */
	t_wait_written(&td, 0, 20);
	c = t_client(&td, 1);
	for (uint32_t k = 0; k < CHAINS; k++)
		cr_expect_eq(match(c, k, CHAIN), CHAIN, "chain %u attaches whole", k);
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.unwritten_evictions, 0);
	prefixd_close(c);
	cr_assert_eq(td_stop(&td), 0);

	/* Without a disk tier it cannot: it says so, and fails; what it
	 * says it imported is there (it held each block until the end,
	 * rather than evict the file's earlier blocks for its later ones). */
	const char *plain[] = { "--block-tokens", "4", "--memory", "1M", NULL };
	cr_assert_eq(td_start(&td, plain), 0);
	cr_expect_eq(t_ctl(&td, out, sizeof(out), "import", file), 1, "%s", out);
	cr_expect(strstr(out, "of the file's 248 blocks were not imported"), "%s", out);
	const char *said = strstr(out, "imported ");
	unsigned long long imported = 0;
	cr_assert(said && sscanf(said, "imported %llu blocks", &imported) == 1, "%s", out);
	cr_expect_gt(imported, 0);
	c = t_client(&td, 1);
	unsigned long long there = 0;
	for (uint32_t k = 0; k < CHAINS; k++)
		there += match(c, k, CHAIN);
	cr_expect_eq(there, imported, "the blocks it says it imported attach");
	prefixd_close(c);
	cr_assert_eq(td_stop(&td), 0);
}
