/* SPDX-License-Identifier: MIT */
/*
 * bench/flight: N processes start one 2048-token prompt at once (a random
 * SmolLM-135M-shaped model, 2 threads each), behind a barrier, through one
 * prefixd: with single flight (one computes, the others wait for its
 * blocks) and without (PFX_CACHE_NO_WAIT: each computes it), for N = 2, 4
 * and 8, on a fresh daemon each time. Per run: the total CPU seconds of
 * the prefills and the daemon, the time from the barrier to the last
 * process's first token, and each process's time to first token. The
 * reference is one process alone (N = 1), cold, without single flight.
 * In the JSON, cpu_ratio and last_first_token_ratio are objects keyed by
 * N: with single flight, the total CPU over one cold prefill's CPU, and
 * the last first token over one cold TTFT.
 *
 * --quick: a 4-layer model, a 1024-token prompt, N = 2 only (checks that
 * the benchmark runs; its figures mean little).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "cache.h"
#include "daemon_util.h"
#include "random_model.h"
#include "report.h"
#include "session.h"

#define NAME "flight"
#define MAX_PROCS 8

static const char *model_dir;
static int prompt_tokens = 2048;

struct proc_result {
	double ttft_ms;     /* from the barrier to its first token */
	double done_s;      /* monotonic time of its first token */
	double cpu_s;       /* of its prefill */
	double attached;
};

