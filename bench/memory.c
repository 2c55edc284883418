/* SPDX-License-Identifier: MIT */
/*
 * bench/memory: what a shared prefix costs in memory. A private prefixd
 * holds one cached 2048-token prefix of SmolLM-135M-shaped blocks (32
 * blocks, 94 MB); 4 client processes attach it and read every page. The
 * figure is the prefix's resident memory summed over the 4 processes,
 * relative to one copy of it: PSS (proportional set size) charges each
 * process 1/n of a page n processes map, so attached clients sum to at
 * most one copy, where private copies would sum to 4.
 *
 * The parent reads, for each client, /proc/PID/smaps_rollup (the whole
 * process) and /proc/PID/smaps (just the arena mappings, memfd
 * "prefixd-arena") at three moments: connected but not attached, attached
 * and touched, and after the client made a private copy of the prefix (the
 * no-sharing baseline, measured the same way). Prints one JSON object.
 *
 *   memory [--clients N]
 *
 * Target: pss_ratio <= 1.2. Exits 1 when something fails or the target is
 * missed (the figures are printed either way).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_util.h"
#include "prefixd.h"

/* SmolLM-135M: 30 layers, 3 KV heads of 64 dims, f32, K and V. */
#define BLOCK_TOKENS 64
#define BLOCK_BYTES ((uint64_t)2 * 30 * 3 * BLOCK_TOKENS * 64 * 4)
#define PREFIX_BLOCKS 32 /* 2048 tokens */
#define PREFIX_BYTES (PREFIX_BLOCKS * BLOCK_BYTES)
#define MAX_CLIENTS 16
#define TARGET_PSS_RATIO 1.2
#define ARENA_NAME "/memfd:prefixd-arena" /* shm/arena.c's memfd_create name */
#define REPLY_TIMEOUT_MS 30000

/* ==== The prefix ==== */

static struct prefixd_layout layout(void)
{
	struct prefixd_layout l = { .block_tokens = BLOCK_TOKENS, .block_bytes = BLOCK_BYTES };
	memset(l.fingerprint, 0x4d, sizeof(l.fingerprint));
	return l;
}

static void prefix_tokens(uint32_t *t)
{
	uint64_t s = 42;
	for (int i = 0; i < PREFIX_BLOCKS * BLOCK_TOKENS; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		t[i] = (uint32_t)(s >> 33) % 49152u; /* SmolLM's vocabulary */
	}
}

/* Word i of block b: a client checks it reads the published bytes. */
static uint32_t kv_word(int b, size_t i) { return (uint32_t)b * 2654435761u + (uint32_t)i; }

static int publish(const char *sock, const uint32_t *tokens)
{
	struct prefixd_layout l = layout();
	struct prefixd *c;
	if (prefixd_connect(sock, &l, &c)) {
		fprintf(stderr, "bench/memory: connect: %s\n", prefixd_errmsg());
		return -1;
	}
	uint8_t *kv = malloc(PREFIX_BYTES);
	const void *ptrs[PREFIX_BLOCKS];
	uint32_t stored = 0, dedup;
	int rc = -1;
	if (kv) {
		for (int b = 0; b < PREFIX_BLOCKS; b++) {
			uint32_t *w = (uint32_t *)(kv + (size_t)b * BLOCK_BYTES);
			for (size_t i = 0; i < BLOCK_BYTES / 4; i++)
				w[i] = kv_word(b, i);
			ptrs[b] = w;
		}
		rc = prefixd_publish(c, 0, tokens, 0, PREFIX_BLOCKS, ptrs, &stored, &dedup);
	}
	if (!kv)
		fprintf(stderr, "bench/memory: out of memory\n");
	else if (rc)
		fprintf(stderr, "bench/memory: publish: %s\n", prefixd_errmsg());
	else if (stored != PREFIX_BLOCKS)
		fprintf(stderr, "bench/memory: %u of %d blocks stored\n", stored, PREFIX_BLOCKS);
	free(kv); /* before the clients fork: they must not share it */
	prefixd_close(c);
	return kv && !rc && stored == PREFIX_BLOCKS ? 0 : -1;
}

/* ==== A client process ==== */

/*
 * Commands on `cmd`, one byte each, answered on `st` with the same byte
 * (or 'E' and a message): 'a' attach and read every page, 'p' make a
 * private copy and read it. End of file: release and exit.
 */
static void reply(int st, char what, const char *msg)
{
	char buf[300];
	int n = snprintf(buf, sizeof(buf), "%c%s", msg ? 'E' : what, msg ? msg : "");
	if (write(st, buf, (size_t)n) < 0)
		_exit(1);
}

