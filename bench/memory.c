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
 * no-sharing baseline, measured the same way).
 *
 * Then the same question for a model's weights: a random SmolLM-135M-shaped
 * checkpoint in bf16 (269 MB) is loaded by 4 processes, each running 8
 * tokens so every weight page is resident. Kept native, the weight matrices
 * stay in the checkpoint's read-only file mapping, whose page-cache pages
 * the 4 share: the mapping's PSS summed over them should be one copy of the
 * file. Upcast to f32 (PFX_WEIGHTS_F32) they are private anonymous memory
 * of twice the size in each. The parent reads smaps_rollup before the load
 * and after the tokens, and the smaps entry of the model.safetensors
 * mapping. Prints one JSON object with both measurements.
 *
 *   memory [--clients N]
 *
 * Targets: pss_ratio <= 1.2 (the KV prefix), weights_native_pss_total_vs_file
 * <= 1.2. Exits 1 when something fails or a target is missed (the figures
 * are printed either way).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon_util.h"
#include "model.h"
#include "opts.h"
#include "prefixd.h"
#include "random_model.h"
#include "report.h"
#include "session.h"
#include "shapes.h"

#define NAME "memory"
#define BLOCK_TOKENS SMOLLM_BLOCK_TOKENS
#define BLOCK_BYTES SMOLLM_BLOCK_BYTES
#define PREFIX_BLOCKS SMOLLM_PREFIX_BLOCKS
#define PREFIX_BYTES (PREFIX_BLOCKS * BLOCK_BYTES)
#define MAX_CLIENTS 16
#define TARGET_PSS_RATIO 1.2
#define ARENA_NAME "/memfd:prefixd-arena" /* shm/arena.c's memfd_create name */
#define REPLY_TIMEOUT_MS 30000
/* The weights: processes loading the model, tokens each runs. */
#define WEIGHT_PROCS 4
#define WEIGHT_TOKENS 8
#define TARGET_WEIGHTS_RATIO 1.2
/* Every weight page is read (fingerprint, forward): a mapping with less of
 * the file resident is not the one we are looking for. */
#define WEIGHTS_RESIDENT_MIN 0.9

/* ==== The prefix ==== */

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
	struct prefixd_layout l = bench_layout(BLOCK_TOKENS, BLOCK_BYTES, 0x4d);
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

/* A successful answer that carries text (the model processes' figures). */
static void reply_with(int st, char what, const char *text)
{
	char buf[300];
	int n = snprintf(buf, sizeof(buf), "%c%s", what, text);
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
	struct prefixd_layout l = bench_layout(BLOCK_TOKENS, BLOCK_BYTES, 0x4d);
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

/* What a forked process runs: its argument, the command and status pipes.
 * It never returns (it _exits, so the parent's atexit handlers stay the
 * parent's). */
typedef void (*child_main)(const void *arg, int cmd, int st);

struct kv_client_arg {
	const char *sock;
	const uint32_t *tokens;
};

static void kv_client_main(const void *arg, int cmd, int st)
{
	const struct kv_client_arg *a = arg;
	client_main(a->sock, a->tokens, cmd, st);
}

static int spawn(struct client *k, child_main fn, const void *arg)
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
		fn(arg, cmd[0], st[1]);
		_exit(1);
	}
	close(cmd[0]);
	close(st[1]);
	k->cmd = cmd[1];
	k->st = st[0];
	return 0;
}

/* Waits for client i's answer to `what`, copying the text after the byte
 * into text[cap] (if text); -1 with the reason on stderr. */
static int await_text(const struct client *k, int i, char what, char *text, size_t cap)
{
	struct pollfd p = { .fd = k->st, .events = POLLIN };
	char buf[301];
	int n = poll(&p, 1, REPLY_TIMEOUT_MS);
	ssize_t r = n > 0 ? read(k->st, buf, sizeof(buf) - 1) : -1;
	buf[r > 0 ? r : 0] = 0;
	if (r > 0 && buf[0] == what) {
		if (text)
			snprintf(text, cap, "%s", buf + 1);
		return 0;
	}
	fprintf(stderr, "bench/memory: client %d: %s\n", i,
		n == 0 ? "no answer within 30 s" : r > 0 ? buf + 1 : "exited");
	return -1;
}

