/* SPDX-License-Identifier: MIT */
/*
 * bench/disk: what the disk tier (prefixd --disk-dir) costs and buys. Its
 * directories are made under /tmp (--dir), whose file system and device
 * the output names: the figures are the disk's as much as the daemon's.
 *
 *  - restore_mb_s: a private daemon holds P 2048-token prefixes of
 *    SmolLM-135M-shaped blocks (64 tokens of 30 layers x K,V x 3 KV heads
 *    x 64 dims x f32: 2,949,120 bytes; 32 blocks a prefix, synthetic KV);
 *    once every block is written it is stopped (SIGTERM) and started again
 *    on the same directory, so every block is on disk only. Each prefix is
 *    then matched from a fresh connection: the MATCH, timed as the client
 *    sees it, reads its 32 blocks back (hit 32, 32 from disk, every byte
 *    checked afterwards). Payload bytes / time, median over the prefixes
 *    of every round. The records' pages are dropped from the page cache
 *    first (syncfs, then posix_fadvise(DONTNEED) on each record, checked
 *    with mincore).
 *  - restore_mb_s_cached: the same with every record read into the page
 *    cache first. The daemon reads payloads with O_DIRECT when the file
 *    system takes it, past the page cache: then both figures are the
 *    device's (page_cache_note says what was seen).
 *  - raw_read_mb_s: the same payload bytes of the same record files, each
 *    opened with O_DIRECT and read in one pread into a 4096-aligned buffer,
 *    one after the other, caches dropped the same way; in the same rounds,
 *    before or after the restores (in turn). restore_ratio =
 *    restore_mb_s / raw_read_mb_s (target >= 0.7).
 *  - ttft_disk_ms, ttft_cold_ms, ttft_warm_ms: time to first token of a
 *    2048-token prefix + 32-token suffix with a random SmolLM-135M-shaped
 *    model (2 threads), as bench/share measures it, each run in a fresh
 *    process: cold computes all 2080 tokens alone; disk attaches the
 *    prefix a first process published, after the daemon was stopped and
 *    started again on its directory (every run: the prefix on disk only,
 *    its records out of the page cache); warm attaches it right after,
 *    from memory. ttft_ratio = cold / disk (target >= 10).
 *  - match_p99_us_idle, match_p99_us_spilling: MATCH latency of a client
 *    that matches and releases a resident 4-block prompt of 8 KiB blocks
 *    in a loop (the MATCH timed), idle, then while another process
 *    publishes new SmolLM-sized prefixes so that the daemon's tier thread
 *    writes records all along: "spilling" keeps 1-2 prefixes waiting to
 *    be written (it publishes whenever fewer than 64 blocks wait: as fast
 *    as the disk takes them), "flat_out" publishes without a pause (faster
 *    than any disk: blocks not yet written are evicted unwritten, and the
 *    copies of publishing take the CPUs). Medians over rounds of each
 *    phase's p99 (target: spilling <= 2 x idle); spills_during and
 *    spill_mb_s from the daemon's counters.
 *  - restart_ms: from fork+exec of prefixd on a directory of 10,000
 *    records (4-token blocks of 8 KiB) to its socket accepting a
 *    connection; restart_load_ms: what its log line "loaded in X ms" says
 *    (the index rebuilt from the directory); _cold: the records dropped
 *    from the page cache first (dentries and inodes stay cached);
 *    _dropcaches (as root): after echo 3 > /proc/sys/vm/drop_caches.
 *
 * On 2 vCPUs the phases never overlap; the latency client and the
 * publisher use one connection each, made one after the other, so that
 * they land on the daemon's two workers. One JSON object on stdout.
 *
 *   disk [--dir DIR] [--rounds R] [--prefixes P] [--ttft-runs N] [--no-ttft]
 *
 * Exits 1 when something fails or a target is missed (the figures are
 * printed either way).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "cache.h"
#include "daemon_util.h"
#include "prefixd.h"
#include "random_model.h"
#include "session.h"

/* SmolLM-135M: 30 layers, 3 KV heads of 64 dims, f32, K and V. */
#define KV_TOKENS 64
#define KV_BYTES ((uint64_t)2 * 30 * 3 * KV_TOKENS * 64 * 4)
#define PREFIX_BLOCKS 32 /* 2048 tokens */
#define PREFIX_TOKENS (PREFIX_BLOCKS * KV_TOKENS)
#define HEAD_BYTES 4096  /* a record's head, for up to 976 tokens */
#define MAX_PREFIXES 16
#define MAX_ROUNDS 15
#define SUFFIX 32

/* restart: 10,000 records of td_layout's blocks */
#define RESTART_RECORDS 10000
#define RESTART_PROMPT_BLOCKS 16
#define RESTART_RUNS 5
#define RESTART_COLD_RUNS 3
#define RESTART_DROP_RUNS 2

/* MATCH latency */
#define LAT_BLOCKS 4
#define LAT_BLOCK_BYTES 8192
#define LAT_PHASE_S 2.0
#define PACED_PENDING 64 /* the publisher waits while this many blocks wait */

#define TARGET_RESTORE_RATIO 0.7
#define TARGET_TTFT_RATIO 10.0
#define TARGET_SPILL_P99 2.0

#define MB 1e6

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("bench/disk: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static double median_of(const double *v, int n)
{
	double tmp[256];
	if (n <= 0 || n > 256)
		return 0;
	memcpy(tmp, v, (size_t)n * sizeof(*v));
	return bench_median(tmp, n);
}

static void range_of(const double *v, int n, double *lo, double *hi)
{
	*lo = *hi = n ? v[0] : 0;
	for (int i = 1; i < n; i++) {
		*lo = v[i] < *lo ? v[i] : *lo;
		*hi = v[i] > *hi ? v[i] : *hi;
	}
}

/* ==== The machine ==== */

static void cpu_model(char *out, size_t len)
{
	char line[256];
	snprintf(out, len, "unknown");
	FILE *f = fopen("/proc/cpuinfo", "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');
		if (strncmp(line, "model name", 10) || !colon)
			continue;
		colon += 1 + (colon[1] == ' ');
		colon[strcspn(colon, "\n\"\\")] = 0;
		snprintf(out, len, "%s", colon);
		break;
	}
	if (f)
		fclose(f);
}

/* The file system of dir and the block device under it, in words. */
static void fs_of(const char *dir, char *out, size_t len)
{
	struct statfs sf;
	struct stat st;
	const char *type = "other";
	char dev[64] = "unknown", line[256], path[128];
	if (!statfs(dir, &sf))
		type = sf.f_type == 0xEF53 ? "ext2/3/4" : sf.f_type == 0x01021994 ? "tmpfs"
			: sf.f_type == 0x58465342 ? "xfs" : sf.f_type == 0x9123683E ? "btrfs"
			: sf.f_type == 0x794c7630 ? "overlayfs" : "other";
	if (!stat(dir, &st)) {
		snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/uevent", major(st.st_dev),
			 minor(st.st_dev));
		FILE *f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f))
			if (!strncmp(line, "DEVNAME=", 8)) {
				line[strcspn(line, "\n")] = 0;
				snprintf(dev, sizeof(dev), "/dev/%.48s", line + 8);
			}
		if (f)
			fclose(f);
	}
	snprintf(out, len, "%s on %s", type, dev);
}

static double children_cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_CHILDREN, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	       1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* ==== The daemon ==== */

static int stats_of(const struct test_daemon *d, struct prefixd_stats *s)
{
	int rc = td_stats(d, s);
	if (rc)
		fail("stats: %s", prefixd_errmsg());
	return rc;
}

