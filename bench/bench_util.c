/* SPDX-License-Identifier: MIT */
/* Benchmark helpers. */
#include "bench_util.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

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

double bench_median_of(const double *v, int n)
{
	double *tmp = n > 0 ? malloc((size_t)n * sizeof(*v)) : NULL;
	if (!tmp)
		return 0;
	memcpy(tmp, v, (size_t)n * sizeof(*v));
	double m = bench_median(tmp, n);
	free(tmp);
	return m;
}

int bench_lat_add(struct bench_lat *l, double s)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 1 << 16;
		uint32_t *v = realloc(l->ns, cap * sizeof(*v));
		if (!v)
			return -1;
		l->ns = v;
		l->cap = cap;
	}
	l->ns[l->n++] = (uint32_t)(s * 1e9 < 4e9 ? s * 1e9 : 4e9);
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

void bench_sort_u32(uint32_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u32);
}

double bench_pct_us(const uint32_t *v, size_t n, double q)
{
	return n ? v[(size_t)(q * (double)(n - 1) + 0.5)] / 1e3 : 0;
}

struct bw_arg {
	const uint64_t *p;
	size_t n;
	pthread_barrier_t *start;
	uint64_t sink;
	double t0, t1;
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

/* Each thread times its own read, so thread start-up and joining are not
 * counted against the memory. */
static void *bw_thread(void *a)
{
	struct bw_arg *b = a;
	pthread_barrier_wait(b->start);
	b->t0 = bench_now();
	b->sink = sum_words(b->p, b->n);
	b->t1 = bench_now();
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
		arg[t] = (struct bw_arg){ .p = p->buf + n / threads * t, .n = n / threads, .start = &start };
		pthread_create(&th[t], NULL, bw_thread, &arg[t]);
	}
	pthread_barrier_wait(&start);
	double t0 = 0, t1 = 0;
	for (int t = 0; t < threads; t++) {
		pthread_join(th[t], NULL);
		t0 = t == 0 || arg[t].t0 < t0 ? arg[t].t0 : t0;
		t1 = arg[t].t1 > t1 ? arg[t].t1 : t1;
	}
	pthread_barrier_destroy(&start);
	/* From the first thread's start to the last one's end: the time the
	 * whole buffer took, as a parallel loop's would. */
	return (double)(n / threads * threads * 8) / (t1 - t0) / 1e9;
}

static double rusage_s(int who)
{
	struct rusage ru;
	getrusage(who, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

/* A process's parent and utime + stime in seconds, from one read of its
 * /proc stat: 0, or -1 when it cannot be read (gone). */
static int proc_stat(int pid, int *ppid, double *cpu_s)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	/* Fields after the command name, which may hold spaces: ") S ppid ...". */
	char *p = strrchr(buf, ')');
	unsigned long long ut = 0, st = 0;
	if (!p || sscanf(p + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", ppid, &ut,
			 &st) != 3)
		return -1;
	*cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	return 0;
}

/* The CPU time of this benchmark's whole process tree: itself, the
 * children it reaped (and theirs), and the descendants still running or
 * not reaped yet (its daemons, the fresh processes of a run), so that
 * what they use is not taken for another process's noise. */
static double tree_cpu_s(void)
{
	enum { MAXP = 4096 };
	static int pid[MAXP], ppid[MAXP];
	static double cpu[MAXP];
	int n = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d)) && n < MAXP) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		pid[n] = atoi(e->d_name);
		if (!proc_stat(pid[n], &ppid[n], &cpu[n]))
			n++;
	}
	if (d)
		closedir(d);
	int self = getpid();
	double s = rusage_s(RUSAGE_SELF) + rusage_s(RUSAGE_CHILDREN);
	for (int i = 0; i < n; i++) {
		int up = ppid[i], hops = 0;
		while (up > 1 && up != self && hops++ < 64) {
			int k = 0;
			while (k < n && pid[k] != up)
				k++;
			up = k < n ? ppid[k] : 0;
		}
		if (up == self && pid[i] != self)
			s += cpu[i];
	}
	return s;
}

void bench_cpu_now(struct bench_cpu *c)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
			 &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
		memset(v, 0, sizeof(v));
	if (f)
		fclose(f);
	double tick = (double)sysconf(_SC_CLK_TCK);
	/* user, nice, system, irq, softirq; steal separately */
	c->busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / tick;
	c->steal = (double)v[7] / tick;
	c->self = tree_cpu_s();
	c->wall = bench_now();
}

void bench_cpu_since(const struct bench_cpu *a, double *others, double *steal)
{
	struct bench_cpu b;
	bench_cpu_now(&b);
	double wall = b.wall - a->wall;
	double o = wall > 0 ? ((b.busy - a->busy) - (b.self - a->self)) / wall : 0;
	*others = o > 0 ? o : 0; /* /proc/stat's ticks are coarser than rusage */
	*steal = wall > 0 ? (b.steal - a->steal) / wall : 0;
}

double bench_proc_cpu_s(int pid)
{
	int ppid;
	double cpu;
	return proc_stat(pid, &ppid, &cpu) ? 0 : cpu;
}

void bench_cpu_model(char *out, size_t len)
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

double bench_loadavg(void)
{
	double load = 0;
	FILE *f = fopen("/proc/loadavg", "r");
	if (f && fscanf(f, "%lf", &load) != 1)
		load = 0;
	if (f)
		fclose(f);
	return load;
}
