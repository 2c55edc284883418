/* SPDX-License-Identifier: MIT */
/*
 * The benchmarks' option values, checked: a value that is not a number,
 * has anything after it, or lies outside [min, max] is refused with
 * "bench/PROG: --NAME must be ... from MIN to MAX, not 'VALUE'" on stderr and
 * exit status 2, as a usage error is, rather than run as 0 or a
 * truncated figure (what atoi would make of it).
 */
#ifndef PFX_BENCH_OPTS_H
#define PFX_BENCH_OPTS_H

#include <stdint.h>

int opt_int(const char *prog, const char *name, const char *arg, long min, long max);
uint64_t opt_u64(const char *prog, const char *name, const char *arg, uint64_t min, uint64_t max);
double opt_double(const char *prog, const char *name, const char *arg, double min, double max);

#endif
