/* SPDX-License-Identifier: MIT */
/*
 * bench/disk: what the disk tier (prefixd --disk-dir) costs and buys. Its
 * directories are made under --dir (default /tmp), whose file system and
 * device the output names: the figures are the disk's as much as the
 * daemon's. The parts run one after the other (2 vCPUs); one JSON object
 * on stdout, progress on stderr.
 *
 *  - restore_mb_s (cold): a daemon holds P 2048-token prefixes of
 *    SmolLM-135M-shaped blocks (64 tokens x 30 layers x K,V x 3 KV heads x
 *    64 dims x f32: 2,949,120 bytes; 32 blocks a prefix, synthetic KV).
 *    Once every block is written it is stopped (SIGTERM), the records are
 *    dropped from the page cache (syncfs, then posix_fadvise(DONTNEED) on
 *    each, checked with mincore) and it is started again on the directory:
 *    every block is on disk only, and the daemon has no slot yet, so a
 *    restore's slots are new memory whose pages the kernel allocates as
 *    the reads land. Each prefix is matched from a fresh connection: the
 *    MATCH, timed as the client sees it, reads its 32 blocks back (32 hit,
 *    32 from disk, every byte checked afterwards). Payload bytes / time,
 *    median over prefixes and rounds.
 *  - restore_mb_s_steady: the daemon started again on the same records
 *    with --memory for two prefixes and a bit (STEADY_MEMORY), the
 *    prefixes matched in rotation from fresh connections, each lease
 *    released before the next: each restore evicts the least recently used
 *    prefix (on disk already, so nothing is written) and reads into its
 *    slots, which the store keeps resident: no page is allocated
 *    (daemon_rss_mb_per_restore*: the daemon's RSS growth). One pass fills
 *    the memory, R more are timed, the records dropped before each.
 *  - raw_read_mb_s: the same payloads, each record opened with O_DIRECT and
 *    read in one pread into a 4096-aligned buffer (reused), one after the
 *    other; raw_read_fresh_mb_s: into new shared memory (a memfd for each
 *    prefix), as a cold restore's slots are. Each prefix's right before or
 *    after its cold restore, in turn. restore_ratio = restore_mb_s /
 *    raw_read_mb_s (target >= 0.7), _paired the median of each prefix's;
 *    restore_ratio_steady = restore_mb_s_steady / raw_read_mb_s;
 *    restore_ratio_fresh = restore_mb_s / raw_read_fresh_mb_s.
 *  - ttft_disk_ms, ttft_cold_ms, ttft_warm_ms: time to first token of a
 *    2048-token prefix + 32-token suffix with a random SmolLM-135M-shaped
 *    model, as bench/share measures it (bench/ttft.c), each run a fresh
 *    process: cold computes all 2080 tokens alone; disk attaches the
 *    prefix a first process published, the daemon restarted on its
 *    directory before each run (the prefix on disk only, out of the page
 *    cache); warm attaches it right after, from memory. ttft_ratio = cold
 *    / disk (target >= 10).
 *  - match_p99_us_*: a client matches and releases a resident 4-block
 *    prompt of 8 KiB blocks every 250 us (open loop, leaving the CPUs to
 *    the others between calls; each MATCH timed as the call takes it, and
 *    from when it was due: match_from_due_us), idle, then while another
 *    process publishes new 2048-token SmolLM-sized prefixes (one PUBLISH
 *    of 32 blocks each) so that the tier writes records all along:
 *    "spilling" whenever fewer than 96 blocks wait to be written (as fast
 *    as the tier takes them), "flat_out" without a pause (once memory is
 *    full of blocks not yet written, each PUBLISH waits for the tier to
 *    write some: publish_ms_flat_out is what that pacing costs a
 *    publisher), "spilling_1gbs" one prefix every
 *    94 ms (1 GB/s: what the tier costs a MATCH per byte, whatever its
 *    top speed). The control, "publishing_no_disk": a daemon without
 *    --disk-dir, as many publishes a second as while spilling: what
 *    publishing alone costs a MATCH. Medians over rounds of each phase's
 *    percentiles (target: spilling <= 2 x idle).
 *  - publish_ms_write_behind, publish_ms_disk_sync: each PUBLISH of a
 *    2048-token SmolLM-sized prefix (32 blocks, 94 MB), as the client
 *    times it, P of them one after the other into a fresh directory, the
 *    daemon (--memory 1G) started without and with --disk-sync in turn,
 *    R rounds: write-behind answers once the blocks are in memory (the
 *    records follow: written_s, from the first publish until every record
 *    is written, not synced); --disk-sync once every record is written and
 *    synced (fdatasync, then the directory). disk_sync_cost = the ratio of
 *    the two p50s; publish_mb_s_* the prefix bytes over the p50.
 *  - restart_ms: from fork+exec of prefixd on a directory of 10,000
 *    records (4-token blocks of 8 KiB), stopped gracefully before, its
 *    files in the page cache, to its first accepted connection
 *    (td_start_timed); restart_load_ms: what its log line "loaded in X ms
 *    from ..." says, restart_load_from where from. _cold: the files dropped
 *    from the page cache first (dentries and inodes stay cached);
 *    _dropcaches (as root): echo 3 > /proc/sys/vm/drop_caches; _scan: the
 *    manifest deleted first, as a crash leaves it: every head is read.
 *
 *   disk [--dir DIR] [--rounds R] [--prefixes P] [--ttft-runs N] [--no-ttft]
 *
 * Exits 1 when something fails (nothing printed) or a target is missed
 * (the figures printed all the same).
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
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "daemon_util.h"
#include "opts.h"
#include "prefixd.h"
#include "random_model.h"
#include "report.h"
#include "shapes.h"
#include "ttft.h"

#define NAME "disk"
#define KV_TOKENS SMOLLM_BLOCK_TOKENS
#define KV_BYTES SMOLLM_BLOCK_BYTES
#define PREFIX_BLOCKS SMOLLM_PREFIX_BLOCKS
#define PREFIX_TOKENS (PREFIX_BLOCKS * KV_TOKENS)
#define PREFIX_BYTES ((double)PREFIX_BLOCKS * (double)KV_BYTES)
#define HEAD_BYTES 4096 /* a record's head, for up to 976 tokens */
#define MAX_PREFIXES 16
#define MAX_ROUNDS 15
#define SUFFIX 32
#define STEADY_MEMORY "200M" /* 71 slots: two prefixes and 7 blocks */

#define RESTART_RECORDS 10000 /* of td_layout's blocks, 16 a prompt */
#define RESTART_PROMPT_BLOCKS 16

#define LAT_BLOCKS 4
#define LAT_BLOCK_BYTES 8192
#define LAT_PHASE_S 2.0
#define PROBE_US 250     /* one MATCH every 250 us: 4,000 a second */
#define PACED_PENDING 96 /* the publisher waits while this many blocks wait */

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

static void sleep_until(double t)
{
	struct timespec ts = { (time_t)t, (long)((t - (double)(time_t)t) * 1e9) };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static double most(double a, double b)
{
	return a > b ? a : b;
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
			struct prefixd_stats *s)
{
	double t0 = bench_now();
	while (!stats_of(d, s)) {
		if (!s->disk_pending && s->spills >= spills)
			return 0;
		if (bench_now() - t0 > timeout_s) {
			fail("%llu blocks still wait to be written after %.0f s, %llu of %llu written",
			     (unsigned long long)s->disk_pending, timeout_s,
			     (unsigned long long)s->spills, (unsigned long long)spills);
			return -1;
		}
		usleep(5000);
	}
	return -1;
}

static int stop(struct test_daemon *d)
{
	int rc = td_stop(d);
	if (rc)
		fail("prefixd exited with status %d", rc);
	return rc ? -1 : 0;
}

/* The disk tier's line of the log: blocks loaded, "loaded in X ms" and
 * what from ("the manifest", "a scan"; "" when it does not say). */
static int log_load(const struct test_daemon *d, double *ms, unsigned long long *blocks,
		    char *from, size_t len)
{
	char line[1024];
	FILE *f = fopen(d->log, "r");
	int rc = -1;
	while (f && rc && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "disk tier "), *q = strstr(line, " loaded in "), *end;
		char *b = p ? strstr(p, ": ") : NULL;
		if (!p || !q || !b || !strstr(b, " blocks ("))
			continue;
		*blocks = strtoull(b + 2, NULL, 10);
		*ms = strtod(q + 11, &end);
		const char *src = !strncmp(end, " ms from ", 9) ? end + 9 : "";
		snprintf(from, len, "%.*s", (int)strcspn(src, ";\n"), src);
		rc = 0;
	}
	if (f)
		fclose(f);
	if (rc)
		fail("no \"disk tier ... loaded in X ms\" line in the log");
	return rc;
}

