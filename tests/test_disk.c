/* SPDX-License-Identifier: MIT */
/*
 * The disk tier: blocks written behind publishes, evicted from memory and
 * read back by MATCH; graceful and kill -9 restarts; damaged, cut short
 * and planted records (never served); the disk budget; one daemon a
 * directory; what prefixctl shows of it; and the runtime's logits on a
 * prefix read back from disk.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chain.h"
#include "daemon_cases.h"
#include "daemon_asserts.h"
#include "helpers.h"
#include "record.h"

#define BT TD_BLOCK_TOKENS
#define BB ((uint64_t)TD_BLOCK_BYTES)
#define REC_BYTES (4096 + BB) /* a record of one test block: head, payload */

static struct test_daemon td;
static char disk[PATH_MAX];

T_DISK_SUITE(disk, "disk", 120);

/* ==== The daemon ==== */

/* Publishes prompt k: every block stored or there already. */
static void publish(struct prefixd *c, uint32_t k, uint32_t n)
{
	uint32_t done = t_publish_k(c, k, n);
	cr_assert_eq(done, n, "prompt %u: %u of %u blocks stored or there already", k, done, n);
}

/* ==== Records on disk ==== */

/* The path of the record of prompt k's block b (found by its first
 * token), or "" when there is none. */
static void record_of(uint32_t k, uint32_t b, char *path, size_t cap)
{
	uint32_t first = TD_PROMPT_K(k) + b * BT;
	DIR *d = opendir(disk);
	cr_assert(d);
	path[0] = 0;
	for (struct dirent *e; (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n < 4 || strcmp(e->d_name + n - 4, ".rec"))
			continue;
		char p[PATH_MAX + 256];
		snprintf(p, sizeof(p), "%s/%s", disk, e->d_name);
		uint8_t head[4096];
		int fd = open(p, O_RDONLY);
		cr_assert_geq(fd, 0);
		ssize_t r = pread(fd, head, sizeof(head), 0);
		close(fd);
		struct rec_meta m;
		if (r == (ssize_t)sizeof(head) && !rec_check_head(head, sizeof(head), NULL, &m, NULL) &&
		    pd_token_at(m.tokens, BT, 0, 0) == first) {
			snprintf(path, cap, "%s", p);
			break;
		}
	}
	closedir(d);
}

static int count_files(const char *suffix)
{
	DIR *d = opendir(disk);
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		size_t k = strlen(e->d_name), s = strlen(suffix);
		n += k > s && !strcmp(e->d_name + k - s, suffix);
	}
	if (d)
		closedir(d);
	return n;
}

static void flip_byte(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0, "%s", path);
	uint8_t b;
	cr_assert_eq(pread(fd, &b, 1, at), 1);
	b ^= 0x40;
	cr_assert_eq(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

static uint8_t *read_all(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0, "%s", path);
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	uint8_t *b = malloc((size_t)st.st_size);
	cr_assert_eq(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return b;
}

static void write_all(const char *path, const uint8_t *b, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0, "%s", path);
	cr_assert_eq(write(fd, b, len), (ssize_t)len);
	close(fd);
}

/* ==== Tests ==== */

Test(disk, blocks_evicted_from_memory_come_back_from_disk_whole)
{
	/* 16 slots of 8 KiB. */
	const char *args[] = { "--memory", "128K", NULL };
	t_start_disk(&td, disk, args);
	struct prefixd *c = t_client(&td, 1);
	publish(c, 0, 8);
	struct prefixd_stats s = t_wait_written(&td, 8, 10);
	cr_expect_eq(s.disk_blocks, 8);
	cr_expect_eq(s.disk_bytes, 8 * REC_BYTES);
	cr_expect_eq(count_files(".rec"), 8);
	publish(c, 1, 16); /* memory holds only these now */
	s = t_wait_written(&td, 24, 10);
	cr_expect_eq(s.blocks, 16);
	cr_expect_eq(s.evictions, 8);
	cr_expect_eq(s.disk_blocks, 24, "eviction from memory keeps the records");
	struct t_got g = t_match_k(c, 0, 8);
	cr_expect_eq(g.hit, 8, "the evicted prompt is served again");
	cr_expect_eq(g.from_disk, 8, "and the reply says it came from disk");
	cr_expect_eq(g.bad, 0, "every byte as published");
	s = t_stats(&td);
	cr_expect_eq(s.restores, 8);
	cr_expect_eq(s.restore_bytes, 8 * BB);
	cr_expect_eq(s.disk_corrupt, 0);
	g = t_match_k(c, 0, 8);
	cr_expect_eq(g.hit, 8);
	cr_expect_eq(g.from_disk, 0, "now in memory again");
	g = t_match_k(c, 1, 16);
	cr_expect_eq(g.hit, 16, "the other prompt, partly read back");
	cr_expect_eq(g.bad, 0);
	prefixd_close(c);
	t_stop(&td);
}

Test(disk, a_graceful_restart_keeps_every_block)
{
	t_start_disk(&td, disk, NULL);
	struct prefixd *c = t_client(&td, 1);
	for (uint32_t k = 0; k < 4; k++)
		publish(c, k, 8);
	prefixd_close(c);
	/* No wait: SIGTERM writes what is held only in memory. */
	t_stop(&td);
	cr_expect_eq(count_files(".rec"), 32);
	cr_expect_eq(count_files(".tmp"), 0);
	t_start_disk(&td, disk, NULL);
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.disk_blocks, 32, "the index is rebuilt from the directory");
	cr_expect_eq(s.disk_bytes, 32 * REC_BYTES);
	cr_expect_eq(s.blocks, 0, "nothing in memory yet");
	c = t_client(&td, 1);
	for (uint32_t k = 0; k < 4; k++) {
		struct t_got g = t_match_k(c, k, 8);
		cr_expect_eq(g.hit, 8, "prompt %u", k);
		cr_expect_eq(g.from_disk, 8, "prompt %u", k);
		cr_expect_eq(g.bad, 0, "prompt %u", k);
	}
	prefixd_close(c);
	t_stop(&td);
}

Test(disk, after_kill_9_everything_written_is_served_again)
{
	t_start_disk(&td, disk, NULL);
	struct prefixd *c = t_client(&td, 1);
	publish(c, 0, 6);
	t_wait_written(&td, 6, 10);
	prefixd_close(c);
	td_kill(&td);
	t_start_disk(&td, disk, NULL);
	c = t_client(&td, 1);
	struct t_got g = t_match_k(c, 0, 6);
	cr_expect_eq(g.hit, 6);
	cr_expect_eq(g.from_disk, 6);
	cr_expect_eq(g.bad, 0);
	prefixd_close(c);
	t_stop(&td);
}

#define NPROMPTS 300

