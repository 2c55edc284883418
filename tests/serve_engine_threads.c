/* SPDX-License-Identifier: MIT */
/*
 * prefix-serve's engine under many client threads, without Criterion so
 * that ThreadSanitizer runs it (TAP on stdout): threads submit, read the
 * output under the job's lock while the engine writes it, cancel, hang
 * up, release early, and every job must end as it should. Run twice: alone,
 * and through a private prefixd with single flight, where jobs of one
 * shared head wait for each other's claims on attach threads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "daemon_util.h"
#include "engine.h"
#include "random_model.h"

#define CLIENTS 6
#define ROUNDS 6

static struct serve_engine *engine;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static char failure[256];

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	pthread_mutex_lock(&mu);
	if (!failure[0])
		vsnprintf(failure, sizeof(failure), fmt, ap);
	pthread_mutex_unlock(&mu);
	va_end(ap);
}

static void notify(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* Round r of client id: 0 plain, 1 cancelled, 2 sampled with n = 1..2,
 * 3 hung up, 4 a stop string, 5 released while it runs. */
static void *client(void *arg)
{
	long id = (long)arg;
	for (int round = 0; round < ROUNDS; round++) {
		size_t n = 5 + (size_t)((id * 13 + round * 7) % 40);
		int32_t *p = malloc(n * sizeof(*p));
		if (!p)
			return NULL;
		/* A shared head: local prefix reuse between the clients. */
		for (size_t i = 0; i < n; i++)
			p[i] = 4 + (int32_t)((i < 16 ? i * 3 : i * 7 + (size_t)id) % 270);
		int sv[2] = { -1, -1 };
		if (round == 3 && socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			sv[0] = sv[1] = -1;
		struct serve_request r = {
			.prompt = p, .nprompt = n, .max_tokens = 20, .n = 1 + (uint32_t)(round % 2),
			.top_p = 1, .temperature = round == 2 ? 1.0f : 0, .ignore_eos = true,
			.client_fd = sv[0], .notify = notify, .logprobs = true, .top_logprobs = 3,
		};
		if (round == 4) {
			r.stop[0] = strdup("e");
			r.nstop = 1;
		}
		struct serve_job *j;
		struct pfx_error err;
		int rc = serve_engine_submit(engine, &r, &j, &err);
		if (rc == -EAGAIN)
			continue;
		if (rc) {
			fail("submit: %d (round %d)", rc, round);
			return NULL;
		}
		if (round == 5) {
			usleep(1000);
			serve_job_release(j);
			continue;
		}
		if (round == 1) {
			usleep(2000);
			serve_job_cancel(j);
		}
		if (round == 3 && sv[1] >= 0) {
			usleep(2000);
			close(sv[1]);
		}
		for (bool done = false; !done;) {
			serve_job_lock(j);
			done = serve_job_done(j);
			for (uint32_t i = 0; i < serve_job_choices(j); i++) {
				const struct serve_choice *c = serve_job_choice(j, i);
				if (c->text[c->text_len] || c->ntokens > 20)
					fail("choice %u of round %d: a torn text", i, round);
				enum serve_finish f = c->finish;
				bool ok = round == 1 || round == 3 ? f != SERVE_FAILED
								   : f == SERVE_RUNNING || f == SERVE_LENGTH ||
									     f == SERVE_STOP;
				if (!ok)
					fail("round %d ended with %d", round, (int)f);
			}
			struct serve_job_usage u;
			serve_job_usage(j, &u);
			serve_job_unlock(j);
			if (done)
				break;
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_mutex_lock(&mu);
			pthread_cond_timedwait(&cv, &mu, &ts);
			pthread_mutex_unlock(&mu);
		}
		serve_job_release(j);
		if (sv[0] >= 0)
			close(sv[0]);
	}
	return NULL;
}

/* flight: through a private prefixd, with single flight. */
static int run(const char *tokenizer, bool flight, char *why, size_t cap)
{
	failure[0] = 0;
	char dir[] = "/tmp/pfx-serve-threads-XXXXXX";
	if (!mkdtemp(dir))
		return snprintf(why, cap, "mkdtemp failed"), -1;
	struct pfx_config c = {
		.arch = "LlamaForCausalLM", .hidden = 64, .n_layers = 2, .n_heads = 4,
		.n_kv_heads = 2, .head_dim = 16, .intermediate = 128, .vocab = 288,
		.max_positions = 1024, .rotary_dim = 16, .rope_base = 10000.0f, .norm_eps = 1e-5f,
		.norm = PFX_NORM_RMS, .act = PFX_ACT_SILU, .tied_embeddings = true,
	};
	struct pfx_error err = { "" };
	struct pfx_model *m = NULL;
	struct pfx_tokenizer *t = NULL;
	struct pfx_model_opts o = { .threads = 2, .block_tokens = 8 };
	int rc = pfx_random_checkpoint(dir, &c, "F32", 1, &err);
	if (!rc)
		rc = pfx_model_load(dir, &o, &m, &err);
	if (!rc)
		rc = pfx_tokenizer_load(tokenizer, &t, &err);
	struct serve_engine_opts eo = { .model = m, .tok = t, .parallel = 4, .queue = 4,
					.ctx = 256, .step_tokens = 16, .local_bytes = 1 << 20 };
	struct test_daemon td = { 0 };
	struct pfx_cache *cache = NULL;
	const char *args[] = { "--block-tokens", "8", "--memory", "64M", NULL };
	if (!rc && flight) {
		if (td_start(&td, args))
			return snprintf(why, cap, "prefixd did not start"), -1;
		rc = pfx_cache_open(m, td.sock, NULL, 0, &cache, &err);
		eo.cache = cache;
		eo.wait_ms = 5000;
	}
	if (!rc)
		rc = serve_engine_start(&eo, &engine, &err);
	if (!rc) {
		pthread_t th[CLIENTS];
		for (long i = 0; i < CLIENTS; i++)
			pthread_create(&th[i], NULL, client, (void *)i);
		for (int i = 0; i < CLIENTS; i++)
			pthread_join(th[i], NULL);
		serve_engine_drain(engine, 5000);
		struct serve_engine_stats st;
		serve_engine_stats(engine, &st);
		if (st.running || st.queued || !st.steps)
			fail("after the drain: %u running, %u queued", st.running, st.queued);
		struct prefixd_stats ds;
		if (flight && td_stats(&td, &ds))
			fail("prefixd's stats: %s", prefixd_errmsg());
		else if (flight && !ds.claims)
			fail("single flight made no claim");
		else if (flight)
			printf("# %llu claims, %llu waits\n", (unsigned long long)ds.claims,
			       (unsigned long long)ds.waits);
		serve_engine_stop(engine);
		/* A stop with attaches in flight: they are abandoned and joined. */
		if (!failure[0] && !serve_engine_start(&eo, &engine, &err)) {
			struct serve_job *j[4] = { 0 };
			for (int i = 0; i < 4; i++) {
				int32_t *p = malloc(60 * sizeof(*p));
				for (size_t k = 0; p && k < 60; k++)
					p[k] = 4 + (int32_t)((k * 11 + 5) % 270);
				struct serve_request r = { .prompt = p, .nprompt = 60, .max_tokens = 5,
							   .n = 1, .top_p = 1, .ignore_eos = true,
							   .client_fd = -1 };
				if (p && serve_engine_submit(engine, &r, &j[i], &err))
					j[i] = NULL;
			}
			serve_engine_stop(engine);
			for (int i = 0; i < 4; i++) {
				if (!j[i])
					continue;
				serve_job_lock(j[i]);
				if (!serve_job_done(j[i]))
					fail("job %d still runs after the stop", i);
				serve_job_unlock(j[i]);
				serve_job_release(j[i]);
			}
		}
		if (failure[0])
			snprintf(why, cap, "%s", failure);
		rc = failure[0] ? -1 : 0;
	} else {
		snprintf(why, cap, "%s", err.msg);
	}
	pfx_cache_close(cache);
	if (flight && td_stop(&td) && !rc) {
		snprintf(why, cap, "prefixd did not stop cleanly");
		rc = -1;
	}
	pfx_tokenizer_free(t);
	pfx_model_free(m);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		return snprintf(why, cap, "cannot remove %s", dir), -1;
	return rc;
}

int main(void)
{
	char why[256] = "", why2[256] = "";
	int rc = run(TOKENIZERS_DIR "/tiny-chat", false, why, sizeof(why));
	printf("%s 1 - serve_engine_many_clients%s%s\n", rc ? "not ok" : "ok", rc ? ": " : "", why);
	int rc2 = run(TOKENIZERS_DIR "/tiny-chat", true, why2, sizeof(why2));
	printf("%s 2 - serve_engine_many_clients_single_flight%s%s\n1..2\n",
	       rc2 ? "not ok" : "ok", rc2 ? ": " : "", why2);
	return rc || rc2 ? 1 : 0;
}