/* Waits (up to timeout_s) until nothing waits to be written and at least
 * spills records were written in all. */
static int wait_spilled(const struct test_daemon *d, uint64_t spills, double timeout_s,
			struct prefixd_stats *out)
{
	struct prefixd_stats s = { 0 };
	double t0 = bench_now();
	while (!stats_of(d, &s)) {
		if (!s.disk_pending && s.spills >= spills) {
			if (out)
				*out = s;
			return 0;
		}
		if (bench_now() - t0 > timeout_s) {
			fail("%llu blocks still wait to be written after %.0f s, %llu of %llu written",
			     (unsigned long long)s.disk_pending, timeout_s,
			     (unsigned long long)s.spills, (unsigned long long)spills);
			return -1;
		}
		usleep(5000);
	}
	return -1;
}

static int start_disk(struct test_daemon *d, const char *disk, const char *const *extra)
{
	const char *base[] = { "--disk-dir", disk, NULL };
	if (td_start_args(d, base, extra)) {
		fail("prefixd did not start on %s", disk);
		return -1;
	}
	return 0;
}

static int stop(struct test_daemon *d)
{
	int rc = td_stop(d);
	if (rc)
		fail("prefixd exited with status %d", rc);
	return rc ? -1 : 0;
}

static int can_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(a.sun_path))
		return 0;
	strcpy(a.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int ok = fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a));
	if (fd >= 0)
		close(fd);
	return ok;
}

/* td_start's start (its directory, socket and log, so that td_stop stops
 * it), timed finely: ms from fork to the first accepted connection. */
static int start_timed(struct test_daemon *d, const char *const *args, double *ms)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/prefixd-test-XXXXXX");
	if (!mkdtemp(d->dir)) {
		fail("mkdtemp: %s", strerror(errno));
		return -1;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
	const char *argv[40] = { PREFIXD_EXE, "--socket", d->sock, "--threads", "2" };
	int n = 5;
	for (int i = 0; args[i] && n < 39; i++)
		argv[n++] = args[i];
	fflush(NULL);
	double t0 = bench_now();
	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		int log = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (log >= 0)
			dup2(log, 2);
		if (null >= 0)
			dup2(null, 1);
		execv(PREFIXD_EXE, (char *const *)argv);
		_exit(127);
	}
	while (bench_now() - t0 < 60) {
		if (can_connect(d->sock)) {
			*ms = (bench_now() - t0) * 1e3;
			return 0;
		}
		int st;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			fail("prefixd exited at start (status %d)", st);
			d->pid = 0;
			td_stop(d);
			return -1;
		}
		usleep(100);
	}
	fail("prefixd did not listen within 60 s");
	td_stop(d);
	return -1;
}

/* The disk tier's line of the log: blocks loaded and "loaded in X ms". */
static int log_load(const struct test_daemon *d, double *ms, unsigned long long *blocks)
{
	char line[1024];
	FILE *f = fopen(d->log, "r");
	int rc = -1;
	while (f && rc && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "disk tier "), *q = strstr(line, " loaded in ");
		char *b = p ? strstr(p, ": ") : NULL;
		if (!p || !q || !b || !strstr(b, " blocks ("))
			continue;
		*blocks = strtoull(b + 2, NULL, 10);
		*ms = strtod(q + 11, NULL);
		rc = 0;
	}
	if (f)
		fclose(f);
	if (rc)
		fail("no \"disk tier ... loaded in X ms\" line in the log");
	return rc;
}

/* ==== Record files and the page cache ==== */

/* Calls fn on every .rec file of dir (by its directory's descriptor); stops
 * at the first error. */
static int for_each_rec(const char *dir, int (*fn)(int dfd, const char *name, void *arg),
			void *arg)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int fd = dfd < 0 ? -1 : dup(dfd);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	int rc = d ? 0 : -errno;
	if (!d && fd >= 0)
		close(fd);
	for (struct dirent *e; !rc && d && (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n > 4 && !strcmp(e->d_name + n - 4, ".rec"))
			rc = fn(dfd, e->d_name, arg);
	}
	if (d)
		closedir(d);
	if (dfd >= 0)
		close(dfd);
	return rc;
}

static int drop_one(int dfd, const char *name, void *arg)
{
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	return -rc;
}

/* The records' pages out of the page cache: written back first (syncfs),
 * then dropped file by file. */
static int drop_cache(const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || syncfs(dfd)) {
		fail("syncfs %s: %s", dir, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return -1;
	}
	close(dfd);
	int rc = for_each_rec(dir, drop_one, NULL);
	if (rc)
		fail("posix_fadvise: %s", strerror(-rc));
	return rc;
}

/* Everything out of the page cache, dentries and inodes too (root). */
static int drop_all_caches(void)
{
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	int ok = fd >= 0 && write(fd, "3\n", 2) == 2;
	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

struct residency {
	uint64_t pages, resident;
	bool payload_only; /* pages past the head only */
};

static int resident_one(int dfd, const char *name, void *arg)
{
	struct residency *r = arg;
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st)) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	size_t len = (size_t)st.st_size, pages = (len + 4095) / 4096;
	void *p = len ? mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
	close(fd);
	if (p == MAP_FAILED)
		return len ? -errno : 0;
	unsigned char *v = malloc(pages);
	int rc = v && !mincore(p, len, v) ? 0 : -ENOMEM;
	for (size_t i = r->payload_only ? HEAD_BYTES / 4096 : 0; !rc && i < pages; i++) {
		r->pages++;
		r->resident += v[i] & 1;
	}
	free(v);
	munmap(p, len);
	return rc;
}

/* Of the records' pages, the fraction in the page cache. */
static double cached_fraction(const char *dir, bool payload_only)
{
	struct residency r = { .payload_only = payload_only };
	if (for_each_rec(dir, resident_one, &r) || !r.pages)
		return -1;
	return (double)r.resident / (double)r.pages;
}

static int load_one(int dfd, const char *name, void *arg)
{
	static char buf[1 << 20];
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t r;
	while ((r = read(fd, buf, sizeof(buf))) > 0)
		;
	close(fd);
	return r < 0 ? -errno : 0;
}

/* ==== Restore throughput ==== */

static struct prefixd_layout kv_layout(uint8_t model)
{
	struct prefixd_layout l = { .block_tokens = KV_TOKENS, .block_bytes = KV_BYTES };
	memset(l.fingerprint, model, sizeof(l.fingerprint));
	return l;
}

/* Prefix p: tokens no other prefix has; its block b starts with
 * (p + 1) << 20 | 64 b, which names its record. */
static void prefix_tokens(uint32_t *t, int p)
{
	for (uint32_t i = 0; i < PREFIX_TOKENS; i++)
		t[i] = (uint32_t)(p + 1) << 20 | i;
}

static uint32_t kv_word(int p, int b, size_t i)
{
	return (0xb10c0000u | (uint32_t)p << 8 | (uint32_t)b) + (uint32_t)i * 2654435761u;
}

static void fill_block(int p, int b, void *kv)
{
	uint32_t *w = kv;
	for (size_t i = 0; i < KV_BYTES / 4; i++)
		w[i] = kv_word(p, b, i);
}

static int block_ok(int p, int b, const void *kv)
{
	const uint32_t *w = kv;
	for (size_t i = 0; i < KV_BYTES / 4; i++)
		if (w[i] != kv_word(p, b, i))
			return 0;
	return 1;
}