Test(disk, kill_9_during_heavy_spilling_serves_only_whole_blocks)
{
	const char *args[] = { "--memory", "1M", NULL };
	t_start_disk(&td, disk, args);
	int ready[2];
	cr_assert_eq(pipe(ready), 0);
	pid_t kid = fork();
	cr_assert_geq(kid, 0);
	if (!kid) {
		/* Publishes prompts until the daemon dies under it. */
		struct prefixd_layout l = td_layout(1);
		struct prefixd *cc;
		if (prefixd_connect(td.sock, &l, &cc))
			_exit(1);
		uint32_t t[32 * BT], stored, dedup;
		for (uint32_t k = 0; k < NPROMPTS; k++) {
			td_prompt(t, 32, TD_PROMPT_K(k));
			if (td_publish(cc, 0, t, 0, 32, &stored, &dedup))
				_exit(0);
			if (k == 20 && write(ready[1], "x", 1) != 1)
				_exit(1);
		}
		pause();
	}
	close(ready[1]);
	char x;
	cr_assert_eq(read(ready[0], &x, 1), 1, "the publisher got going");
	close(ready[0]);
	usleep(200000); /* publishing and spilling flat out meanwhile */
	struct prefixd_stats s = t_stats(&td);
	cr_expect_gt(s.disk_pending + s.spills, 0);
	td_kill(&td);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	t_start_disk(&td, disk, args);
	uint64_t on_disk = t_stats(&td).disk_blocks;
	struct prefixd *c = t_client(&td, 1);
	uint32_t served = 0, bad = 0;
	for (uint32_t k = 0; k < NPROMPTS; k++) {
		struct t_got g = t_match_k(c, k, 32);
		served += g.hit;
		bad += g.bad;
	}
	cr_expect_gt(on_disk, 0, "records were written before the kill");
	cr_expect_eq(served, on_disk, "each record found at start is served (chains from their roots)");
	cr_expect_eq(bad, 0, "and every byte of it is as published");
	cr_expect_eq(count_files(".tmp"), 0, "records cut short were deleted at start");
	prefixd_close(c);
	t_stop(&td);
}

/* Damages records of five prompts after a graceful stop; the next start
 * reads the manifest of that stop, or (scan) finds every file's head as
 * after a kill -9. */
static void damaged_records(bool scan)
{
	t_start_disk(&td, disk, NULL);
	struct prefixd *c = t_client(&td, 1);
	for (uint32_t k = 0; k < 5; k++)
		publish(c, k, 4);
	prefixd_close(c);
	t_stop(&td);
	char p[PATH_MAX + 256];
	/* 0: a payload byte of block 2 (found only when it is read back). */
	record_of(0, 2, p, sizeof(p));
	cr_assert(p[0]);
	flip_byte(p, 4096 + 100);
	/* 1: a head byte (a token) of block 1: found at start; its
	 * continuations lose their parent and go too. */
	record_of(1, 1, p, sizeof(p));
	cr_assert(p[0]);
	flip_byte(p, REC_HDR_SIZE + 2);
	/* 2: block 0 cut short. */
	record_of(2, 0, p, sizeof(p));
	cr_assert(p[0]);
	cr_assert_eq(truncate(p, 4096 + 100), 0);
	/* 3: block 0 as another user's record, under this user's name. */
	size_t len;
	record_of(3, 0, p, sizeof(p));
	cr_assert(p[0]);
	uint8_t *rec = read_all(p, &len), out[4096 + BB];
	struct rec_meta m;
	cr_assert_eq(rec_check(rec, len, NULL, &m, NULL), 0);
	uint32_t tok[BT];
	for (uint32_t i = 0; i < BT; i++)
		tok[i] = pd_token_at(m.tokens, BT, 0, i);
	m.ns = 4242;
	cr_assert_eq(rec_encode(&m, tok, rec + m.payload_off, out, sizeof(out)), (int)len);
	write_all(p, out, len);
	/* 4: block 0 as another model's (another chain root), same name. */
	free(rec);
	record_of(4, 0, p, sizeof(p));
	cr_assert(p[0]);
	rec = read_all(p, &len);
	cr_assert_eq(rec_check(rec, len, NULL, &m, NULL), 0);
	for (uint32_t i = 0; i < BT; i++)
		tok[i] = pd_token_at(m.tokens, BT, 0, i);
	m.root[0] ^= 1;
	m.fp[0] ^= 1;
	cr_assert_eq(rec_encode(&m, tok, rec + m.payload_off, out, sizeof(out)), (int)len);
	write_all(p, out, len);
	free(rec);

	char manifest[PATH_MAX + 32];
	snprintf(manifest, sizeof(manifest), "%s/manifest", disk);
	cr_assert_eq(access(manifest, F_OK), 0, "a graceful stop writes a manifest");
	if (scan)
		cr_assert_eq(unlink(manifest), 0);
	t_start_disk(&td, disk, NULL);
	cr_expect_eq(access(manifest, F_OK), -1, "a start deletes the manifest it read");
	cr_expect(td_log_has(&td, scan ? "from a scan" : "from the manifest"), "the log says how");
	struct prefixd_stats s = t_stats(&td);
	if (scan) {
		cr_expect_eq(s.disk_corrupt, 4, "the head, the cut and the two planted ones, at start");
		cr_expect_eq(s.disk_blocks, 4 + 1 + 0 + 0 + 0,
			     "prompt 0 whole on disk, prompt 1 up to its damaged block, nothing after a bad block 0");
	} else {
		cr_expect_eq(s.disk_corrupt, 0, "the manifest's heads are intact");
		cr_expect_eq(s.disk_blocks, 20);
	}
	c = t_client(&td, 1);
	struct t_got g = t_match_k(c, 0, 4);
	cr_expect_eq(g.hit, 2, "prompt 0 is served up to its damaged payload");
	cr_expect_eq(g.bad, 0);
	s = t_stats(&td);
	cr_expect_eq(s.disk_corrupt, scan ? 5 : 1, "the payload, when read back");
	uint32_t want_hit[5] = { 2, 1, 0, 0, 0 };
	for (uint32_t k = 1; k < 5; k++) {
		g = t_match_k(c, k, 4);
		cr_expect_eq(g.hit, want_hit[k], "prompt %u: %u hit", k, g.hit);
		cr_expect_eq(g.bad, 0, "prompt %u", k);
	}
	cr_expect_eq(t_stats(&td).disk_corrupt, 5, "each bad record is counted once, however found");
	if (scan) {
		cr_expect(td_log_has(&td, "its hash does not follow its chain"), "the planted model's record is named in the log");
		cr_expect(td_log_has(&td, "filed under another block"), "the planted user's record is named in the log");
	}
	/* The client computes them again and publishes them: whole again. */
	publish(c, 0, 4);
	g = t_match_k(c, 0, 4);
	cr_expect_eq(g.hit, 4);
	cr_expect_eq(g.bad, 0);
	prefixd_close(c);
	t_stop(&td);
}

Test(disk, damaged_cut_short_and_planted_records_found_by_a_scan_are_dropped_and_never_served)
{
	damaged_records(true);
}