/* A daemon with its disk tier in dir; with want, it must have loaded
 * that many blocks from there. */
static int start_disk(struct test_daemon *d, const char *dir, const char *memory, uint64_t want)
{
	const char *args[] = { "--disk-dir", dir, "--memory", memory, NULL };
	unsigned long long loaded = 0;
	double ms;
	char from[64];
	if (td_start(d, args)) {
		fail("prefixd did not start on %s", dir);
		return -1;
	}
	if (want && (log_load(d, &ms, &loaded, from, sizeof(from)) || loaded != want)) {
		fail("the daemon loaded %llu blocks, not %llu", loaded, (unsigned long long)want);
		stop(d);
		return -1;
	}
	return 0;
}

/* ==== Record files and the page cache ==== */

/* Calls fn on every file of dir whose name ends in suffix (NULL: every
 * regular file), by its directory's descriptor; stops at the first error. */
static int for_each_file(const char *dir, const char *suffix,
			 int (*fn)(int dfd, const char *name, void *arg), void *arg)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd < 0 ? NULL : opendir(dir);
	int rc = d ? 0 : -errno;
	for (struct dirent *e; !rc && d && (e = readdir(d));) {
		size_t n = strlen(e->d_name), k = suffix ? strlen(suffix) : 0;
		if (suffix ? n > k && !strcmp(e->d_name + n - k, suffix) : e->d_type == DT_REG)
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
	int rc = fd < 0 ? errno : posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (fd >= 0)
		close(fd);
	return -rc;
}

static int load_one(int dfd, const char *name, void *arg)
{
	static char buf[1 << 20];
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	ssize_t r = fd < 0 ? -1 : 1;
	while (r > 0)
		r = read(fd, buf, sizeof(buf));
	if (fd >= 0)
		close(fd);
	return r < 0 ? -errno : 0;
}

/* The directory's files (records, the manifest) out of the page cache:
 * written back (syncfs), then dropped file by file; with all (root
 * only), everything, dentries and inodes too. */
static int drop_cache(const char *dir, bool all)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = dfd < 0 || syncfs(dfd) ? -errno : 0;
	if (dfd >= 0)
		close(dfd);
	if (!rc && all) {
		int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, "3\n", 2) != 2)
			rc = -errno;
		if (fd >= 0)
			close(fd);
	} else if (!rc) {
		rc = for_each_file(dir, NULL, drop_one, NULL);
	}
	if (rc)
		fail("dropping %s from the page cache: %s", dir, strerror(-rc));
	return rc;
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

/* Of the records' pages (or their payloads'), the fraction in the page
 * cache; -1 when unknown. */
static double cached_fraction(const char *dir, bool payload_only)
{
	struct residency r = { .payload_only = payload_only };
	if (for_each_file(dir, ".rec", resident_one, &r) || !r.pages)
		return -1;
	return (double)r.resident / (double)r.pages;
}

/* ==== Restore throughput ==== */

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

static bool block_ok(int p, int b, const uint32_t *w)
{
	for (size_t i = 0; i < KV_BYTES / 4; i++)
		if (w[i] != kv_word(p, b, i))
			return false;
	return true;
}

/* Samples of one kind of restore or read: [round * prefixes + p]. */
typedef double samples[MAX_ROUNDS * MAX_PREFIXES];

struct restore_run {
	char dir[PATH_MAX];
	int prefixes, rounds;
	char (*name)[PREFIX_BLOCKS][96]; /* the record of each block */
	samples cold, steady, raw, fresh, cold_ms, steady_ms; /* MB/s, ms */
	double rss_cold, rss_steady;     /* the daemon's RSS growth, MB a restore */
	double resid_dropped;            /* most of the records' pages left after a drop */
	double resid_after_restore;      /* most of the payload pages a cold restore cached */
	bool direct;                     /* the file system takes O_DIRECT */
	double spill_s;                  /* from the first publish until all were written */
	uint64_t evictions;              /* by the timed steady restores */
};

/* Prefix p's KV blocks, written into kv and pointed at by ptrs. */
static void prefix_kv(uint32_t *kv, const void *ptrs[PREFIX_BLOCKS], int p)
{
	for (int b = 0; b < PREFIX_BLOCKS; b++) {
		uint32_t *w = kv + (size_t)b * (KV_BYTES / 4);
		for (size_t i = 0; i < KV_BYTES / 4; i++)
			w[i] = kv_word(p, b, i);
		ptrs[b] = w;
	}
}

/* Publishes prefixes 0..n-1 of the model whose fingerprint bytes are fp;
 * with ms, the milliseconds each PUBLISH took into ms[p]. */
static int publish_prefixes(const char *sock, uint8_t fp, int n, double *ms)
{
	struct prefixd_layout l = bench_layout(KV_TOKENS, KV_BYTES, fp);
	struct prefixd *c = NULL;
	uint32_t *kv = malloc(PREFIX_BLOCKS * KV_BYTES);
	static uint32_t t[PREFIX_TOKENS];
	const void *ptrs[PREFIX_BLOCKS];
	int rc = kv ? prefixd_connect(sock, &l, &c) : -ENOMEM;
	for (int p = 0; !rc && p < n; p++) {
		prefix_kv(kv, ptrs, p);
		prefix_tokens(t, p);
		uint32_t stored, dedup;
		double t1 = bench_now();
		rc = prefixd_publish(c, 0, t, 0, PREFIX_BLOCKS, ptrs, &stored, &dedup);
		if (ms)
			ms[p] = (bench_now() - t1) * 1e3;
		if (!rc && stored != PREFIX_BLOCKS)
			rc = -EIO;
	}
	if (rc)
		fail("publish: %s", rc == -EIO ? "not every block stored" : prefixd_errmsg());
	prefixd_close(c);
	free(kv);
	return rc;
}

static uint64_t le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;
	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Files each record under its prefix and block by its first token
 * (docs/FORMAT.md, "Records": the magic, payload bytes at 40, its
 * offset at 48, depth at 56, the tokens at 192). */
static int map_one(int dfd, const char *name, void *arg)
{
	struct restore_run *r = arg;
	uint8_t head[196] = { 0 };
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : pread(fd, head, sizeof(head), 0);
	if (fd >= 0)
		close(fd);
	uint32_t tok = (uint32_t)le(head + 192, 4);
	int p = (int)(tok >> 20) - 1, b = (int)(tok & 0xfffff) / KV_TOKENS;
	if (n != (ssize_t)sizeof(head) || memcmp(head, "PFXDREC", 8) || le(head + 40, 8) != KV_BYTES ||
	    le(head + 48, 8) != HEAD_BYTES || le(head + 56, 4) != (uint64_t)b || p < 0 ||
	    p >= r->prefixes || b >= PREFIX_BLOCKS || r->name[p][b][0]) {
		fail("%s/%s: not a record of a block published here", r->dir, name);
		return -EBADMSG;
	}
	snprintf(r->name[p][b], sizeof(r->name[p][b]), "%s", name);
	return 0;
}