struct restore_run {
	char dir[PATH_MAX];
	int prefixes, rounds;
	/* the record of each block: its name and payload's offset */
	char (*name)[PREFIX_BLOCKS][96];
	uint64_t (*off)[PREFIX_BLOCKS];
	/* samples, MB/s: [round * prefixes + p] */
	double cold[MAX_ROUNDS * MAX_PREFIXES], cached[MAX_ROUNDS * MAX_PREFIXES],
		raw[MAX_ROUNDS * MAX_PREFIXES];
	double cold_ms[MAX_ROUNDS * MAX_PREFIXES];
	double resid_dropped;      /* most of the records' pages left after a drop */
	double resid_loaded;       /* least after reading them into the cache */
	double resid_after_restore; /* most of the payload pages cached by a cold restore */
	bool direct;               /* the file system takes O_DIRECT */
	unsigned long long loaded; /* blocks the restarted daemon loaded */
};

static int publish_prefixes(const char *sock, int n)
{
	struct prefixd_layout l = kv_layout(0x5a);
	struct prefixd *c = NULL;
	uint8_t *kv = malloc(PREFIX_BLOCKS * KV_BYTES);
	static uint32_t t[PREFIX_TOKENS];
	const void *ptrs[PREFIX_BLOCKS];
	int rc = kv ? prefixd_connect(sock, &l, &c) : -ENOMEM;
	for (int p = 0; !rc && p < n; p++) {
		for (int b = 0; b < PREFIX_BLOCKS; b++) {
			ptrs[b] = kv + (size_t)b * KV_BYTES;
			fill_block(p, b, kv + (size_t)b * KV_BYTES);
		}
		prefix_tokens(t, p);
		uint32_t stored, dedup;
		rc = prefixd_publish(c, 0, t, 0, PREFIX_BLOCKS, ptrs, &stored, &dedup);
		if (!rc && stored != PREFIX_BLOCKS) {
			fail("prefix %d: %u of %d blocks stored", p, stored, PREFIX_BLOCKS);
			rc = -EIO;
		}
	}
	if (rc && rc != -EIO)
		fail("publish: %s", kv ? prefixd_errmsg() : "out of memory");
	prefixd_close(c);
	free(kv);
	return rc;
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Files each record under its prefix and block (docs/DESIGN.md, "Disk
 * records": magic, payload bytes at 40, its offset at 48, depth at 56,
 * the first token at 192). */
static int map_one(int dfd, const char *name, void *arg)
{
	struct restore_run *r = arg;
	uint8_t head[256];
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : pread(fd, head, sizeof(head), 0);
	if (fd >= 0)
		close(fd);
	if (n != (ssize_t)sizeof(head) || memcmp(head, "PFXDREC", 8) || le64(head + 40) != KV_BYTES) {
		fail("%s/%s: not a record of a %llu-byte block", r->dir, name,
		     (unsigned long long)KV_BYTES);
		return -EBADMSG;
	}
	uint32_t tok = (uint32_t)le64(head + 192), depth = (uint32_t)le64(head + 56);
	int p = (int)(tok >> 20) - 1, b = (int)(tok & 0xfffff) / KV_TOKENS;
	if (p < 0 || p >= r->prefixes || b >= PREFIX_BLOCKS || (uint32_t)b != depth ||
	    r->name[p][b][0]) {
		fail("%s/%s: a record of no block published here", r->dir, name);
		return -EBADMSG;
	}
	snprintf(r->name[p][b], sizeof(r->name[p][b]), "%s", name);
	r->off[p][b] = le64(head + 48);
	return 0;
}

/* One prefix read back from disk by one MATCH on a fresh connection; MB/s. */
static int restore_one(const char *sock, int p, double *mb_s, double *ms)
{
	struct prefixd_layout l = kv_layout(0x5a);
	struct prefixd *c = NULL;
	static uint32_t t[PREFIX_TOKENS];
	const void *kv[PREFIX_BLOCKS];
	uint64_t lease = 0;
	uint32_t hit = 0, from_disk = 0, bad = 0;
	prefix_tokens(t, p);
	int rc = prefixd_connect(sock, &l, &c);
	if (rc) {
		fail("connect: %s", prefixd_errmsg());
		return rc;
	}
	double t0 = bench_now();
	rc = prefixd_match(c, t, PREFIX_BLOCKS, &lease, &hit, kv);
	double s = bench_now() - t0;
	from_disk = prefixd_match_from_disk();
	for (uint32_t b = 0; !rc && b < hit; b++)
		bad += !block_ok(p, (int)b, kv[b]);
	if (rc)
		fail("match: %s", prefixd_errmsg());
	else if (hit != PREFIX_BLOCKS || from_disk != PREFIX_BLOCKS || bad) {
		fail("prefix %d: %u blocks hit, %u from disk, %u not as published (want %d, %d, 0)",
		     p, hit, from_disk, bad, PREFIX_BLOCKS, PREFIX_BLOCKS);
		rc = -EIO;
	}
	if (lease)
		prefixd_release(c, lease);
	prefixd_close(c);
	*mb_s = (double)PREFIX_BLOCKS * (double)KV_BYTES / s / MB;
	*ms = s * 1e3;
	return rc;
}

/* Every prefix, each from a fresh connection; then the daemon's counters
 * must say the same. */
static int restore_all(const struct test_daemon *d, struct restore_run *r, double *out,
		       double *ms)
{
	struct prefixd_stats s0, s1;
	double ignored;
	int rc = stats_of(d, &s0);
	for (int p = 0; !rc && p < r->prefixes; p++)
		rc = restore_one(d->sock, p, &out[p], ms ? &ms[p] : &ignored);
	if (!rc)
		rc = stats_of(d, &s1);
	uint64_t blocks = (uint64_t)r->prefixes * PREFIX_BLOCKS;
	if (!rc && (s1.restores - s0.restores != blocks ||
		    s1.restore_bytes - s0.restore_bytes != blocks * KV_BYTES || s1.disk_corrupt)) {
		fail("the daemon counted %llu restores of %llu bytes (want %llu of %llu), %llu corrupt",
		     (unsigned long long)(s1.restores - s0.restores),
		     (unsigned long long)(s1.restore_bytes - s0.restore_bytes),
		     (unsigned long long)blocks, (unsigned long long)(blocks * KV_BYTES),
		     (unsigned long long)s1.disk_corrupt);
		rc = -EIO;
	}
	return rc;
}

/* The payloads of prefix p's records, O_DIRECT, one pread each; MB/s. */
static int raw_read(struct restore_run *r, int dfd, int p, void *buf, double *mb_s)
{
	double t0 = bench_now();
	for (int b = 0; b < PREFIX_BLOCKS; b++) {
		int fd = openat(dfd, r->name[p][b], O_RDONLY | O_CLOEXEC | (r->direct ? O_DIRECT : 0));
		ssize_t n = fd < 0 ? -1 : pread(fd, buf, KV_BYTES, (off_t)r->off[p][b]);
		int e = errno;
		if (fd >= 0)
			close(fd);
		if (n != (ssize_t)KV_BYTES) {
			fail("reading %s/%s: %s", r->dir, r->name[p][b], n < 0 ? strerror(e) : "short");
			return -1;
		}
	}
	*mb_s = (double)PREFIX_BLOCKS * (double)KV_BYTES / (bench_now() - t0) / MB;
	return 0;
}

static int raw_all(struct restore_run *r, double *out)
{
	void *buf = NULL;
	int dfd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = dfd < 0 || posix_memalign(&buf, 4096, KV_BYTES) ? -1 : 0;
	for (int p = 0; !rc && p < r->prefixes; p++)
		rc = raw_read(r, dfd, p, buf, &out[p]);
	free(buf);
	if (dfd >= 0)
		close(dfd);
	return rc;
}

static int direct_ok(struct restore_run *r)
{
	char path[PATH_MAX + 128];
	snprintf(path, sizeof(path), "%s/%s", r->dir, r->name[0][0]);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	r->direct = fd >= 0;
	if (fd >= 0)
		close(fd);
	return r->direct || errno == EINVAL ? 0 : -1;
}

static int measure_restore(struct restore_run *r)
{
	const char *mem[] = { "--memory", "1G", NULL };
	struct test_daemon d;
	struct prefixd_stats s;
	int rc = start_disk(&d, r->dir, mem);
	if (rc)
		return rc;
	uint64_t blocks = (uint64_t)r->prefixes * PREFIX_BLOCKS;
	rc = publish_prefixes(d.sock, r->prefixes);
	if (!rc)
		rc = wait_spilled(&d, blocks, 60, &s);
	if (!rc && s.blocks != blocks) {
		fail("%llu blocks in memory, not %llu: the budget is too small",
		     (unsigned long long)s.blocks, (unsigned long long)blocks);
		rc = -1;
	}
	if (stop(&d) || rc)
		return -1;
	r->name = calloc((size_t)r->prefixes, sizeof(*r->name));
	r->off = calloc((size_t)r->prefixes, sizeof(*r->off));
	if (!r->name || !r->off || for_each_rec(r->dir, map_one, r) || direct_ok(r))
		return -1;
	for (int p = 0; p < r->prefixes; p++)
		for (int b = 0; b < PREFIX_BLOCKS; b++)
			if (!r->name[p][b][0]) {
				fail("no record of prefix %d block %d", p, b);
				return -1;
			}
	r->resid_loaded = 1;
	for (int k = 0; k < r->rounds; k++) {
		double *cold = r->cold + k * r->prefixes, *raw = r->raw + k * r->prefixes;
		double *cached = r->cached + k * r->prefixes, f;
		unsigned long long loaded;
		double load_ms;
		/* On disk only, out of the page cache. */
		if (drop_cache(r->dir) || (f = cached_fraction(r->dir, false)) < 0 ||
		    start_disk(&d, r->dir, mem))
			return -1;
		r->resid_dropped = f > r->resid_dropped ? f : r->resid_dropped;
		rc = log_load(&d, &load_ms, &loaded);
		r->loaded = loaded;
		if (!rc && loaded != blocks) {
			fail("the daemon loaded %llu blocks, not %llu", loaded, (unsigned long long)blocks);
			rc = -1;
		}
		/* The raw reads first every other round: neither always gets the
		 * device (or its host's cache) first. */
		if (!rc && k % 2)
			rc = raw_all(r, raw) || drop_cache(r->dir);
		if (!rc)
			rc = restore_all(&d, r, cold, r->cold_ms + k * r->prefixes);
		if (!rc && (f = cached_fraction(r->dir, true)) >= 0)
			r->resid_after_restore = f > r->resid_after_restore ? f : r->resid_after_restore;
		if (!rc && !(k % 2))
			rc = drop_cache(r->dir) || raw_all(r, raw);
		if (!rc && (stats_of(&d, &s) || s.disk_pending)) {
			fail("blocks read back wait to be written again");
			rc = -1;
		}
		if (stop(&d) || rc)
			return -1;
		/* Again, the records in the page cache. */
		if (for_each_rec(r->dir, load_one, NULL) || (f = cached_fraction(r->dir, false)) < 0 ||
		    start_disk(&d, r->dir, mem))
			return -1;
		r->resid_loaded = f < r->resid_loaded ? f : r->resid_loaded;
		rc = restore_all(&d, r, cached, NULL);
		if (stop(&d) || rc)
			return -1;
	}
	return 0;
}

/* ==== Time to first token ==== */

static const char *model_dir;

static void tokens(int32_t *t, int n, int vocab, uint32_t seed)
{
	for (int i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		t[i] = (int32_t)((seed >> 8) % (uint32_t)vocab);
	}
}

/* What a run sends back. */
struct ttft_res {
	double ms, attached, first, from_disk, published;
};

/* In a child: load the model, then time one prompt to its first token,
 * through the daemon at sock (NULL: alone), as bench/share does. */
static int ttft_child(const char *sock, int suffix_seed, int out)
{
	struct pfx_model *m;
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_model_opts mo = { .threads = 2 };
	if (pfx_model_load(model_dir, &mo, &m, &err)) {
		fail("%s", err.msg);
		return 1;
	}
	int V = pfx_model_config(m)->vocab;
	int32_t t[PREFIX_TOKENS + SUFFIX];
	tokens(t, PREFIX_TOKENS, V, 1);
	tokens(t + PREFIX_TOKENS, SUFFIX, V, (uint32_t)suffix_seed);
	float *logits = malloc((size_t)V * sizeof(float));
	struct pfx_session *s;
	struct pfx_prefill_info info;
	struct pfx_cache *c = NULL;
	double t0 = bench_now();
	if (sock && pfx_cache_open(m, sock, NULL, 0, &c, &err)) {
		fail("%s", err.msg);
		return 1;
	}
	if (!logits || pfx_session_new(m, &s, &err) ||
	    pfx_session_prefill(s, c, t, PREFIX_TOKENS + SUFFIX, PFX_LOGITS_LAST, logits, &info,
				&cerr, &err)) {
		fail("%s", err.msg);
		return 1;
	}
	int32_t first = 0; /* greedy: the first token */
	for (int i = 1; i < V; i++)
		if (logits[i] > logits[first])
			first = i;
	double ms = (bench_now() - t0) * 1e3;
	if (info.cache_rc)
		fail("the cache failed: %s", cerr.msg);
	struct ttft_res res = { ms, (double)info.attached, (double)first, (double)info.from_disk,
				(double)info.published };
	if (write(out, &res, sizeof(res)) != sizeof(res))
		return 1;
	pfx_session_free(s);
	pfx_cache_close(c);
	free(logits);
	pfx_model_free(m);
	return 0;
}

/* Runs ttft_child in a new process. */
static int ttft(const char *sock, int suffix_seed, struct ttft_res *res)
{
	int p[2];
	if (pipe(p))
		return -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		close(p[0]);
		_exit(ttft_child(sock, suffix_seed, p[1]));
	}
	close(p[1]);
	ssize_t n = read(p[0], res, sizeof(*res));
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	if (n != sizeof(*res) || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fail("a time-to-first-token run failed");
		return -1;
	}
	return 0;
}

