/* SPDX-License-Identifier: MIT */
/*
 * prefix-serve's engine (tools/prefix-serve/engine.h) on a small random
 * model and the tiny-chat tokenizer: continuous batching gives each
 * request what it gets alone, n choices share one prefill, stop strings,
 * EOS, max_tokens, logprobs, cancellation and hang-ups, the queue's
 * bounds, drain, and prefix reuse within a process and through prefixd.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "daemon_asserts.h"
#include "engine.h"
#include "helpers.h"
#include "random_model.h"
#include "sample.h"
#include "text.h"

#define BT 8       /* KV block tokens */
#define VOCAB 288  /* the model's (padded) */
#define TOK_VOCAB 280 /* the tokenizer's: ids past it are never sampled */
#define EOS_ID 2   /* tiny-chat's <|im_end|> */

static char dir[] = "/tmp/pfx-serve-engine-XXXXXX";
static struct pfx_model *model;
static struct pfx_tokenizer *tok;

static void setup(void)
{
	struct pfx_config c = {
		.arch = "LlamaForCausalLM", .hidden = 64, .n_layers = 2, .n_heads = 4,
		.n_kv_heads = 2, .head_dim = 16, .intermediate = 128, .vocab = VOCAB,
		.max_positions = 1024, .rotary_dim = 16, .rope_base = 10000.0f, .norm_eps = 1e-5f,
		.norm = PFX_NORM_RMS, .act = PFX_ACT_SILU, .tied_embeddings = true,
	};
	struct pfx_error err = { "" };
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(pfx_random_checkpoint(dir, &c, "F32", 11, &err), 0, "%s", err.msg);
	struct pfx_model_opts o = { .threads = 1, .block_tokens = BT };
	cr_assert_eq(pfx_model_load(dir, &o, &model, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_tokenizer_load(TOKENIZERS_DIR "/tiny-chat", &tok, &err), 0, "%s", err.msg);
}

static void teardown(void)
{
	pfx_tokenizer_free(tok);
	pfx_model_free(model);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(serve_engine, .init = setup, .fini = teardown, .timeout = 60);

/* ==== Helpers ==== */

static struct serve_engine *start(struct serve_engine_opts o)
{
	o.model = model;
	o.tok = tok;
	if (!o.parallel)
		o.parallel = 4;
	if (!o.ctx)
		o.ctx = 512;
	struct serve_engine *e;
	struct pfx_error err = { "" };
	cr_assert_eq(serve_engine_start(&o, &e, &err), 0, "%s", err.msg);
	return e;
}

/* Notifications wake the waiting test. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned notified;

static void notify(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	notified++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* A prompt of n tokens from seed (ordinary tokens: ids from 4 on). */
static int32_t *prompt(size_t n, unsigned seed)
{
	int32_t *p = malloc(n * sizeof(*p));
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = 4 + (int32_t)((seed >> 16) % 276);
	}
	return p;
}

static int32_t *dup_ids(const int32_t *p, size_t n)
{
	int32_t *d = malloc(n * sizeof(*d));
	memcpy(d, p, n * sizeof(*d));
	return d;
}

/* A greedy request of prompt p (copied) without EOS. */
static struct serve_request req(const int32_t *p, size_t n, uint32_t max_tokens)
{
	return (struct serve_request){
		.prompt = dup_ids(p, n), .nprompt = n, .max_tokens = max_tokens, .n = 1,
		.top_p = 1, .ignore_eos = true, .client_fd = -1, .notify = notify,
	};
}

static struct serve_job *submit(struct serve_engine *e, struct serve_request r)
{
	struct serve_job *j;
	struct pfx_error err = { "" };
	cr_assert_eq(serve_engine_submit(e, &r, &j, &err), 0, "%s", err.msg);
	return j;
}

static bool done(struct serve_job *j)
{
	serve_job_lock(j);
	bool d = serve_job_done(j);
	serve_job_unlock(j);
	return d;
}

static size_t ntokens(struct serve_job *j, uint32_t i)
{
	serve_job_lock(j);
	size_t n = serve_job_choice(j, i)->ntokens;
	serve_job_unlock(j);
	return n;
}

/* Waits (20 s at most) until pred(j) holds. */
static void wait_for(struct serve_job *j, bool (*pred)(struct serve_job *), const char *what)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	pthread_mutex_lock(&mu);
	int rc = 0;
	while (!pred(j) && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&cv, &mu, &until);
	pthread_mutex_unlock(&mu);
	cr_assert(pred(j), "timed out waiting for %s", what);
}

static void wait_done(struct serve_job *j) { wait_for(j, done, "the job to end"); }

static bool started(struct serve_job *j) { return ntokens(j, 0) >= 3; }

/* Choice i's ids (malloc'd) and count. */
static int32_t *ids_of(struct serve_job *j, uint32_t i, size_t *n)
{
	serve_job_lock(j);
	const struct serve_choice *c = serve_job_choice(j, i);
	int32_t *ids = malloc((c->ntokens + 1) * sizeof(*ids));
	for (size_t k = 0; k < c->ntokens; k++)
		ids[k] = c->tokens[k].id;
	*n = c->ntokens;
	serve_job_unlock(j);
	return ids;
}

static enum serve_finish finish_of(struct serve_job *j, uint32_t i)
{
	serve_job_lock(j);
	enum serve_finish f = serve_job_choice(j, i)->finish;
	serve_job_unlock(j);
	return f;
}

/* The continuation of p on a plain session (max tokens, no EOS) sampled
 * as o says (greedy when zeroed): the reference of "alone". logits
 * (optional): every step's rows. */