/* Reads one byte of every page of the prefix, so all of it is resident in
 * this process, and checks a word of each block. */
static int touch(const void *const *kv)
{
	volatile uint8_t sink = 0;
	for (int b = 0; b < PREFIX_BLOCKS; b++) {
		const uint8_t *p = kv[b];
		for (size_t off = 0; off < BLOCK_BYTES; off += 4096)
			sink ^= p[off];
		if (((const uint32_t *)p)[BLOCK_BYTES / 8] != kv_word(b, BLOCK_BYTES / 8))
			return -1;
	}
	(void)sink;
	return 0;
}

static void client_main(const char *sock, const uint32_t *tokens, int cmd, int st)
{
	struct prefixd_layout l = layout();
	struct prefixd *c;
	char msg[300];
	if (prefixd_connect(sock, &l, &c)) {
		snprintf(msg, sizeof(msg), "connect: %s", prefixd_errmsg());
		reply(st, 0, msg);
		_exit(1);
	}
	reply(st, 'c', NULL);
	const void *kv[PREFIX_BLOCKS];
	uint64_t lease = 0;
	uint32_t hit = 0;
	uint8_t *copy = NULL;
	char what;
	while (read(cmd, &what, 1) == 1) {
		const char *err = NULL;
		if (what == 'a') {
			if (prefixd_match(c, tokens, PREFIX_BLOCKS, &lease, &hit, kv)) {
				snprintf(msg, sizeof(msg), "match: %s", prefixd_errmsg());
				err = msg;
			} else if (hit != PREFIX_BLOCKS) {
				snprintf(msg, sizeof(msg), "%u of %d blocks hit", hit, PREFIX_BLOCKS);
				err = msg;
			} else if (touch(kv)) {
				err = "the attached prefix does not hold the published bytes";
			}
		} else if (what == 'p') {
			/* What each process would hold without sharing. */
			if (!(copy = malloc(PREFIX_BYTES)))
				err = "out of memory";
			for (int b = 0; copy && b < PREFIX_BLOCKS; b++)
				memcpy(copy + (size_t)b * BLOCK_BYTES, kv[b], BLOCK_BYTES);
		}
		reply(st, what, err);
	}
	free(copy);
	if (lease)
		prefixd_release(c, lease);
	prefixd_close(c);
	_exit(0);
}

struct client {
	pid_t pid;
	int cmd, st;
};

static int spawn(struct client *k, const char *sock, const uint32_t *tokens)
{
	int cmd[2], st[2];
	if (pipe2(cmd, O_CLOEXEC) || pipe2(st, O_CLOEXEC)) {
		perror("bench/memory: pipe");
		return -1;
	}
	fflush(NULL);
	k->pid = fork();
	if (k->pid < 0) {
		perror("bench/memory: fork");
		return -1;
	}
	if (k->pid == 0) {
		close(cmd[1]);
		close(st[0]);
		client_main(sock, tokens, cmd[0], st[1]);
	}
	close(cmd[0]);
	close(st[1]);
	k->cmd = cmd[1];
	k->st = st[0];
	return 0;
}

/* Waits for client i's answer to `what`; -1 with the reason on stderr. */
static int await(const struct client *k, int i, char what)
{
	struct pollfd p = { .fd = k->st, .events = POLLIN };
	char buf[301];
	int n = poll(&p, 1, REPLY_TIMEOUT_MS);
	ssize_t r = n > 0 ? read(k->st, buf, sizeof(buf) - 1) : -1;
	if (r > 0 && buf[0] == what)
		return 0;
	buf[r > 0 ? r : 0] = 0;
	fprintf(stderr, "bench/memory: client %d: %s\n", i,
		n == 0 ? "no answer within 30 s" : r > 0 ? buf + 1 : "exited");
	return -1;
}

static int command(struct client *ks, int n, char what)
{
	for (int i = 0; i < n; i++)
		if (write(ks[i].cmd, &what, 1) != 1) {
			fprintf(stderr, "bench/memory: client %d: exited\n", i);
			return -1;
		}
	for (int i = 0; i < n; i++)
		if (await(&ks[i], i, what))
			return -1;
	return 0;
}