static double cpu_self_s(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
	       (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

/* One process: loads the model, waits at the barrier, prefills, writes
 * its result to out. */
static int proc_main(const char *sock, unsigned flags, int barrier, int out)
{
	struct pfx_model *m;
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_model_opts mo = { .threads = 2 };
	if (pfx_model_load(model_dir, &mo, &m, &err)) {
		fprintf(stderr, NAME ": %s\n", err.msg);
		return 1;
	}
	int V = pfx_model_config(m)->vocab;
	int32_t *t = malloc((size_t)prompt_tokens * sizeof(*t));
	float *logits = malloc((size_t)V * sizeof(float));
	uint32_t seed = 1;
	for (int i = 0; t && i < prompt_tokens; i++) {
		seed = seed * 1664525u + 1013904223u;
		t[i] = (int32_t)((seed >> 8) % (uint32_t)V);
	}
	struct pfx_cache *c;
	struct pfx_session *s;
	if (!t || !logits || pfx_cache_open_flags(m, sock, NULL, 0, flags, &c, &err) ||
	    pfx_session_new(m, &s, &err)) {
		fprintf(stderr, NAME ": %s\n", err.msg);
		return 1;
	}
	char go;
	if (read(barrier, &go, 1) != 1)
		return 1;
	double t0 = bench_now(), cpu0 = cpu_self_s();
	struct pfx_prefill_info info;
	if (pfx_session_prefill(s, c, t, (size_t)prompt_tokens, PFX_LOGITS_LAST, logits, &info,
				&cerr, &err)) {
		fprintf(stderr, NAME ": %s\n", err.msg);
		return 1;
	}
	int first = 0;
	for (int i = 1; i < V; i++)
		if (logits[i] > logits[first])
			first = i;
	struct proc_result r = { (bench_now() - t0) * 1e3, bench_now(), cpu_self_s() - cpu0,
				 (double)info.attached };
	(void)first;
	if (info.cache_rc)
		fprintf(stderr, NAME ": the cache failed: %s\n", cerr.msg);
	if (write(out, &r, sizeof(r)) != sizeof(r))
		return 1;
	pfx_session_free(s);
	pfx_cache_close(c);
	pfx_model_free(m);
	free(logits);
	free(t);
	return 0;
}

struct run {
	int n;
	double cpu_s;        /* the prefills' and the daemon's */
	double last_ms;      /* barrier to the last first token */
	double ttft_ms[MAX_PROCS];
	double attached[MAX_PROCS];
};

/* n processes on a fresh daemon; 0 or -1. */
static int run_once(int n, bool flight, struct run *out)
{
	struct test_daemon d;
	if (td_start(&d, (const char *const[]){ "--memory", "2G", NULL }))
		return -1;
	int bar[2], res[2];
	if (pipe(bar) || pipe(res))
		return -1;
	pid_t pid[MAX_PROCS];
	fflush(NULL);
	for (int i = 0; i < n; i++) {
		pid[i] = fork();
		if (pid[i] == 0) {
			close(bar[1]);
			close(res[0]);
			_exit(proc_main(d.sock, flight ? 0 : PFX_CACHE_NO_WAIT, bar[0], res[1]));
		}
	}
	close(bar[0]);
	close(res[1]);
	/* Every process loads its model before the barrier opens. */
	usleep(n * 400000);
	double daemon0 = bench_proc_cpu_s(d.pid), t0 = bench_now();
	char go[MAX_PROCS] = { 0 };
	int rc = write(bar[1], go, (size_t)n) == n ? 0 : -1;
	close(bar[1]);
	out->n = n;
	out->cpu_s = 0;
	out->last_ms = 0;
	for (int i = 0; i < n && !rc; i++) {
		struct proc_result r;
		if (read(res[0], &r, sizeof(r)) != sizeof(r)) {
			rc = -1;
			break;
		}
		out->ttft_ms[i] = r.ttft_ms;
		out->attached[i] = r.attached;
		out->cpu_s += r.cpu_s;
		double last = (r.done_s - t0) * 1e3;
		out->last_ms = last > out->last_ms ? last : out->last_ms;
	}
	close(res[0]);
	out->cpu_s += bench_proc_cpu_s(d.pid) - daemon0;
	for (int i = 0; i < n; i++) {
		int st;
		waitpid(pid[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			rc = -1;
	}
	if (td_stop(&d))
		rc = -1;
	return rc;
}

static void print_run(const char *mode, const struct run *r)
{
	report_fmt(report_key("%s_%d_cpu_s", mode, r->n), "%.3f", r->cpu_s);
	report_fmt(report_key("%s_%d_last_first_token_ms", mode, r->n), "%.1f", r->last_ms);
	report_array(report_key("%s_%d_ttft_ms", mode, r->n), r->ttft_ms, r->n, 1);
}

int main(int argc, char **argv)
{
	bool quick = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			quick = true;
		} else {
			fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
			return 2;
		}
	}
	static const int all_n[] = { 2, 4, 8 };
	int nn = quick ? 1 : 3;
	struct pfx_config sc = pfx_config_smollm135m();
	if (quick) {
		sc.n_layers = 4;
		prompt_tokens = 1024;
	}
	char tmp[] = "/tmp/prefixd-flight-XXXXXX";
	struct pfx_error err = { "" };
	if (!mkdtemp(tmp) || pfx_random_checkpoint(tmp, &sc, "F32", 1, &err)) {
		fprintf(stderr, NAME ": cannot write the random model: %s\n", err.msg);
		return 1;
	}
	model_dir = tmp;
	struct bench_cpu noise;
	bench_cpu_now(&noise);
	struct run cold, one_flight, flight[3], plain[3];
	int rc = 1;
	/* Alone, both ways: the reference, and single flight's cost when
	 * nobody else runs. */
	if (run_once(1, false, &cold) || run_once(1, true, &one_flight))
		goto out;
	for (int k = 0; k < nn; k++)
		if (run_once(all_n[k], true, &flight[k]) || run_once(all_n[k], false, &plain[k]))
			goto out;
	double others, steal;
	bench_cpu_since(&noise, &others, &steal);
	report_begin(NAME);
	report_str("model", "random SmolLM-135M shape%s (f32), 2 threads a process",
		   quick ? " with 4 layers (--quick)" : "");
	report_fmt("prompt_tokens", "%d", prompt_tokens);
	report_fmt("cold_cpu_s", "%.3f", cold.cpu_s);
	report_fmt("cold_ttft_ms", "%.1f", cold.ttft_ms[0]);
	report_fmt("alone_with_flight_ttft_ms", "%.1f", one_flight.ttft_ms[0]);
	char cpu_ratio[256] = "{", last_ratio[256] = "{";
	for (int k = 0; k < nn; k++) {
		print_run("flight", &flight[k]);
		print_run("no_flight", &plain[k]);
		size_t a = strlen(cpu_ratio), b = strlen(last_ratio);
		snprintf(cpu_ratio + a, sizeof(cpu_ratio) - a, "%s\"%d\": %.3f", k ? ", " : "",
			 all_n[k], flight[k].cpu_s / cold.cpu_s);
		snprintf(last_ratio + b, sizeof(last_ratio) - b, "%s\"%d\": %.3f", k ? ", " : "",
			 all_n[k], flight[k].last_ms / cold.ttft_ms[0]);
	}
	strcat(cpu_ratio, "}");
	strcat(last_ratio, "}");
	report_fmt("cpu_ratio", "%s", cpu_ratio);
	report_fmt("last_first_token_ratio", "%s", last_ratio);
	report_machine();
	report_noise(others, steal);
	for (int k = 0; k < nn; k++)
		report_target(report_key("cpu_ratio_%d", all_n[k]), flight[k].cpu_s / cold.cpu_s,
			      REPORT_AT_MOST, 1.25);
	if (!quick)
		report_target("last_first_token_ratio_4", flight[1].last_ms / cold.ttft_ms[0],
			      REPORT_AT_MOST, 1.3);
	report_target("alone_with_flight_vs_without", one_flight.ttft_ms[0] / cold.ttft_ms[0],
		      REPORT_AT_MOST, 1.1);
	rc = report_end("cpu: the prefills' CPU time (from the barrier) plus the daemon's; cold: one process alone without single flight; no_flight: PFX_CACHE_NO_WAIT (prefix-run --no-wait)")
		     ? 0
		     : 1;
out:;
	char p[sizeof(tmp) + 32];
	snprintf(p, sizeof(p), "%s/model.safetensors", tmp);
	unlink(p);
	snprintf(p, sizeof(p), "%s/config.json", tmp);
	unlink(p);
	rmdir(tmp);
	if (rc && !quick)
		fprintf(stderr, NAME ": a run failed or a target was missed\n");
	return rc;
}
