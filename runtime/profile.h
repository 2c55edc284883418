/* SPDX-License-Identifier: MIT */
/*
 * Where a model's time goes, for the benchmarks (bench/share): a struct
 * the caller owns, set on the model; while it is set, every forward pass
 * and every attach through a cache adds its phases' seconds to it. Unset
 * (the default) each phase costs a test of a NULL pointer. Internal to the
 * runtime: the tools and benchmarks link it statically.
 */
#ifndef PFX_PROFILE_H
#define PFX_PROFILE_H

#include <stdint.h>

#include "model.h"

struct pfx_profile {
	uint64_t passes;    /* forward passes */
	uint64_t rows;      /* new tokens they computed */
	double forward_s;   /* the passes, whole */
	double matmul_s;    /* the layers' products: QKV, O, MLP */
	double attention_s; /* attention over the sessions' KV */
	double head_s;      /* final norm and output head of the rows asked for */
	double attach_s;    /* an attach: hashing, MATCH, mapping (cache.c) */
	/* The same phases in CPU seconds of the whole process (every worker,
	 * spinning included): on a machine others use too, wall time says
	 * when the CPUs were given, CPU time what the work took. */
	double forward_cpu_s, matmul_cpu_s, attention_cpu_s, head_cpu_s;
	double attach_cpu_s; /* the attach's, its populate on the workers included */
	long faults;        /* minor page faults while the passes ran */
};

/* Sets (or with NULL unsets) the profile filled from the next pass on.
 * The caller keeps p alive while it is set and zeroes it to start. */
void pfx_model_set_profile(struct pfx_model *m, struct pfx_profile *p);
/* CLOCK_MONOTONIC in seconds. */
double pfx_profile_now(void);
/* The process's CPU time (CLOCK_PROCESS_CPUTIME_ID) in seconds. */
double pfx_profile_cpu(void);

#endif