static int32_t *sampled_ref(const int32_t *p, size_t n, size_t max,
			    const struct pfx_sampler_opts *o, float *logits)
{
	struct pfx_session *s;
	struct pfx_sampler *sm;
	struct pfx_error err = { "" };
	float *l = malloc(VOCAB * sizeof(float));
	int32_t *out = malloc(max * sizeof(*out));
	cr_assert_eq(pfx_sampler_new(o, VOCAB, &sm, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_new(model, &s, &err), 0);
	cr_assert_eq(pfx_session_append(s, p, n, PFX_LOGITS_LAST, l, &err), 0, "%s", err.msg);
	for (size_t i = 0; i < max; i++) {
		for (int v = TOK_VOCAB; v < VOCAB; v++)
			l[v] = -INFINITY;
		if (logits)
			memcpy(logits + i * VOCAB, l, VOCAB * sizeof(float));
		out[i] = pfx_sample(sm, l);
		if (i + 1 < max)
			cr_assert_eq(pfx_session_decode(s, out[i], l, &err), 0, "%s", err.msg);
	}
	pfx_sampler_free(sm);
	pfx_session_free(s);
	free(l);
	return out;
}

static int32_t *greedy_ref(const int32_t *p, size_t n, size_t max, float *logits)
{
	struct pfx_sampler_opts o = { 0 };
	return sampled_ref(p, n, max, &o, logits);
}

static char *text_of(struct serve_job *j, uint32_t i)
{
	serve_job_lock(j);
	char *t = strdup(serve_job_choice(j, i)->text);
	serve_job_unlock(j);
	return t;
}

static char *detok(const int32_t *ids, size_t n)
{
	char *t;
	size_t len;
	struct pfx_error err = { "" };
	cr_assert_eq(pfx_detokenize(tok, ids, n, PFX_TEXT_SKIP_SPECIAL, &t, &len, &err), 0, "%s",
		     err.msg);
	return t;
}

static double lse_of(const float *row)
{
	float mx = row[0];
	for (int v = 1; v < VOCAB; v++)
		mx = row[v] > mx ? row[v] : mx;
	double sum = 0;
	for (int v = 0; v < VOCAB; v++)
		sum += exp((double)row[v] - mx);
	return mx + log(sum);
}

/* The largest logprob difference from alone seen by expect_alone. */
static double worst_logprob;

/* The job's greedy ids equal the reference's, and its text their text;
 * with top logprobs, their difference from alone's is recorded. */
static void expect_alone(struct serve_job *j, const int32_t *p, size_t np, size_t max,
			 const char *what)
{
	float *l = malloc(max * VOCAB * sizeof(float));
	int32_t *ref = greedy_ref(p, np, max, l);
	size_t n;
	int32_t *got = ids_of(j, 0, &n);
	cr_expect_eq(n, max, "%s: %zu tokens", what, n);
	for (size_t k = 0; k < n && k < max; k++)
		if (got[k] != ref[k]) {
			cr_expect_fail("%s: token %zu is %d, alone %d", what, k, got[k], ref[k]);
			break;
		}
	serve_job_lock(j);
	const struct serve_choice *c = serve_job_choice(j, 0);
	for (size_t k = 0; k < c->ntokens && k < max && c->tokens[k].ntop; k++) {
		double d = fabs(c->tokens[k].logprob - (l[k * VOCAB + ref[k]] - lse_of(l + k * VOCAB)));
		worst_logprob = d > worst_logprob ? d : worst_logprob;
	}
	serve_job_unlock(j);
	char *t = text_of(j, 0), *want = detok(ref, max);
	cr_expect_str_eq(t, want, "%s", what);
	free(t);
	free(want);
	free(got);
	free(ref);
	free(l);
}

/* ==== Continuous batching ==== */

/* Six prompts of different lengths on four slots: prompts chunked by 32
 * tokens a step beside running decodes, two jobs waiting and joining
 * when others finish, a late one joining mid-stream. Each one's greedy
 * tokens are those it gets alone. */
Test(serve_engine, batched_greedy_equals_each_alone)
{
	struct serve_engine *e = start((struct serve_engine_opts){ .parallel = 4, .queue = 8,
								   .step_tokens = 32 });
	static const size_t len[] = { 5, 70, 17, 100, 9, 41 };
	static const uint32_t max[] = { 30, 12, 24, 16, 20, 8 };
	int32_t *p[6];
	struct serve_job *j[6];
	for (int i = 0; i < 6; i++)
		p[i] = prompt(len[i], 100 + i);
	struct serve_request r[6];
	for (int i = 0; i < 6; i++) {
		r[i] = req(p[i], len[i], max[i]);
		r[i].logprobs = true;
		r[i].top_logprobs = 1;
	}
	for (int i = 0; i < 5; i++)
		j[i] = submit(e, r[i]);
	wait_for(j[0], started, "the first tokens");
	j[5] = submit(e, r[5]);
	for (int i = 0; i < 6; i++)
		wait_done(j[i]);
	for (int i = 0; i < 6; i++) {
		char what[64];
		snprintf(what, sizeof(what), "prompt %d (%zu tokens)", i, len[i]);
		expect_alone(j[i], p[i], len[i], max[i], what);
		cr_expect_eq(finish_of(j[i], 0), SERVE_LENGTH, "%s", what);
		struct serve_job_usage u;
		serve_job_usage(j[i], &u);
		cr_expect_eq(u.prompt_tokens, len[i]);
		cr_expect_eq(u.completion_tokens, max[i]);
		cr_expect(u.queued_ns >= 0 && u.ttft_ns > 0 && u.total_ns >= u.ttft_ns);
		serve_job_release(j[i]);
		free(p[i]);
	}
	/* Batched rows run other kernels than alone (kernels.h: gemv up to 4
	 * rows, gemm_few up to 64, sgemm beyond), so logits may differ in
	 * their last bits; a greedy choice changes only at a near tie. */
	cr_log_info("batched vs alone: logprobs differ by %g at most", worst_logprob);
	cr_expect_lt(worst_logprob, 1e-4);
	struct serve_engine_stats st;
	serve_engine_stats(e, &st);
	cr_expect_eq(st.running, 0);
	cr_expect_eq(st.queued, 0);
	serve_engine_stop(e);
}

/* n = 3: the prompt computed once (as many steps as one choice takes,
 * none cached), every greedy choice the same as alone; with sampling,
 * choice i is what an n = 1 request with seed + i gets. */
/* The notified hook (prefix-serve wakes its HTTP thread there, once for
 * all the streams a step gave output to): it follows every round of
 * notifies, so no notify is left without one, and it comes once a step,
 * not once a job. */
static atomic_uint hook_calls, hook_notifies;
static atomic_bool notify_pending;

static void counting_notify(void *arg)
{
	atomic_fetch_add(&hook_notifies, 1);
	atomic_store(&notify_pending, true);
	notify(arg);
}

static void notified_hook(void *arg)
{
	(void)arg;
	atomic_fetch_add(&hook_calls, 1);
	atomic_store(&notify_pending, false);
}

Test(serve_engine, the_notified_hook_follows_each_round_of_notifies)
{
	struct serve_engine *e = start((struct serve_engine_opts){ .notified = notified_hook });
	enum { JOBS = 3, TOKENS = 6 };
	struct serve_job *j[JOBS];
	int32_t *p = prompt(12, 5);
	for (int i = 0; i < JOBS; i++) {
		struct serve_request r = req(p, 12, TOKENS);
		r.notify = counting_notify;
		j[i] = submit(e, r);
	}
	for (int i = 0; i < JOBS; i++)
		wait_done(j[i]);
	/* The engine goes idle after the last round: the hook came before
	 * (the bound only matters when it never comes). */
	for (int t = 0; atomic_load(&notify_pending) && t < 5000; t++)
		usleep(1000);
	cr_expect_not(atomic_load(&notify_pending), "a notify was left without the hook after it");
	struct serve_engine_stats st;
	serve_engine_stats(e, &st);
	serve_engine_stop(e);
	cr_expect_geq(atomic_load(&hook_notifies), JOBS * TOKENS);
	/* Once after each turn of the engine's loop (a step, or a wait that
	 * computed nothing) and once at the end: never once a job. */
	cr_expect_lt(atomic_load(&hook_calls), atomic_load(&hook_notifies),
		     "%u hook calls for %u notifies", atomic_load(&hook_calls),
		     atomic_load(&hook_notifies));
	cr_expect_geq(atomic_load(&hook_calls), st.steps ? 1 : 0);
	for (int i = 0; i < JOBS; i++)
		serve_job_release(j[i]);
	free(p);
}

Test(serve_engine, n_choices_share_one_prefill)
{
	int32_t *p = prompt(50, 7);
	struct serve_engine *e = start((struct serve_engine_opts){ .parallel = 4, .step_tokens = 16 });
	struct serve_job *one = submit(e, req(p, 50, 6));
	wait_done(one);
	struct serve_engine_stats s1, s3;
	serve_engine_stats(e, &s1);
	struct serve_request r = req(p, 50, 6);
	r.n = 3;
	struct serve_job *three = submit(e, r);
	wait_done(three);
	serve_engine_stats(e, &s3);
	cr_expect_eq(s3.steps - s1.steps, s1.steps, "n = 3 took %llu steps, n = 1 %llu",
		     (unsigned long long)(s3.steps - s1.steps), (unsigned long long)s1.steps);
	struct serve_job_usage u;
	serve_job_lock(three); /* the lock may be held around it */
	serve_job_usage(three, &u);
	serve_job_unlock(three);
	cr_expect_eq(u.completion_tokens, 18);
	cr_expect_eq(u.prompt_tokens, 50);
	cr_expect_eq(serve_job_choices(three), 3);
	size_t n0;
	int32_t *c0 = ids_of(one, 0, &n0);
	for (uint32_t i = 0; i < 3; i++) {
		size_t n;
		int32_t *c = ids_of(three, i, &n);
		cr_expect_eq(n, n0);
		cr_expect(!memcmp(c, c0, n0 * sizeof(*c)), "greedy choice %u", i);
		free(c);
	}
	free(c0);
	serve_job_release(one);
	serve_job_release(three);

	r = req(p, 50, 10);
	r.n = 3;
	r.temperature = 1.5f;
	r.seed = 1000;
	r.has_seed = true;
	struct serve_job *sampled = submit(e, r);
	wait_done(sampled);
	for (uint32_t i = 0; i < 3; i++) {
		r = req(p, 50, 10);
		r.temperature = 1.5f;
		r.seed = 1000 + i;
		r.has_seed = true;
		struct serve_job *alone = submit(e, r);
		wait_done(alone);
		char *a = text_of(alone, 0), *b = text_of(sampled, i);
		cr_expect_str_eq(b, a, "choice %u samples with seed + %u", i, i);
		size_t na, nb;
		int32_t *ia = ids_of(alone, 0, &na), *ib = ids_of(sampled, i, &nb);
		cr_expect(na == nb && !memcmp(ia, ib, na * sizeof(*ia)), "choice %u's ids", i);
		cr_expect_eq(finish_of(sampled, i), SERVE_LENGTH);
		free(ia);
		free(ib);
		free(a);
		free(b);
		serve_job_release(alone);
	}
	serve_job_release(sampled);
	serve_engine_stop(e);
	free(p);
}

/* ==== Ends ==== */

Test(serve_engine, max_tokens_ends_with_length)
{
	int32_t *p = prompt(12, 3);
	struct serve_engine *e = start((struct serve_engine_opts){ 0 });
	struct serve_job *j = submit(e, req(p, 12, 5));
	wait_done(j);
	cr_expect_eq(finish_of(j, 0), SERVE_LENGTH);
	cr_expect_eq(ntokens(j, 0), 5);
	serve_job_release(j);
	serve_engine_stop(e);
	free(p);
}

/* A stop string across a token boundary: the text ends right before its
 * first occurrence, the choice with SERVE_STOP; one never produced
 * changes nothing. */
/* A sampled request (seed s): its text and ids. */
static struct serve_request sampled(const int32_t *p, size_t n, uint32_t max, uint64_t seed)
{
	struct serve_request r = req(p, n, max);
	r.temperature = 1.0f;
	r.seed = seed;
	r.has_seed = true;
	return r;
}

/* A stop string across a boundary of the streamed text of ids (text
 * full), where one token's text ends and the next one's begins: 2 bytes
 * on each side, whose first occurrence is that one; false when none. */
static bool stop_across(const int32_t *ids, size_t n, const char *full, char stop[8])
{
	struct pfx_detok_stream *ds;
	struct pfx_error err = { "" };
	cr_assert_eq(pfx_detok_stream_new(tok, PFX_TEXT_SKIP_SPECIAL, &ds, &err), 0);
	size_t at = 0, len = strlen(full);
	stop[0] = 0;
	for (size_t k = 0; k + 1 < n && !stop[0]; k++) {
		const char *piece;
		size_t pl;
		cr_assert_eq(pfx_detok_stream_push(ds, ids[k], &piece, &pl, &err), 0);
		at += pl;
		if (pl >= 2 && at >= 2 && at + 2 <= len) {
			snprintf(stop, 8, "%.4s", full + at - 2);
			if (strstr(full, stop) != full + at - 2)
				stop[0] = 0;
		}
	}
	pfx_detok_stream_free(ds);
	return stop[0];
}

Test(serve_engine, stop_strings_end_the_text_before_them)
{
	int32_t *p = prompt(20, 5);
	struct serve_engine *e = start((struct serve_engine_opts){ 0 });
	/* Random bytes decode to many U+FFFD: a seed whose text has a
	 * boundary to stop at. */
	char stop[8], *full = NULL;
	int32_t *ids = NULL;
	uint64_t seed = 0;
	for (bool found = false; !found && seed < 50; seed++) {
		free(full);
		free(ids);
		struct serve_job *j = submit(e, sampled(p, 20, 40, seed));
		wait_done(j);
		full = text_of(j, 0);
		size_t n;
		ids = ids_of(j, 0, &n);
		serve_job_release(j);
		found = stop_across(ids, n, full, stop);
	}
	seed--;
	cr_assert(stop[0], "no token boundary to stop at in 50 texts");
	struct serve_job *j;
	size_t cut = (size_t)(strstr(full, stop) - full);
	struct serve_request r = sampled(p, 20, 40, seed);
	r.stop[0] = strdup("never in this text \x01");
	r.stop[1] = strdup(stop);
	r.nstop = 2;
	j = submit(e, r);
	wait_done(j);
	char *t = text_of(j, 0);
	cr_expect_eq(strlen(t), cut, "\"%s\" stops \"%s\" at %zu: got \"%s\"", stop, full, cut, t);
	cr_expect(!strncmp(t, full, cut));
	cr_expect_eq(finish_of(j, 0), SERVE_STOP);
	free(t);
	serve_job_release(j);

	r = sampled(p, 20, 40, seed);
	r.stop[0] = strdup("never in this text \x01");
	r.nstop = 1;
	j = submit(e, r);
	wait_done(j);
	t = text_of(j, 0);
	cr_expect_str_eq(t, full);
	cr_expect_eq(finish_of(j, 0), SERVE_LENGTH);
	free(t);
	serve_job_release(j);
	free(ids);
	free(full);
	serve_engine_stop(e);
	free(p);
}

/* A sampled continuation that reaches EOS (a seed found on a plain
 * session): SERVE_STOP there, the EOS neither in the text nor among the
 * tokens (but in the usage); with ignore_eos it runs on. */
Test(serve_engine, eos_stops_and_is_not_in_the_text)
{
	size_t eos_n;
	const int32_t *eos = pfx_tokenizer_eos(tok, &eos_n);
	cr_assert(eos_n == 1 && eos[0] == EOS_ID, "tiny-chat's EOS is <|im_end|>");
	int32_t *p = prompt(6, 77), *ref = NULL;
	/* With tied embeddings a token in the prompt is likelier next. */
	p[2] = EOS_ID;
	struct pfx_sampler_opts o = { .temperature = 2.0f };
	size_t at = 0;
	for (o.seed = 1; o.seed < 1000 && !at; o.seed++) {
		free(ref);
		ref = sampled_ref(p, 6, 24, &o, NULL);
		for (size_t k = 0; k < 24; k++)
			if (ref[k] == EOS_ID) {
				at = k;
				break;
			}
	}
	o.seed--;
	cr_assert(at, "no seed found whose continuation reaches EOS after a token");
	struct serve_engine *e = start((struct serve_engine_opts){ 0 });
	struct serve_request r = req(p, 6, 24);
	r.ignore_eos = false;
	r.temperature = o.temperature;
	r.seed = o.seed;
	r.has_seed = true;
	struct serve_job *j = submit(e, r);
	wait_done(j);
	cr_expect_eq(finish_of(j, 0), SERVE_STOP);
	size_t n;
	int32_t *ids = ids_of(j, 0, &n);
	cr_expect_eq(n, at);
	cr_expect(!memcmp(ids, ref, at * sizeof(*ids)));
	char *t = text_of(j, 0), *want = detok(ref, at);
	cr_expect_str_eq(t, want);
	struct serve_job_usage u;
	serve_job_usage(j, &u);
	cr_expect_eq(u.completion_tokens, at + 1, "the EOS was generated");
	free(t);
	free(want);
	free(ids);
	serve_job_release(j);
	r.prompt = dup_ids(p, 6);
	r.ignore_eos = true;
	j = submit(e, r);
	wait_done(j);
	cr_expect_eq(finish_of(j, 0), SERVE_LENGTH);
	ids = ids_of(j, 0, &n);
	cr_expect_eq(n, 24);
	cr_expect(!memcmp(ids, ref, 24 * sizeof(*ids)), "past the EOS as alone");
	free(ids);
	serve_job_release(j);
	serve_engine_stop(e);
	free(p);
	free(ref);
}

/* Each token's logprob and top logprobs: the log-softmax of the raw
 * logits a plain session computes. */
Test(serve_engine, logprobs_are_the_log_softmax_of_the_logits)
{
	enum { N = 8, TOP = 5 };
	int32_t *p = prompt(30, 9);
	float *l = malloc(N * VOCAB * sizeof(float));
	int32_t *ref = greedy_ref(p, 30, N, l);
	struct serve_engine *e = start((struct serve_engine_opts){ 0 });
	struct serve_request r = req(p, 30, N);
	r.logprobs = true;
	r.top_logprobs = TOP;
	struct serve_job *j = submit(e, r);
	wait_done(j);
	serve_job_lock(j);
	const struct serve_choice *c = serve_job_choice(j, 0);
	cr_assert_eq(c->ntokens, N);
	for (size_t k = 0; k < N; k++) {
		const float *row = l + k * VOCAB;
		double sum = 0;
		float mx = row[0];
		for (int v = 1; v < VOCAB; v++)
			mx = row[v] > mx ? row[v] : mx;
		for (int v = 0; v < VOCAB; v++)
			sum += exp((double)row[v] - mx);
		double lse = mx + log(sum);
		const struct serve_token *t = &c->tokens[k];
		cr_expect_eq(t->id, ref[k]);
		cr_expect(fabs(t->logprob - (row[t->id] - lse)) < 1e-4, "token %zu: %g vs %g", k,
			  t->logprob, row[t->id] - lse);
		cr_expect_eq(t->ntop, TOP);
		cr_expect_eq(t->top_id[0], t->id, "greedy picks the most likely");
		for (uint32_t q = 0; q < t->ntop; q++) {
			cr_expect(fabs(t->top_logprob[q] - (row[t->top_id[q]] - lse)) < 1e-4);
			if (q)
				cr_expect(t->top_logprob[q] <= t->top_logprob[q - 1]);
			/* Nothing outside the top is more likely than its last. */
			int above = 0;
			for (int v = 0; v < VOCAB; v++)
				above += row[v] > row[t->top_id[q]];
			cr_expect(above <= (int)q, "token %zu: top %u has %d above it", k, q, above);
		}
	}
	serve_job_unlock(j);
	serve_job_release(j);
	serve_engine_stop(e);
	free(ref);
	free(l);
	free(p);
}

/* ==== Cancellation and bounds ==== */

/* Waits until the engine runs nothing (5 s at most). */
static void wait_idle(struct serve_engine *e)
{
	struct serve_engine_stats st;
	for (int i = 0; i < 500; i++) {
		serve_engine_stats(e, &st);
		if (!st.running && !st.queued)
			return;
		usleep(10000);
	}
	cr_assert_fail("the engine still runs %u sequences, %u queued", st.running, st.queued);
}

Test(serve_engine, cancel_and_hang_up_end_the_sequence)
{
	int32_t *p = prompt(10, 4);
	struct serve_engine *e = start((struct serve_engine_opts){ .parallel = 2 });
	struct serve_job *j = submit(e, req(p, 10, 400));
	wait_for(j, started, "the first tokens");
	serve_job_cancel(j);
	wait_done(j);
	cr_expect_eq(finish_of(j, 0), SERVE_CANCELLED);
	cr_expect_lt(ntokens(j, 0), 400);
	wait_idle(e);
	serve_job_release(j);

	int sv[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	struct serve_request r = req(p, 10, 400);
	r.client_fd = sv[0];
	j = submit(e, r);
	struct serve_job *other = submit(e, req(p, 10, 20));
	wait_for(j, started, "the first tokens");
	close(sv[1]);
	wait_done(j);
	cr_expect_eq(finish_of(j, 0), SERVE_CANCELLED, "the client hung up");
	wait_done(other);
	cr_expect_eq(finish_of(other, 0), SERVE_LENGTH, "the other client is served");
	wait_idle(e);
	close(sv[0]);
	serve_job_release(j);
	serve_job_release(other);

	/* Released while running: cancelled, and the engine drops it. */
	j = submit(e, req(p, 10, 400));
	wait_for(j, started, "the first tokens");
	serve_job_release(j);
	wait_idle(e);
	serve_engine_stop(e);
	free(p);
}

Test(serve_engine, a_full_queue_refuses_and_a_drain_shuts_down)
{
	int32_t *p = prompt(10, 6);
	struct serve_engine *e = start((struct serve_engine_opts){ .parallel = 1, .queue = 1 });
	struct serve_job *a = submit(e, req(p, 10, 400)), *b = submit(e, req(p, 10, 400)), *c;
	struct serve_request r = req(p, 10, 4);
	struct pfx_error err = { "" };
	cr_expect_eq(serve_engine_submit(e, &r, &c, &err), -EAGAIN);
	cr_expect(strstr(err.msg, "queue is full"), "%s", err.msg);
	r = req(p, 10, 4);
	r.n = 2;
	cr_expect_eq(serve_engine_submit(e, &r, &c, &err), -EINVAL, "n past parallel");
	r = req(p, 10, 600);
	cr_expect_eq(serve_engine_submit(e, &r, &c, &err), -EINVAL, "past ctx");
	cr_expect(strstr(err.msg, "exceed the context"), "%s", err.msg);
	struct serve_engine_stats st;
	serve_engine_stats(e, &st);
	cr_expect_eq(st.running + st.queued, 2);
	serve_engine_drain(e, 0);
	cr_expect(done(a) && done(b));
	cr_expect_eq(finish_of(a, 0), SERVE_CANCELLED);
	cr_expect_eq(finish_of(b, 0), SERVE_CANCELLED);
	r = req(p, 10, 4);
	cr_expect_eq(serve_engine_submit(e, &r, &c, &err), -ESHUTDOWN);
	serve_job_release(a);
	serve_job_release(b);
	serve_engine_stop(e);

	/* Within the grace period, running jobs finish. */
	e = start((struct serve_engine_opts){ .parallel = 1, .queue = 1 });
	a = submit(e, req(p, 10, 6));
	serve_engine_drain(e, 20000);
	cr_expect(done(a));
	cr_expect_eq(finish_of(a, 0), SERVE_LENGTH);
	serve_job_release(a);
	serve_engine_stop(e);
	free(p);
}

/* ==== Prefix reuse ==== */

/* Two requests with one system prompt (43 tokens: 5 whole blocks) and
 * different questions: the second forks the first's frozen blocks, and
 * its greedy output is what it gets without any reuse. */
Test(serve_engine, a_second_request_reuses_the_first_ones_system_prompt)
{
	enum { SYS = 43, Q = 9 };
	int32_t *sys = prompt(SYS, 21), *q1 = prompt(Q, 22), *q2 = prompt(Q, 23);
	int32_t a[SYS + Q], b[SYS + Q];
	memcpy(a, sys, sizeof(*sys) * SYS);
	memcpy(a + SYS, q1, sizeof(*q1) * Q);
	memcpy(b, sys, sizeof(*sys) * SYS);
	memcpy(b + SYS, q2, sizeof(*q2) * Q);
	struct serve_engine *e = start((struct serve_engine_opts){ .local_bytes = 64 << 20,
								   .step_tokens = 16 });
	struct serve_job *j = submit(e, req(a, SYS + Q, 10));
	wait_done(j);
	struct serve_job_usage u;
	serve_job_usage(j, &u);
	cr_expect_eq(u.cached_tokens, 0);
	serve_job_release(j);
	j = submit(e, req(b, SYS + Q, 10));
	wait_done(j);
	serve_job_usage(j, &u);
	cr_expect_geq(u.cached_tokens, SYS / BT * BT, "cached %zu", u.cached_tokens);
	cr_expect_lt(u.cached_tokens, SYS + Q);
	expect_alone(j, b, SYS + Q, 10, "after a local reuse");
	serve_job_release(j);
	/* The same prompt again: all its whole blocks but the last token's. */
	j = submit(e, req(b, SYS + Q, 10));
	wait_done(j);
	serve_job_usage(j, &u);
	cr_expect_eq(u.cached_tokens, (SYS + Q - 1) / BT * BT);
	expect_alone(j, b, SYS + Q, 10, "the same prompt again");
	serve_job_release(j);
	serve_engine_stop(e);
	free(sys);
	free(q1);
	free(q2);
}

/* Through a private prefixd: a second engine (another process's, with
 * its own connection and nothing local) attaches what the first
 * published; its greedy output is what it gets without a cache. */
Test(serve_engine, a_second_engine_attaches_through_prefixd)
{
	enum { SYS = 43, Q = 9 };
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "8", "--memory", "64M", NULL };
	t_start(&td, args, NULL);
	int32_t *sys = prompt(SYS, 31), *q1 = prompt(Q, 32), *q2 = prompt(Q, 33);
	int32_t a[SYS + Q], b[SYS + Q];
	memcpy(a, sys, sizeof(*sys) * SYS);
	memcpy(a + SYS, q1, sizeof(*q1) * Q);
	memcpy(b, sys, sizeof(*sys) * SYS);
	memcpy(b + SYS, q2, sizeof(*q2) * Q);
	struct pfx_error err = { "" };
	struct pfx_cache *c1, *c2;
	cr_assert_eq(pfx_cache_open(model, td.sock, NULL, 0, &c1, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_cache_open(model, td.sock, NULL, 0, &c2, &err), 0, "%s", err.msg);
	struct serve_engine *e1 = start((struct serve_engine_opts){ .cache = c1, .step_tokens = 16,
								    .local_bytes = 64 << 20 });
	struct serve_job *j = submit(e1, req(a, SYS + Q, 10));
	wait_done(j);
	struct serve_job_usage u;
	serve_job_usage(j, &u);
	cr_expect_eq(u.cached_tokens, 0);
	serve_job_release(j);
	/* Another question: its system prompt is both in prefixd and kept
	 * locally (computed here); prefixd's lease wins, so the publish
	 * sends only the new block, none the daemon has. */
	int32_t *q3 = prompt(Q, 34), c3[SYS + Q];
	memcpy(c3, sys, sizeof(*sys) * SYS);
	memcpy(c3 + SYS, q3, sizeof(*q3) * Q);
	unsigned long long dedup = t_counter(&td, "dedup"), blocks = t_counter(&td, "blocks");
	j = submit(e1, req(c3, SYS + Q, 10));
	wait_done(j);
	serve_job_usage(j, &u);
	cr_expect_eq(u.cached_tokens, SYS / BT * BT);
	expect_alone(j, c3, SYS + Q, 10, "another question");
	serve_job_release(j);
	cr_expect_eq(t_counter(&td, "dedup"), dedup, "no block sent again");
	cr_expect_eq(t_counter(&td, "blocks"), blocks + 1);
	free(q3);
	/* Only the prompt computed here was kept locally: one attached from
	 * prefixd is not, nor its lease, which would hold the daemon's
	 * blocks against eviction. */
	struct serve_engine_stats st;
	serve_engine_stats(e1, &st);
	size_t per = pfx_kv_bytes_per_token(pfx_model_config(model), pfx_model_kv_dtype(model));
	cr_expect_eq(st.local_bytes, (SYS + Q) / BT * BT * per);
	unsigned long long leases = 1;
	for (int i = 0; i < 200 && (leases = t_counter(&td, "leases")); i++)
		usleep(10000);
	cr_expect_eq(leases, 0, "an idle engine holds no lease");
	serve_engine_stop(e1);
	pfx_cache_close(c1);
	cr_expect_eq(t_counter(&td, "blocks"), (SYS + Q) / BT + 1,
		     "the first prompt's whole blocks, the other question's last");

	struct serve_engine *e2 = start((struct serve_engine_opts){ .cache = c2, .step_tokens = 16 });
	j = submit(e2, req(b, SYS + Q, 10));
	wait_done(j);
	serve_job_usage(j, &u);
	cr_expect_eq(u.cached_tokens, SYS / BT * BT);
	cr_expect_eq(t_counter(&td, "hit_tokens"), 2 * (SYS / BT * BT), "the other question's too");
	expect_alone(j, b, SYS + Q, 10, "after attaching through prefixd");
	serve_job_release(j);

	serve_engine_stop(e2);
	pfx_cache_close(c2);
	t_stop(&td);
	free(sys);
	free(q1);
	free(q2);
}

/* ==== What is refused ==== */

Test(serve_engine, what_cannot_run_is_refused_with_a_reason)
{
	struct pfx_error err = { "" };
	struct serve_engine *e;
	struct serve_engine_opts o = { .model = model, .tok = tok, .parallel = 0, .ctx = 64 };
	cr_expect_eq(serve_engine_start(&o, &e, &err), -EINVAL, "no slots");
	/* A tokenizer with more ids than the model's vocabulary. */
	struct pfx_tokenizer *big;
	cr_assert_eq(pfx_tokenizer_load(TOKENIZERS_DIR "/smollm", &big, &err), 0, "%s", err.msg);
	o = (struct serve_engine_opts){ .model = model, .tok = big, .parallel = 1, .ctx = 64 };
	cr_expect_eq(serve_engine_start(&o, &e, &err), -EINVAL);
	cr_expect(strstr(err.msg, "the model's vocabulary only 288"), "%s", err.msg);
	pfx_tokenizer_free(big);

	e = start((struct serve_engine_opts){ .parallel = 2, .ctx = 64 });
	int32_t *p = prompt(8, 1);
	struct serve_job *j;
	struct serve_request r = req(p, 8, 4);
	r.prompt[3] = VOCAB;
	cr_expect_eq(serve_engine_submit(e, &r, &j, &err), -EINVAL);
	cr_expect(strstr(err.msg, "prompt token 3 is 288"), "%s", err.msg);
	r = req(p, 8, 4);
	r.stop[0] = strdup("");
	r.nstop = 1;
	cr_expect_eq(serve_engine_submit(e, &r, &j, &err), -EINVAL, "an empty stop string");
	r = req(p, 8, 4);
	r.n = 0;
	cr_expect_eq(serve_engine_submit(e, &r, &j, &err), -EINVAL, "no choices");
	r = req(p, 8, 4);
	r.temperature = NAN;
	cr_expect_eq(serve_engine_submit(e, &r, &j, &err), -EINVAL, "a NaN temperature");
	r = req(p, 8, 4);
	r.top_p = -1;
	cr_expect_eq(serve_engine_submit(e, &r, &j, &err), -EINVAL, "a negative top_p");
	r = req(p, 8, 60);
	cr_expect_eq(serve_engine_submit(e, &r, &j, &err), -EINVAL, "past ctx");
	/* The engine serves on. */
	j = submit(e, req(p, 8, 56));
	wait_done(j);
	cr_expect_eq(finish_of(j, 0), SERVE_LENGTH);
	cr_expect_eq(ntokens(j, 0), 56, "prompt and output fill the context");
	serve_job_release(j);
	serve_engine_stop(e);
	free(p);
}

/* A sequence whose forward pass fails (past the model's 1024 positions,
 * under an engine told a larger context) fails its own job with the
 * reason; the one batched beside it is served as if alone. */
Test(serve_engine, a_failing_sequence_fails_its_job_only)
{
	int32_t *p = prompt(1014, 41), *q = prompt(12, 42);
	struct serve_engine *e = start((struct serve_engine_opts){ .parallel = 2, .ctx = 2048,
								   .step_tokens = 512 });
	struct serve_job *a = submit(e, req(p, 1014, 30)), *b = submit(e, req(q, 12, 40));
	wait_done(a);
	wait_done(b);
	cr_expect_eq(finish_of(a, 0), SERVE_FAILED);
	serve_job_lock(a);
	cr_expect(strstr(serve_job_error(a), "exceed the model's 1024 positions"), "%s",
		  serve_job_error(a));
	serve_job_unlock(a);
	/* The prompt's logits give one, each of 10 positions left one more. */
	cr_expect_eq(ntokens(a, 0), 11, "its tokens up to the limit stay");
	cr_expect_eq(finish_of(b, 0), SERVE_LENGTH);
	expect_alone(b, q, 12, 40, "beside a failing sequence");
	struct serve_engine_stats st;
	serve_engine_stats(e, &st);
	cr_expect_eq(st.running, 0);
	serve_job_release(a);
	serve_job_release(b);
	/* The engine serves on. */
	struct serve_job *c = submit(e, req(q, 12, 5));
	wait_done(c);
	cr_expect_eq(finish_of(c, 0), SERVE_LENGTH);
	serve_job_release(c);
	serve_engine_stop(e);
	free(p);
	free(q);
}

/* What B's notifications saw of A when B's first token came. */
struct seen {
	struct serve_job *a;
	_Atomic(struct serve_job *) b; /* set once submit returned */
	long a_tokens;           /* -1: B has no token yet (the engine thread's) */
};

static void notify_seen(void *arg)
{
	struct seen *s = arg;
	struct serve_job *b = atomic_load(&s->b);
	if (b && s->a_tokens < 0 && ntokens(b, 0) > 0)
		s->a_tokens = (long)ntokens(s->a, 0);
	notify(NULL);
}

/* Prompts are computed first come, first served whatever slot they run
 * in: B, admitted into a slot before A's while A's long prompt is being
 * computed, gets its first token after A's. */
Test(serve_engine, prompts_are_computed_first_come_first_served)
{
	int32_t *x = prompt(5, 51), *pa = prompt(800, 52), *pb = prompt(10, 53);
	struct serve_engine *e = start((struct serve_engine_opts){ .parallel = 2, .ctx = 1000,
								   .step_tokens = 8 });
	struct serve_job *jx = submit(e, req(x, 5, 1)), *ja = submit(e, req(pa, 800, 2));
	wait_done(jx);
	static struct seen s = { .a_tokens = -1 };
	s.a = ja;
	struct serve_request r = req(pb, 10, 2);
	r.notify = notify_seen;
	r.notify_arg = &s;
	struct serve_job *jb;
	struct pfx_error err = { "" };
	cr_assert_eq(serve_engine_submit(e, &r, &jb, &err), 0, "%s", err.msg);
	atomic_store(&s.b, jb);
	wait_done(ja);
	wait_done(jb);
	cr_expect_gt(s.a_tokens, 0, "B's first token came before A's");
	serve_job_release(jx);
	serve_job_release(ja);
	serve_job_release(jb);
	serve_engine_stop(e);
	free(x);
	free(pa);
	free(pb);
}

/* Local prompts under a budget of two: the least recently used one goes
 * when a third comes. */
Test(serve_engine, local_prompts_are_evicted_least_recently_used_first)
{
	enum { N = 41 };
	size_t per = pfx_kv_bytes_per_token(pfx_model_config(model), pfx_model_kv_dtype(model));
	size_t kept = N / BT * BT * per; /* what one prompt keeps */
	struct serve_engine *e = start((struct serve_engine_opts){ .local_bytes = 2 * kept + kept / 2 });
	int32_t *a = prompt(N, 61), *b = prompt(N, 62), *c = prompt(N, 63);
	struct {
		const int32_t *p;
		size_t cached, bytes;
	} runs[] = {
		{ a, 0, kept }, { b, 0, 2 * kept },
		{ a, N / BT * BT, 2 * kept },     /* reused, now the most recent */
		{ c, 0, 2 * kept },               /* b goes */
		{ a, N / BT * BT, 2 * kept },
		{ b, 0, 2 * kept },               /* computed again; c goes */
		{ c, 0, 2 * kept },
	};
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		struct serve_job *j = submit(e, req(runs[i].p, N, 2));
		wait_done(j);
		struct serve_job_usage u;
		serve_job_usage(j, &u);
		cr_expect_eq(u.cached_tokens, runs[i].cached, "run %zu: %zu cached", i, u.cached_tokens);
		struct serve_engine_stats st;
		serve_engine_stats(e, &st);
		cr_expect_eq(st.local_bytes, runs[i].bytes, "run %zu: %zu bytes kept", i, st.local_bytes);
		serve_job_release(j);
	}
	serve_engine_stop(e);
	free(a);
	free(b);
	free(c);
}

/* A prompt of whole blocks is frozen whole: its choices fork all of it
 * and decode into blocks of their own; the same prompt again reuses all
 * but its last block (whose last token's logits are the answer). */
Test(serve_engine, a_prompt_of_whole_blocks)
{
	enum { N = 6 * BT };
	int32_t *p = prompt(N, 71);
	struct serve_engine *e = start((struct serve_engine_opts){ .local_bytes = 1 << 20 });
	for (int round = 0; round < 2; round++) {
		struct serve_request r = req(p, N, 12);
		r.n = 2;
		struct serve_job *j = submit(e, r);
		wait_done(j);
		struct serve_job_usage u;
		serve_job_usage(j, &u);
		cr_expect_eq(u.cached_tokens, round ? N - BT : 0);
		expect_alone(j, p, N, 12, round ? "again" : "whole blocks");
		size_t n0, n1;
		int32_t *c0 = ids_of(j, 0, &n0), *c1 = ids_of(j, 1, &n1);
		cr_expect(n0 == n1 && !memcmp(c0, c1, n0 * sizeof(*c0)), "the greedy choices agree");
		free(c0);
		free(c1);
		serve_job_release(j);
	}
	serve_engine_stop(e);
	free(p);
}

/* ==== Single flight ==== */

/* Two engines, each with its own connection, start one long prompt at
 * once: it is computed once (its blocks published once, nothing sent
 * twice, the other job's prompt attached), and both outputs are those of
 * an uncached run. Whichever claims, the other waits or finds it done. */
static void two_engines(size_t NP)
{
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "8", "--memory", "64M", NULL };
	t_start(&td, args, NULL);
	int32_t *p = prompt(NP, 71);
	struct pfx_error err = { "" };
	struct pfx_cache *c1, *c2;
	cr_assert_eq(pfx_cache_open(model, td.sock, NULL, 0, &c1, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_cache_open(model, td.sock, NULL, 0, &c2, &err), 0, "%s", err.msg);
	struct serve_engine *e1 = start((struct serve_engine_opts){ .cache = c1, .step_tokens = 8,
								    .wait_ms = 20000 });
	struct serve_engine *e2 = start((struct serve_engine_opts){ .cache = c2, .step_tokens = 8,
								    .wait_ms = 20000 });
	struct serve_job *a = submit(e1, req(p, NP, 8)), *b = submit(e2, req(p, NP, 8));
	wait_done(a);
	wait_done(b);
	struct serve_job_usage ua, ub;
	serve_job_usage(a, &ua);
	serve_job_usage(b, &ub);
	/* A prompt of whole blocks: the waiter computes its last token. */
	size_t all = NP % BT ? NP / BT * BT : NP - 1;
	cr_expect_eq(ua.cached_tokens + ub.cached_tokens, all,
		     "%zu tokens: one computed the prompt, the other attached it (%zu, %zu)", NP,
		     ua.cached_tokens, ub.cached_tokens);
	cr_expect_eq(t_counter(&td, "published"), NP / BT, "each block published once");
	cr_expect_eq(t_counter(&td, "dedup"), 0, "no block sent twice");
	cr_expect_eq(t_counter(&td, "claims"), 1);
	expect_alone(a, p, NP, 8, "the first engine");
	expect_alone(b, p, NP, 8, "the second engine");
	serve_job_release(a);
	serve_job_release(b);
	serve_engine_stop(e1);
	serve_engine_stop(e2);
	pfx_cache_close(c1);
	pfx_cache_close(c2);
	t_stop(&td);
	free(p);
}

Test(serve_engine, two_engines_starting_one_prompt_compute_it_once)
{
	two_engines(403); /* the waiter computes the last 3 tokens */
	two_engines(400); /* whole blocks: it computes the last token */
}

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The test claims a prompt as another process computing it would. */
static struct pfx_session *claim(struct pfx_cache *c, const int32_t *p, size_t n)
{
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_session *s;
	struct pfx_prefill_info info;
	enum pfx_flight f;
	cr_assert_eq(pfx_session_new(model, &s, &err), 0);
	cr_assert_eq(pfx_session_attach_wait(s, c, p, n, 1000, &f, &info, &cerr, &err), 0, "%s",
		     err.msg);
	cr_assert_eq(f, PFX_FLIGHT_CLAIMED);
	return s;
}

static unsigned long long waits_at_least(struct test_daemon *td, unsigned long long n)
{
	unsigned long long w = 0;
	for (int i = 0; i < 500 && (w = t_counter(td, "waits")) < n; i++)
		usleep(10000);
	cr_assert_geq(w, n, "the engine's attach waits");
	return w;
}

/* A stream's notify, slowing every engine step down (12 ms): a stream
 * lasts long enough to watch, a long prefill longer than a claim timeout. */
static void slow_notify(void *arg)
{
	usleep(12000);
	notify(arg);
}

/* While another process computes a prompt, the engine's job for it waits
 * without stalling the engine's other stream; it then attaches what was
 * published. With wait 0 nothing waits. */
Test(serve_engine, a_waiting_prompt_does_not_stall_the_other_streams)
{
	enum { NP = 83 };
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "8", "--memory", "64M", NULL };
	t_start(&td, args, NULL);
	int32_t *p = prompt(NP, 72), *q = prompt(10, 73);
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_cache *c, *mine;
	cr_assert_eq(pfx_cache_open(model, td.sock, NULL, 0, &c, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_cache_open(model, td.sock, NULL, 0, &mine, &err), 0, "%s", err.msg);
	struct pfx_session *s = claim(mine, p, NP);

	/* Without a wait: computed at once, neither claimed nor waited. */
	struct serve_engine *e = start((struct serve_engine_opts){ .cache = c, .step_tokens = 16 });
	struct serve_job *j = submit(e, req(p, NP, 4));
	wait_done(j);
	struct serve_job_usage u;
	serve_job_usage(j, &u);
	cr_expect_eq(u.cached_tokens, 0);
	cr_expect_eq(t_counter(&td, "waits"), 0, "wait 0 never waits");
	cr_expect_eq(t_counter(&td, "claims"), 1, "only the test's claim");
	serve_job_release(j);
	serve_engine_stop(e);
	/* Its publish moved the claim past every block: claim another prompt. */
	free(p);
	p = prompt(NP, 74);
	pfx_session_free(s);
	s = claim(mine, p, NP);

	e = start((struct serve_engine_opts){ .cache = c, .step_tokens = 16, .wait_ms = 20000 });
	struct serve_request sr = req(q, 10, 100);
	sr.notify = slow_notify;
	struct serve_job *stream = submit(e, sr);
	wait_for(stream, started, "the stream's first tokens");
	j = submit(e, req(p, NP, 6));
	waits_at_least(&td, 1);
	size_t before = ntokens(stream, 0);
	usleep(300000);
	size_t after = ntokens(stream, 0);
	cr_expect_gt(after, before + 5, "the stream kept going while the prompt waited (%zu -> %zu)",
		     before, after);
	cr_expect_eq(ntokens(j, 0), 0, "the waiting prompt has not started");
	struct serve_engine_stats st;
	serve_engine_stats(e, &st);
	cr_expect_eq(st.attaching, 1, "one attach waits");
	cr_expect_geq(st.running, 1, "its slot is taken");
	/* The other process computes and publishes the prompt. */
	cr_assert_eq(pfx_session_append(s, p, NP, PFX_LOGITS_NONE, NULL, &err), 0, "%s", err.msg);
	struct pfx_prefill_info info;
	cr_assert_eq(pfx_session_publish(s, mine, p, NP, &info, &cerr, &err), 0);
	cr_expect_eq(info.published, NP / BT);
	wait_done(j);
	serve_job_usage(j, &u);
	cr_expect_eq(u.cached_tokens, NP / BT * BT, "the prompt attached what the other published");
	expect_alone(j, p, NP, 6, "after waiting");
	serve_engine_stats(e, &st);
	cr_expect_eq(st.attaching, 0);
	cr_expect_eq(t_counter(&td, "dedup"), 0, "the engine sent nothing again");
	wait_done(stream);
	expect_alone(stream, q, 10, 100, "the stream");
	serve_job_release(j);
	serve_job_release(stream);
	serve_engine_stop(e);
	pfx_session_free(s);
	pfx_cache_close(mine);
	pfx_cache_close(c);
	t_stop(&td);
	free(p);
	free(q);
}

/* A job cancelled while its attach waits ends at once and frees its slot
 * and everything the attach holds; a stop with an attach waiting returns
 * promptly. ASan's leak check covers the rest. */
Test(serve_engine, cancel_or_stop_during_a_wait_frees_everything)
{
	enum { NP = 50 };
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "8", "--memory", "64M", NULL };
	t_start(&td, args, NULL);
	int32_t *p = prompt(NP, 75);
	struct pfx_error err = { "" };
	struct pfx_cache *c, *mine;
	cr_assert_eq(pfx_cache_open(model, td.sock, NULL, 0, &c, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_cache_open(model, td.sock, NULL, 0, &mine, &err), 0, "%s", err.msg);
	struct pfx_session *s = claim(mine, p, NP);
	struct serve_engine *e = start((struct serve_engine_opts){ .cache = c, .parallel = 1,
								   .queue = 2, .wait_ms = 60000 });
	struct serve_job *j = submit(e, req(p, NP, 4));
	unsigned long long w = waits_at_least(&td, 1);
	int64_t t0 = mono_ns();
	serve_job_cancel(j);
	wait_done(j);
	cr_expect_lt(mono_ns() - t0, 2000000000LL, "the cancel did not wait for the claim");
	cr_expect_eq(finish_of(j, 0), SERVE_CANCELLED);
	wait_idle(e);
	serve_job_release(j);
	/* Its slot is free: another job runs on the one slot. */
	int32_t *q = prompt(5, 76);
	struct serve_job *k = submit(e, req(q, 5, 4));
	wait_done(k);
	cr_expect_eq(finish_of(k, 0), SERVE_LENGTH);
	serve_job_release(k);
	unsigned long long leases = 1;
	for (int i = 0; i < 300 && (leases = t_counter(&td, "leases")); i++)
		usleep(10000);
	cr_expect_eq(leases, 0, "the abandoned attach holds no lease");

	j = submit(e, req(p, NP, 4));
	waits_at_least(&td, w + 1);
	t0 = mono_ns();
	serve_engine_stop(e);
	cr_expect_lt(mono_ns() - t0, 2000000000LL, "the stop did not wait for the claim");
	cr_expect(done(j));
	cr_expect_eq(finish_of(j, 0), SERVE_CANCELLED);
	serve_job_release(j);
	pfx_session_free(s);
	pfx_cache_close(mine);
	pfx_cache_close(c);
	t_stop(&td);
	free(p);
	free(q);
}

/* A prompt the engine claimed is published step by step: a process that
 * needs only its start attaches that while the engine still prefills,
 * and the claim, published to all along, outlives the daemon's claim
 * timeout, so a process waiting for the whole prompt attaches it all. */
Test(serve_engine, a_claimed_prompt_is_published_as_it_is_computed)
{
	enum { NP = 803, HEAD = 33 };
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "8", "--memory", "64M", "--claim-timeout", "1",
			       NULL };
	t_start(&td, args, NULL);
	int32_t *p = prompt(NP, 77), *q = prompt(10, 78);
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_cache *c, *mine;
	cr_assert_eq(pfx_cache_open(model, td.sock, NULL, 0, &c, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_cache_open(model, td.sock, NULL, 0, &mine, &err), 0, "%s", err.msg);
	struct serve_engine *e = start((struct serve_engine_opts){
		.cache = c, .step_tokens = 8, .wait_ms = 20000, .ctx = 1000 });
	struct serve_request sr = req(q, 10, 400);
	sr.notify = slow_notify;
	struct serve_job *stream = submit(e, sr);
	wait_for(stream, started, "the stream's first tokens");
	struct serve_job *j = submit(e, req(p, NP, 4));
	/* The stream's one block was the first claim. */
	for (int i = 0; i < 500 && t_counter(&td, "claims") < 2; i++)
		usleep(5000);
	cr_assert_eq(t_counter(&td, "claims"), 2, "the engine claimed the prompt");
	/* The start of the prompt, while the engine computes the rest. */
	struct pfx_session *s;
	struct pfx_prefill_info info;
	enum pfx_flight f;
	cr_assert_eq(pfx_session_new(model, &s, &err), 0);
	cr_assert_eq(pfx_session_attach_wait(s, mine, p, HEAD, 10000, &f, &info, &cerr, &err), 0);
	cr_expect_eq(info.attached, (HEAD - 1) / BT * BT, "the start attached (flight %d)", f);
	cr_expect_eq(ntokens(j, 0), 0, "while the engine still computes the prompt");
	cr_expect_lt(t_counter(&td, "published"), NP / BT);
	pfx_session_free(s);
	/* The whole prompt: it waits past the claim timeout, on the
	 * engine's publishes. */
	cr_assert_eq(pfx_session_new(model, &s, &err), 0);
	cr_assert_eq(pfx_session_attach_wait(s, mine, p, NP, 20000, &f, &info, &cerr, &err), 0);
	cr_expect_eq(f, PFX_FLIGHT_WAITED, "it waited, inheriting nothing");
	cr_expect_eq(info.attached, NP / BT * BT);
	cr_expect_geq(t_counter(&td, "wait_ms"), 1000, "the prefill outlasted the claim timeout");
	cr_expect_eq(t_counter(&td, "claims_expired"), 0, "the publishes kept the claim alive");
	pfx_session_free(s);
	wait_done(j);
	expect_alone(j, p, NP, 4, "the claimed prompt");
	cr_expect_eq(t_counter(&td, "published"), NP / BT + 1,
		     "each block published once (and the stream's one)");
	cr_expect_eq(t_counter(&td, "dedup"), 0, "none sent twice");
	serve_job_cancel(stream);
	wait_done(stream);
	serve_job_release(j);
	serve_job_release(stream);
	serve_engine_stop(e);
	pfx_cache_close(mine);
	pfx_cache_close(c);
	t_stop(&td);
	free(p);
	free(q);
}

/* With single flight, n choices still fork one prefill (claimed, then
 * attached by the next request), and each equals the prompt alone. */
Test(serve_engine, n_choices_fork_a_claimed_and_an_attached_prompt)
{
	enum { NP = 50 };
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "8", "--memory", "64M", NULL };
	t_start(&td, args, NULL);
	int32_t *p = prompt(NP, 79);
	struct pfx_error err = { "" };
	struct pfx_cache *c;
	cr_assert_eq(pfx_cache_open(model, td.sock, NULL, 0, &c, &err), 0, "%s", err.msg);
	struct serve_engine *e = start((struct serve_engine_opts){ .cache = c, .step_tokens = 16,
								   .wait_ms = 5000 });
	for (int round = 0; round < 2; round++) {
		struct serve_request r = req(p, NP, 5);
		r.n = 3;
		struct serve_job *j = submit(e, r);
		wait_done(j);
		struct serve_job_usage u;
		serve_job_usage(j, &u);
		cr_expect_eq(u.cached_tokens, round ? NP / BT * BT : 0, "round %d", round);
		cr_expect_eq(u.completion_tokens, 15);
		int32_t *ref = greedy_ref(p, NP, 5, NULL);
		for (uint32_t i = 0; i < 3; i++) {
			size_t n;
			int32_t *got = ids_of(j, i, &n);
			cr_expect_eq(n, 5);
			cr_expect_arr_eq(got, ref, 5 * sizeof(*ref), "round %d, choice %u", round, i);
			free(got);
		}
		free(ref);
		serve_job_release(j);
	}
	cr_expect_eq(t_counter(&td, "claims"), 1, "the first round claimed");
	cr_expect_eq(t_counter(&td, "published"), NP / BT);
	serve_engine_stop(e);
	pfx_cache_close(c);
	t_stop(&td);
	free(p);
}