static int await(const struct client *k, int i, char what)
{
	return await_text(k, i, what, NULL, 0);
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

/* Fields of /proc/PID/smaps_rollup, in bytes; -1 for one the kernel does
 * not report (Pss_Anon and Pss_File came with Linux 5.x). */
struct rollup {
	long long pss, rss, pss_anon, pss_file;
};

static int rollup_read(pid_t pid, struct rollup *r)
{
	char path[64], line[256];
	long long kb;
	*r = (struct rollup){ -1, -1, -1, -1 };
	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "Pss: %lld kB", &kb) == 1)
			r->pss = kb * 1024;
		else if (sscanf(line, "Rss: %lld kB", &kb) == 1)
			r->rss = kb * 1024;
		else if (sscanf(line, "Pss_Anon: %lld kB", &kb) == 1)
			r->pss_anon = kb * 1024;
		else if (sscanf(line, "Pss_File: %lld kB", &kb) == 1)
			r->pss_file = kb * 1024;
	}
	fclose(f);
	return r->pss < 0 || r->rss < 0 ? -1 : 0;
}

/* The "Pss:" line of /proc/PID/smaps_rollup, in bytes; -1 on failure. */
static long long rollup_pss(pid_t pid)
{
	struct rollup r;
	return rollup_read(pid, &r) ? -1 : r.pss;
}

struct arena_mem {
	long long pss, rss, mapped; /* bytes, over every mapping of the name */
	int mappings;
};

/* Sums the mappings of /proc/PID/smaps whose path contains `name`. A
 * mapping starts with a line "start-end perms offset dev inode path"; its
 * fields follow as "Name: n kB". */
static int mapping_mem(pid_t pid, const char *name, struct arena_mem *m)
{
	char path[64], line[4352]; /* a path can be PATH_MAX long */
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
			in_arena = strstr(line, name) != NULL;
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

/* The arena mappings (memfd "prefixd-arena"). */
static int arena_mem(pid_t pid, struct arena_mem *m)
{
	return mapping_mem(pid, ARENA_NAME, m);
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
	long long v[MAX_CLIENTS];
	for (int i = 0; i < n; i++)
		v[i] = *(const long long *)((const char *)&s[i] + field);
	report_array_ll(name, v, n);
}

/* Opens the JSON and prints the prefix's keys; the pss ratio. */
static double print_kv(const struct sample *s, int n, const struct arena_mem *dm)
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
	report_begin(NAME);
	report_fmt("clients", "%d", n);
	report_str("client_kind", "processes, one connection each");
	report_fmt("prefix_tokens", "%d", PREFIX_BLOCKS * BLOCK_TOKENS);
	report_fmt("prefix_blocks", "%d", PREFIX_BLOCKS);
	report_fmt("block_bytes", "%llu", (unsigned long long)BLOCK_BYTES);
	report_fmt("prefix_bytes", "%llu", (unsigned long long)PREFIX_BYTES);
	report_fmt("pss_ratio", "%.3f", ratio);
	report_fmt("pss_ratio_with_daemon", "%.3f", (double)(pss + dm->pss) / one);
	report_fmt("rollup_pss_growth_ratio", "%.3f", (double)grew / one);
	report_fmt("rss_ratio", "%.3f", (double)rss / one);
	report_fmt("private_copy_ratio", "%.3f", (double)copies / one);
	report_fmt("arena_pss_bytes", "%lld", pss);
	report_fmt("arena_rss_bytes", "%lld", rss);
	report_fmt("arena_mapped_bytes", "%lld", mapped);
	report_fmt("daemon_arena_pss_bytes", "%lld", dm->pss);
	report_fmt("daemon_arena_rss_bytes", "%lld", dm->rss);
	print_list("clients_arena_pss_bytes", s, n, offsetof(struct sample, arena.pss));
	print_list("clients_rollup_pss_before", s, n, offsetof(struct sample, before));
	print_list("clients_rollup_pss_attached", s, n, offsetof(struct sample, attached));
	print_list("clients_rollup_pss_private_copy", s, n, offsetof(struct sample, private_copy));
	return ratio;
}

