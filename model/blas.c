/* SPDX-License-Identifier: MIT */
/*
 * OpenBLAS set-up.
 *
 * Kernels: Debian's OpenBLAS 0.3.21 is a DYNAMIC_ARCH build that identifies
 * some AVX-512 CPUs (e.g. AMD Zen 4) as "Haswell" or "Zen" and then runs AVX2
 * kernels at half the speed. When the user has not chosen a core with
 * OPENBLAS_CORETYPE and the CPU has the AVX-512 subsets SkylakeX kernels
 * need, we re-run OpenBLAS's own core selection with that choice. The two
 * entry points are exported by every DYNAMIC_ARCH build but not declared
 * in cblas.h, so they are weak: with a build that lacks them nothing changes.
 *
 * Threads: the runtime splits every matrix product over its own worker
 * pool, so OpenBLAS is told to use one thread per call. Two thread pools
 * each sized to the core count would oversubscribe the machine.
 */
#include "blas.h"
#include "model.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));

static pthread_once_t once = PTHREAD_ONCE_INIT;

static int cpu_has_avx512_skx(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
	       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("avx512cd");
}

static void init_once(void)
{
	const char *core = openblas_get_corename();
	int weak_core = !strcmp(core, "Haswell") || !strcmp(core, "Zen") ||
			!strcmp(core, "Sandybridge");
	if (weak_core && !getenv("OPENBLAS_CORETYPE") && cpu_has_avx512_skx() &&
	    gotoblas_dynamic_init && gotoblas_dynamic_quit) {
		setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
		gotoblas_dynamic_quit();
		gotoblas_dynamic_init();
	}
	openblas_set_num_threads(1);
}

void pfx_blas_init(void)
{
	pthread_once(&once, init_once);
}

const char *pfx_blas_corename(void)
{
	pfx_blas_init();
	return openblas_get_corename();
}