Test(disk, damaged_cut_short_and_planted_records_listed_in_a_manifest_are_never_served)
{
	damaged_records(false);
}

Test(disk, the_disk_budget_lets_the_least_recently_used_go_and_respects_pins)
{
	/* 8 slots in memory; 40 records on disk. */
	char budget[32];
	snprintf(budget, sizeof(budget), "%llu", (unsigned long long)(40 * REC_BYTES));
	const char *args[] = { "--memory", "64K", "--pin-max", "32K", "--disk-budget", budget, NULL };
	t_start_disk(&td, disk, args);
	struct prefixd *c = t_client(&td, 1);
	publish(c, 0, 4);
	t_wait_written(&td, 4, 10);
	struct prefixd *adm;
	cr_assert_eq(prefixd_connect(td.sock, NULL, &adm), 0);
	uint32_t t[4 * BT];
	td_prompt(t, 4, TD_PROMPT_K(0));
	struct prefixd_id id;
	struct prefixd_prompt *pp;
	struct prefixd_layout l = td_layout(1);
	cr_assert_eq(prefixd_prompt_new(&l, &pp), 0);
	cr_assert_eq(prefixd_prompt_append(pp, t, 4 * BT), 0);
	cr_assert_eq(prefixd_prompt_id(pp, &id), 0);
	prefixd_prompt_free(pp);
	uint64_t pinned;
	cr_assert_eq(prefixd_pin(adm, &id, 0, &pinned), 0, "%s", prefixd_errmsg());
	for (uint32_t k = 1; k < 20; k++) {
		publish(c, k, 4);
		struct prefixd_stats s = t_wait_written(&td, 4 + 4 * k, 10);
		cr_expect_leq(s.disk_bytes, 40 * REC_BYTES, "after prompt %u", k);
	}
	struct prefixd_stats s = t_wait_written(&td, 0, 10);
	cr_expect_gt(s.disk_evictions, 0);
	cr_expect_eq(s.disk_bytes, s.disk_blocks * REC_BYTES);
	struct t_got g = t_match_k(c, 0, 4);
	cr_expect_eq(g.hit, 4, "the pinned prompt stayed");
	cr_expect_eq(g.from_disk, 0, "in memory");
	g = t_match_k(c, 1, 4);
	cr_expect_eq(g.hit, 0, "the oldest unpinned prompt went from disk too");
	g = t_match_k(c, 19, 4);
	cr_expect_eq(g.hit, 4, "the newest is there");
	g = t_match_k(c, 12, 4);
	cr_expect_eq(g.hit, 4, "recent ones too, from disk");
	cr_expect_eq(g.from_disk, 4);
	cr_expect_eq(g.bad, 0);
	/* The writer unlinks a deleted block's record after the index let it
	 * go, as soon as it wakes: give it that moment. */
	int files = -1, blocks = 0;
	for (int i = 0; i < 500 && files != blocks; i++) {
		if (i)
			usleep(10000);
		blocks = (int)t_stats(&td).disk_blocks;
		files = count_files(".rec");
	}
	cr_expect_eq(files, blocks, "deleted records are gone from the directory");
	prefixd_close(adm);
	prefixd_close(c);
	t_stop(&td);
}

Test(disk, a_full_disk_budget_keeps_blocks_in_memory_and_says_so)
{
	/* 128 slots in memory, records for 20 on disk. */
	char budget[32];
	snprintf(budget, sizeof(budget), "%llu", (unsigned long long)(20 * REC_BYTES));
	const char *args[] = { "--memory", "1M", "--disk-budget", budget, NULL };
	t_start_disk(&td, disk, args);
	struct prefixd *c = t_client(&td, 1);
	for (uint32_t k = 0; k < 10; k++)
		publish(c, k, 8);
	struct prefixd_stats s;
	for (int i = 0; i < 500; i++) {
		s = t_stats(&td);
		if (s.spills == 20)
			break;
		usleep(10000);
	}
	cr_expect_eq(s.spills, 20);
	cr_expect_eq(s.disk_pending, 60, "the rest waits, in memory");
	cr_expect_eq(s.blocks, 80, "nothing lost from memory");
	for (uint32_t k = 0; k < 10; k++) {
		struct t_got g = t_match_k(c, k, 8);
		cr_expect_eq(g.hit, 8, "prompt %u", k);
		cr_expect_eq(g.bad, 0);
	}
	for (int i = 0; i < 100 && !td_log_has(&td, "the disk budget is full"); i++)
		usleep(10000);
	cr_expect(td_log_has(&td, "the disk budget is full"), "a line in the log");
	prefixd_close(c);
	t_stop(&td);
}

Test(disk, a_second_daemon_on_one_directory_is_refused)
{
	t_start_disk(&td, disk, NULL);
	char out[4096], sock[PATH_MAX + 32];
	snprintf(sock, sizeof(sock), "%s/second.sock", disk);
	int st = td_sh(out, sizeof(out), "timeout 10 %s --block-tokens 4 --socket %s --disk-dir %s", PREFIXD_EXE,
		       sock, disk);
	cr_expect_eq(st, 1, "%s", out);
	char want[64];
	snprintf(want, sizeof(want), "in use by another prefixd (pid %d)", (int)td.pid);
	cr_expect(strstr(out, want), "%s", out);
	cr_expect_eq(access(sock, F_OK), -1, "it never listened");
	t_stop(&td);
	/* Once the first is gone, the directory is free again (also after a kill -9). */
	t_start_disk(&td, disk, NULL);
	td_kill(&td);
	t_start_disk(&td, disk, NULL);
	t_stop(&td);
}

Test(disk, bad_flags_are_refused)
{
	char out[4096];
	cr_expect_eq(td_sh(out, sizeof(out), "%s --disk-budget 1G", PREFIXD_EXE), 2, "%s", out);
	cr_expect(strstr(out, "only with --disk-dir"), "%s", out);
	cr_expect_eq(td_sh(out, sizeof(out), "%s --disk-dir %s --disk-budget 10", PREFIXD_EXE, disk), 2, "%s", out);
	cr_expect(strstr(out, "at least 64K"), "%s", out);
	cr_expect_eq(td_sh(out, sizeof(out), "timeout 10 %s --disk-dir /proc/nonexistent/x --socket %s/s", PREFIXD_EXE, disk), 1, "%s", out);
	cr_expect(strstr(out, "cannot make the disk directory /proc/nonexistent/x"), "%s", out);
}

/* ==== Export and import ==== */

