/* SPDX-License-Identifier: MIT */
/*
 * The crash loop (issue 33), as an outside tester ran it: rounds of a
 * daemon with a disk tier and too little memory, two clients publishing
 * new prompts, one re-serving earlier ones (every byte checked), one
 * running a small random model through the cache (its logits compared
 * with an uncached run); then SIGTERM or SIGKILL at a random moment, and
 * a restart on the same directory. Checked every round: no block left
 * memory before its record was written; no record on disk without its
 * parent's, also after a full disk freed room for a few records and a
 * kill came during the retries; every record on disk loaded again (none
 * dropped) and served;
 * after a SIGTERM, and after any kill in a round run with --disk-sync
 * (every fourth), every block a publish confirmed served again; no wrong
 * byte, no wrong logit. Plain C for the TSan driver.
 */
#include "crashloop_case.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "daemon_util.h"
#include "random_model.h"
#include "record.h"
#include "session.h"

#define BT TD_BLOCK_TOKENS
#define BLOCKS 12          /* of a published prompt */
#define MAX_PROMPTS 4096
#define PUBLISHERS 2
#define MODEL_PROMPTS 6
#define MODEL_TOKENS 41    /* 10 blocks and one token */
#define MODEL_SHARED 20    /* tokens every model prompt starts with */
#define VERIFY_OLD 48      /* older prompts checked after a restart, at random */

struct loop {
	const char *sock;
	atomic_bool stop;
	atomic_uint next;                       /* the next prompt to publish */
	_Atomic uint32_t confirmed[MAX_PROMPTS]; /* blocks the daemon confirmed */
	struct pfx_model *model;
	int32_t mtok[MODEL_PROMPTS][MODEL_TOKENS];
	float *mref[MODEL_PROMPTS];             /* uncached logits of the last token */
	size_t vocab;
	atomic_uint logits_checked;
	pthread_mutex_t mu;
	char why[256];                          /* the first failure */
};

