/* SPDX-License-Identifier: MIT */
/*
 * bench/remote: the remote tier on a loopback Redis (a private
 * redis-server on a free port), with SmolLM-135M-shaped blocks (64 tokens,
 * 2.9 MiB):
 *  - remote_gb_s: a MATCH of a 2048-token prefix (32 blocks) that daemon A
 *    published and daemon B fetches from Redis (pipelined GETs, each record
 *    checked and signed), against disk_gb_s: the same prefix read back from
 *    the disk tier of a restarted daemon; rounds take turns;
 *  - ttft_remote_ms: time to first token of a 2048-token prompt computed
 *    through A and attached through a fresh B, against ttft_cold_ms;
 *  - match_p99_us: MATCH latency when every lookup misses (memory, and
 *    Redis) with the remote tier, against no remote tier. The remote tier
 *    runs as deployed: its index of Redis's keys live (keyspace
 *    notifications, --remote-index), so such misses cost no round trip;
 *    match_index_skipped says what share of them it ruled out.
 * --tiny: one small round of each, for a check that it runs.
 * --fetch: the fetch throughput alone, more rounds, with the CPU time of
 * daemon B, of the disk daemon and of Redis per GB moved: the figures to
 * compare two builds by on a shared machine, where wall time is noise.
 * --fetch-unix: the same with Redis on a unix socket (else loopback TCP).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "bench_util.h"
#include "daemon_util.h"
#include "prefixd.h"
#include "random_model.h"
#include "redis_util.h"
#include "report.h"
#include "shapes.h"
#include "ttft.h"

#define NAME "remote"

static struct test_redis rs;
static char seed[PATH_MAX + 32], tmp[] = "/tmp/prefixd-remote-XXXXXX", keyfile[PATH_MAX];
static double cpu_b, cpu_disk, cpu_redis; /* --fetch: seconds over the rounds */
static double index_share; /* of the all-miss MATCHes, those the index ruled out */
static char disk_how[160] = "not measured"; /* the disk side, as measured */
static int rounds = 5, prefix_blocks = SMOLLM_PREFIX_BLOCKS, ttft_runs = 3, probes = 20000;

static void fail(const char *what)
{
	fprintf(stderr, NAME ": %s: %s\n", what, prefixd_errmsg());
}

/* A daemon of SmolLM blocks on the bench's Redis (none: without the remote
 * tier), with a disk directory when disk is not NULL. A timeout of 1 s:
 * this measures throughput, and on a loaded machine a 16 MiB round trip
 * can take more than the default 50 ms (a miss, which would end a fetch). */
static int start(struct test_daemon *d, bool remote, const char *disk)
{
	const char *args[16] = { "--memory", "1G", "--remote-users", "all", "--remote-timeout", "1000" };
	int n = remote ? 6 : 2;
	if (remote) {
		args[n++] = "--remote";
		args[n++] = seed;
		args[n++] = "--remote-key-file";
		args[n++] = keyfile;
	}
	if (disk) {
		args[n++] = "--disk-dir";
		args[n++] = disk;
	}
	args[n] = NULL;
	return td_start(d, args);
}

static uint64_t stat_of(const struct test_daemon *d, size_t off)
{
	struct prefixd_stats s = { 0 };
	if (td_stats(d, &s))
		return 0;
	uint64_t v;
	memcpy(&v, (const char *)&s + off, sizeof(v));
	return v;
}
#define STAT(d, f) stat_of(d, offsetof(struct prefixd_stats, f))

static void prompt(uint32_t *t, uint32_t n, uint32_t base)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = base + i;
}