struct ttft_run {
	char dir[PATH_MAX];
	int runs;
	double cold[MAX_ROUNDS], disk[MAX_ROUNDS], warm[MAX_ROUNDS];
	double publish_ms;
	int first_same; /* runs whose disk and warm first tokens are the cold run's */
};

static int measure_ttft(struct ttft_run *r)
{
	const char *mem[] = { "--memory", "1G", NULL };
	struct test_daemon d;
	struct ttft_res a, b, c;
	if (start_disk(&d, r->dir, mem))
		return -1;
	/* A first process computes the prefix and publishes it. */
	int rc = ttft(d.sock, 99, &a);
	if (!rc && a.published != PREFIX_BLOCKS) {
		fail("the first run published %.0f blocks, not %d", a.published, PREFIX_BLOCKS);
		rc = -1;
	}
	r->publish_ms = a.ms;
	if (!rc)
		rc = wait_spilled(&d, PREFIX_BLOCKS, 60, NULL);
	for (int k = 0; !rc && k < r->runs; k++) {
		rc = ttft(NULL, 100 + k, &a);
		if (rc || stop(&d) || drop_cache(r->dir) || start_disk(&d, r->dir, mem)) {
			rc = -1;
			break;
		}
		rc = ttft(d.sock, 100 + k, &b);
		if (!rc)
			rc = ttft(d.sock, 100 + k, &c);
		if (rc)
			break;
		if (b.attached != PREFIX_TOKENS || b.from_disk != PREFIX_BLOCKS ||
		    c.attached != PREFIX_TOKENS || c.from_disk) {
			fail("run %d: %.0f tokens attached, %.0f blocks from disk, then %.0f and %.0f (want %d, %d, then %d, 0)",
			     k, b.attached, b.from_disk, c.attached, c.from_disk, PREFIX_TOKENS,
			     PREFIX_BLOCKS, PREFIX_TOKENS);
			rc = -1;
		}
		r->cold[k] = a.ms;
		r->disk[k] = b.ms;
		r->warm[k] = c.ms;
		r->first_same += a.first == b.first && a.first == c.first;
	}
	if (d.pid && stop(&d))
		rc = -1;
	return rc;
}

