/* SPDX-License-Identifier: MIT */
#include "ttft.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "cache.h"
#include "session.h"

static void tokens(int32_t *t, int n, int vocab, uint32_t seed)
{
	for (int i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		t[i] = (int32_t)((seed >> 8) % (uint32_t)vocab);
	}
}

/* In the child: load the model, then time the prompt to its first token. */
static int child(const char *who, const char *model_dir, const char *sock, int prefix, int suffix,
		 uint32_t suffix_seed, enum pfx_kv_dtype kv, int out)
{
	struct pfx_model *m;
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_model_opts mo = { .threads = 2, .kv_dtype = kv };
	if (pfx_model_load(model_dir, &mo, &m, &err)) {
		fprintf(stderr, "%s: %s\n", who, err.msg);
		return 1;
	}
	int V = pfx_model_config(m)->vocab;
	int32_t *t = malloc((size_t)(prefix + suffix) * sizeof(*t));
	float *logits = malloc((size_t)V * sizeof(float));
	if (!t || !logits)
		return 1;
	tokens(t, prefix, V, 1);
	tokens(t + prefix, suffix, V, suffix_seed);
	struct pfx_session *s;
	struct pfx_prefill_info info;
	struct pfx_cache *c = NULL;
	struct bench_ttft res = { 0 };
	pfx_model_set_profile(m, &res.prof);
	double t0 = bench_now();
	if (sock && pfx_cache_open(m, sock, NULL, 0, &c, &err)) {
		fprintf(stderr, "%s: %s\n", who, err.msg);
		return 1;
	}
	double t1 = bench_now();
	if (pfx_session_new(m, &s, &err) ||
	    pfx_session_prefill(s, c, t, (size_t)(prefix + suffix), PFX_LOGITS_LAST, logits, &info,
				&cerr, &err)) {
		fprintf(stderr, "%s: %s\n", who, err.msg);
		return 1;
	}
	double t2 = bench_now();
	int32_t first = 0;
	for (int i = 1; i < V; i++)
		if (logits[i] > logits[first])
			first = i;
	double t3 = bench_now();
	pfx_model_set_profile(m, NULL);
	if (info.cache_rc)
		fprintf(stderr, "%s: the cache failed: %s\n", who, cerr.msg);
	res.ms = (t3 - t0) * 1e3;
	res.attached = (double)info.attached;
	res.first = (double)first;
	res.from_disk = (double)info.from_disk;
	res.published = (double)info.published;
	res.connect_ms = (t1 - t0) * 1e3;
	res.sample_ms = (t3 - t2) * 1e3;
	if (info.attached) {
		pfx_model_set_profile(m, &res.again);
		if (pfx_session_rewind(s, info.attached, &err) ||
		    pfx_session_append(s, t + info.attached, (size_t)(prefix + suffix) - info.attached,
				       PFX_LOGITS_LAST, logits, &err)) {
			fprintf(stderr, "%s: %s\n", who, err.msg);
			return 1;
		}
		pfx_model_set_profile(m, NULL);
	}
	if (write(out, &res, sizeof(res)) != sizeof(res))
		return 1;
	pfx_session_free(s);
	pfx_cache_close(c);
	free(logits);
	free(t);
	pfx_model_free(m);
	return 0;
}

int bench_ttft(const char *who, const char *model_dir, const char *sock, int prefix, int suffix,
	       uint32_t suffix_seed, enum pfx_kv_dtype kv, struct bench_ttft *out)
{
	int p[2];
	if (pipe(p))
		return -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		_exit(child(who, model_dir, sock, prefix, suffix, suffix_seed, kv, p[1]));
	}
	close(p[1]);
	ssize_t n = pid < 0 ? -1 : read(p[0], out, sizeof(*out));
	close(p[0]);
	int st = 0;
	if (pid > 0)
		waitpid(pid, &st, 0);
	return n == sizeof(*out) && WIFEXITED(st) && !WEXITSTATUS(st) ? 0 : -1;
}
