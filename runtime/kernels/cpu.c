/* SPDX-License-Identifier: MIT */
#include "cpu.h"

#include <cpuid.h>
#include <stdlib.h>

static bool turned_off(const char *var)
{
	const char *no = getenv(var);
	return no && *no && *no != '0';
}

static bool has_avx512(void)
{
	return __builtin_cpu_supports("avx512f") && !turned_off("PFX_NO_AVX512");
}

static bool has_avx2(void)
{
	/* F16C from CPUID itself: clang's __builtin_cpu_supports does not
	 * know it. */
	unsigned a, b, c = 0, d;
	bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c &&
	       !turned_off("PFX_NO_AVX2");
}

/* Decided once: the kernels of one pass must agree, and getenv per call
 * would cost more than some of them. -1 until known; a race only computes
 * the same answer twice. */
static bool once(_Atomic int *known, bool (*probe)(void))
{
	int v = *known;
	if (v < 0)
		*known = v = probe();
	return v;
}

bool pfx_cpu_avx512(void)
{
	static _Atomic int known = -1;
	return once(&known, has_avx512);
}

bool pfx_cpu_avx2(void)
{
	static _Atomic int known = -1;
	return once(&known, has_avx2);
}

const char *pfx_cpu_kernels(void)
{
	if (pfx_cpu_avx512())
		return "AVX-512";
	if (!pfx_cpu_avx2())
		return "portable, plain C (no AVX2 with F16C, or PFX_NO_AVX2 is set)";
	return __builtin_cpu_supports("avx512f") ? "AVX2 (PFX_NO_AVX512 is set)"
						 : "AVX2 (no AVX-512 on this CPU)";
}