/* ==== MATCH latency while the tier writes ==== */

enum { PUB_PAUSE, PUB_PACED, PUB_FLAT, PUB_QUIT };

struct pub_shared {
	_Atomic int mode, ready, failed;
	_Atomic uint64_t blocks, publishes;
};

/* The publisher (a child): new 2048-token prefixes of SmolLM-sized
 * blocks, one after the other, in the mode the parent sets. */
static void publisher_main(const char *sock, struct pub_shared *sh)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct prefixd_layout l = kv_layout(0x22);
	struct prefixd *c = NULL;
	uint8_t *kv = malloc(PREFIX_BLOCKS * KV_BYTES);
	const void *ptrs[PREFIX_BLOCKS];
	static uint32_t t[PREFIX_TOKENS];
	if (!kv || prefixd_connect(sock, &l, &c))
		_exit(1);
	for (int b = 0; b < PREFIX_BLOCKS; b++) {
		ptrs[b] = kv + (size_t)b * KV_BYTES;
		memset(kv + (size_t)b * KV_BYTES, b + 1, KV_BYTES);
	}
	atomic_store(&sh->ready, 1);
	for (uint32_t n = 0;;) {
		int mode = atomic_load(&sh->mode);
		if (mode == PUB_QUIT)
			break;
		if (mode == PUB_PAUSE) {
			usleep(1000);
			continue;
		}
		struct prefixd_stats st;
		if (mode == PUB_PACED) {
			if (prefixd_stats(c, &st))
				break;
			if (st.disk_pending >= PACED_PENDING) {
				usleep(2000);
				continue;
			}
		}
		for (uint32_t i = 0; i < PREFIX_TOKENS; i++)
			t[i] = i ? i : 0x800000u + n;
		n++;
		uint32_t stored = 0, dedup = 0;
		int rc = prefixd_publish(c, 0, t, 0, PREFIX_BLOCKS, ptrs, &stored, &dedup);
		if (rc && rc != -ENOSPC) {
			fprintf(stderr, "bench/disk: publisher: %s\n", prefixd_errmsg());
			atomic_store(&sh->failed, 1);
			break;
		}
		atomic_fetch_add(&sh->blocks, stored);
		atomic_fetch_add(&sh->publishes, 1);
	}
	prefixd_close(c);
	_exit(0);
}

struct lat {
	uint32_t *ns;
	size_t n, cap;
	uint64_t from_disk, misses;
};

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static double pct_us(const uint32_t *v, size_t n, double q)
{
	return n ? v[(size_t)(q * (double)(n - 1) + 0.5)] / 1e3 : 0;
}

/* MATCH + RELEASE of the resident prompt for `seconds`, the MATCH timed. */
static int match_loop(struct prefixd *c, const uint32_t *t, double seconds, struct lat *l)
{
	const void *kv[LAT_BLOCKS];
	l->n = 0;
	double end = bench_now() + seconds;
	for (;;) {
		uint64_t lease = 0;
		uint32_t hit = 0;
		double t0 = bench_now();
		if (t0 > end)
			break;
		int rc = prefixd_match(c, t, LAT_BLOCKS, &lease, &hit, kv);
		double s = bench_now() - t0;
		if (rc) {
			fail("match: %s", prefixd_errmsg());
			return -1;
		}
		l->from_disk += prefixd_match_from_disk();
		l->misses += hit != LAT_BLOCKS;
		if (lease && prefixd_release(c, lease)) {
			fail("release: %s", prefixd_errmsg());
			return -1;
		}
		if (l->n == l->cap) {
			size_t cap = l->cap ? 2 * l->cap : 1 << 16;
			uint32_t *v = realloc(l->ns, cap * sizeof(*v));
			if (!v)
				return -1;
			l->ns = v;
			l->cap = cap;
		}
		l->ns[l->n++] = (uint32_t)(s * 1e9 < 4e9 ? s * 1e9 : 4e9);
	}
	qsort(l->ns, l->n, sizeof(*l->ns), cmp_u32);
	return 0;
}

enum { PH_IDLE, PH_PACED, PH_FLAT, NPHASES };
static const char *const phase_names[NPHASES] = { "idle", "spilling", "flat_out" };

struct lat_run {
	char dir[PATH_MAX];
	int rounds;
	double p50[NPHASES][MAX_ROUNDS], p99[NPHASES][MAX_ROUNDS], p999[NPHASES][MAX_ROUNDS],
		max[NPHASES][MAX_ROUNDS], ops[NPHASES][MAX_ROUNDS], spill_mb_s[NPHASES][MAX_ROUNDS],
		pending_end[NPHASES][MAX_ROUNDS];
	uint64_t spills[NPHASES], published[NPHASES], evictions[NPHASES];
	uint64_t from_disk, misses;
	uint64_t rec_bytes;
};

static int lat_phase(struct lat_run *r, const struct test_daemon *d, struct prefixd *c,
		     const uint32_t *t, struct pub_shared *sh, int ph, int k, struct lat *l)
{
	struct prefixd_stats s0, s1;
	if (ph == PH_IDLE) {
		/* Nothing left to write from the last phase. */
		if (wait_spilled(d, 0, 60, NULL))
			return -1;
	} else {
		/* The publisher gets going (and the tier with it). */
		uint64_t b0 = atomic_load(&sh->blocks);
		atomic_store(&sh->mode, ph == PH_PACED ? PUB_PACED : PUB_FLAT);
		for (int i = 0; i < 2000 && atomic_load(&sh->blocks) == b0; i++)
			usleep(1000);
		usleep(200000);
	}
	uint64_t b0 = atomic_load(&sh->blocks);
	if (stats_of(d, &s0))
		return -1;
	double t0 = bench_now();
	int rc = match_loop(c, t, LAT_PHASE_S, l);
	double wall = bench_now() - t0;
	if (rc || stats_of(d, &s1))
		return -1;
	atomic_store(&sh->mode, PUB_PAUSE);
	if (atomic_load(&sh->failed)) {
		fail("the publisher failed");
		return -1;
	}
	r->p50[ph][k] = pct_us(l->ns, l->n, 0.50);
	r->p99[ph][k] = pct_us(l->ns, l->n, 0.99);
	r->p999[ph][k] = pct_us(l->ns, l->n, 0.999);
	r->max[ph][k] = l->n ? l->ns[l->n - 1] / 1e3 : 0;
	r->ops[ph][k] = (double)l->n;
	r->spill_mb_s[ph][k] = (double)(s1.spills - s0.spills) * (double)r->rec_bytes / wall / MB;
	r->pending_end[ph][k] = (double)s1.disk_pending;
	r->spills[ph] += s1.spills - s0.spills;
	r->evictions[ph] += s1.evictions - s0.evictions;
	r->published[ph] += atomic_load(&sh->blocks) - b0;
	if (ph != PH_IDLE && s1.spills == s0.spills) {
		fail("no record was written during the %s phase", phase_names[ph]);
		return -1;
	}
	return 0;
}