/* The record of every block, and whether the file system takes O_DIRECT. */
static int map_records(struct restore_run *r)
{
	if (!(r->name = calloc((size_t)r->prefixes, sizeof(*r->name))) ||
	    for_each_file(r->dir, ".rec", map_one, r))
		return -1;
	for (int p = 0; p < r->prefixes; p++)
		for (int b = 0; b < PREFIX_BLOCKS; b++)
			if (!r->name[p][b][0]) {
				fail("no record of prefix %d block %d", p, b);
				return -1;
			}
	char path[PATH_MAX + 128];
	snprintf(path, sizeof(path), "%s/%s", r->dir, r->name[0][0]);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	r->direct = fd >= 0;
	if (fd >= 0)
		close(fd);
	return r->direct || errno == EINVAL ? 0 : -1;
}

/* One prefix read back from disk by one MATCH on a fresh connection: MB/s
 * and ms. */
static int restore_one(const char *sock, int p, double *mb_s, double *ms)
{
	struct prefixd_layout l = bench_layout(KV_TOKENS, KV_BYTES, 0x5a);
	struct prefixd *c = NULL;
	static uint32_t t[PREFIX_TOKENS];
	const void *kv[PREFIX_BLOCKS];
	uint64_t lease = 0;
	uint32_t hit = 0, from_disk = 0, bad = 0;
	prefix_tokens(t, p);
	int rc = prefixd_connect(sock, &l, &c);
	double t0 = bench_now();
	if (!rc)
		rc = prefixd_match2(c, t, PREFIX_BLOCKS, &lease, &hit, &from_disk, kv);
	double s = bench_now() - t0;
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
	*mb_s = PREFIX_BYTES / s / MB;
	*ms = s * 1e3;
	return rc;
}

/* The payloads of prefix p's records, O_DIRECT, one pread each, into buf
 * (reused), or with fresh set into new shared memory, as a restarted
 * daemon's slots are (its pages allocated by the reads); MB/s. */
static int raw_read(struct restore_run *r, int dfd, int p, uint8_t *buf, bool fresh,
		    double *mb_s)
{
	size_t len = PREFIX_BLOCKS * KV_BYTES;
	double t0 = bench_now();
	int mfd = fresh ? memfd_create("bench-disk", MFD_CLOEXEC) : -1, rc = 0;
	uint8_t *mem = mfd < 0 || ftruncate(mfd, (off_t)len) ? MAP_FAILED
		     : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (fresh && mem == MAP_FAILED) {
		fail("memfd: %s", strerror(errno));
		rc = -1;
	}
	for (int b = 0; !rc && b < PREFIX_BLOCKS; b++) {
		int fd = openat(dfd, r->name[p][b], O_RDONLY | O_CLOEXEC | (r->direct ? O_DIRECT : 0));
		ssize_t n = fd < 0 ? -1 : pread(fd, fresh ? mem + b * KV_BYTES : buf, KV_BYTES, HEAD_BYTES);
		if (n != (ssize_t)KV_BYTES) {
			fail("reading %s/%s: %s", r->dir, r->name[p][b], n < 0 ? strerror(errno) : "short");
			rc = -1;
		}
		if (fd >= 0)
			close(fd);
	}
	*mb_s = (double)len / (bench_now() - t0) / MB;
	if (mem != MAP_FAILED)
		munmap(mem, len);
	if (mfd >= 0)
		close(mfd);
	return rc;
}

/* Every prefix, each from a fresh connection, into out[p] and ms[p]; with
 * raw, each also read raw into a buffer (raw[p]) and into new memory
 * (fresh[p]), the three in turns (prefix p of round k), so that none
 * always gets the device, or what its host caches, first. Then the
 * daemon's counters must say the same, and that nothing was written.
 * *rss: the most the daemon's RSS grew, MB a restore. */
static int restore_all(const struct test_daemon *d, struct restore_run *r, int k, double *out,
		       double *ms, double *raw, double *fresh, double *rss)
{
	struct prefixd_stats s0, s1;
	uint8_t *buf = NULL;
	int dfd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = dfd < 0 || posix_memalign((void **)&buf, 4096, KV_BYTES) ? -1 : stats_of(d, &s0);
	uint64_t rss0 = td_rss(d->pid), blocks = (uint64_t)r->prefixes * PREFIX_BLOCKS;
	for (int p = 0; !rc && p < r->prefixes; p++)
		for (int i = 0; !rc && i < (raw ? 3 : 1); i++) {
			int what = raw ? (p + k + i) % 3 : 0;
			if (what == 0)
				rc = restore_one(d->sock, p, &out[p], &ms[p]);
			else
				rc = raw_read(r, dfd, p, buf, what == 2, what == 1 ? &raw[p] : &fresh[p]);
		}
	*rss = most(*rss, ((double)td_rss(d->pid) - (double)rss0) / MB / r->prefixes);
	free(buf);
	if (dfd >= 0)
		close(dfd);
	if (!rc && (rc = stats_of(d, &s1)) == 0 &&
	    (s1.restores - s0.restores != blocks || s1.disk_corrupt || s1.disk_pending ||
	     s1.restore_bytes - s0.restore_bytes != blocks * KV_BYTES || s1.spills != s0.spills)) {
		fail("the daemon counted %llu restores of %llu bytes (want %llu of %llu), %llu corrupt; %llu blocks written again, %llu waiting",
		     (unsigned long long)(s1.restores - s0.restores),
		     (unsigned long long)(s1.restore_bytes - s0.restore_bytes),
		     (unsigned long long)blocks, (unsigned long long)(blocks * KV_BYTES),
		     (unsigned long long)s1.disk_corrupt, (unsigned long long)(s1.spills - s0.spills),
		     (unsigned long long)s1.disk_pending);
		rc = -EIO;
	}
	r->evictions += rc ? 0 : s1.evictions - s0.evictions;
	return rc;
}

/* Cold: each round a restart, the records out of the page cache. Then the
 * steady state: --memory for two prefixes and a bit, the prefixes in
 * rotation, a pass to fill the memory and r->rounds timed. */
static int measure_restore(struct restore_run *r)
{
	struct test_daemon d;
	struct prefixd_stats s;
	uint64_t blocks = (uint64_t)r->prefixes * PREFIX_BLOCKS;
	if (start_disk(&d, r->dir, "1G", 0))
		return -1;
	double t0 = bench_now();
	int rc = publish_prefixes(d.sock, 0x5a, r->prefixes, NULL);
	if (!rc)
		rc = wait_spilled(&d, blocks, 60, &s);
	r->spill_s = bench_now() - t0;
	if (!rc && s.blocks != blocks) {
		fail("%llu blocks in memory, not %llu: the budget is too small",
		     (unsigned long long)s.blocks, (unsigned long long)blocks);
		rc = -1;
	}
	if (stop(&d) || rc || map_records(r))
		return -1;
	for (int k = 0; k < r->rounds; k++) {
		int i = k * r->prefixes;
		double f = -1;
		if (drop_cache(r->dir, false) || (f = cached_fraction(r->dir, false)) < 0 ||
		    start_disk(&d, r->dir, "1G", blocks))
			return -1;
		r->resid_dropped = most(r->resid_dropped, f);
		rc = restore_all(&d, r, k, r->cold + i, r->cold_ms + i, r->raw + i, r->fresh + i,
				 &r->rss_cold);
		r->resid_after_restore = most(r->resid_after_restore, cached_fraction(r->dir, true));
		if (stop(&d) || rc)
			return -1;
	}
	if (start_disk(&d, r->dir, STEADY_MEMORY, blocks))
		return -1;
	for (int k = -1; !rc && k < r->rounds; k++) {
		samples first;
		double *out = k < 0 ? first : r->steady + k * r->prefixes, rss = 0;
		double *ms = k < 0 ? first : r->steady_ms + k * r->prefixes;
		if (k == 0)
			r->evictions = 0; /* those of the timed passes */
		if (!(rc = drop_cache(r->dir, false)))
			rc = restore_all(&d, r, k, out, ms, NULL, NULL, k < 0 ? &rss : &r->rss_steady);
	}
	return stop(&d) || rc ? -1 : 0;
}

/* ==== What --disk-sync costs a publisher ==== */