Test(disk, an_export_imported_into_a_fresh_daemon_gives_hits)
{
	/* 8 slots: of two 6-block prompts, part is on disk only. */
	const char *args[] = { "--memory", "64K", NULL };
	t_start_disk(&td, disk, args);
	struct prefixd *c = t_client(&td, 1);
	publish(c, 0, 6);
	t_wait_written(&td, 6, 10);
	publish(c, 1, 6);
	struct prefixd_stats s = t_wait_written(&td, 12, 10);
	cr_assert_lt(s.blocks, 12, "some blocks are on disk only");
	prefixd_close(c);
	char file[PATH_MAX + 32], out[4096];
	snprintf(file, sizeof(file), "%s/all.pfx", disk);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "export", file), 0, "%s", out);
	cr_expect(strstr(out, "exported 12 blocks"), "%s", out);
	struct stat st;
	cr_assert_eq(stat(file, &st), 0);
	cr_expect_eq(st.st_size, 12 * REC_BYTES, "records in the disk format");
	cr_expect_eq(st.st_mode & 0777, 0600);
	t_stop(&td);
	/* Another daemon, without a disk. */
	const char *plain[] = { "--block-tokens", "4", NULL };
	cr_assert_eq(td_start(&td, plain), 0);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "import", file), 0, "%s", out);
	cr_expect(strstr(out, "imported 12 blocks"), "%s", out);
	c = t_client(&td, 1);
	for (uint32_t k = 0; k < 2; k++) {
		struct t_got g = t_match_k(c, k, 6);
		cr_expect_eq(g.hit, 6, "prompt %u", k);
		cr_expect_eq(g.bad, 0, "prompt %u", k);
		cr_expect_eq(g.from_disk, 0);
	}
	/* Again: everything is there already. */
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "import", file), 0, "%s", out);
	cr_expect(strstr(out, "imported 0 blocks (0 B) from"), "%s", out);
	cr_expect(strstr(out, "12 already cached"), "%s", out);
	prefixd_close(c);
	t_stop(&td);
}

Test(disk, an_export_by_id_or_user_takes_what_they_select_and_import_user_moves_it)
{
	t_start_disk(&td, disk, NULL);
	struct prefixd *c = t_client(&td, 1);
	publish(c, 0, 3);
	publish(c, 1, 5);
	prefixd_close(c);
	char out[4096], file[PATH_MAX + 32], id[128];
	/* The chain of 3 blocks: the last row by tokens (a count line follows). */
	cr_assert_eq(td_sh(id, sizeof(id), "%s --socket %s ls --sort tokens | tail -2 | head -1 | awk '{print $1}'", PREFIXCTL, td.sock), 0);
	id[strcspn(id, "\n")] = 0;
	snprintf(file, sizeof(file), "%s/one.pfx", disk);
	char sel[256];
	snprintf(sel, sizeof(sel), "export --id %s", id);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), sel, file), 0, "%s", out);
	cr_expect(strstr(out, "exported 3 blocks"), "%s", out);
	snprintf(file, sizeof(file), "%s/nobody.pfx", disk);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "export --user 4242", file), 0, "%s", out);
	cr_expect(strstr(out, "exported 0 blocks"), "%s", out);
	snprintf(file, sizeof(file), "%s/none.pfx", disk);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "export --id 0123456789ab", file), 1, "%s", out);
	cr_expect(access(file, F_OK), "a failed export leaves no file");
	snprintf(file, sizeof(file), "%s/one.pfx", disk);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "import --user 4242", file), 0, "%s", out);
	cr_expect(strstr(out, "imported 3 blocks"), "%s", out);
	cr_assert_eq(td_sh(out, sizeof(out), "%s --socket %s ls --user 4242", PREFIXCTL, td.sock), 0, "%s", out);
	cr_expect(strstr(out, "1 chain"), "the chain, in user 4242's namespace: %s", out);
	t_stop(&td);
}

Test(disk, a_damaged_foreign_or_strange_file_is_refused_and_nothing_is_imported)
{
	/* A file of 8-token blocks. */
	const char *eight[] = { "--block-tokens", "8", NULL };
	cr_assert_eq(td_start(&td, eight), 0);
	struct prefixd_layout l = td_layout(1);
	l.block_tokens = 8;
	struct prefixd *c;
	cr_assert_eq(prefixd_connect(td.sock, &l, &c), 0, "%s", prefixd_errmsg());
	uint32_t t[16], stored, dedup;
	for (uint32_t i = 0; i < 16; i++)
		t[i] = i + 7;
	static uint8_t kv[2][TD_BLOCK_BYTES];
	const void *ptrs[2] = { kv[0], kv[1] };
	cr_assert_eq(prefixd_publish(c, 0, t, 0, 2, ptrs, &stored, &dedup), 0, "%s", prefixd_errmsg());
	prefixd_close(c);
	char foreign[PATH_MAX + 32], out[4096];
	snprintf(foreign, sizeof(foreign), "%s/eight.pfx", disk);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "export", foreign), 0, "%s", out);
	t_stop(&td);

	t_start_disk(&td, disk, NULL);
	c = t_client(&td, 1);
	publish(c, 0, 4);
	prefixd_close(c);
	char good[PATH_MAX + 32], bad[PATH_MAX + 32], junk[PATH_MAX + 32];
	snprintf(good, sizeof(good), "%s/good.pfx", disk);
	snprintf(bad, sizeof(bad), "%s/bad.pfx", disk);
	snprintf(junk, sizeof(junk), "%s/junk.pfx", disk);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "export", good), 0, "%s", out);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "evict --all", ""), 0, "%s", out);
	uint64_t published = t_stats(&td).published;
	size_t len;
	uint8_t *b = read_all(good, &len);
	b[3 * REC_BYTES + 4096 + 10] ^= 1; /* the last record's payload */
	write_all(bad, b, len);
	write_all(junk, b + 1, len - 1);
	free(b);
	cr_expect_eq(t_ctl(&td, out, sizeof(out), "import", bad), 1, "%s", out);
	cr_expect(strstr(out, "record 3") && strstr(out, "nothing was imported"), "%s", out);
	cr_expect_eq(t_ctl(&td, out, sizeof(out), "import", junk), 1, "%s", out);
	cr_expect(strstr(out, "record 0"), "%s", out);
	cr_expect_eq(t_ctl(&td, out, sizeof(out), "import", foreign), 1, "%s", out);
	cr_expect(strstr(out, "not of this daemon's size"), "%s", out);
	cr_expect_eq(t_ctl(&td, out, sizeof(out), "import", "/nonexistent/file"), 1, "%s", out);
	cr_expect(strstr(out, "cannot read /nonexistent/file"), "%s", out);
	cr_expect_eq(t_stats(&td).published, published, "nothing was stored");
	c = t_client(&td, 1);
	cr_expect_eq(t_match_k(c, 0, 4).hit, 0);
	prefixd_close(c);
	cr_expect_eq(t_ctl(&td, out, sizeof(out), "import", good), 0, "%s", out);
	c = t_client(&td, 1);
	cr_expect_eq(t_match_k(c, 0, 4).hit, 4, "the good file still imports");
	prefixd_close(c);
	t_stop(&td);
}

