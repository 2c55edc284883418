/* SPDX-License-Identifier: MIT */
/* Benchmark helpers. */
#include "bench_util.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct bw_arg {
	const uint64_t *p;
	size_t n;
	pthread_barrier_t *start;
	uint64_t sink;
};

/* Eight independent accumulators: the loop vectorises (with the widest
 * loads the CPU has) and is limited by memory, not by the add chain. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static uint64_t sum_words(const uint64_t *p, size_t n)
{
	uint64_t s[8] = { 0 };
	for (size_t i = 0; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++)
			s[k] += p[i + k];
	return s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}

static void *bw_thread(void *a)
{
	struct bw_arg *b = a;
	pthread_barrier_wait(b->start);
	b->sink = sum_words(b->p, b->n);
	return NULL;
}

#define PROBE_BYTES ((size_t)512 << 20)

struct bw_probe {
	uint64_t *buf;
};

struct bw_probe *bw_probe_new(void)
{
	struct bw_probe *p = malloc(sizeof(*p));
	if (!p || !(p->buf = aligned_alloc(4096, PROBE_BYTES))) {
		free(p);
		return NULL;
	}
	memset(p->buf, 1, PROBE_BYTES);
	return p;
}

void bw_probe_free(struct bw_probe *p)
{
	if (p)
		free(p->buf);
	free(p);
}

double bw_probe_run(struct bw_probe *p, int threads)
{
	size_t n = PROBE_BYTES / 8;
	pthread_t th[64];
	struct bw_arg arg[64];
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	for (int t = 0; t < threads; t++) {
		arg[t] = (struct bw_arg){ p->buf + n / threads * t, n / threads, &start, 0 };
		pthread_create(&th[t], NULL, bw_thread, &arg[t]);
	}
	double t0 = bench_now();
	pthread_barrier_wait(&start);
	for (int t = 0; t < threads; t++)
		pthread_join(th[t], NULL);
	double gbs = (double)PROBE_BYTES / (bench_now() - t0) / 1e9;
	pthread_barrier_destroy(&start);
	return gbs;
}