struct sync_run {
	char dir[PATH_MAX];
	int prefixes, rounds;
	samples ms[2];        /* [mode][round * prefixes + p]: each PUBLISH */
	double written_s[2][MAX_ROUNDS];
};

static const char *const sync_names[2] = { "write_behind", "disk_sync" };

/* One round of one mode: P prefixes published one after the other, each
 * timed, then the time until every record is written. */
static int sync_round(struct sync_run *r, int mode, int k)
{
	char dir[PATH_MAX + 32];
	snprintf(dir, sizeof(dir), "%s/%s-%d", r->dir, sync_names[mode], k);
	const char *args[] = { "--disk-dir", dir, "--memory", "1G", mode ? "--disk-sync" : NULL, NULL };
	struct test_daemon d;
	if (td_start(&d, args)) {
		fail("prefixd did not start on %s", dir);
		return -1;
	}
	double t0 = bench_now();
	int rc = publish_prefixes(d.sock, 0x5b, r->prefixes, &r->ms[mode][k * r->prefixes]);
	struct prefixd_stats s;
	if (!rc)
		rc = wait_spilled(&d, (uint64_t)r->prefixes * PREFIX_BLOCKS, 120, &s);
	r->written_s[mode][k] = bench_now() - t0;
	char out[PATH_MAX + 64];
	td_sh(out, sizeof(out), "rm -rf '%s'", dir);
	return stop(&d) || rc ? -1 : 0;
}

static int measure_sync(struct sync_run *r)
{
	if (mkdir(r->dir, 0700)) {
		fail("mkdir %s: %s", r->dir, strerror(errno));
		return -1;
	}
	/* The modes in turn, each round starting with the other. */
	for (int k = 0; k < r->rounds; k++)
		for (int i = 0; i < 2; i++)
			if (sync_round(r, (k + i) % 2, k))
				return -1;
	return 0;
}

/* ==== Time to first token ==== */

static const char *model_dir;

struct ttft_run {
	char dir[PATH_MAX];
	int runs;
	double cold[MAX_ROUNDS], disk[MAX_ROUNDS], warm[MAX_ROUNDS];
	double publish_ms;
	int first_same; /* runs whose disk and warm first tokens are the cold run's */
};

static int ttft(const char *sock, int suffix_seed, struct bench_ttft *res)
{
	int rc = bench_ttft("bench/disk", model_dir, sock, PREFIX_TOKENS, SUFFIX,
			    (uint32_t)suffix_seed, PFX_KV_F32, res);
	if (rc)
		fail("a time-to-first-token run failed");
	return rc;
}