/* ==== The weights ==== */

/* The random checkpoint's directory, resolved (smaps names the mapping by
 * its real path); removed at exit. */
static char wdir[4096];

static void remove_checkpoint(void)
{
	char p[sizeof(wdir) + 32];
	if (!wdir[0])
		return;
	snprintf(p, sizeof(p), "%s/model.safetensors", wdir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/config.json", wdir);
	unlink(p);
	rmdir(wdir);
	wdir[0] = 0;
}

/* Writes the bf16 SmolLM-shaped checkpoint; its model.safetensors path
 * into file[cap] and size into *bytes. */
static int write_checkpoint(char *file, size_t cap, long long *bytes)
{
	char tmp[] = "/tmp/prefixd-bench-memory-XXXXXX";
	struct pfx_config c = pfx_config_smollm135m();
	struct pfx_error err = { "" };
	struct stat st;
	if (!mkdtemp(tmp)) {
		fprintf(stderr, "bench/memory: mkdtemp %s: %s\n", tmp, strerror(errno));
		return -1;
	}
	if (!realpath(tmp, wdir)) {
		fprintf(stderr, "bench/memory: realpath %s: %s\n", tmp, strerror(errno));
		rmdir(tmp);
		return -1;
	}
	atexit(remove_checkpoint); /* also on the failures below */
	if (pfx_random_checkpoint(wdir, &c, "BF16", 1, &err)) {
		fprintf(stderr, "bench/memory: cannot write the random model: %s\n", err.msg);
		return -1;
	}
	snprintf(file, cap, "%s/model.safetensors", wdir);
	if (stat(file, &st)) {
		fprintf(stderr, "bench/memory: stat %s: %s\n", file, strerror(errno));
		return -1;
	}
	*bytes = (long long)st.st_size;
	return 0;
}

struct model_child_arg {
	const char *dir;
	enum pfx_weights weights;
};

/* Loads the model and runs WEIGHT_TOKENS tokens with the last position's
 * logits: the layers read every matrix, the logits all of the (tied)
 * embedding. The weights' figures into text[cap], or the error. */
static int load_and_run(const struct model_child_arg *a, struct pfx_model **m,
			struct pfx_session **s, char *text, size_t cap)
{
	struct pfx_model_opts o = { .threads = 1, .weights = a->weights };
	struct pfx_error err = { "" };
	int32_t tok[WEIGHT_TOKENS];
	float *logits = NULL;
	int rc = pfx_model_load(a->dir, &o, m, &err);
	if (!rc)
		rc = pfx_session_new(*m, s, &err);
	if (!rc) {
		const struct pfx_config *c = pfx_model_config(*m);
		for (int i = 0; i < WEIGHT_TOKENS; i++)
			tok[i] = (int32_t)((i * 7919 + 1) % c->vocab);
		if (!(logits = malloc((size_t)c->vocab * sizeof(float))))
			rc = pfx_errorf(&err, -ENOMEM, "out of memory");
		else
			rc = pfx_session_append(*s, tok, WEIGHT_TOKENS, PFX_LOGITS_LAST, logits, &err);
	}
	free(logits);
	if (rc)
		snprintf(text, cap, "%.250s", err.msg);
	else
		snprintf(text, cap, "%zu %s", pfx_model_weight_bytes(*m), pfx_model_weight_held(*m));
	return rc;
}

/*
 * A process holding the model: answers 'r' once forked (nothing loaded yet:
 * the baseline), then on any command loads it, runs the tokens and answers
 * 'l' with "<weight bytes> <dtype held>". It keeps the model until its
 * command pipe closes, so the parent reads its /proc files meanwhile.
 */
static void model_child_main(const void *arg, int cmd, int st)
{
	struct pfx_model *m = NULL;
	struct pfx_session *s = NULL;
	char what, text[300];
	reply(st, 'r', NULL);
	if (read(cmd, &what, 1) != 1)
		_exit(0);
	int rc = load_and_run(arg, &m, &s, text, sizeof(text));
	if (rc)
		reply(st, 'l', text);
	else
		reply_with(st, 'l', text);
	while (read(cmd, &what, 1) == 1)
		;
	pfx_session_free(s);
	pfx_model_free(m);
	_exit(rc ? 1 : 0);
}

struct wsample {
	struct rollup before, after; /* before the load; after the tokens */
	struct arena_mem file;       /* the model.safetensors mapping, after */
	long long held_bytes;        /* pfx_model_weight_bytes */
	char held[16];               /* pfx_model_weight_held */
};

/* The model's private memory: Pss_Anon's growth. Without Pss_Anon (older
 * kernels), what grew outside the checkpoint's mapping. */
static long long private_growth(const struct wsample *w)
{
	if (w->before.pss_anon >= 0 && w->after.pss_anon >= 0)
		return w->after.pss_anon - w->before.pss_anon;
	return w->after.pss - w->before.pss - w->file.pss;
}

/* Reads process i's memory once every process holds the model. */
static int read_weights(const struct client *k, int i, const char *file, long long file_bytes,
			struct wsample *w)
{
	if (rollup_read(k->pid, &w->after) || mapping_mem(k->pid, file, &w->file)) {
		fprintf(stderr, "bench/memory: cannot read /proc/%d/smaps or smaps_rollup\n",
			(int)k->pid);
		return -1;
	}
	if (w->file.rss < (long long)(WEIGHTS_RESIDENT_MIN * (double)file_bytes)) {
		fprintf(stderr, "bench/memory: model process %d: %lld bytes resident in %d mappings of %s, less than %.0f%% of its %lld bytes: every weight was read, so the mapping is not the model's\n",
			i, w->file.rss, w->file.mappings, file, 100 * WEIGHTS_RESIDENT_MIN, file_bytes);
		return -1;
	}
	return 0;
}

/* Forks WEIGHT_PROCS processes holding the model as `weights` and measures
 * them while all of them hold it; w[i] for process i. */
static int measure_weights(const char *dir, const char *file, long long file_bytes,
			   enum pfx_weights weights, struct wsample *w)
{
	struct model_child_arg a = { dir, weights };
	struct client ks[WEIGHT_PROCS];
	char text[300];
	int started = 0, rc = 0;
	while (!rc && started < WEIGHT_PROCS && !(rc = spawn(&ks[started], model_child_main, &a)))
		started++;
	for (int i = 0; !rc && i < WEIGHT_PROCS; i++) {
		if ((rc = await(&ks[i], i, 'r')))
			break;
		if ((rc = rollup_read(ks[i].pid, &w[i].before)))
			fprintf(stderr, "bench/memory: cannot read /proc/%d/smaps_rollup\n",
				(int)ks[i].pid);
	}
	for (int i = 0; !rc && i < WEIGHT_PROCS; i++)
		if (write(ks[i].cmd, "l", 1) != 1) {
			fprintf(stderr, "bench/memory: model process %d: exited\n", i);
			rc = -1;
		}
	for (int i = 0; !rc && i < WEIGHT_PROCS; i++) {
		if ((rc = await_text(&ks[i], i, 'l', text, sizeof(text))))
			break;
		if (sscanf(text, "%lld %15s", &w[i].held_bytes, w[i].held) != 2) {
			fprintf(stderr, "bench/memory: model process %d: unreadable answer '%s'\n", i,
				text);
			rc = -1;
		}
	}
	for (int i = 0; !rc && i < WEIGHT_PROCS; i++)
		rc = read_weights(&ks[i], i, file, file_bytes, &w[i]);
	if (reap(ks, started) && !rc) {
		fprintf(stderr, "bench/memory: a model process failed on its way out\n");
		rc = -1;
	}
	return rc;
}

/* Held as asked, or the figures measure something else. */
static int check_held(const struct wsample *w, const char *want, const char *mode)
{
	for (int i = 0; i < WEIGHT_PROCS; i++)
		if (strcmp(w[i].held, want)) {
			fprintf(stderr, "bench/memory: model process %d, weights %s: holds %s, not %s\n",
				i, mode, w[i].held, want);
			return -1;
		}
	return 0;
}

/* Both halves: native (bf16 in the file's mapping), then upcast to f32. The
 * native processes have exited before the f32 ones map the file, so each
 * half's PSS is shared among its own 4 only. */
static int weights(long long *file_bytes, struct wsample *nat, struct wsample *f32)
{
	char file[sizeof(wdir) + 32];
	int rc = write_checkpoint(file, sizeof(file), file_bytes);
	if (!rc)
		rc = measure_weights(wdir, file, *file_bytes, PFX_WEIGHTS_NATIVE, nat);
	if (!rc)
		rc = check_held(nat, "BF16", "native");
	if (!rc)
		rc = measure_weights(wdir, file, *file_bytes, PFX_WEIGHTS_F32, f32);
	if (!rc)
		rc = check_held(f32, "F32", "f32");
	remove_checkpoint();
	return rc;
}

static void print_wlist(const char *name, const struct wsample *w, size_t field)
{
	long long v[WEIGHT_PROCS];
	for (int i = 0; i < WEIGHT_PROCS; i++)
		v[i] = *(const long long *)((const char *)&w[i] + field);
	report_array_ll(name, v, WEIGHT_PROCS);
}

static void print_private(const char *name, const struct wsample *w)
{
	long long v[WEIGHT_PROCS];
	for (int i = 0; i < WEIGHT_PROCS; i++)
		v[i] = private_growth(&w[i]);
	report_array_ll(name, v, WEIGHT_PROCS);
}

/* smaps_rollup after the tokens, and its Pss growth summed. */
static void print_rollups(const char *mode, const struct wsample *w)
{
	static const struct {
		const char *name;
		size_t field;
	} f[] = {
		{ "pss", offsetof(struct wsample, after.pss) },
		{ "rss", offsetof(struct wsample, after.rss) },
		{ "pss_anon", offsetof(struct wsample, after.pss_anon) },
		{ "pss_file", offsetof(struct wsample, after.pss_file) },
	};
	char name[64];
	long long grew = 0;
	for (size_t j = 0; j < sizeof(f) / sizeof(f[0]); j++) {
		snprintf(name, sizeof(name), "weights_%s_rollup_%s", mode, f[j].name);
		print_wlist(name, w, f[j].field);
	}
	for (int i = 0; i < WEIGHT_PROCS; i++)
		grew += w[i].after.pss - w[i].before.pss;
	report_fmt(report_key("weights_%s_rollup_pss_growth_total_bytes", mode), "%lld", grew);
}

/* Prints the weights' keys; native total Pss of the mapping over the file. */
static double print_weights(long long file_bytes, const struct wsample *nat,
			    const struct wsample *f32)
{
	long long npss = 0, fpss = 0, ngrew = 0, fgrew = 0;
	for (int i = 0; i < WEIGHT_PROCS; i++) {
		npss += nat[i].file.pss;
		fpss += private_growth(&f32[i]) + f32[i].file.pss;
		ngrew += nat[i].after.pss - nat[i].before.pss;
		fgrew += f32[i].after.pss - f32[i].before.pss;
	}
	double ratio = (double)npss / (double)file_bytes;
	report_fmt("weights_processes", "%d", WEIGHT_PROCS);
	report_str("weights_checkpoint", "random SmolLM-135M shape, BF16 model.safetensors");
	report_fmt("weights_tokens_run", "%d", WEIGHT_TOKENS);
	report_fmt("weights_file_bytes", "%lld", file_bytes);
	report_str("weights_native_held", "%s", nat[0].held);
	report_fmt("weights_native_held_bytes", "%lld", nat[0].held_bytes);
	print_wlist("weights_native_pss_bytes_per_process", nat, offsetof(struct wsample, file.pss));
	print_wlist("weights_native_rss_bytes_per_process", nat, offsetof(struct wsample, file.rss));
	report_fmt("weights_native_pss_total_bytes", "%lld", npss);
	report_fmt("weights_native_pss_total_vs_file", "%.3f", ratio);
	print_private("weights_native_private_bytes_per_process", nat);
	print_rollups("native", nat);
	report_str("weights_f32_held", "%s", f32[0].held);
	report_fmt("weights_f32_held_bytes", "%lld", f32[0].held_bytes);
	print_private("weights_f32_private_bytes_per_process", f32);
	print_wlist("weights_f32_file_pss_bytes_per_process", f32, offsetof(struct wsample, file.pss));
	print_wlist("weights_f32_file_rss_bytes_per_process", f32, offsetof(struct wsample, file.rss));
	report_fmt("weights_f32_pss_total_bytes", "%lld", fpss);
	print_rollups("f32", f32);
	report_fmt("weights_pss_total_native_vs_f32", "%.3f", (double)npss / (double)fpss);
	report_fmt("weights_rollup_pss_growth_native_vs_f32", "%.3f",
		   (double)ngrew / (double)fgrew);
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
		if (o == 'c') {
			n = opt_int(NAME, "clients", optarg, 1, MAX_CLIENTS);
			continue;
		}
		fprintf(o == 'h' ? stdout : stderr, "usage: memory [--clients N (1..%d, default 4)]\n",
			MAX_CLIENTS);
		return o == 'h' ? 0 : 2;
	}
	if (optind < argc) {
		fprintf(stderr, "usage: memory [--clients N (1..%d, default 4)]\n", MAX_CLIENTS);
		return 2;
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
	struct kv_client_arg ka = { d.sock, tokens };
	while (!rc && started < n && !(rc = spawn(&ks[started], kv_client_main, &ka)))
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
	static struct wsample nat[WEIGHT_PROCS], f32[WEIGHT_PROCS];
	long long file_bytes = 0;
	if (!rc)
		rc = weights(&file_bytes, nat, f32);
	if (rc) {
		fprintf(stderr, "bench/memory: failed\n");
		return 1;
	}
	double ratio = print_kv(s, n, &dm);
	double w_ratio = print_weights(file_bytes, nat, f32);
	report_str("weights_note", "%d processes each load the bf16 checkpoint (threads 1) and run %d tokens, so every weight page is resident; figures read while all hold it. native: the weight matrices stay in the read-only mapping of model.safetensors, page-cache pages the processes share: Rss shows the whole file in each, Pss a 1/%d share, so the Pss summed (weights_native_pss_total_bytes) is one copy of the file. f32: the weights upcast at load into private anonymous memory, twice the file's size in each process (Pss_Anon growth, weights_f32_private_bytes_per_process), %d copies; the checkpoint stays mapped besides (weights_f32_file_*), and weights_f32_pss_total_bytes counts both. *_private_bytes_per_process: smaps_rollup Pss_Anon growth from before the load (native: norms, session, scratch, BLAS buffers). *_rollup_pss_growth_total_bytes: all the Pss the load and the tokens added, summed over the processes",
		   WEIGHT_PROCS, WEIGHT_TOKENS, WEIGHT_PROCS, WEIGHT_PROCS);
	report_machine();
	report_target("pss_ratio", ratio, REPORT_AT_MOST, TARGET_PSS_RATIO);
	report_target("weights_native_pss_total_vs_file", w_ratio, REPORT_AT_MOST,
		      TARGET_WEIGHTS_RATIO);
	bool met = report_end("pss_ratio: Pss of the arena mappings (%s) summed over the clients, over the prefix's bytes; the daemon's own mapping holds the remaining share (pss_ratio_with_daemon). rollup_pss_growth_ratio: growth of smaps_rollup Pss on attaching. rss_ratio and private_copy_ratio: what Rss would claim, and what private copies cost, measured the same way",
			      ARENA_NAME);
	return met ? 0 : 1;
}