/* Publishes prefix p (prefix_blocks SmolLM blocks of a pattern). */
static int publish(const char *sock, const struct prefixd_layout *l, uint32_t p, void *kv)
{
	uint32_t n = (uint32_t)prefix_blocks, *t = malloc(n * SMOLLM_BLOCK_TOKENS * sizeof(*t));
	const void **ptrs = malloc(n * sizeof(*ptrs));
	struct prefixd *c = NULL;
	int rc = t && ptrs ? prefixd_connect(sock, l, &c) : -ENOMEM;
	prompt(t, n * SMOLLM_BLOCK_TOKENS, 1000000u * (p + 1));
	for (uint32_t i = 0; t && ptrs && i < n; i++) {
		memset((char *)kv + i * l->block_bytes, (int)(p + i), l->block_bytes);
		ptrs[i] = (char *)kv + i * l->block_bytes;
	}
	uint32_t stored, dedup;
	if (!rc)
		rc = prefixd_publish(c, 0, t, 0, n, ptrs, &stored, &dedup);
	if (rc)
		fail("publish");
	prefixd_close(c);
	free(t);
	free(ptrs);
	return rc;
}

/* MATCH of prefix p: its time in seconds, or a negative value when not all
 * of it hit. */
static double match(const char *sock, const struct prefixd_layout *l, uint32_t p)
{
	uint32_t n = (uint32_t)prefix_blocks, hit = 0, *t = malloc(n * SMOLLM_BLOCK_TOKENS * sizeof(*t));
	const void **kv = malloc(n * sizeof(*kv));
	struct prefixd *c = NULL;
	uint64_t lease = 0;
	double dt = -1;
	if (t && kv && !prefixd_connect(sock, l, &c)) {
		prompt(t, n * SMOLLM_BLOCK_TOKENS, 1000000u * (p + 1));
		double t0 = bench_now();
		int rc = prefixd_match(c, t, n, &lease, &hit, kv);
		dt = bench_now() - t0;
		if (rc || hit != n) {
			fprintf(stderr, NAME ": prefix %u: %u of %u blocks hit\n", p, hit, n);
			dt = -1;
		}
	}
	prefixd_close(c);
	free(t);
	free(kv);
	return dt;
}

static int wait_writes(const struct test_daemon *d, uint64_t n)
{
	for (int i = 0; i < 3000; i++) {
		if (STAT(d, remote_writes) >= n)
			return 0;
		usleep(10000);
	}
	fprintf(stderr, NAME ": daemon A wrote %llu of %llu records to Redis\n",
		(unsigned long long)STAT(d, remote_writes), (unsigned long long)n);
	return -1;
}

/* ==== Fetch throughput: Redis against the disk tier ==== */

/* What the disk side read from: the file system of dir and whether its
 * records open with O_DIRECT (then the daemon reads them past the page
 * cache, as it does; else buffered, and they may be cached). */
static void describe_disk(const char *dir)
{
	struct statfs fs;
	const char *type = "another file system";
	if (!statfs(dir, &fs))
		type = fs.f_type == 0xEF53 ? "ext4" : fs.f_type == 0x58465342 ? "xfs"
			 : fs.f_type == 0x9123683E ? "btrfs" : fs.f_type == 0x01021994 ? "tmpfs" : type;
	DIR *d = opendir(dir);
	struct dirent *e;
	int direct = -1;
	while (d && direct < 0 && (e = readdir(d)))
		if (strstr(e->d_name, ".rec")) {
			int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECT);
			direct = fd >= 0;
			if (fd >= 0)
				close(fd);
		}
	if (d)
		closedir(d);
	snprintf(disk_how, sizeof(disk_how), "%s, %s; the same prefixes' records as Redis's (unsigned), daemon restarted",
		 type, direct > 0 ? "read with O_DIRECT (no page cache)"
		 : direct == 0 ? "buffered (no O_DIRECT here: the page cache may hold them)"
			       : "no record found");
}

