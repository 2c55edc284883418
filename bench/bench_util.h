/* SPDX-License-Identifier: MIT */
/* Small helpers shared by the benchmarks: timing, medians, percentiles,
 * bandwidth, the machine. */
#ifndef PFX_BENCH_UTIL_H
#define PFX_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

double bench_now(void);
/* Median of n samples (sorts them). */
double bench_median(double *v, int n);
/* Median of n samples, left in their order; 0 when n <= 0. */
double bench_median_of(const double *v, int n);

/* Latency samples in ns (at most 4 s each), in an array that grows. */
struct bench_lat {
	uint32_t *ns;
	size_t n, cap;
};
/* Adds one of `seconds`; 0, or -1 out of memory. */
int bench_lat_add(struct bench_lat *l, double seconds);
void bench_sort_u32(uint32_t *v, size_t n);
/* Percentile q (0..1, nearest rank) of n sorted samples in ns, in
 * microseconds; 0 when there are none. */
double bench_pct_us(const uint32_t *v, size_t n, double q);
/* Read bandwidth: `threads` threads stream a buffer much larger than the
 * caches. One probe, many short passes, so benchmarks can interleave them
 * with what they measure and compare like with like on a noisy machine. */
struct bw_probe;
struct bw_probe *bw_probe_new(void);
/* One pass; GB/s. */
double bw_probe_run(struct bw_probe *p, int threads);
void bw_probe_free(struct bw_probe *p);

/* What else ran on the machine while a benchmark did: a figure measured
 * while other processes used the CPUs, or the hypervisor took them
 * (steal), says little about the code. */
struct bench_cpu {
	double busy, steal, self, wall; /* seconds */
};
void bench_cpu_now(struct bench_cpu *c);
/* CPUs (on average) processes outside this benchmark's own tree (itself, its
 * daemons and children) used, and steal, since a. */
void bench_cpu_since(const struct bench_cpu *a, double *others, double *steal);
/* utime + stime of a process, in seconds (0 when it cannot be read). */
double bench_proc_cpu_s(int pid);
/* The 1-minute load average (/proc/loadavg), 0 when unknown: read before
 * a benchmark starts, what else the machine was doing. */
double bench_loadavg(void);
/* The CPU's model name from /proc/cpuinfo ("unknown"), without the
 * characters a JSON string would have to escape. */
void bench_cpu_model(char *out, size_t len);

#endif
