/* SPDX-License-Identifier: MIT */
/* Small helpers shared by the benchmarks: timing, medians, bandwidth. */
#ifndef PFX_BENCH_UTIL_H
#define PFX_BENCH_UTIL_H

#include <stddef.h>

double bench_now(void);
/* Median of n samples (sorts them). */
double bench_median(double *v, int n);
/* Read bandwidth in GB/s with `threads` threads streaming a buffer much
 * larger than the caches; the median of several passes. */
double bench_read_bandwidth(int threads);

#endif
