/* SPDX-License-Identifier: MIT */
/* Small helpers shared by the benchmarks: timing, medians, bandwidth. */
#ifndef PFX_BENCH_UTIL_H
#define PFX_BENCH_UTIL_H

#include <stddef.h>

double bench_now(void);
/* Median of n samples (sorts them). */
double bench_median(double *v, int n);
/* Read bandwidth: `threads` threads stream a buffer much larger than the
 * caches. One probe, many short passes, so benchmarks can interleave them
 * with what they measure and compare like with like on a noisy machine. */
struct bw_probe;
struct bw_probe *bw_probe_new(void);
/* One pass; GB/s. */
double bw_probe_run(struct bw_probe *p, int threads);
void bw_probe_free(struct bw_probe *p);

#endif