static int measure_fetch(const struct prefixd_layout *l, double *remote, double *disk)
{
	struct test_daemon a, b, c;
	char ddir[PATH_MAX + 16];
	snprintf(ddir, sizeof(ddir), "%s/disk", tmp);
	size_t bytes = (size_t)prefix_blocks * l->block_bytes;
	void *kv = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int rc = -1;
	if (kv == MAP_FAILED || start(&a, true, NULL))
		return -1;
	if (start(&c, false, ddir)) {
		td_stop(&a);
		return -1;
	}
	for (int r = 0; r < rounds; r++)
		if (publish(a.sock, l, (uint32_t)r, kv) || publish(c.sock, l, (uint32_t)r, kv))
			goto out;
	if (wait_writes(&a, (uint64_t)rounds * (uint64_t)prefix_blocks))
		goto out;
	/* The disk daemon restarted: its prefixes on disk only. */
	if (td_stop(&c) || start(&c, false, ddir) || start(&b, true, NULL))
		goto out;
	describe_disk(ddir);
	rc = 0;
	for (int r = 0; r < rounds && !rc; r++) {
		double b0 = bench_proc_cpu_s(b.pid), r0 = bench_proc_cpu_s(rs.pid);
		double tr = match(b.sock, l, (uint32_t)r);
		double c0 = bench_proc_cpu_s(c.pid);
		double td = match(c.sock, l, (uint32_t)r);
		cpu_b += bench_proc_cpu_s(b.pid) - b0;
		cpu_redis += bench_proc_cpu_s(rs.pid) - r0;
		cpu_disk += bench_proc_cpu_s(c.pid) - c0;
		if (tr < 0 || td < 0)
			rc = -1;
		else {
			remote[r] = (double)bytes / tr / 1e9;
			disk[r] = (double)bytes / td / 1e9;
		}
	}
	if (!rc && STAT(&b, remote_hits) != (uint64_t)rounds * (uint64_t)prefix_blocks) {
		fprintf(stderr, NAME ": daemon B fetched %llu blocks from Redis\n",
			(unsigned long long)STAT(&b, remote_hits));
		rc = -1;
	}
	rc |= td_stop(&b);
out:
	td_stop(&a);
	rc |= td_stop(&c);
	munmap(kv, bytes);
	return rc;
}

/* ==== MATCH latency, every lookup a miss ==== */

static int lat_run(const char *sock, const struct prefixd_layout *l, uint32_t base, int n,
		   struct bench_lat *lat)
{
	struct prefixd *c;
	uint32_t t[4 * SMOLLM_BLOCK_TOKENS], hit;
	uint64_t lease;
	const void *kv[4];
	if (prefixd_connect(sock, l, &c)) {
		fail("connect");
		return -1;
	}
	int rc = 0;
	for (int i = 0; i < n && !rc; i++) {
		prompt(t, 4 * SMOLLM_BLOCK_TOKENS, base + (uint32_t)i * 1000u);
		double t0 = bench_now();
		rc = prefixd_match(c, t, 4, &lease, &hit, kv);
		if (!rc && (hit || bench_lat_add(lat, bench_now() - t0)))
			rc = -1;
	}
	prefixd_close(c);
	return rc;
}

static int measure_latency(const struct prefixd_layout *l, double *with, double *without)
{
	struct test_daemon b, d;
	if (start(&b, true, NULL))
		return -1;
	if (start(&d, false, NULL)) {
		td_stop(&b);
		return -1;
	}
	struct bench_lat lw = { 0 }, lo = { 0 };
	int rc = 0;
	/* As deployed: the index live (every master subscribed and scanned). */
	for (int i = 0; i < 1000 && STAT(&b, remote_index_live) != 1; i++)
		usleep(10000);
	if (STAT(&b, remote_index_live) != 1) {
		fprintf(stderr, NAME ": the remote tier's index of Redis's keys did not go live in 10 s\n");
		rc = -1;
	}
	/* Runs take turns, so that the machine's noise falls on both. Each
	 * side's p99 is the 200th worst of its 20,000 MATCHes: with 2,000,
	 * the 20th worst, three runs alone gave ratios of 0.74, 0.93 and
	 * 1.70 (p99s of 127 to 1,490 us), a VM's hiccups and not the tier. */
	for (int k = 0; k < 20 && !rc; k++)
		rc = lat_run(b.sock, l, 500000000u + (uint32_t)k * 10000000u, probes / 20, &lw) ||
		     lat_run(d.sock, l, 500000000u + (uint32_t)k * 10000000u, probes / 20, &lo);
	if (!rc) {
		bench_sort_u32(lw.ns, lw.n);
		bench_sort_u32(lo.ns, lo.n);
		*with = bench_pct_us(lw.ns, lw.n, 0.99);
		*without = bench_pct_us(lo.ns, lo.n, 0.99);
		if (STAT(&b, remote_misses) < lw.n) {
			fprintf(stderr, NAME ": the remote tier was asked %llu times for %zu misses\n",
				(unsigned long long)STAT(&b, remote_misses), lw.n);
			rc = -1;
		}
		index_share = lw.n ? (double)STAT(&b, remote_index_skips) / (double)lw.n : 0;
	}
	free(lw.ns);
	free(lo.ns);
	rc |= td_stop(&b);
	rc |= td_stop(&d);
	return rc ? -1 : 0;
}