Test(disk, export_and_import_take_only_a_regular_file_open_the_right_way)
{
	t_start_disk(&td, disk, NULL);
	struct prefixd *c = t_client(&td, 1);
	publish(c, 0, 2);
	prefixd_close(c);
	struct prefixd *adm;
	cr_assert_eq(prefixd_connect(td.sock, NULL, &adm), 0);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	int rc = prefixd_export(adm, NULL, NULL, p[1], NULL, NULL);
	cr_expect_eq(rc, -EBADMSG, "%d: %s", rc, prefixd_errmsg());
	cr_expect(strstr(prefixd_errmsg(), "not a regular file"), "%s", prefixd_errmsg());
	cr_expect_eq(prefixd_import(adm, p[0], NULL, NULL), -EBADMSG);
	close(p[0]);
	close(p[1]);
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/ro.pfx", disk);
	write_all(path, (const uint8_t *)"", 0);
	int ro = open(path, O_RDONLY), wo = open(path, O_WRONLY);
	cr_expect_eq(prefixd_export(adm, NULL, NULL, ro, NULL, NULL), -EBADMSG);
	cr_expect(strstr(prefixd_errmsg(), "is not open for writing"), "%s", prefixd_errmsg());
	cr_expect_eq(prefixd_import(adm, wo, NULL, NULL), -EBADMSG);
	cr_expect(strstr(prefixd_errmsg(), "not open for reading"), "%s", prefixd_errmsg());
	struct prefixd_imported r;
	cr_expect_eq(prefixd_import(adm, ro, NULL, &r), 0, "an empty file: nothing to import");
	cr_expect_eq(r.blocks, 0);
	close(ro);
	close(wo);
	/* The connection serves on. */
	struct prefixd_stats s;
	cr_expect_eq(prefixd_stats(adm, &s), 0);
	prefixd_close(adm);
	t_stop(&td);
}

/* ==== The runtime on a prefix read back from disk ==== */

#define MODEL "llama-tiny-gqa"
#define HEAD 24 /* the prefix: 6 blocks of 4 */

Test(disk, logits_on_a_prefix_read_back_from_disk_equal_an_uncached_run)
{
	size_t ntok;
	int32_t *tok = expected_i32(MODEL, "tokens", &ntok);
	char *head = tokens_csv(tok, HEAD), *all = tokens_csv(tok, ntok);
	char out[PATH_MAX + 32];
	t_start_disk(&td, disk, NULL);
	snprintf(out, sizeof(out), "%s/a.npy", disk);
	struct cmd_result a = run("logits --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --out %s",
				  fixtures_dir(), td.sock, head, out);
	cr_assert_eq(a.status, 0, "%s", a.out);
	cr_expect(strstr(a.out, "6 new blocks published"), "%s", a.out);
	t_stop(&td); /* the prefix is written out; after the restart it is on disk only */
	t_start_disk(&td, disk, NULL);
	snprintf(out, sizeof(out), "%s/b.npy", disk);
	struct cmd_result b = run("logits --model %s/" MODEL " --block-tokens 4 --socket %s --tokens %s --out %s",
				  fixtures_dir(), td.sock, all, out);
	cr_assert_eq(b.status, 0, "%s", b.out);
	cr_expect(strstr(b.out, "24 attached from the cache (6 blocks read back from prefixd's disk)"),
		  "%s", b.out);
	struct pfx_model *m = load_fixture_model_bt(MODEL, 4);
	float *ref = logits_uncached(m, tok, ntok);
	size_t V = (size_t)pfx_model_config(m)->vocab, rows = ntok - HEAD;
	float *got = read_npy(out, rows, V);
	float d = max_abs_diff(got, ref + HEAD * V, rows * V);
	cr_expect_leq(d, TOL_SELF, "logits on the restored prefix vs an uncached run: %g", d);
	size_t nl;
	float *hf = expected_f32(MODEL, "logits_full", &nl);
	d = max_abs_diff(got, hf + HEAD * V, rows * V);
	cr_expect_leq(d, TOL_LOGITS, "and vs transformers: %g", d);
	cr_expect_eq(t_stats(&td).restores, 6);
	free(hf);
	free(got);
	free(ref);
	pfx_model_free(m);
	free(head);
	free(all);
	free(tok);
	t_stop(&td);
}

Test(disk, a_damaged_manifest_falls_back_to_a_scan)
{
	t_start_disk(&td, disk, NULL);
	struct prefixd *c = t_client(&td, 1);
	publish(c, 0, 5);
	prefixd_close(c);
	t_stop(&td);
	char manifest[PATH_MAX + 32];
	snprintf(manifest, sizeof(manifest), "%s/manifest", disk);
	flip_byte(manifest, 32 + 200);
	t_start_disk(&td, disk, NULL);
	cr_expect(td_log_has(&td, "the manifest: it is damaged: scanning the directory instead"));
	cr_expect(td_log_has(&td, "from a scan"));
	cr_expect_eq(t_stats(&td).disk_blocks, 5);
	c = t_client(&td, 1);
	struct t_got g = t_match_k(c, 0, 5);
	cr_expect_eq(g.hit, 5);
	cr_expect_eq(g.from_disk, 5);
	cr_expect_eq(g.bad, 0);
	prefixd_close(c);
	t_stop(&td);
}

Test(disk, many_clients_at_once_with_spills_and_restores_keep_every_byte)
{
	char why[256];
	cr_expect_eq(case_daemon_many_clients_disk(why, sizeof(why)), 0, "%s", why);
}

Test(disk, a_full_file_system_keeps_blocks_in_memory_and_says_so)
{
	/* A file system of 160 KiB (13 records), under a budget of 10 MiB. */
	char out[4096];
	t_mount_tmpfs(disk, "160k");
	const char *args[] = { "--memory", "1M", "--disk-budget", "10M", NULL };
	t_start_disk(&td, disk, args);
	struct prefixd *c = t_client(&td, 1);
	for (uint32_t k = 0; k < 5; k++)
		publish(c, k, 8);
	for (int i = 0; i < 300 && !td_log_has(&td, "is full: blocks stay in memory only"); i++)
		usleep(10000);
	cr_expect(td_log_has(&td, "is full: blocks stay in memory only"), "a line in the log");
	struct prefixd_stats s = t_stats(&td);
	cr_expect_lt(s.spills, 14, "no more records than the file system holds: %llu",
		     (unsigned long long)s.spills);
	cr_expect_gt(s.disk_pending, 0, "the rest waits");
	cr_expect_eq(s.blocks, 40, "nothing lost from memory");
	for (uint32_t k = 0; k < 5; k++) {
		struct t_got g = t_match_k(c, k, 8);
		cr_expect_eq(g.hit, 8, "prompt %u", k);
		cr_expect_eq(g.bad, 0);
	}
	cr_expect_eq(count_files(".tmp"), 0, "a record that did not fit is not left half-written");
	prefixd_close(c);
	t_stop(&td);
	cr_expect_eq(td_sh(out, sizeof(out), "umount '%s'", disk), 0, "%s", out);
}