/* Closing the command pipe asks a client to exit; a stuck one is killed. */
static int reap(struct client *ks, int n)
{
	int rc = 0;
	for (int i = 0; i < n; i++)
		close(ks[i].cmd);
	for (int i = 0; i < n; i++) {
		int st = 0;
		struct pollfd p = { .fd = ks[i].st, .events = POLLIN };
		if (poll(&p, 1, REPLY_TIMEOUT_MS) == 0)
			kill(ks[i].pid, SIGKILL);
		while (waitpid(ks[i].pid, &st, 0) < 0 && errno == EINTR)
			;
		close(ks[i].st);
		rc |= !WIFEXITED(st) || WEXITSTATUS(st);
	}
	return rc ? -1 : 0;
}

/* ==== /proc ==== */

/* The "Pss:" line of /proc/PID/smaps_rollup, in bytes; -1 on failure. */
static long long rollup_pss(pid_t pid)
{
	char path[64], line[256];
	long long kb = -1;
	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Pss: %lld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

struct arena_mem {
	long long pss, rss, mapped; /* bytes, over every arena mapping */
	int mappings;
};

/* Sums the arena mappings of /proc/PID/smaps. A mapping starts with a line
 * "start-end perms offset dev inode path"; its fields follow as "Name: n kB". */
static int arena_mem(pid_t pid, struct arena_mem *m)
{
	char path[64], line[512];
	memset(m, 0, sizeof(*m));
	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int in_arena = 0;
	long long kb;
	unsigned long long lo, hi;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, ' ')) {
			in_arena = strstr(line, ARENA_NAME) != NULL;
			if (in_arena) {
				m->mappings++;
				m->mapped += (long long)(hi - lo);
			}
		} else if (in_arena && sscanf(line, "Pss: %lld kB", &kb) == 1) {
			m->pss += kb * 1024;
		} else if (in_arena && sscanf(line, "Rss: %lld kB", &kb) == 1) {
			m->rss += kb * 1024;
		}
	}
	fclose(f);
	return 0;
}

/* ==== Measuring ==== */

struct sample {
	long long before, attached, private_copy; /* smaps_rollup Pss */
	struct arena_mem arena;                   /* attached */
};

static int read_rollups(const struct client *ks, int n, size_t field, struct sample *s)
{
	for (int i = 0; i < n; i++) {
		long long v = rollup_pss(ks[i].pid);
		if (v < 0) {
			fprintf(stderr, "bench/memory: cannot read /proc/%d/smaps_rollup\n", (int)ks[i].pid);
			return -1;
		}
		*(long long *)((char *)&s[i] + field) = v;
	}
	return 0;
}

/* The three moments; s[i] for client i, *daemon the daemon's arenas. */
static int measure(struct client *ks, int n, pid_t daemon, struct sample *s,
		   struct arena_mem *dm)
{
	if (read_rollups(ks, n, offsetof(struct sample, before), s) || command(ks, n, 'a') ||
	    read_rollups(ks, n, offsetof(struct sample, attached), s))
		return -1;
	for (int i = 0; i < n; i++) {
		if (arena_mem(ks[i].pid, &s[i].arena)) {
			fprintf(stderr, "bench/memory: cannot read /proc/%d/smaps\n", (int)ks[i].pid);
			return -1;
		}
		/* Every page was read: less resident means we are not looking at
		 * the right mappings, and a ratio from them would be meaningless. */
		if (s[i].arena.rss < (long long)PREFIX_BYTES) {
			fprintf(stderr, "bench/memory: client %d: %lld bytes resident in %d mappings named %s, less than the prefix's %llu (was the memfd renamed in shm/arena.c?)\n",
				i, s[i].arena.rss, s[i].arena.mappings, ARENA_NAME,
				(unsigned long long)PREFIX_BYTES);
			return -1;
		}
	}
	if (arena_mem(daemon, dm)) {
		fprintf(stderr, "bench/memory: cannot read the daemon's /proc/%d/smaps\n", (int)daemon);
		return -1;
	}
	return command(ks, n, 'p') || read_rollups(ks, n, offsetof(struct sample, private_copy), s)
		       ? -1
		       : 0;
}

static void print_list(const char *name, const struct sample *s, int n, size_t field)
{
	printf("  \"%s\": [", name);
	for (int i = 0; i < n; i++)
		printf("%s%lld", i ? ", " : "", *(const long long *)((const char *)&s[i] + field));
	printf("],\n");
}