static int measure_ttft(struct ttft_run *r)
{
	struct test_daemon d;
	struct prefixd_stats s;
	struct bench_ttft a, b, c;
	if (start_disk(&d, r->dir, "1G", 0))
		return -1;
	/* A first process computes the prefix and publishes it. */
	int rc = ttft(d.sock, 99, &a);
	if (!rc && a.published != PREFIX_BLOCKS) {
		fail("the first run published %.0f blocks, not %d", a.published, PREFIX_BLOCKS);
		rc = -1;
	}
	r->publish_ms = a.ms;
	if (!rc)
		rc = wait_spilled(&d, PREFIX_BLOCKS, 60, &s);
	for (int k = 0; !rc && k < r->runs; k++) {
		if (ttft(NULL, 100 + k, &a) || stop(&d) || drop_cache(r->dir, false) ||
		    start_disk(&d, r->dir, "1G", PREFIX_BLOCKS) || ttft(d.sock, 100 + k, &b) ||
		    ttft(d.sock, 100 + k, &c)) {
			rc = -1;
			break;
		}
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

enum { PUB_PAUSE, PUB_PACED, PUB_FLAT, PUB_RATE, PUB_QUIT };

struct pub_shared {
	_Atomic int mode, ready, failed;
	_Atomic uint64_t blocks, publishes;
	_Atomic uint64_t interval_ns;        /* PUB_RATE: one publish every */
	_Atomic uint64_t pub_ns, pub_ns_max; /* time in PUBLISH calls, the longest */
};

/* The publisher (a child): new 2048-token prefixes of SmolLM-sized
 * blocks, one PUBLISH of 32 blocks each, as a client that computed one
 * publishes it, in the mode the parent sets: while fewer than
 * PACED_PENDING blocks wait to be written, without a pause, or one every
 * interval_ns. */
static void publisher_main(const char *sock, struct pub_shared *sh)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct prefixd_layout l = bench_layout(KV_TOKENS, KV_BYTES, 0x22);
	struct prefixd *c = NULL;
	struct prefixd_stats st;
	uint8_t *kv = malloc(PREFIX_BLOCKS * KV_BYTES);
	const void *ptrs[PREFIX_BLOCKS];
	static uint32_t t[PREFIX_TOKENS];
	if (!kv || prefixd_connect(sock, &l, &c))
		_exit(1);
	for (int b = 0; b < PREFIX_BLOCKS; b++)
		ptrs[b] = memset(kv + (size_t)b * KV_BYTES, b + 1, KV_BYTES);
	for (uint32_t i = 0; i < PREFIX_TOKENS; i++)
		t[i] = i;
	atomic_store(&sh->ready, 1);
	double next = 0;
	for (uint32_t n = 0;;) {
		int mode = atomic_load(&sh->mode), rc = 0;
		double now = bench_now();
		if (mode == PUB_QUIT)
			break;
		if (mode == PUB_PAUSE) {
			next = 0;
			usleep(1000);
			continue;
		}
		/* (a STATS that fails ends the publisher below) */
		if (mode == PUB_PACED && (rc = prefixd_stats(c, &st)) == 0 &&
		    st.disk_pending >= PACED_PENDING) {
			usleep(2000);
			continue;
		}
		if (mode == PUB_RATE) {
			next = next == 0 || next < now - 1 ? now : next;
			if (now < next) {
				sleep_until(next < now + 0.002 ? next : now + 0.002);
				continue;
			}
			next += (double)atomic_load(&sh->interval_ns) * 1e-9;
		}
		t[0] = 0x800000u + n++;
		uint32_t stored = 0, dedup = 0;
		double t0 = bench_now();
		if (!rc)
			rc = prefixd_publish(c, 0, t, 0, PREFIX_BLOCKS, ptrs, &stored, &dedup);
		uint64_t ns = (uint64_t)((bench_now() - t0) * 1e9);
		if (rc && rc != -ENOSPC) {
			fail("publisher: %s", prefixd_errmsg());
			atomic_store(&sh->failed, 1);
			break;
		}
		atomic_fetch_add(&sh->blocks, stored);
		atomic_fetch_add(&sh->publishes, 1);
		atomic_fetch_add(&sh->pub_ns, ns);
		if (ns > atomic_load(&sh->pub_ns_max))
			atomic_store(&sh->pub_ns_max, ns);
	}
	prefixd_close(c);
	_exit(0);
}

/* The prober: MATCH + RELEASE of the resident prompt every PROBE_US for
 * `seconds` (open loop: it leaves the CPUs to the others between calls).
 * call: each MATCH as the client's call takes it; sched: from when it
 * was due, so that a MATCH held up also counts for those that had to
 * wait behind it. Both sorted. */
static int probe(struct prefixd *c, const uint32_t *t, double seconds, struct bench_lat *call,
		 struct bench_lat *sched, uint64_t *from_disk, uint64_t *misses)
{
	const void *kv[LAT_BLOCKS];
	call->n = sched->n = 0;
	double t0 = bench_now();
	for (double due = t0; due <= t0 + seconds; due += PROBE_US * 1e-6) {
		if (bench_now() < due)
			sleep_until(due);
		uint64_t lease = 0;
		uint32_t hit = 0, disk = 0;
		double a = bench_now();
		int rc = prefixd_match2(c, t, LAT_BLOCKS, &lease, &hit, &disk, kv);
		double b = bench_now();
		if (rc || (lease && prefixd_release(c, lease))) {
			fail("match or release: %s", prefixd_errmsg());
			return -1;
		}
		*from_disk += disk;
		*misses += hit != LAT_BLOCKS;
		if (bench_lat_add(call, b - a) || bench_lat_add(sched, b - due))
			return -1;
	}
	bench_sort_u32(call->ns, call->n);
	bench_sort_u32(sched->ns, sched->n);
	return 0;
}

enum { PH_IDLE, PH_PACED, PH_FLAT, PH_RATED, PH_CONTROL, NPHASES };
static const char *const phase_names[NPHASES] = { "idle", "spilling", "flat_out", "spilling_1gbs",
						  "publishing_no_disk" };

/* Figures of one phase, per round. */
enum { L_P50, L_P99, L_P999, L_MAX, L_SP50, L_SP99, L_SMAX, L_SPILL_MB_S, L_PUB_MS,
       L_PUB_MAX_MS, L_N };

struct lat_run {
	char dir[PATH_MAX];
	int rounds;
	double fig[NPHASES][L_N][MAX_ROUNDS];
	uint64_t spills[NPHASES], published[NPHASES], evictions[NPHASES], publishes[NPHASES];
	uint64_t from_disk, misses;
	double pub_interval_s; /* the control's: the spilling phases' mean */
};

static int lat_phase(struct lat_run *r, const struct test_daemon *d, struct prefixd *c,
		     const uint32_t *t, struct pub_shared *sh, int ph, int k, struct bench_lat *call,
		     struct bench_lat *sched)
{
	struct prefixd_stats s0, s1;
	if (ph == PH_IDLE) {
		/* Nothing left to write from the last phase. */
		if (wait_spilled(d, 0, 60, &s0))
			return -1;
		usleep(100000);
	} else {
		/* The publisher gets going (and the tier with it). */
		uint64_t b0 = atomic_load(&sh->blocks);
		/* The rated phase: one prefix every (its bytes / 1 GB/s). */
		double every = ph == PH_RATED ? (double)PREFIX_BLOCKS * KV_BYTES / 1e9 : r->pub_interval_s;
		atomic_store(&sh->interval_ns, (uint64_t)(every * 1e9));
		atomic_store(&sh->mode, ph == PH_PACED ? PUB_PACED : ph == PH_FLAT ? PUB_FLAT : PUB_RATE);
		for (int i = 0; i < 2000 && atomic_load(&sh->blocks) == b0; i++)
			usleep(1000);
		usleep(300000);
	}
	uint64_t b0 = atomic_load(&sh->blocks), n0 = atomic_load(&sh->publishes);
	uint64_t ns0 = atomic_load(&sh->pub_ns);
	atomic_store(&sh->pub_ns_max, 0);
	if (stats_of(d, &s0))
		return -1;
	double t0 = bench_now();
	int rc = probe(c, t, LAT_PHASE_S, call, sched, &r->from_disk, &r->misses);
	double wall = bench_now() - t0;
	if (rc || stats_of(d, &s1))
		return -1;
	atomic_store(&sh->mode, PUB_PAUSE);
	if (atomic_load(&sh->failed)) {
		fail("the publisher failed");
		return -1;
	}
	double(*f)[MAX_ROUNDS] = r->fig[ph];
	uint64_t np = atomic_load(&sh->publishes) - n0;
	f[L_P50][k] = bench_pct_us(call->ns, call->n, 0.50);
	f[L_P99][k] = bench_pct_us(call->ns, call->n, 0.99);
	f[L_P999][k] = bench_pct_us(call->ns, call->n, 0.999);
	f[L_MAX][k] = bench_pct_us(call->ns, call->n, 1);
	f[L_SP50][k] = bench_pct_us(sched->ns, sched->n, 0.50);
	f[L_SP99][k] = bench_pct_us(sched->ns, sched->n, 0.99);
	f[L_SMAX][k] = bench_pct_us(sched->ns, sched->n, 1);
	f[L_SPILL_MB_S][k] = (double)(s1.spills - s0.spills) * (HEAD_BYTES + KV_BYTES) / wall / MB;
	f[L_PUB_MS][k] = np ? (double)(atomic_load(&sh->pub_ns) - ns0) / (double)np / 1e6 : 0;
	f[L_PUB_MAX_MS][k] = (double)atomic_load(&sh->pub_ns_max) / 1e6;
	r->spills[ph] += s1.spills - s0.spills;
	r->evictions[ph] += s1.evictions - s0.evictions;
	r->published[ph] += atomic_load(&sh->blocks) - b0;
	r->publishes[ph] += np;
	if (ph != PH_IDLE && ph != PH_CONTROL && s1.spills == s0.spills) {
		fail("no record was written during the %s phase", phase_names[ph]);
		return -1;
	}
	return 0;
}

/* One daemon, with the disk tier (the idle, spilling and flat-out
 * phases) or without (the control), `rounds` rounds of its phases. */
static int lat_session(struct lat_run *r, bool disk)
{
	const char *args[] = { "--memory", "1G", "--disk-dir", r->dir, "--disk-budget", "2G", NULL };
	struct test_daemon d;
	struct prefixd_stats s;
	struct prefixd_layout l = bench_layout(KV_TOKENS, LAT_BLOCK_BYTES, 0x31);
	static uint32_t t[LAT_BLOCKS * KV_TOKENS];
	static uint8_t kv[LAT_BLOCKS][LAT_BLOCK_BYTES];
	const void *ptrs[LAT_BLOCKS];
	for (uint32_t i = 0; i < LAT_BLOCKS * KV_TOKENS; i++)
		t[i] = 0x700000u + i;
	for (int b = 0; b < LAT_BLOCKS; b++)
		ptrs[b] = memset(kv[b], 0x40 + b, LAT_BLOCK_BYTES);
	/* The prober's wake-ups on time, not 50 us late. */
	prctl(PR_SET_TIMERSLACK, 1UL);
	struct pub_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!disk)
		args[2] = NULL;
	if (sh == MAP_FAILED || td_start(&d, args)) {
		fail("prefixd did not start");
		return -1;
	}
	struct prefixd *c = NULL;
	struct bench_lat call = { 0 }, sched = { 0 };
	uint32_t stored = 0, dedup = 0;
	pid_t kid = -1;
	int rc = prefixd_connect(d.sock, &l, &c);
	if (!rc)
		rc = prefixd_publish(c, 0, t, 0, LAT_BLOCKS, ptrs, &stored, &dedup);
	if (rc || stored != LAT_BLOCKS) {
		fail("the latency prompt: %s", rc ? prefixd_errmsg() : "not stored");
		rc = -1;
	}
	/* Its records written, so that the idle phases are idle. The
	 * publisher's connection right after this one: the other worker. */
	if (!rc && disk)
		rc = wait_spilled(&d, LAT_BLOCKS, 60, &s);
	/* A lease held all along keeps the prompt in memory: nothing touches
	 * it while the publisher gets going before a phase, and a publisher
	 * fast enough would otherwise age it out then. */
	struct prefixd *hold = c;
	uint64_t held = 0;
	uint32_t hit = 0;
	const void *hkv[LAT_BLOCKS];
	if (!rc && (prefixd_match(hold, t, LAT_BLOCKS, &held, &hit, hkv) || hit != LAT_BLOCKS)) {
		fail("the latency prompt is not cached: %s", prefixd_errmsg());
		rc = -1;
	}
	c = NULL;
	if (!rc && (rc = prefixd_connect(d.sock, &l, &c)))
		fail("connect: %s", prefixd_errmsg());
	fflush(NULL);
	if (!rc && (kid = fork()) == 0)
		publisher_main(d.sock, sh);
	for (int i = 0; kid > 0 && i < 10000 && !atomic_load(&sh->ready); i++)
		usleep(1000);
	if (!rc && !atomic_load(&sh->ready)) {
		fail("the publisher did not connect");
		rc = -1;
	}
	/* Warm-up: the mapping and the client's memo of the prompt. */
	if (!rc)
		rc = probe(c, t, 0.3, &call, &sched, &r->from_disk, &r->misses);
	for (int k = 0; !rc && k < r->rounds; k++)
		for (int ph = disk ? 0 : PH_CONTROL; !rc && ph < (disk ? PH_CONTROL : NPHASES); ph++)
			rc = lat_phase(r, &d, c, t, sh, ph, k, &call, &sched);
	if (!rc && (r->from_disk || r->misses)) {
		fail("the resident prompt was not always in memory: %llu blocks from disk, %llu short hits",
		     (unsigned long long)r->from_disk, (unsigned long long)r->misses);
		rc = -1;
	}
	if (kid > 0) {
		atomic_store(&sh->mode, PUB_QUIT);
		waitpid(kid, NULL, 0);
	}
	prefixd_close(c);
	if (held)
		prefixd_release(hold, held);
	prefixd_close(hold);
	free(call.ns);
	free(sched.ns);
	munmap(sh, sizeof(*sh));
	return stop(&d) || rc ? -1 : 0;
}