Test(disk, prefixctl_shows_where_chains_live_and_the_disk_counters)
{
	/* 8 slots: prompt 0 leaves memory for prompt 1. */
	const char *args[] = { "--memory", "64K", NULL };
	t_start_disk(&td, disk, args);
	struct prefixd *c = t_client(&td, 1);
	publish(c, 0, 6);
	t_wait_written(&td, 6, 10);
	publish(c, 1, 6);
	t_wait_written(&td, 12, 10);
	prefixd_close(c);
	char out[16384];
	cr_assert_eq(td_sh(out, sizeof(out), "%s --socket %s ls --json", PREFIXCTL, td.sock), 0, "%s", out);
	cr_expect(strstr(out, "\"where\":\"disk\""), "prompt 0 is on disk only: %s", out);
	cr_expect(strstr(out, "\"where\":\"both\""), "prompt 1 is in memory and on disk: %s", out);
	cr_assert_eq(td_sh(out, sizeof(out), "%s --socket %s ls", PREFIXCTL, td.sock), 0, "%s", out);
	cr_expect(strstr(out, "disk") && strstr(out, "both"), "%s", out);
	cr_assert_eq(td_sh(out, sizeof(out), "%s --socket %s stats --json", PREFIXCTL, td.sock), 0, "%s", out);
	char want[128];
	snprintf(want, sizeof(want), "\"disk_bytes\":%llu", (unsigned long long)(12 * REC_BYTES));
	cr_expect(strstr(out, want), "%s in %s", want, out);
	cr_expect(strstr(out, "\"disk_blocks\":12"), "%s", out);
	cr_expect(strstr(out, "\"spills\":12"), "%s", out);
	cr_expect(strstr(out, "\"disk_budget\":262144"), "4 x --memory: %s", out);
	cr_expect(strstr(out, "\"disk_corrupt\":0"), "%s", out);
	cr_assert_eq(td_sh(out, sizeof(out), "%s --socket %s stats", PREFIXCTL, td.sock), 0, "%s", out);
	cr_expect(strstr(out, "disk budget in use: 56.2%"), "%s", out);
	c = t_client(&td, 1);
	cr_expect_eq(t_match_k(c, 0, 6).from_disk, 4, "memory kept its first 2 blocks (leaves go first)");
	prefixd_close(c);
	cr_assert_eq(td_sh(out, sizeof(out), "%s --socket %s stats --prometheus", PREFIXCTL, td.sock), 0, "%s", out);
	cr_expect(strstr(out, "prefixd_disk_restores_total 4"), "%s", out);
	snprintf(want, sizeof(want), "prefixd_disk_restore_bytes_total %llu", (unsigned long long)(4 * BB));
	cr_expect(strstr(out, want), "%s in %s", want, out);
	cr_expect(strstr(out, "prefixd_disk_usage_bytes "), "%s", out);
	cr_expect(strstr(out, "# TYPE prefixd_disk_corrupt_records_total counter"), "%s", out);
	t_stop(&td);
}

Test(disk, an_import_that_files_blocks_of_another_size_under_a_root_is_not_stored)
{
	t_start_disk(&td, disk, NULL);
	struct prefixd *c = t_client(&td, 1);
	publish(c, 0, 2);
	char file[PATH_MAX + 32], out[4096];
	snprintf(file, sizeof(file), "%s/one.pfx", disk);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "export", file), 0, "%s", out);
	/* Record 0 again, with a payload twice the root's block size and
	 * tokens of its own (a valid chain hash, valid checksums). */
	size_t len;
	uint8_t *rec = read_all(file, &len);
	struct rec_meta m;
	cr_assert_eq(rec_check_head(rec, len, NULL, &m, NULL), 0);
	uint32_t tok[BT];
	for (uint32_t i = 0; i < BT; i++)
		tok[i] = 777000 + i;
	pd_chain_next(m.root, tok, BT, m.hash);
	m.payload = 2 * BB;
	static uint8_t payload[2 * TD_BLOCK_BYTES], forged[4096 + 2 * TD_BLOCK_BYTES];
	memset(payload, 0x5a, sizeof(payload));
	int n = rec_encode(&m, tok, payload, forged, sizeof(forged));
	cr_assert_gt(n, 0);
	write_all(file, forged, (size_t)n);
	free(rec);
	cr_assert_eq(t_ctl(&td, out, sizeof(out), "import", file), 1, "not every block imported: %s", out);
	cr_expect(strstr(out, "imported 0 blocks"), "%s", out);
	cr_expect(strstr(out, "1 without a parent"), "counted as not storable: %s", out);
	struct t_got g = t_match_k(c, 0, 2);
	cr_expect_eq(g.hit, 2, "the model's own blocks are untouched");
	cr_expect_eq(g.bad, 0);
	prefixd_close(c);
	t_stop(&td);
}

/* Records in the directory whose files were made after t (their birth
 * time), and all of them. */
static int records_born_after(const struct statx_timestamp *t, int *all)
{
	DIR *d = opendir(disk);
	cr_assert(d);
	int n = 0;
	*all = 0;
	for (struct dirent *e; (e = readdir(d));) {
		size_t k = strlen(e->d_name);
		if (k < 4 || strcmp(e->d_name + k - 4, ".rec"))
			continue;
		struct statx st;
		if (statx(dirfd(d), e->d_name, 0, STATX_BTIME, &st))
			continue; /* deleted meanwhile */
		cr_assert(st.stx_mask & STATX_BTIME, "the file system keeps birth times");
		(*all)++;
		n += st.stx_btime.tv_sec > t->tv_sec ||
		     (st.stx_btime.tv_sec == t->tv_sec && st.stx_btime.tv_nsec > t->tv_nsec);
	}
	closedir(d);
	return n;
}

Test(disk, new_records_take_over_the_files_of_records_that_left)
{
	/* Room for 40 records; 80 written. */
	char budget[32];
	snprintf(budget, sizeof(budget), "%llu", (unsigned long long)(40 * REC_BYTES));
	const char *args[] = { "--memory", "64K", "--disk-budget", budget, NULL };
	t_start_disk(&td, disk, args);
	struct prefixd *c = t_client(&td, 1);
	for (uint32_t k = 0; k < 10; k++) {
		publish(c, k, 4);
		t_wait_written(&td, 4 + 4 * k, 10);
	}
	/* The budget is full: from now on, a file made is one too many. */
	struct statx now;
	char mark[PATH_MAX + 16];
	snprintf(mark, sizeof(mark), "%s/mark", disk);
	write_all(mark, (const uint8_t *)"", 0);
	cr_assert_eq(statx(AT_FDCWD, mark, 0, STATX_BTIME, &now), 0);
	unlink(mark);
	for (uint32_t k = 10; k < 20; k++) {
		publish(c, k, 4);
		t_wait_written(&td, 4 + 4 * k, 10);
	}
	struct prefixd_stats s = t_wait_written(&td, 80, 10);
	cr_expect_gt(s.disk_evictions, 0);
	int all, made = records_born_after(&now.stx_btime, &all);
	/* A record of its own for each would be 40 new files; a batch may
	 * make one before the deletions that make room for it. */
	cr_expect_eq(all, 40);
	cr_expect_leq(made, 4, "%d of the last 40 records got new files", made);
	prefixd_close(c);
	t_stop(&td);
	/* Every record written over is whole: all of them read back. */
	t_start_disk(&td, disk, args);
	c = t_client(&td, 1);
	uint32_t hits = 0, bad = 0;
	for (uint32_t k = 10; k < 20; k++) {
		struct t_got g = t_match_k(c, k, 4);
		hits += g.hit;
		bad += g.bad;
	}
	cr_expect_eq(hits, 40, "the last 10 prompts come back from disk");
	cr_expect_eq(bad, 0);
	cr_expect_eq(t_stats(&td).disk_corrupt, 0);
	cr_expect_eq(count_files(".tmp"), 0);
	prefixd_close(c);
	t_stop(&td);
}