/* ==== Time to first token ==== */

static int measure_ttft(const char *model, int prefix, double *cold, double *remote)
{
	struct test_daemon a, b;
	struct bench_ttft r;
	int rc = -1;
	if (start(&a, true, NULL))
		return -1;
	/* Through A: computed, published, written to Redis. */
	if (bench_ttft(NAME, model, a.sock, prefix, 32, 1, PFX_KV_F32, &r) ||
	    wait_writes(&a, (uint64_t)prefix / SMOLLM_BLOCK_TOKENS))
		goto out;
	rc = 0;
	for (int k = 0; k < ttft_runs && !rc; k++) {
		rc = bench_ttft(NAME, model, NULL, prefix, 32, 100 + (uint32_t)k, PFX_KV_F32, &r);
		cold[k] = r.ms;
		/* A fresh B each time: nothing in its memory. */
		if (rc || (rc = start(&b, true, NULL)))
			break;
		rc = bench_ttft(NAME, model, b.sock, prefix, 32, 200 + (uint32_t)k, PFX_KV_F32, &r);
		remote[k] = r.ms;
		if (!rc && r.attached != prefix) {
			fprintf(stderr, NAME ": B attached %.0f of %d tokens\n", r.attached, prefix);
			rc = -1;
		}
		rc |= td_stop(&b);
	}
out:
	rc |= td_stop(&a);
	return rc ? -1 : 0;
}

/* The fetch rounds' throughput, both reports' first figures: the
 * remote tier's median over the disk tier's. */
static double report_throughput(double *remote, double *disk)
{
	double gr = bench_median(remote, rounds), gd = bench_median(disk, rounds);
	report_fmt("prefix_blocks", "%d", prefix_blocks);
	report_fmt("rounds", "%d", rounds);
	report_array("remote_gb_s_runs", remote, rounds, 2);
	report_array("disk_gb_s_runs", disk, rounds, 2);
	report_fmt("remote_gb_s", "%.2f", gr);
	report_fmt("disk_gb_s", "%.2f", gd);
	return gr / gd;
}

/* --fetch: throughput and the CPU seconds each process spent per GB. */
static void report_fetch(double *remote, double *disk, bool unix_sock)
{
	double gb = (double)rounds * prefix_blocks * SMOLLM_BLOCK_BYTES / 1e9;
	report_begin(NAME "_fetch");
	report_str("redis", "a private redis-server on %s, records signed",
		   unix_sock ? "a unix socket" : "a loopback port");
	report_str("disk", "%s", disk_how);
	double ratio = report_throughput(remote, disk);
	report_fmt("daemon_cpu_s_per_gb_remote", "%.3f", cpu_b / gb);
	report_fmt("redis_cpu_s_per_gb", "%.3f", cpu_redis / gb);
	report_fmt("daemon_cpu_s_per_gb_disk", "%.3f", cpu_disk / gb);
	report_machine();
	report_target("remote_vs_disk_throughput", ratio, REPORT_AT_LEAST, 0.5);
	report_end("--fetch: remote and disk fetches take turns round by round; CPU time from /proc (10 ms ticks)");
}