/* The phases with the disk tier; then the control: a daemon without it,
 * the publisher publishing as often as it did while spilling. */
static int measure_latency(struct lat_run *r)
{
	if (lat_session(r, true))
		return -1;
	double wall = r->rounds * LAT_PHASE_S;
	r->pub_interval_s = r->publishes[PH_PACED] ? wall / (double)r->publishes[PH_PACED] : 0.1;
	return lat_session(r, false);
}

/* ==== Restart ==== */

/* How a start finds the directory: its manifest (written by the last
 * graceful stop) or, the manifest deleted as a crash leaves it, a scan of
 * every record's head; the files in the page cache, dropped from it
 * (posix_fadvise), or everything dropped (drop_caches, root only). */
enum { RS_WARM, RS_COLD, RS_DROP, RS_SCAN, RS_SCAN_COLD, RS_SCAN_DROP, RS_N };
static const char *const rs_names[RS_N] = { "", "_cold", "_dropcaches", "_scan", "_scan_cold",
					    "_scan_dropcaches" };
static const int rs_runs[RS_N] = { 5, 3, 2, 3, 3, 2 };
#define RS_MAX_RUNS 5

struct restart_run {
	char dir[PATH_MAX];
	double ms[RS_N][RS_MAX_RUNS], load[RS_N][RS_MAX_RUNS];
	char from[RS_N][32];
	int runs[RS_N];
	double resid_dropped; /* most of the records' pages left after a drop */
	double spill_s;
};

static int restart_once(struct restart_run *r, int mode, int k)
{
	const char *args[] = { "--block-tokens", "4", "--memory", "256M", "--disk-dir", r->dir, NULL };
	struct test_daemon d;
	struct prefixd_stats s;
	unsigned long long loaded = 0;
	bool drop = mode == RS_DROP || mode == RS_SCAN_DROP;
	bool cold = mode == RS_COLD || mode == RS_SCAN_COLD;
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/manifest", r->dir);
	if (mode >= RS_SCAN && unlink(path) && errno != ENOENT) {
		fail("unlink %s: %s", path, strerror(errno));
		return -1;
	}
	/* Warm: every file read into the page cache (a manifest start reads
	 * no head, so the last start may have left them out). */
	if (drop || cold ? drop_cache(r->dir, drop) : for_each_file(r->dir, NULL, load_one, NULL))
		return -1;
	if (cold)
		r->resid_dropped = most(r->resid_dropped, cached_fraction(r->dir, false));
	if (td_start_timed(&d, args, &r->ms[mode][k]))
		return -1;
	int rc = log_load(&d, &r->load[mode][k], &loaded, r->from[mode], sizeof(r->from[mode]));
	if (!rc && (rc = stats_of(&d, &s)) == 0 &&
	    (loaded != RESTART_RECORDS || s.disk_blocks != RESTART_RECORDS)) {
		fail("the daemon loaded %llu blocks and counts %llu on disk, not %d", loaded,
		     (unsigned long long)s.disk_blocks, RESTART_RECORDS);
		rc = -1;
	}
	r->runs[mode] = k + 1;
	return stop(&d) || rc ? -1 : 0;
}