/* ==== The default disk budget and a small disk ==== */

/* What the disk tier's own files take on the file system, and what the
 * disk budget counts of its records. */
static void own_span(uint64_t *span, uint64_t *records)
{
	*span = *records = 0;
	DIR *d = opendir(disk);
	for (struct dirent *e; d && (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n < 5 || (strcmp(e->d_name + n - 4, ".rec") && strcmp(e->d_name + n - 4, ".tmp")))
			continue;
		char path[PATH_MAX + 300];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", disk, e->d_name);
		cr_assert_eq(stat(path, &st), 0);
		*span += (uint64_t)st.st_blocks * 512;
		*records += strcmp(e->d_name + n - 4, ".rec") ? 0 : (uint64_t)st.st_size;
	}
	if (d)
		closedir(d);
}

/* The README's default: 4 x --memory, at most 90% of the free space with
 * the directory's records counted as free, never less than the records. */
static uint64_t expected_budget(uint64_t memory)
{
	struct statvfs fs;
	uint64_t span, records;
	cr_assert_eq(statvfs(disk, &fs), 0);
	own_span(&span, &records);
	uint64_t usable = ((uint64_t)fs.f_bavail * fs.f_frsize + span) / 10 * 9, want = 4 * memory;
	want = usable < want ? usable : want;
	return want > records ? want : records;
}

/* Fills what the file system has left with one file. */
static void fill_disk(void)
{
	char out[4096];
	td_sh(out, sizeof(out), "dd if=/dev/zero of='%s/filler' bs=4k 2>/dev/null; sync", disk);
	struct statvfs fs;
	cr_assert_eq(statvfs(disk, &fs), 0);
	cr_assert_eq(fs.f_bavail, 0, "the file system is full");
}

#define SMALL_PROMPTS 8
#define SMALL_BLOCKS 64

static void expect_all_served(void)
{
	struct prefixd *c = t_client(&td, 1);
	for (uint32_t k = 0; k < SMALL_PROMPTS; k++) {
		struct t_got g = t_match_k(c, k, SMALL_BLOCKS);
		cr_expect_eq(g.hit, SMALL_BLOCKS, "prompt %u: every block served again", k);
		cr_expect_eq(g.bad, 0, "prompt %u", k);
	}
	prefixd_close(c);
}

Test(disk, a_restart_keeps_every_record_on_a_small_disk_and_the_default_budget_is_90_percent)
{
	/* 8 MiB of tmpfs; 4 x --memory is 32 MiB, so 90% of the disk caps
	 * the budget. 512 records of 12 KiB (6 MiB): more than 90% of what
	 * is left free once they are written, so a budget of the free space
	 * alone would delete most of them at a restart. */
	t_mount_tmpfs(disk, "8m");
	const uint64_t mem = 8u << 20;
	const char *args[] = { "--memory", "8M", NULL };
	uint64_t want = expected_budget(mem);
	cr_assert_lt(want, 4 * mem, "the disk, not the memory, bounds this budget");
	t_start_disk(&td, disk, args);
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.disk_budget, want, "the default budget is 90%% of the free space: %llu, not %llu",
		     (unsigned long long)s.disk_budget, (unsigned long long)want);
	struct prefixd *c = t_client(&td, 1);
	for (uint32_t k = 0; k < SMALL_PROMPTS; k++)
		publish(c, k, SMALL_BLOCKS);
	prefixd_close(c);
	t_wait_written(&td, SMALL_PROMPTS * SMALL_BLOCKS, 10);
	t_stop(&td);
	const int n = SMALL_PROMPTS * SMALL_BLOCKS;
	cr_assert_eq(count_files(".rec"), n);

	/* A restart: the records count as usable space. */
	want = expected_budget(mem);
	t_start_disk(&td, disk, args);
	s = t_stats(&td);
	cr_expect_eq(s.disk_blocks, (uint64_t)n, "every record is loaded again");
	cr_expect_eq(s.disk_budget, want, "90%% of the free space and the records: %llu, not %llu",
		     (unsigned long long)s.disk_budget, (unsigned long long)want);
	cr_expect(td_log_has(&td, " 0 others dropped"), "nothing dropped");
	expect_all_served();
	t_stop(&td);

	/* Another file takes the rest of the disk: the budget is then the
	 * records themselves, and a restart still keeps them all. */
	fill_disk();
	t_start_disk(&td, disk, args);
	s = t_stats(&td);
	cr_expect_eq(s.disk_blocks, (uint64_t)n, "every record is loaded again on a full disk");
	cr_expect_eq(s.disk_budget, (uint64_t)n * REC_BYTES, "the budget holds what is there");
	expect_all_served();
	t_stop(&td);
	cr_expect_eq(count_files(".rec"), n);

	/* Only an explicit, smaller --disk-budget deletes intact records,
	 * and the log says how many and why. */
	char budget[32];
	snprintf(budget, sizeof(budget), "%llu", (unsigned long long)(100 * REC_BYTES));
	const char *lower[] = { "--memory", "8M", "--disk-budget", budget, NULL };
	t_start_disk(&td, disk, lower);
	s = t_stats(&td);
	cr_expect_eq(s.disk_blocks, 100);
	char line[128];
	snprintf(line, sizeof(line), "%d intact records (", n - 100);
	if (!td_log_has(&td, line)) {
		char out[16384];
		td_sh(out, sizeof(out), "grep -v ': the disk budget is full: deleted' '%s'", td.log);
		cr_expect_fail("the log counts the records the smaller budget deleted (%s): %s", line, out);
	}
	cr_expect(td_log_has(&td, "more than --disk-budget"), "and says why");
	t_stop(&td);
	cr_expect_eq(count_files(".rec"), 100);
}