static void fail(struct loop *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct loop *L, const char *fmt, ...)
{
	pthread_mutex_lock(&L->mu);
	if (!L->why[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(L->why, sizeof(L->why), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&L->mu);
}

static struct prefixd *connect_td(struct loop *L)
{
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	return prefixd_connect(L->sock, &l, &c) ? NULL : c;
}

/* Publishes new prompts until the daemon goes. */
static void *publisher(void *arg)
{
	struct loop *L = arg;
	struct prefixd *c = connect_td(L);
	while (c && !atomic_load(&L->stop)) {
		uint32_t k = atomic_fetch_add(&L->next, 1), t[BLOCKS * BT], stored = 0, dedup = 0;
		if (k >= MAX_PROMPTS)
			break;
		td_prompt(t, BLOCKS, TD_PROMPT_K(k));
		int rc = td_publish(c, 0, t, 0, BLOCKS, &stored, &dedup);
		if (rc && rc != -ENOSPC)
			break; /* killed */
		atomic_store(&L->confirmed[k], stored + dedup);
	}
	prefixd_close(c);
	return NULL;
}

/* Attaches prompt k: -1 when the daemon is gone, else the blocks attached
 * (each one's bytes checked). */
static int attach(struct loop *L, struct prefixd *c, uint32_t k)
{
	uint32_t t[BLOCKS * BT], hit;
	const void *kv[BLOCKS];
	uint64_t lease;
	td_prompt(t, BLOCKS, TD_PROMPT_K(k));
	if (prefixd_match(c, t, BLOCKS, &lease, &hit, kv))
		return -1;
	for (uint32_t b = 0; b < hit; b++)
		if (!td_block_ok(t, b, kv[b]))
			fail(L, "prompt %u block %u: wrong bytes attached", k, b);
	if (lease)
		prefixd_release(c, lease);
	return (int)hit;
}

/* Re-serves earlier prompts until the daemon goes. */
static void *reserver(void *arg)
{
	struct loop *L = arg;
	struct prefixd *c = connect_td(L);
	unsigned seed = 7;
	while (c && !atomic_load(&L->stop)) {
		uint32_t n = atomic_load(&L->next);
		if (!n) {
			usleep(1000);
			continue;
		}
		if (attach(L, c, (uint32_t)rand_r(&seed) % n) < 0)
			break;
	}
	prefixd_close(c);
	return NULL;
}

/* Runs the model's prompts through the cache until the daemon goes (a
 * cache that fails computes alone: the logits are checked all the same). */
static void *modeller(void *arg)
{
	struct loop *L = arg;
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_cache *cache = NULL;
	float *logits = malloc(L->vocab * sizeof(float));
	if (!logits || pfx_cache_open(L->model, L->sock, NULL, 0, &cache, &err)) {
		free(logits);
		return NULL;
	}
	for (unsigned j = 0; !atomic_load(&L->stop); j++) {
		int p = (int)(j % MODEL_PROMPTS);
		struct pfx_session *s;
		struct pfx_prefill_info info;
		if (pfx_session_new(L->model, &s, &err)) {
			fail(L, "session: %s", err.msg);
			break;
		}
		int rc = pfx_session_prefill(s, cache, L->mtok[p], MODEL_TOKENS, PFX_LOGITS_LAST,
					     logits, &info, &cerr, &err);
		pfx_session_free(s);
		if (rc) {
			fail(L, "prefill: %s", err.msg);
			break;
		}
		float d = 0, top = 0;
		for (size_t v = 0; v < L->vocab; v++) {
			d = fmaxf(d, fabsf(logits[v] - L->mref[p][v]));
			top = fmaxf(top, fabsf(L->mref[p][v]));
		}
		if (!(d <= 1e-4f * (1 + top)))
			fail(L, "model prompt %d, %zu tokens attached: logits off by %g (of %g)", p,
			     info.attached, (double)d, (double)top);
		atomic_fetch_add(&L->logits_checked, 1);
		if (info.cache_rc)
			break; /* the daemon is gone */
	}
	pfx_cache_close(cache);
	free(logits);
	return NULL;
}

/* ==== The records on disk ==== */

struct scan {
	uint32_t records;       /* .rec files */
	uint32_t *run;          /* per prompt: leading blocks with a record */
	char why[200];
};

/* Which blocks of prompts [first, first + nprompts) have records (in
 * sc->run[k - first]); others (the model's) are counted only. A record of
 * block b > 0 whose parent has none is an orphan. */
static int scan_disk(const char *dir, uint32_t first_k, uint32_t nprompts, struct scan *sc)
{
	uint8_t (*have)[BLOCKS] = calloc(nprompts ? nprompts : 1, sizeof(*have));
	DIR *d = opendir(dir);
	if (!have || !d) {
		free(have);
		if (d)
			closedir(d);
		snprintf(sc->why, sizeof(sc->why), "cannot read %s", dir);
		return -1;
	}
	sc->records = 0;
	for (struct dirent *e; (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n < 4 || strcmp(e->d_name + n - 4, ".rec"))
			continue;
		sc->records++;
		char p[4096];
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		uint8_t head[4096];
		int fd = open(p, O_RDONLY | O_CLOEXEC);
		ssize_t r = fd >= 0 ? pread(fd, head, sizeof(head), 0) : -1;
		if (fd >= 0)
			close(fd);
		struct rec_meta m;
		if (r != (ssize_t)sizeof(head) || rec_check_head(head, sizeof(head), NULL, &m, NULL) ||
		    m.block_tokens != BT)
			continue;
		uint32_t first = pd_token_at(m.tokens, BT, 0, 0), k = first / 1000000 - 1 - first_k;
		if (first >= 1000000 * (first_k + 1) && k < nprompts && first % 1000000 / BT < BLOCKS)
			have[k][first % 1000000 / BT] = 1;
	}
	closedir(d);
	int rc = 0;
	for (uint32_t k = 0; k < nprompts; k++) {
		uint32_t run = 0;
		while (run < BLOCKS && have[k][run])
			run++;
		sc->run[k] = run;
		for (uint32_t b = run; b < BLOCKS && !rc; b++)
			if (have[k][b]) {
				snprintf(sc->why, sizeof(sc->why),
					 "prompt %u: block %u has a record, block %u (its ancestor) none",
					 first_k + k, b, run);
				rc = -1;
			}
	}
	free(have);
	return rc;
}

/* ==== The model ==== */

static int make_model(struct loop *L, char *dir)
{
	struct pfx_config cfg = {
		.arch = "LlamaForCausalLM", .hidden = 32, .n_layers = 2, .n_heads = 2,
		.n_kv_heads = 1, .head_dim = 16, .intermediate = 64, .vocab = 96,
		.max_positions = 128, .rotary_dim = 16, .rope_base = 10000.0f, .norm_eps = 1e-5f,
		.norm = PFX_NORM_RMS, .act = PFX_ACT_SILU, .tied_embeddings = true,
	};
	struct pfx_error err;
	struct pfx_model_opts o = { .threads = 1, .block_tokens = BT };
	if (pfx_random_checkpoint(dir, &cfg, "F32", 33, &err) ||
	    pfx_model_load(dir, &o, &L->model, &err)) {
		fail(L, "the random model: %s", err.msg);
		return -1;
	}
	L->vocab = (size_t)cfg.vocab;
	for (int p = 0; p < MODEL_PROMPTS; p++) {
		for (int i = 0; i < MODEL_TOKENS; i++)
			L->mtok[p][i] = i < MODEL_SHARED ? (i * 7 + 3) % cfg.vocab
							 : (i * 13 + p * 29 + 1) % cfg.vocab;
		struct pfx_session *s;
		L->mref[p] = malloc(L->vocab * sizeof(float));
		if (!L->mref[p] || pfx_session_new(L->model, &s, &err)) {
			fail(L, "a session: out of memory");
			return -1;
		}
		int rc = pfx_session_run(s, L->mtok[p], MODEL_TOKENS, PFX_LOGITS_LAST, L->mref[p], &err);
		pfx_session_free(s);
		if (rc) {
			fail(L, "an uncached run: %s", err.msg);
			return -1;
		}
	}
	return 0;
}

/* ==== The loop ==== */

/* After a restart: every record loaded, the prompts of the last round
 * and some older ones served as far as their records; after a SIGTERM,
 * or any kill with --disk-sync (kept_all), the last round's records hold
 * every block its publishes confirmed. */
static void verify(struct loop *L, const struct test_daemon *td, const struct scan *sc,
		   uint32_t from, uint32_t upto, const char *how, bool kept_all, unsigned *seed)
{
	struct prefixd *c = connect_td(L);
	struct prefixd_stats s;
	if (!c || td_stats(td, &s)) {
		fail(L, "after a restart: %s", prefixd_errmsg());
		prefixd_close(c);
		return;
	}
	if (s.disk_blocks != sc->records)
		fail(L, "after a %s: %u records on disk, %llu loaded (the daemon's log says why)",
		     how, sc->records, (unsigned long long)s.disk_blocks);
	for (uint32_t i = 0; i < (upto - from) + VERIFY_OLD && upto; i++) {
		bool last = i < upto - from; /* published in the round just ended */
		uint32_t k = last ? from + i : (uint32_t)rand_r(seed) % upto;
		uint32_t want = kept_all && last ? atomic_load(&L->confirmed[k]) : sc->run[k];
		if (kept_all && last && sc->run[k] < want)
			fail(L, "prompt %u: %u blocks confirmed before a %s, %u on disk after it", k,
			     want, how, sc->run[k]);
		int hit = attach(L, c, k);
		if (hit < (int)want)
			fail(L, "prompt %u: %d blocks attached after a %s, %u on disk", k, hit, how,
			     sc->run[k]);
	}
	prefixd_close(c);
}

/* ==== A full disk, room for a few records, a kill during the retries ==== */

#define FULL_PROMPTS 3
#define REC_BYTES (4096 + TD_BLOCK_BYTES)

/* On its own small tmpfs: the file system filled, prompts published (they
 * wait in memory), room made for a few records, a SIGKILL at a random
 * moment of the writer's retries. The records then on disk must have
 * their parents', and a restart must load and serve them all. */
static void full_disk_round(struct loop *L, const char *base, int round, unsigned *seed)
{
	char dir[128], filler[160], out[512];
	snprintf(dir, sizeof(dir), "%s/full-%d", base, round);
	snprintf(filler, sizeof(filler), "%s/filler", dir);
	if (mkdir(dir, 0700) ||
	    td_sh(out, sizeof(out), "mount -t tmpfs -o size=1m prefixd-crashloop '%s'", dir)) {
		fail(L, "a full disk: cannot mount a 1 MiB tmpfs on %s (the tests run as root): %s",
		     dir, out);
		return;
	}
	const char *args[] = { "--block-tokens", "4", "--memory", "1M", "--disk-dir", dir,
			       "--disk-budget", "64M", NULL };
	struct test_daemon td;
	uint32_t first = MAX_PROMPTS + (uint32_t)round % 64;
	struct scan sc = { .run = calloc(FULL_PROMPTS, sizeof(uint32_t)) };
	if (!sc.run || td_start(&td, args)) {
		fail(L, "a full disk: prefixd did not start");
		goto out;
	}
	td_sh(out, sizeof(out), "dd if=/dev/zero of='%s' bs=4k 2>&1", filler);
	L->sock = td.sock;
	struct prefixd *c = connect_td(L);
	for (uint32_t k = first; c && k < first + FULL_PROMPTS; k++) {
		uint32_t t[BLOCKS * BT], stored, dedup;
		td_prompt(t, BLOCKS, TD_PROMPT_K(k));
		if (td_publish(c, 0, t, 0, BLOCKS, &stored, &dedup) || stored != BLOCKS)
			fail(L, "a full disk: a publish: %s", prefixd_errmsg());
	}
	prefixd_close(c);
	/* The writer meets the full disk, then waits a second to try again:
	 * room for 2 to 11 records, and a kill within the next 2.5 s. */
	usleep(200000);
	struct stat st;
	if (stat(filler, &st) ||
	    truncate(filler, st.st_size - (off_t)(2 + rand_r(seed) % 10) * REC_BYTES))
		fail(L, "a full disk: cannot make room in %s: %s", dir, strerror(errno));
	usleep((useconds_t)(rand_r(seed) % 2500000));
	td_kill(&td);
	if (scan_disk(dir, first, FULL_PROMPTS, &sc))
		fail(L, "after a full disk and a SIGKILL: %s", sc.why);
	unlink(filler);
	if (td_start(&td, args)) {
		fail(L, "a full disk: prefixd did not start again");
		goto out;
	}
	struct prefixd_stats s;
	if (td_stats(&td, &s) || s.disk_blocks != sc.records)
		fail(L, "after a full disk and a SIGKILL: %u records on disk, %llu loaded", sc.records,
		     (unsigned long long)s.disk_blocks);
	c = connect_td(L);
	for (uint32_t k = 0; c && k < FULL_PROMPTS; k++) {
		int hit = attach(L, c, first + k);
		if (hit < (int)sc.run[k])
			fail(L, "after a full disk and a SIGKILL: prompt %u: %d blocks attached, %u on disk",
			     first + k, hit, sc.run[k]);
	}
	prefixd_close(c);
	if (td_stop(&td))
		fail(L, "a full disk: prefixd did not stop cleanly (its log is above)");
out:
	free(sc.run);
	td_sh(out, sizeof(out), "umount '%s'; rmdir '%s'", dir, dir);
}

static int seconds_to_run(void)
{
	const char *e = getenv("PREFIXD_CRASHLOOP_SECONDS");
	int s = e && *e ? atoi(e) : 3;
	return s > 0 ? s : 3;
}

int case_crash_loop(char *why, size_t len, int *rounds)
{
	static struct loop L; /* large: the confirmed counts */
	memset(&L, 0, sizeof(L));
	pthread_mutex_init(&L.mu, NULL);
	char dir[] = "/tmp/pfx-crashloop-XXXXXX", disk[64], model[64], out[256];
	if (!mkdtemp(dir)) {
		snprintf(why, len, "mkdtemp: %s", strerror(errno));
		return -1;
	}
	snprintf(disk, sizeof(disk), "%s/disk", dir);
	snprintf(model, sizeof(model), "%s/model", dir);
	struct scan sc = { .run = calloc(MAX_PROMPTS, sizeof(uint32_t)) };
	/* 48 slots of test blocks: two publishers and restores overrun them.
	 * The disk budget holds every prompt (MAX_PROMPTS x BLOCKS records of
	 * 12 KiB, 600 MB at most), so that no record is deleted for room. */
	const char *args[] = { "--block-tokens", "4", "--memory", "384K", "--disk-dir", disk,
			       "--disk-budget", "1G", "--threads", "2", NULL, NULL };
	unsigned seed = (unsigned)time(NULL);
	double end = td_now_s() + seconds_to_run();
	bool graceful = false, synced = false;
	const char *how = "";
	uint32_t last_from = 0;
	*rounds = 0;
	if (!sc.run || make_model(&L, model))
		goto out;
	/* Rounds 0, 1 and 2 end with a SIGTERM, a SIGKILL and a SIGKILL with
	 * --disk-sync; then at random. A last start checks the last kill. */
	for (int round = 0;; round++) {
		struct test_daemon td;
		bool sync_now = round % 4 == 2; /* a PUBLISH answered once durable */
		args[10] = sync_now ? "--disk-sync" : NULL;
		if (td_start(&td, args)) {
			fail(&L, "round %d: prefixd did not start", round);
			break;
		}
		L.sock = td.sock;
		uint32_t upto = atomic_load(&L.next);
		if (upto > MAX_PROMPTS)
			upto = MAX_PROMPTS;
		if (round)
			verify(&L, &td, &sc, last_from, upto, how, graceful || synced, &seed);
		if (L.why[0] || (round >= 3 && td_now_s() >= end)) {
			if (td_stop(&td))
				fail(&L, "prefixd did not stop cleanly (its log is above)");
			break;
		}
		last_from = upto;
		atomic_store(&L.stop, false);
		pthread_t th[PUBLISHERS + 2];
		for (int i = 0; i < PUBLISHERS; i++)
			pthread_create(&th[i], NULL, publisher, &L);
		pthread_create(&th[PUBLISHERS], NULL, reserver, &L);
		pthread_create(&th[PUBLISHERS + 1], NULL, modeller, &L);
		usleep(100000 + (useconds_t)(rand_r(&seed) % 300000));
		struct prefixd_stats s;
		if (td_stats(&td, &s))
			fail(&L, "round %d: stats: %s", round, prefixd_errmsg());
		else if (s.unwritten_evictions)
			fail(&L, "round %d: %llu blocks left memory before they were written", round,
			     (unsigned long long)s.unwritten_evictions);
		else if (s.disk_evictions)
			fail(&L, "round %d: the disk budget deleted records: make it larger", round);
		graceful = round < 3 ? round == 0 : rand_r(&seed) % 2;
		synced = sync_now;
		how = graceful ? "SIGTERM" : synced ? "SIGKILL with --disk-sync" : "SIGKILL";
		atomic_store(&L.stop, true);
		if (graceful) {
			int st = td_stop(&td);
			if (st)
				fail(&L, "round %d: prefixd exited with %d on SIGTERM (its log is above)",
				     round, st);
		} else {
			td_kill(&td);
		}
		for (int i = 0; i < PUBLISHERS + 2; i++)
			pthread_join(th[i], NULL);
		uint32_t n = atomic_load(&L.next);
		if (scan_disk(disk, 0, n < MAX_PROMPTS ? n : MAX_PROMPTS, &sc))
			fail(&L, "round %d, after a %s: %s", round, how, sc.why);
		/* Every third round, and the first, a full disk on the side. */
		if (round % 3 == 0 && !L.why[0])
			full_disk_round(&L, dir, round, &seed);
		(*rounds)++;
	}
	if (!L.why[0] && !atomic_load(&L.logits_checked))
		fail(&L, "no logits were checked");
out:
	snprintf(why, len, "%s (seed %u)", L.why, seed);
	for (int p = 0; p < MODEL_PROMPTS; p++)
		free(L.mref[p]);
	pfx_model_free(L.model);
	free(sc.run);
	td_sh(out, sizeof(out), "rm -rf '%s'", dir);
	pthread_mutex_destroy(&L.mu);
	return L.why[0] ? -1 : 0;
}