int main(int argc, char **argv)
{
	bool tiny = argc == 2 && !strcmp(argv[1], "--tiny");
	bool unix_sock = argc == 2 && !strcmp(argv[1], "--fetch-unix");
	bool fetch_only = unix_sock || (argc == 2 && !strcmp(argv[1], "--fetch"));
	if (argc > 1 && !tiny && !fetch_only) {
		fprintf(stderr, "usage: %s [--tiny | --fetch | --fetch-unix]\n", argv[0]);
		return 2;
	}
	if (tiny) {
		rounds = 1;
		prefix_blocks = 16; /* several round trips of a lookup */
		ttft_runs = 1;
		probes = 100;
	}
	if (fetch_only)
		rounds = 8;
	if (!tr_available()) {
		fprintf(stderr, NAME ": redis-server is not installed (scripts/deps.sh installs it)\n");
		return 77;
	}
	struct pfx_error err = { "" };
	struct pfx_config sc = pfx_config_smollm135m();
	if (!mkdtemp(tmp) || pfx_random_checkpoint(tmp, &sc, "F32", 1, &err)) {
		fprintf(stderr, NAME ": cannot write the random model: %s\n", err.msg);
		return 1;
	}
	snprintf(keyfile, sizeof(keyfile), "%s/key", tmp);
	int fd = open(keyfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	const char secret[] = "bench-remote-secret-key-of-32-bytes-or-more\n";
	bool ok = fd >= 0 && write(fd, secret, sizeof(secret) - 1) == (ssize_t)sizeof(secret) - 1;
	if (fd >= 0)
		close(fd);
	const char *conf = "maxmemory 4gb\nmaxmemory-policy allkeys-lru\n";
	if (!ok || (unix_sock ? tr_start(&rs, conf) : tr_start_tcp(&rs, conf)))
		return 1;
	tr_seed(&rs, !unix_sock, 0, seed, sizeof(seed));
	struct prefixd_layout l = bench_layout(SMOLLM_BLOCK_TOKENS, SMOLLM_BLOCK_BYTES, 0xab);
	double remote[8], disk[8], cold[8], ttft_remote[8], p99_with = 0, p99_without = 0;
	int prefix = tiny ? 256 : SMOLLM_PREFIX_BLOCKS * SMOLLM_BLOCK_TOKENS, rc = 1;
	struct bench_cpu cpu;
	bench_cpu_now(&cpu);
	if (fetch_only) {
		rc = measure_fetch(&l, remote, disk);
		if (!rc)
			report_fetch(remote, disk, unix_sock);
		goto out;
	}
	if (measure_fetch(&l, remote, disk) || measure_latency(&l, &p99_with, &p99_without) ||
	    measure_ttft(tmp, prefix, cold, ttft_remote))
		goto out;
	double others, steal;
	bench_cpu_since(&cpu, &others, &steal);
	double tc = bench_median(cold, ttft_runs), tr = bench_median(ttft_remote, ttft_runs);
	report_begin(NAME);
	report_str("model", "random SmolLM-135M shape (f32), %d-token blocks of %llu bytes",
		   SMOLLM_BLOCK_TOKENS, (unsigned long long)SMOLLM_BLOCK_BYTES);
	report_str("redis", "a private redis-server on a loopback port, records signed (--remote-key-file), --remote-timeout 1000");
	report_str("disk", "%s", disk_how);
	double ratio = report_throughput(remote, disk);
	report_fmt("ttft_prompt_tokens", "%d", prefix + 32);
	report_fmt("ttft_cold_ms", "%.1f", tc);
	report_fmt("ttft_remote_ms", "%.1f", tr);
	report_fmt("match_p99_us_remote_missing", "%.1f", p99_with);
	report_fmt("match_p99_us_no_remote", "%.1f", p99_without);
	report_fmt("match_index_skipped", "%.3f", index_share);
	report_machine();
	report_noise(others, steal);
	report_target("remote_vs_disk_throughput", ratio, REPORT_AT_LEAST, 0.5);
	report_target("ttft_cold_vs_remote", tc / tr, REPORT_AT_LEAST, 10);
	report_target("match_p99_remote_missing_vs_none", p99_with / p99_without, REPORT_AT_MOST,
		      1.1);
	report_end("%s", tiny ? "--tiny: one small round, a check that it runs, not a measurement"
			      : "remote and disk fetches take turns round by round; TTFT from a fresh daemon B each run");
	rc = 0;
out:
	tr_stop(&rs);
	char cmd[sizeof(tmp) + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	if (system(cmd)) {
		/* Only a temporary directory left behind. */
	}
	return rc;
}