/* Prints the JSON; the pss ratio. */
static double report(const struct sample *s, int n, const struct arena_mem *dm)
{
	long long pss = 0, rss = 0, grew = 0, copies = 0, mapped = 0;
	for (int i = 0; i < n; i++) {
		pss += s[i].arena.pss;
		rss += s[i].arena.rss;
		mapped += s[i].arena.mapped;
		grew += s[i].attached - s[i].before;
		copies += s[i].private_copy - s[i].attached;
	}
	double one = (double)PREFIX_BYTES, ratio = (double)pss / one;
	printf("{\n");
	printf("  \"clients\": %d,\n  \"client_kind\": \"processes, one connection each\",\n", n);
	printf("  \"prefix_tokens\": %d,\n  \"prefix_blocks\": %d,\n", PREFIX_BLOCKS * BLOCK_TOKENS,
	       PREFIX_BLOCKS);
	printf("  \"block_bytes\": %llu,\n  \"prefix_bytes\": %llu,\n",
	       (unsigned long long)BLOCK_BYTES, (unsigned long long)PREFIX_BYTES);
	printf("  \"pss_ratio\": %.3f,\n", ratio);
	printf("  \"pss_ratio_with_daemon\": %.3f,\n", (double)(pss + dm->pss) / one);
	printf("  \"rollup_pss_growth_ratio\": %.3f,\n", (double)grew / one);
	printf("  \"rss_ratio\": %.3f,\n", (double)rss / one);
	printf("  \"private_copy_ratio\": %.3f,\n", (double)copies / one);
	printf("  \"arena_pss_bytes\": %lld,\n  \"arena_rss_bytes\": %lld,\n", pss, rss);
	printf("  \"arena_mapped_bytes\": %lld,\n", mapped);
	printf("  \"daemon_arena_pss_bytes\": %lld,\n  \"daemon_arena_rss_bytes\": %lld,\n", dm->pss,
	       dm->rss);
	printf("  \"clients_arena_pss_bytes\": [");
	for (int i = 0; i < n; i++)
		printf("%s%lld", i ? ", " : "", s[i].arena.pss);
	printf("],\n");
	print_list("clients_rollup_pss_before", s, n, offsetof(struct sample, before));
	print_list("clients_rollup_pss_attached", s, n, offsetof(struct sample, attached));
	print_list("clients_rollup_pss_private_copy", s, n, offsetof(struct sample, private_copy));
	printf("  \"target\": {\"pss_ratio\": %.1f},\n  \"target_met\": %s,\n", TARGET_PSS_RATIO,
	       ratio <= TARGET_PSS_RATIO ? "true" : "false");
	printf("  \"note\": \"pss_ratio: Pss of the arena mappings (%s) summed over the clients, over the prefix's bytes; the daemon's own mapping holds the remaining share (pss_ratio_with_daemon). rollup_pss_growth_ratio: growth of smaps_rollup Pss on attaching. rss_ratio and private_copy_ratio: what Rss would claim, and what private copies cost, measured the same way\"\n",
	       ARENA_NAME);
	printf("}\n");
	return ratio;
}

int main(int argc, char **argv)
{
	int n = 4, o;
	static const struct option opts[] = {
		{ "clients", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'c' && (n = atoi(optarg)) >= 1 && n <= MAX_CLIENTS)
			continue;
		fprintf(o == 'h' ? stdout : stderr, "usage: memory [--clients N (1..%d, default 4)]\n",
			MAX_CLIENTS);
		return o == 'h' ? 0 : 2;
	}
	static uint32_t tokens[PREFIX_BLOCKS * BLOCK_TOKENS];
	prefix_tokens(tokens);
	struct test_daemon d;
	if (td_start(&d, (const char *const[]){ "--memory", "1G", "--threads", "2", NULL }))
		return 1;
	struct client ks[MAX_CLIENTS];
	struct sample s[MAX_CLIENTS];
	struct arena_mem dm;
	int started = 0, rc = publish(d.sock, tokens);
	while (!rc && started < n && !(rc = spawn(&ks[started], d.sock, tokens)))
		started++;
	for (int i = 0; !rc && i < n; i++)
		rc = await(&ks[i], i, 'c');
	if (!rc)
		rc = measure(ks, n, d.pid, s, &dm);
	if (reap(ks, started) && !rc) {
		fprintf(stderr, "bench/memory: a client failed on its way out\n");
		rc = -1;
	}
	if (td_stop(&d) && !rc) {
		fprintf(stderr, "bench/memory: prefixd did not stop cleanly\n");
		rc = -1;
	}
	if (rc) {
		fprintf(stderr, "bench/memory: failed\n");
		return 1;
	}
	double ratio = report(s, n, &dm);
	if (ratio > TARGET_PSS_RATIO) {
		fprintf(stderr, "bench/memory: target missed: pss_ratio %.3f (target <= %.1f)\n", ratio,
			TARGET_PSS_RATIO);
		return 1;
	}
	return 0;
}