Test(disk, a_disk_full_at_stop_says_so)
{
	t_mount_tmpfs(disk, "1m");
	const char *args[] = { "--memory", "1M", NULL };
	t_start_disk(&td, disk, args);
	struct prefixd *c = t_client(&td, 1);
	publish(c, 0, 8);
	prefixd_close(c);
	t_wait_written(&td, 8, 10);
	fill_disk();
	/* SIGTERM: the manifest cannot be written. The log is read before
	 * td_stop removes it. */
	kill(td.pid, SIGTERM);
	int st;
	cr_assert_eq(waitpid(td.pid, &st, 0), td.pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "prefixd stops cleanly");
	td.pid = 0;
	cr_expect(td_log_has(&td, "no manifest: the file system is full at"), "the log says the disk is full");
	cr_expect(!td_log_has(&td, "Input/output error"), "not an I/O error");
	char out[8192];
	td_sh(out, sizeof(out), "cat '%s'", td.log);
	unlink(td.sock);
	unlink(td.log);
	rmdir(td.dir);
	cr_log_info("%s", out);
	/* Nothing is lost: the next start scans the directory. */
	t_start_disk(&td, disk, args);
	c = t_client(&td, 1);
	struct t_got g = t_match_k(c, 0, 8);
	cr_expect_eq(g.hit, 8);
	cr_expect_eq(g.bad, 0);
	prefixd_close(c);
	t_stop(&td);
}

/* ==== What a graceful restart keeps of each chain's use ==== */

static struct prefixd_id prompt_id(uint32_t k, uint32_t n)
{
	uint32_t t[64 * BT];
	td_prompt(t, n, TD_PROMPT_K(k));
	struct prefixd_id id;
	struct prefixd_prompt *pp;
	struct prefixd_layout l = td_layout(1);
	cr_assert_eq(prefixd_prompt_new(&l, &pp), 0);
	cr_assert_eq(prefixd_prompt_append(pp, t, n * BT), 0);
	cr_assert_eq(prefixd_prompt_id(pp, &id), 0);
	prefixd_prompt_free(pp);
	return id;
}

/* The listing's row of prompt k's chain (n blocks). */
static struct prefixd_chain chain_of(uint32_t k, uint32_t n)
{
	struct prefixd_id id = prompt_id(k, n);
	struct prefixd *adm;
	cr_assert_eq(prefixd_connect(td.sock, NULL, &adm), 0, "%s", prefixd_errmsg());
	struct prefixd_chain *rows, row = { 0 };
	size_t nrows;
	cr_assert_eq(prefixd_list(adm, NULL, &rows, &nrows), 0, "%s", prefixd_errmsg());
	bool found = false;
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].id.user == id.user && !memcmp(rows[i].id.key, id.key, sizeof(id.key))) {
			row = rows[i];
			found = true;
		}
	free(rows);
	prefixd_close(adm);
	cr_assert(found, "prompt %u is listed", k);
	return row;
}

Test(disk, hits_last_use_and_pins_survive_a_graceful_restart)
{
	t_start_disk(&td, disk, NULL);
	struct prefixd *c = t_client(&td, 1);
	for (uint32_t k = 0; k < 4; k++)
		publish(c, k, 4);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(t_match_k(c, 0, 4).hit, 4);
	cr_assert_eq(t_match_k(c, 3, 4).hit, 4);
	prefixd_close(c);
	struct prefixd *adm;
	cr_assert_eq(prefixd_connect(td.sock, NULL, &adm), 0);
	uint64_t pinned;
	struct prefixd_id id1 = prompt_id(1, 4), id2 = prompt_id(2, 4);
	cr_assert_eq(prefixd_pin(adm, &id1, 3600, &pinned), 0, "%s", prefixd_errmsg());
	cr_assert_eq(prefixd_pin(adm, &id2, 0, &pinned), 0, "%s", prefixd_errmsg());
	prefixd_close(adm);
	/* Time passes, so that a last use the restart forgot would show. */
	sleep(3);
	struct prefixd_chain before = chain_of(0, 4);
	cr_assert_eq(before.hits, 3);
	cr_assert_geq(before.idle_s, 3);
	t_stop(&td);
	t_start_disk(&td, disk, NULL);
	struct prefixd_chain c0 = chain_of(0, 4), c1 = chain_of(1, 4), c2 = chain_of(2, 4),
			     c3 = chain_of(3, 4);
	cr_expect_eq(c0.where, PREFIXD_ON_DISK, "read back from disk, not used again");
	cr_expect_eq(c0.hits, 3, "hits survive: %llu", (unsigned long long)c0.hits);
	cr_expect_eq(c3.hits, 1);
	cr_expect_eq(c1.hits, 0);
	cr_expect_geq(c0.idle_s, before.idle_s, "the last use survives: idle %u s, %u s before the stop",
		      c0.idle_s, before.idle_s);
	cr_expect_lt(c0.idle_s, before.idle_s + 60);
	cr_expect(c1.pinned, "a pin with a TTL survives");
	cr_expect_gt(c1.pin_ttl_s, 3500, "and its TTL runs on: %u s left", c1.pin_ttl_s);
	cr_expect_leq(c1.pin_ttl_s, 3600 - 3);
	cr_expect(c2.pinned, "a pin without one too");
	cr_expect_eq(c2.pin_ttl_s, 0);
	cr_expect(!c0.pinned && !c3.pinned);
	cr_expect(td_log_has(&td, "2 pins kept from the last run"));
	struct prefixd_stats s = t_stats(&td);
	cr_expect_eq(s.pins, 2);
	c = t_client(&td, 1);
	struct t_got g = t_match_k(c, 1, 4);
	cr_expect_eq(g.hit, 4);
	cr_expect_eq(g.bad, 0);
	prefixd_close(c);
	t_stop(&td);
}

Test(disk, the_least_recently_used_before_a_graceful_restart_goes_first_after_it)
{
	/* A disk budget of 8 prompts of 4 blocks. */
	char budget[32];
	snprintf(budget, sizeof(budget), "%llu", (unsigned long long)(32 * REC_BYTES));
	const char *args[] = { "--memory", "1M", "--disk-budget", budget, NULL };
	t_start_disk(&td, disk, args);
	struct prefixd *c = t_client(&td, 1);
	for (uint32_t k = 0; k < 8; k++)
		publish(c, k, 4);
	/* Used again in this order: prompt 5 is now the least recently used,
	 * then 2, then 6. */
	static const uint32_t order[] = { 5, 2, 6, 0, 7, 1, 3, 4 };
	for (int i = 0; i < 8; i++)
		cr_assert_eq(t_match_k(c, order[i], 4).hit, 4);
	prefixd_close(c);
	t_stop(&td);
	t_start_disk(&td, disk, args);
	c = t_client(&td, 1);
	/* Room for a new prompt: the disk budget lets the oldest go. */
	publish(c, 8, 4);
	t_wait_written(&td, 4, 10);
	cr_expect_eq(t_match_k(c, 5, 4).hit, 0, "the least recently used before the restart went");
	for (int i = 1; i < 8; i++) {
		struct t_got g = t_match_k(c, order[i], 4);
		cr_expect_eq(g.hit, 4, "prompt %u, used later, stayed", order[i]);
		cr_expect_eq(g.bad, 0);
	}
	prefixd_close(c);
	t_stop(&td);
}
