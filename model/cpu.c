/* SPDX-License-Identifier: MIT */
#include "cpu.h"

#include <stdlib.h>

bool pfx_cpu_avx512(void)
{
	/* Decided once: the kernels of one pass must agree, and getenv per
	 * call would cost more than some of them. -1 until known; a race
	 * only computes the same answer twice. */
	static _Atomic int known = -1;
	int v = known;
	if (v < 0) {
		const char *no = getenv("PFX_NO_AVX512");
		v = __builtin_cpu_supports("avx512f") && !(no && *no && *no != '0');
		known = v;
	}
	return v;
}