static int measure_latency(struct lat_run *r)
{
	const char *args[] = { "--memory", "1G", "--disk-budget", "2G", NULL };
	struct test_daemon d;
	struct prefixd_layout l = { .block_tokens = KV_TOKENS, .block_bytes = LAT_BLOCK_BYTES };
	memset(l.fingerprint, 0x31, sizeof(l.fingerprint));
	r->rec_bytes = HEAD_BYTES + KV_BYTES;
	static uint32_t t[LAT_BLOCKS * KV_TOKENS];
	static uint8_t kv[LAT_BLOCKS][LAT_BLOCK_BYTES];
	const void *ptrs[LAT_BLOCKS];
	for (uint32_t i = 0; i < LAT_BLOCKS * KV_TOKENS; i++)
		t[i] = 0x700000u + i;
	for (int b = 0; b < LAT_BLOCKS; b++) {
		memset(kv[b], 0x40 + b, LAT_BLOCK_BYTES);
		ptrs[b] = kv[b];
	}
	struct pub_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED || start_disk(&d, r->dir, args))
		return -1;
	struct prefixd *c = NULL;
	struct lat lat = { 0 };
	uint32_t stored = 0, dedup = 0;
	pid_t kid = -1;
	int rc = prefixd_connect(d.sock, &l, &c);
	if (!rc)
		rc = prefixd_publish(c, 0, t, 0, LAT_BLOCKS, ptrs, &stored, &dedup);
	if (rc || stored != LAT_BLOCKS) {
		fail("the latency prompt: %s", rc ? prefixd_errmsg() : "not stored");
		rc = -1;
		goto out;
	}
	/* Its records written, so that the idle phases are idle. The
	 * publisher's connection right after this one: the other worker. */
	if ((rc = wait_spilled(&d, LAT_BLOCKS, 60, NULL)))
		goto out;
	prefixd_close(c);
	if ((rc = prefixd_connect(d.sock, &l, &c))) {
		fail("connect: %s", prefixd_errmsg());
		goto out;
	}
	fflush(NULL);
	if ((kid = fork()) < 0) {
		rc = -1;
		goto out;
	}
	if (kid == 0)
		publisher_main(d.sock, sh);
	for (int i = 0; i < 10000 && !atomic_load(&sh->ready); i++)
		usleep(1000);
	if (!atomic_load(&sh->ready)) {
		fail("the publisher did not connect");
		rc = -1;
		goto out;
	}
	/* Warm-up: the mapping and the client's memo of the prompt. */
	if ((rc = match_loop(c, t, 0.3, &lat)))
		goto out;
	lat.from_disk = lat.misses = 0;
	for (int k = 0; !rc && k < r->rounds; k++)
		for (int ph = 0; !rc && ph < NPHASES; ph++)
			rc = lat_phase(r, &d, c, t, sh, ph, k, &lat);
	r->from_disk = lat.from_disk;
	r->misses = lat.misses;
	if (!rc && (lat.from_disk || lat.misses)) {
		fail("the resident prompt was not always in memory: %llu blocks from disk, %llu short hits",
		     (unsigned long long)lat.from_disk, (unsigned long long)lat.misses);
		rc = -1;
	}
out:
	if (kid > 0) {
		atomic_store(&sh->mode, PUB_QUIT);
		waitpid(kid, NULL, 0);
	}
	prefixd_close(c);
	free(lat.ns);
	if (stop(&d))
		rc = -1;
	munmap(sh, sizeof(*sh));
	return rc;
}

/* ==== Restart ==== */

struct restart_run {
	char dir[PATH_MAX];
	double warm[RESTART_RUNS], warm_load[RESTART_RUNS];
	double cold[RESTART_COLD_RUNS], cold_load[RESTART_COLD_RUNS];
	double drop[RESTART_DROP_RUNS], drop_load[RESTART_DROP_RUNS];
	int ndrop;
	double resid_dropped;
	double spill_s;
	unsigned long long loaded;
};

static int restart_once(struct restart_run *r, double *ms, double *load_ms)
{
	const char *args[] = { "--block-tokens", "4", "--memory", "256M", "--disk-dir", r->dir, NULL };
	struct test_daemon d;
	struct prefixd_stats s;
	if (start_timed(&d, args, ms))
		return -1;
	int rc = log_load(&d, load_ms, &r->loaded);
	if (!rc && r->loaded != RESTART_RECORDS) {
		fail("the daemon loaded %llu blocks, not %d", r->loaded, RESTART_RECORDS);
		rc = -1;
	}
	if (!rc && (rc = stats_of(&d, &s)) == 0 && s.disk_blocks != RESTART_RECORDS) {
		fail("the daemon counts %llu blocks on disk, not %d", (unsigned long long)s.disk_blocks,
		     RESTART_RECORDS);
		rc = -1;
	}
	if (stop(&d))
		rc = -1;
	return rc;
}

static int measure_restart(struct restart_run *r)
{
	const char *args[] = { "--block-tokens", "4", "--memory", "256M", NULL };
	struct test_daemon d;
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c = NULL;
	if (start_disk(&d, r->dir, args))
		return -1;
	int rc = prefixd_connect(d.sock, &l, &c);
	uint32_t t[RESTART_PROMPT_BLOCKS * TD_BLOCK_TOKENS];
	double t0 = bench_now();
	for (uint32_t k = 0; !rc && k < RESTART_RECORDS / RESTART_PROMPT_BLOCKS; k++) {
		uint32_t stored, dedup;
		for (uint32_t i = 0; i < RESTART_PROMPT_BLOCKS * TD_BLOCK_TOKENS; i++)
			t[i] = 1000000 * (k + 1) + i;
		rc = td_publish(c, 0, t, 0, RESTART_PROMPT_BLOCKS, &stored, &dedup);
		if (!rc && stored != RESTART_PROMPT_BLOCKS)
			rc = -EIO;
	}
	if (rc)
		fail("publish: %s", rc == -EIO ? "not every block stored" : prefixd_errmsg());
	prefixd_close(c);
	if (!rc)
		rc = wait_spilled(&d, RESTART_RECORDS, 120, NULL);
	r->spill_s = bench_now() - t0;
	if (stop(&d) || rc)
		return -1;
	/* The records in the page cache (just written, and read by each start). */
	for (int k = 0; k < RESTART_RUNS; k++)
		if (restart_once(r, &r->warm[k], &r->warm_load[k]))
			return -1;
	r->resid_dropped = 0;
	for (int k = 0; k < RESTART_COLD_RUNS; k++) {
		double f;
		if (drop_cache(r->dir) || (f = cached_fraction(r->dir, false)) < 0)
			return -1;
		r->resid_dropped = f > r->resid_dropped ? f : r->resid_dropped;
		if (restart_once(r, &r->cold[k], &r->cold_load[k]))
			return -1;
	}
	for (r->ndrop = 0; geteuid() == 0 && r->ndrop < RESTART_DROP_RUNS; r->ndrop++)
		if (drop_all_caches() ||
		    restart_once(r, &r->drop[r->ndrop], &r->drop_load[r->ndrop]))
			return -1;
	return 0;
}

