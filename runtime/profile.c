/* SPDX-License-Identifier: MIT */
/* The benchmarks' profile (profile.h): set under the forward pass's lock,
 * so that a pass sees it set or unset from its start to its end. */
#include "profile.h"

#include <time.h>

#include "model_impl.h"

void pfx_model_set_profile(struct pfx_model *m, struct pfx_profile *p)
{
	pthread_mutex_lock(&m->fwd_lock);
	m->prof = p;
	pthread_mutex_unlock(&m->fwd_lock);
}

double pfx_profile_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double pfx_profile_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