static int measure_restart(struct restart_run *r)
{
	const char *args[] = { "--block-tokens", "4", "--memory", "256M", "--disk-dir", r->dir, NULL };
	struct test_daemon d;
	struct prefixd_stats s;
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c = NULL;
	uint32_t t[RESTART_PROMPT_BLOCKS * TD_BLOCK_TOKENS], stored = 0, dedup;
	if (td_start(&d, args))
		return -1;
	int rc = prefixd_connect(d.sock, &l, &c);
	double t0 = bench_now();
	for (uint32_t k = 0; !rc && k < RESTART_RECORDS / RESTART_PROMPT_BLOCKS; k++) {
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
		rc = wait_spilled(&d, RESTART_RECORDS, 120, &s);
	r->spill_s = bench_now() - t0;
	if (stop(&d) || rc)
		return -1;
	/* The modes take turns run by run; the root-only ones only as root. */
	for (int k = 0; k < RS_MAX_RUNS; k++)
		for (int m = 0; m < RS_N; m++) {
			bool root_only = m == RS_DROP || m == RS_SCAN_DROP;
			if (k < rs_runs[m] && (!root_only || geteuid() == 0) && restart_once(r, m, k))
				return -1;
		}
	return 0;
}

/* ==== Output ==== */

/* One JSON member a line: "key": value, where key is a format. */
static void num(int prec, double v, const char *key, ...) __attribute__((format(printf, 3, 4)));
static void num(int prec, double v, const char *key, ...)
{
	char k[128];
	va_list ap;
	va_start(ap, key);
	vsnprintf(k, sizeof(k), key, ap);
	va_end(ap);
	report_fmt(k, "%.*f", prec, v);
}

/* The smallest and largest of n samples, as "key": [lo, hi]. */
static void range(int prec, const double *v, int n, const char *key)
{
	double lo = n ? v[0] : 0, hi = lo;
	for (int i = 1; i < n; i++) {
		lo = v[i] < lo ? v[i] : lo;
		hi = most(hi, v[i]);
	}
	report_fmt(key, "[%.*f, %.*f]", prec, lo, prec, hi);
}

/* The median of n samples as "key", their range as "key_range". */
static double fig(int prec, const double *v, int n, const char *key)
{
	double med = bench_median_of(v, n);
	char rk[96];
	num(prec, med, "%s", key);
	snprintf(rk, sizeof(rk), "%s_range", key);
	range(prec, v, n, rk);
	return med;
}

/* The median of each round's `each` samples, as "key": [...]. */
static void per_round(int prec, const double *v, int rounds, int each, const char *key)
{
	double med[MAX_ROUNDS];
	for (int k = 0; k < rounds; k++)
		med[k] = bench_median_of(v + k * each, each);
	report_array(key, med, rounds, prec);
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

struct verdict {
	double restore_ratio, restore_ratio_steady, ttft_ratio, spill_vs_idle;
};

static void print_restore(const struct restore_run *rr, struct verdict *v)
{
	int n = rr->rounds * rr->prefixes;
	samples pair;
	num(0, rr->prefixes * PREFIX_BYTES / MB, "restored_mb_per_round");
	num(0, rr->prefixes * PREFIX_BLOCKS * (double)(HEAD_BYTES + KV_BYTES) / rr->spill_s / MB,
	    "spill_mb_s_alone");
	double cold = fig(0, rr->cold, n, "restore_mb_s");
	num(1, bench_median_of(rr->cold_ms, n), "restore_ms");
	double raw = fig(0, rr->raw, n, "raw_read_mb_s");
	num(2, v->restore_ratio = ratio(cold, raw), "restore_ratio");
	for (int i = 0; i < n; i++)
		pair[i] = ratio(rr->cold[i], rr->raw[i]);
	num(2, bench_median_of(pair, n), "restore_ratio_paired");
	double fresh = fig(0, rr->fresh, n, "raw_read_fresh_mb_s");
	num(2, ratio(cold, fresh), "restore_ratio_fresh");
	double steady = fig(0, rr->steady, n, "restore_mb_s_steady");
	num(1, bench_median_of(rr->steady_ms, n), "restore_ms_steady");
	num(2, v->restore_ratio_steady = ratio(steady, raw), "restore_ratio_steady");
	report_str("restore_steady", "--memory %s, %d timed passes over the %d prefixes after one to fill it; %llu blocks evicted in them",
		   STEADY_MEMORY, rr->rounds, rr->prefixes, (unsigned long long)rr->evictions);
	num(1, rr->rss_cold, "daemon_rss_mb_per_restore");
	num(1, rr->rss_steady, "daemon_rss_mb_per_restore_steady");
	/* Round by round: a virtual disk's reads move with its host. */
	per_round(0, rr->cold, rr->rounds, rr->prefixes, "rounds_restore_mb_s");
	per_round(0, rr->steady, rr->rounds, rr->prefixes, "rounds_restore_mb_s_steady");
	per_round(0, rr->raw, rr->rounds, rr->prefixes, "rounds_raw_read_mb_s");
	per_round(0, rr->fresh, rr->rounds, rr->prefixes, "rounds_raw_read_fresh_mb_s");
	report_str("page_cache_note", "%s; a cold restore left %.4f of the payload pages in the page cache (mincore). Two regimes: cold (restore_mb_s), right after a restart: the daemon has no slot yet, a restore's slots are new shared memory whose pages the kernel allocates and zeroes as the reads land (daemon_rss_mb_per_restore), as raw_read_fresh's are; steady (restore_mb_s_steady), the memory full: each restore evicts a prefix already on disk and reads into its slots, resident (daemon_rss_mb_per_restore_steady), as raw_read's reused buffer is. raw_read: O_DIRECT preads, past the page cache, one record at a time, each prefix's right before or after its cold restore (in turn); the daemon reads a MATCH's 32 records with io_uring, all at once. A virtual disk's host may cache what was read (see the ranges)",
		   rr->direct ? "the file system takes O_DIRECT: the daemon reads payloads with O_DIRECT straight into the slot, past the page cache (the 4 KiB heads too; a start from the manifest reads none)"
			  : "the file system refuses O_DIRECT: the daemon reads through the page cache", rr->resid_after_restore);
}

static void print_ttft(const struct ttft_run *tr, struct verdict *v)
{
	int k = tr->runs;
	double cold = bench_median_of(tr->cold, k), disk = bench_median_of(tr->disk, k);
	report_str("model", "random SmolLM-135M shape (f32), 2 threads, %d-token blocks", KV_TOKENS);
	report_fmt("prefix_tokens", "%d", PREFIX_TOKENS);
	report_fmt("suffix_tokens", "%d", SUFFIX);
	report_fmt("ttft_runs", "%d", k);
	num(1, cold, "ttft_cold_ms");
	num(1, disk, "ttft_disk_ms");
	num(1, bench_median_of(tr->warm, k), "ttft_warm_ms");
	num(1, v->ttft_ratio = ratio(cold, disk), "ttft_ratio");
	num(1, tr->publish_ms, "ttft_publishing_run_ms");
	range(1, tr->cold, k, "ttft_cold_range_ms");
	range(1, tr->disk, k, "ttft_disk_range_ms");
	range(1, tr->warm, k, "ttft_warm_range_ms");
	report_str("ttft_first_token_same", "%d of %d runs (cold, disk, warm)", tr->first_same, k);
}

static void print_latency(const struct lat_run *lr, struct verdict *v)
{
	int n = lr->rounds;
	double p99[NPHASES];
	for (int ph = 0; ph < NPHASES; ph++) {
		const char *nm = phase_names[ph];
		const double(*f)[MAX_ROUNDS] = lr->fig[ph];
		double hi = 0, shi = 0, phi = 0;
		for (int k = 0; k < n; k++) {
			hi = most(hi, f[L_MAX][k]);
			shi = most(shi, f[L_SMAX][k]);
			phi = most(phi, f[L_PUB_MAX_MS][k]);
		}
		num(1, p99[ph] = bench_median_of(f[L_P99], n), "match_p99_us_%s", nm);
		num(1, bench_median_of(f[L_P50], n), "match_p50_us_%s", nm);
		num(1, bench_median_of(f[L_P999], n), "match_p999_us_%s", nm);
		num(1, hi, "match_max_us_%s", nm);
		report_array(report_key("rounds_match_p99_us_%s", nm), f[L_P99], n, 1);
		report_fmt(report_key("match_from_due_us_%s", nm), "{\"p50\": %.1f, \"p99\": %.1f, \"max\": %.1f}",
			   bench_median_of(f[L_SP50], n), bench_median_of(f[L_SP99], n), shi);
		if (ph == PH_IDLE)
			continue;
		report_fmt(report_key("publish_ms_%s", nm), "{\"mean\": %.1f, \"max\": %.1f}",
			   bench_median_of(f[L_PUB_MS], n), phi);
		num(0, (double)lr->publishes[ph], "publishes_%s", nm);
		if (ph == PH_CONTROL)
			continue;
		num(0, (double)lr->spills[ph], "spills_during_%s", nm);
		num(0, bench_median_of(f[L_SPILL_MB_S], n), "spill_mb_s_%s", nm);
		num(0, (double)lr->published[ph], "published_blocks_%s", nm);
		num(0, (double)lr->evictions[ph], "evictions_%s", nm);
	}
	num(0, (double)lr->spills[PH_PACED], "spills_during");
	num(2, v->spill_vs_idle = ratio(p99[PH_PACED], p99[PH_IDLE]), "match_p99_spilling_vs_idle");
	num(2, ratio(p99[PH_FLAT], p99[PH_IDLE]), "match_p99_flat_out_vs_idle");
	num(2, ratio(p99[PH_RATED], p99[PH_IDLE]), "match_p99_spilling_1gbs_vs_idle");
	num(2, ratio(p99[PH_PACED], p99[PH_CONTROL]), "match_p99_spilling_vs_publishing_no_disk");
	num(0, 1e6 / PROBE_US, "match_probes_per_s");
	num(0, n, "latency_rounds");
	num(1, LAT_PHASE_S, "latency_phase_s");
}

static void print_sync(const struct sync_run *yr)
{
	double p50[2];
	for (int m = 0; m < 2; m++) {
		int n = yr->rounds * yr->prefixes;
		double v[MAX_ROUNDS * MAX_PREFIXES], most_ms = 0;
		memcpy(v, yr->ms[m], (size_t)n * sizeof(double));
		for (int i = 0; i < n; i++)
			most_ms = most(most_ms, v[i]);
		p50[m] = bench_median(v, n);
		report_fmt(report_key("publish_ms_%s", sync_names[m]), "{\"p50\": %.1f, \"max\": %.1f}",
			   p50[m], most_ms);
		num(0, PREFIX_BYTES / MB / (p50[m] / 1e3), "publish_mb_s_%s", sync_names[m]);
		range(2, yr->written_s[m], yr->rounds, m ? "written_s_disk_sync" : "written_s_write_behind");
	}
	num(2, ratio(p50[1], p50[0]), "disk_sync_cost");
	report_str("disk_sync_note", "each PUBLISH of a 32-block 94 MB prefix, %d one after the other a round, %d rounds, the modes in turn: write-behind answers once the blocks are in memory, its records written after (written_s: the first publish until every record is written, not synced); --disk-sync once every record is written and synced (fdatasync of each record, then of the directory), so that a kill -9 or a power cut loses no confirmed block",
		   yr->prefixes, yr->rounds);
}

static void print_restart(const struct restart_run *sr)
{
	num(0, RESTART_RECORDS, "restart_records");
	num(0, HEAD_BYTES + TD_BLOCK_BYTES, "restart_record_bytes");
	for (int m = 0; m < RS_N; m++) {
		if (!sr->runs[m])
			continue;
		num(1, bench_median_of(sr->ms[m], sr->runs[m]), "restart_ms%s", rs_names[m]);
		num(1, bench_median_of(sr->load[m], sr->runs[m]), "restart_load_ms%s", rs_names[m]);
		report_str(report_key("restart_load_from%s", rs_names[m]), "%s", sr->from[m]);
	}
	num(2, sr->spill_s, "restart_spill_s");
}

/* Prints every figure; whether the targets were met. */
static bool print_json(const char *parent, const char *fs, const struct restore_run *rr,
		       const struct ttft_run *tr, const struct lat_run *lr,
		       const struct restart_run *sr, const struct sync_run *yr, double wall,
		       double others, double steal)
{
	struct verdict v = { 0 };
	report_begin(NAME);
	report_machine();
	report_str("disk_dir_fs", "%s (%s)", fs, parent);
	report_str("cache_drop", "syncfs, then posix_fadvise(POSIX_FADV_DONTNEED) on each file of the directory (records, manifest; most of the records' pages left cached after a drop: %.4f, by mincore); _dropcaches: echo 3 > /proc/sys/vm/drop_caches (root)",
		   most(rr->resid_dropped, sr->resid_dropped));
	report_fmt("block_bytes", "%llu", (unsigned long long)KV_BYTES);
	report_fmt("record_bytes", "%llu", (unsigned long long)(HEAD_BYTES + KV_BYTES));
	report_fmt("prefix_blocks", "%d", PREFIX_BLOCKS);
	report_fmt("prefixes", "%d", rr->prefixes);
	report_fmt("restore_rounds", "%d", rr->rounds);
	print_restore(rr, &v);
	if (tr)
		print_ttft(tr, &v);
	print_latency(lr, &v);
	print_restart(sr);
	print_sync(yr);
	num(1, wall, "duration_s");
	report_noise(others, steal);
	report_target("restore_ratio", v.restore_ratio, REPORT_AT_LEAST, TARGET_RESTORE_RATIO);
	if (tr)
		report_target("ttft_ratio", v.ttft_ratio, REPORT_AT_LEAST, TARGET_TTFT_RATIO);
	report_target("match_p99_spilling_vs_idle", v.spill_vs_idle, REPORT_AT_MOST, TARGET_SPILL_P99);
	return report_end("MB = 10^6 bytes of KV payload. restore: one MATCH of a 32-block prefix from a fresh connection, every block on disk only, median over prefixes and rounds; restore_mb_s cold (after a restart: new slots, pages allocated by the reads), restore_mb_s_steady steady (the memory full: a restore evicts and reuses resident slots); the target is on the cold restore_ratio. raw_read: the same payloads read with O_DIRECT preads. ttft: medians of runs, each a fresh process (model loaded before the clock starts); disk runs follow a restart with the records out of the page cache. match_*: the MATCH of a resident 4-block prompt of 8 KiB blocks every %d us, timed by the client (match_from_due_us: from when it was due); medians over rounds of each phase's percentiles, max the largest of any round; spilling: another process publishes 2048-token SmolLM-sized prefixes (32 blocks a PUBLISH) whenever fewer than %d blocks wait to be written; flat_out: without waiting (the daemon paces it by its writer once memory is full of unwritten blocks); spilling_1gbs: one such publish every 94 ms (1 GB/s); publishing_no_disk: a daemon without a disk tier, as many publishes a second as while spilling. restart_ms: fork+exec to the first accepted connection, %d records of 4-token 8 KiB blocks, after a graceful stop; restart_load_ms: the daemon's log line; _scan: the manifest deleted first. cpu_used_by_others: CPUs that processes other than this benchmark and its daemons used on average, steal the hypervisor's",
		   PROBE_US, PACED_PENDING, RESTART_RECORDS);
}

static int usage(int rc)
{
	fprintf(rc ? stderr : stdout,
		"usage: disk [--dir DIR] [--rounds R] [--prefixes P] [--ttft-runs N] [--no-ttft]\n"
		"  the disk tier's directories under DIR (default /tmp); P (default 7, 4 to 16)\n"
		"  2048-token SmolLM-135M-shaped prefixes restored from disk in R rounds (default\n"
		"  5; also the MATCH latency rounds, at most 3); N (default 5) time-to-first-token\n"
		"  runs of each kind, or none.\n");
	return rc;
}

static double children_cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_CHILDREN, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	       1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

int main(int argc, char **argv)
{
	const char *parent = "/tmp";
	int rounds = 5, prefixes = 7, ttft_runs = 5, c;
	bool no_ttft = false;
	static const struct option lo[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "prefixes", required_argument, NULL, 'p' },
		{ "ttft-runs", required_argument, NULL, 't' },
		{ "no-ttft", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c == 'd')
			parent = optarg;
		else if (c == 'r')
			rounds = opt_int(NAME, "rounds", optarg, 1, MAX_ROUNDS);
		else if (c == 'p')
			/* Steady: a prefix comes back after at least 3 others,
			 * by when the budget (2 prefixes and a bit) has evicted
			 * all of it. */
			prefixes = opt_int(NAME, "prefixes", optarg, 4, MAX_PREFIXES);
		else if (c == 't')
			ttft_runs = opt_int(NAME, "ttft-runs", optarg, 1, MAX_ROUNDS);
		else if (c == 'n')
			no_ttft = true;
		else
			return usage(c == 'h' ? 0 : 2);
	}
	if (optind < argc)
		return usage(2);

	struct bench_cpu cpu0;
	bench_cpu_now(&cpu0);
	double kids0 = children_cpu_s();
	char work[PATH_MAX - 64], fs[160], out[PATH_MAX], mdir[PATH_MAX + 16];
	snprintf(work, sizeof(work), "%s/prefixd-bench-disk-XXXXXX", parent);
	if (!mkdtemp(work)) {
		fail("mkdtemp %s: %s", work, strerror(errno));
		return 1;
	}
	fs_of(work, fs, sizeof(fs));
	static struct restore_run rr;
	static struct ttft_run tr;
	static struct lat_run lr;
	static struct restart_run sr;
	static struct sync_run yr;
	rr.prefixes = prefixes;
	yr.prefixes = prefixes;
	yr.rounds = rounds < 3 ? rounds : 3;
	rr.rounds = rounds;
	tr.runs = ttft_runs;
	lr.rounds = rounds < 3 ? rounds : 3;
	snprintf(rr.dir, sizeof(rr.dir), "%s/restore", work);
	snprintf(tr.dir, sizeof(tr.dir), "%s/ttft", work);
	snprintf(lr.dir, sizeof(lr.dir), "%s/latency", work);
	snprintf(sr.dir, sizeof(sr.dir), "%s/restart", work);
	snprintf(yr.dir, sizeof(yr.dir), "%s/sync", work);
	snprintf(mdir, sizeof(mdir), "%s/model", work);
	model_dir = mdir;

	struct pfx_error err = { "" };
	struct pfx_config sc = pfx_config_smollm135m();
	fprintf(stderr, "bench/disk: restore throughput (%s)\n", fs);
	int rc = measure_restore(&rr);
	if (!rc) {
		fprintf(stderr, "bench/disk: restart with %d records\n", RESTART_RECORDS);
		rc = measure_restart(&sr);
	}
	if (!rc) {
		fprintf(stderr, "bench/disk: MATCH latency while spilling\n");
		rc = measure_latency(&lr);
	}
	if (!rc) {
		fprintf(stderr, "bench/disk: PUBLISH with write-behind and with --disk-sync\n");
		rc = measure_sync(&yr);
	}
	if (!rc && !no_ttft) {
		fprintf(stderr, "bench/disk: time to first token\n");
		if ((rc = pfx_random_checkpoint(mdir, &sc, "F32", 1, &err)))
			fail("cannot write the random model: %s", err.msg);
		else
			rc = measure_ttft(&tr);
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
	return print_json(parent, fs, &rr, no_ttft ? NULL : &tr, &lr, &sr, &yr, wall, others, steal)
		       ? 0
		       : 1;
}