/* ==== Output ==== */

struct opts {
	const char *parent;
	int rounds, prefixes, ttft_runs;
	bool ttft;
};

static void print_json(const struct opts *o, const char *fs, const struct restore_run *rr,
		       const struct ttft_run *tr, const struct lat_run *lr,
		       const struct restart_run *sr, double wall, double others, double steal)
{
	char cpu[128];
	struct utsname u;
	cpu_model(cpu, sizeof(cpu));
	uname(&u);
	int n = rr->rounds * rr->prefixes;
	double cold = median_of(rr->cold, n), cached = median_of(rr->cached, n),
	       raw = median_of(rr->raw, n), lo, hi;
	printf("{\n");
	printf("  \"cpu\": \"%s\",\n  \"cores\": %ld,\n  \"kernel\": \"%s\",\n", cpu,
	       sysconf(_SC_NPROCESSORS_ONLN), u.release);
	printf("  \"disk_dir_fs\": \"%s (%s)\",\n", fs, o->parent);
	printf("  \"cache_drop\": \"syncfs, then posix_fadvise(POSIX_FADV_DONTNEED) on each record file (most left cached after a drop: %.4f of their pages, by mincore)\",\n",
	       rr->resid_dropped > sr->resid_dropped ? rr->resid_dropped : sr->resid_dropped);
	printf("  \"block_bytes\": %llu,\n  \"record_bytes\": %llu,\n  \"prefix_blocks\": %d,\n",
	       (unsigned long long)KV_BYTES, (unsigned long long)(HEAD_BYTES + KV_BYTES),
	       PREFIX_BLOCKS);
	printf("  \"prefixes\": %d,\n  \"restore_rounds\": %d,\n  \"restored_mb_per_round\": %.0f,\n",
	       rr->prefixes, rr->rounds, (double)rr->prefixes * PREFIX_BLOCKS * (double)KV_BYTES / MB);
	printf("  \"restore_mb_s\": %.0f,\n", cold);
	range_of(rr->cold, n, &lo, &hi);
	printf("  \"restore_mb_s_range\": [%.0f, %.0f],\n", lo, hi);
	printf("  \"restore_ms\": %.1f,\n", median_of(rr->cold_ms, n));
	printf("  \"restore_mb_s_cached\": %.0f,\n", cached);
	range_of(rr->cached, n, &lo, &hi);
	printf("  \"restore_mb_s_cached_range\": [%.0f, %.0f],\n", lo, hi);
	printf("  \"raw_read_mb_s\": %.0f,\n", raw);
	range_of(rr->raw, n, &lo, &hi);
	printf("  \"raw_read_mb_s_range\": [%.0f, %.0f],\n", lo, hi);
	printf("  \"restore_ratio\": %.2f,\n", raw > 0 ? cold / raw : 0);
	printf("  \"page_cache_note\": \"%s; a cold restore left %.4f of the payload pages in the page cache (mincore), the records were %.4f cached before the cached restores. raw_read: O_DIRECT preads, past the page cache, one record at a time; the daemon reads a MATCH's records with io_uring, all at once\",\n",
	       rr->direct ? "the file system takes O_DIRECT: the daemon reads payloads with O_DIRECT straight into the slot, past the page cache, so restore_mb_s_cached reads the device too (only the 4 KiB heads, read at start, go through the page cache)"
			  : "the file system refuses O_DIRECT: the daemon reads through the page cache",
	       rr->resid_after_restore, rr->resid_loaded);
	if (tr) {
		int k = tr->runs;
		double tc = median_of(tr->cold, k), td = median_of(tr->disk, k),
		       tw = median_of(tr->warm, k);
		printf("  \"model\": \"random SmolLM-135M shape (f32), 2 threads, 64-token blocks\",\n");
		printf("  \"prefix_tokens\": %d, \"suffix_tokens\": %d, \"ttft_runs\": %d,\n",
		       PREFIX_TOKENS, SUFFIX, k);
		printf("  \"ttft_cold_ms\": %.1f,\n  \"ttft_disk_ms\": %.1f,\n  \"ttft_warm_ms\": %.1f,\n",
		       tc, td, tw);
		printf("  \"ttft_ratio\": %.1f,\n", td > 0 ? tc / td : 0);
		range_of(tr->cold, k, &lo, &hi);
		printf("  \"ttft_cold_range_ms\": [%.1f, %.1f],\n", lo, hi);
		range_of(tr->disk, k, &lo, &hi);
		printf("  \"ttft_disk_range_ms\": [%.1f, %.1f],\n", lo, hi);
		range_of(tr->warm, k, &lo, &hi);
		printf("  \"ttft_warm_range_ms\": [%.1f, %.1f],\n", lo, hi);
		printf("  \"ttft_first_token_same\": \"%d of %d runs (cold, disk, warm)\",\n",
		       tr->first_same, k);
	}
	for (int ph = 0; ph < NPHASES; ph++) {
		double p99 = median_of(lr->p99[ph], lr->rounds);
		printf("  \"match_p99_us_%s\": %.1f,\n", phase_names[ph], p99);
		printf("  \"match_p50_us_%s\": %.1f,\n", phase_names[ph],
		       median_of(lr->p50[ph], lr->rounds));
		printf("  \"match_p999_us_%s\": %.1f,\n", phase_names[ph],
		       median_of(lr->p999[ph], lr->rounds));
		range_of(lr->max[ph], lr->rounds, &lo, &hi);
		printf("  \"match_max_us_%s\": %.1f,\n", phase_names[ph], hi);
		printf("  \"rounds_match_p99_us_%s\": [", phase_names[ph]);
		for (int k = 0; k < lr->rounds; k++)
			printf("%s%.1f", k ? ", " : "", lr->p99[ph][k]);
		printf("],\n");
		if (ph == PH_IDLE)
			continue;
		printf("  \"spills_during_%s\": %llu,\n", phase_names[ph],
		       (unsigned long long)lr->spills[ph]);
		printf("  \"spill_mb_s_%s\": %.0f,\n", phase_names[ph],
		       median_of(lr->spill_mb_s[ph], lr->rounds));
		printf("  \"published_blocks_%s\": %llu,\n  \"evictions_%s\": %llu,\n",
		       phase_names[ph], (unsigned long long)lr->published[ph], phase_names[ph],
		       (unsigned long long)lr->evictions[ph]);
	}
	printf("  \"spills_during\": %llu,\n", (unsigned long long)lr->spills[PH_PACED]);
	double idle = median_of(lr->p99[PH_IDLE], lr->rounds);
	double spill = median_of(lr->p99[PH_PACED], lr->rounds);
	double flat = median_of(lr->p99[PH_FLAT], lr->rounds);
	printf("  \"match_p99_spilling_vs_idle\": %.2f,\n  \"match_p99_flat_out_vs_idle\": %.2f,\n",
	       idle > 0 ? spill / idle : 0, idle > 0 ? flat / idle : 0);
	printf("  \"latency_rounds\": %d,\n  \"latency_phase_s\": %.1f,\n", lr->rounds, LAT_PHASE_S);
	printf("  \"restart_records\": %d,\n", RESTART_RECORDS);
	printf("  \"restart_record_bytes\": %d,\n", 4096 + TD_BLOCK_BYTES);
	printf("  \"restart_ms\": %.1f,\n  \"restart_load_ms\": %.1f,\n",
	       median_of(sr->warm, RESTART_RUNS), median_of(sr->warm_load, RESTART_RUNS));
	printf("  \"restart_ms_cold\": %.1f,\n  \"restart_load_ms_cold\": %.1f,\n",
	       median_of(sr->cold, RESTART_COLD_RUNS), median_of(sr->cold_load, RESTART_COLD_RUNS));
	if (sr->ndrop)
		printf("  \"restart_ms_dropcaches\": %.1f,\n  \"restart_load_ms_dropcaches\": %.1f,\n",
		       median_of(sr->drop, sr->ndrop), median_of(sr->drop_load, sr->ndrop));
	printf("  \"restart_spill_s\": %.2f,\n", sr->spill_s);
	printf("  \"duration_s\": %.1f,\n", wall);
	printf("  \"cpu_used_by_others\": %.2f,\n  \"steal\": %.3f,\n", others, steal);
	bool met = raw > 0 && cold / raw >= TARGET_RESTORE_RATIO && spill <= TARGET_SPILL_P99 * idle;
	if (tr) {
		double td = median_of(tr->disk, tr->runs);
		met = met && td > 0 && median_of(tr->cold, tr->runs) / td >= TARGET_TTFT_RATIO;
	}
	printf("  \"target\": {\"restore_ratio\": %.1f, \"ttft_ratio\": %.0f, \"match_p99_spilling_vs_idle\": %.1f},\n",
	       TARGET_RESTORE_RATIO, TARGET_TTFT_RATIO, TARGET_SPILL_P99);
	printf("  \"target_met\": %s,\n", met ? "true" : "false");
	printf("  \"note\": \"MB = 10^6 bytes of KV payload. restore: one MATCH of a 32-block prefix from a fresh connection after a restart (every block on disk only), median over prefixes and rounds; raw_read: the same payloads read with O_DIRECT preads. ttft: medians of runs, each a fresh process (model loaded before the clock starts); disk runs follow a restart with the records out of the page cache. match_*: the MATCH of a resident 4-block prompt of 8 KiB blocks, timed by the client; medians over rounds of each phase's percentiles, max the largest of any round; spilling: another process publishes 2048-token SmolLM-sized prefixes whenever fewer than %d blocks wait to be written; flat_out: without waiting. restart_ms: fork+exec to the first accepted connection, %d records of 4-token 8 KiB blocks; restart_load_ms: the daemon's log line. cpu_used_by_others: CPUs that processes other than this benchmark and its daemons used on average, steal the hypervisor's\"\n",
	       PACED_PENDING, RESTART_RECORDS);
	printf("}\n");
}

static int usage(int rc)
{
	fprintf(rc ? stderr : stdout,
		"usage: disk [--dir DIR] [--rounds R] [--prefixes P] [--ttft-runs N] [--no-ttft]\n"
		"  the disk tier's directories under DIR (default /tmp); P (default 7, up to 16)\n"
		"  2048-token SmolLM-135M-shaped prefixes restored from disk in R rounds (default\n"
		"  5; also the MATCH latency rounds, at most 3); N (default 5) time-to-first-token\n"
		"  runs of each kind, or none.\n");
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o = { .parent = "/tmp", .rounds = 5, .prefixes = 7, .ttft_runs = 5,
			  .ttft = true };
	static const struct option lo[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "prefixes", required_argument, NULL, 'p' },
		{ "ttft-runs", required_argument, NULL, 't' },
		{ "no-ttft", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c == 'd')
			o.parent = optarg;
		else if (c == 'r')
			o.rounds = atoi(optarg);
		else if (c == 'p')
			o.prefixes = atoi(optarg);
		else if (c == 't')
			o.ttft_runs = atoi(optarg);
		else if (c == 'n')
			o.ttft = false;
		else
			return usage(c == 'h' ? 0 : 2);
	}
	if (optind < argc || o.rounds < 1 || o.rounds > MAX_ROUNDS || o.prefixes < 1 ||
	    o.prefixes > MAX_PREFIXES || o.ttft_runs < 1 || o.ttft_runs > MAX_ROUNDS)
		return usage(2);

	struct bench_cpu cpu0;
	bench_cpu_now(&cpu0);
	double kids0 = children_cpu_s();
	char work[PATH_MAX - 64], fs[160], out[PATH_MAX];
	snprintf(work, sizeof(work), "%s/prefixd-bench-disk-XXXXXX", o.parent);
	if (!mkdtemp(work)) {
		fail("mkdtemp %s: %s", work, strerror(errno));
		return 1;
	}
	fs_of(work, fs, sizeof(fs));
	static struct restore_run rr;
	static struct ttft_run tr;
	static struct lat_run lr;
	static struct restart_run sr;
	rr.prefixes = o.prefixes;
	rr.rounds = o.rounds;
	tr.runs = o.ttft_runs;
	lr.rounds = o.rounds < 3 ? o.rounds : 3;
	snprintf(rr.dir, sizeof(rr.dir), "%s/restore", work);
	snprintf(tr.dir, sizeof(tr.dir), "%s/ttft", work);
	snprintf(lr.dir, sizeof(lr.dir), "%s/latency", work);
	snprintf(sr.dir, sizeof(sr.dir), "%s/restart", work);
	char mdir[PATH_MAX + 16];
	snprintf(mdir, sizeof(mdir), "%s/model", work);
	model_dir = mdir;

	int rc = 0;
	fprintf(stderr, "bench/disk: restore throughput (%s)\n", fs);
	if (measure_restore(&rr))
		rc = 1;
	if (!rc) {
		fprintf(stderr, "bench/disk: restart with %d records\n", RESTART_RECORDS);
		if (measure_restart(&sr))
			rc = 1;
	}
	if (!rc) {
		fprintf(stderr, "bench/disk: MATCH latency while spilling\n");
		if (measure_latency(&lr))
			rc = 1;
	}
	if (!rc && o.ttft) {
		struct pfx_error err = { "" };
		struct pfx_config sc = pfx_config_smollm135m();
		fprintf(stderr, "bench/disk: time to first token\n");
		if (pfx_random_checkpoint(mdir, &sc, "F32", 1, &err)) {
			fail("cannot write the random model: %s", err.msg);
			rc = 1;
		} else if (measure_ttft(&tr)) {
			rc = 1;
		}
	}
	double wall = bench_now() - cpu0.wall, others, steal;
	bench_cpu_since(&cpu0, &others, &steal);
	/* The daemons and runs are this benchmark's children, reaped by now. */
	double kids = (children_cpu_s() - kids0) / wall;
	others = others > kids ? others - kids : 0;
	td_sh(out, sizeof(out), "rm -rf '%s'", work);
	if (rc) {
		fail("failed");
		return 1;
	}
	print_json(&o, fs, &rr, o.ttft ? &tr : NULL, &lr, &sr, wall, others, steal);
	int n = rr.rounds * rr.prefixes;
	double ratio = median_of(rr.cold, n) / median_of(rr.raw, n);
	double idle = median_of(lr.p99[PH_IDLE], lr.rounds), spill = median_of(lr.p99[PH_PACED], lr.rounds);
	double tratio = o.ttft ? median_of(tr.cold, tr.runs) / median_of(tr.disk, tr.runs) : 1e9;
	if (ratio < TARGET_RESTORE_RATIO || spill > TARGET_SPILL_P99 * idle || tratio < TARGET_TTFT_RATIO) {
		fail("target missed: restore_ratio %.2f (>= %.1f), match p99 spilling %.1f us vs idle %.1f (<= %.0fx), ttft_ratio %.1f (>= %.0f)",
		     ratio, TARGET_RESTORE_RATIO, spill, idle, TARGET_SPILL_P99, tratio, TARGET_TTFT_RATIO);
		return 1;
	}
	return 0;
}
