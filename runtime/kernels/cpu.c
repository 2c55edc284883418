/* SPDX-License-Identifier: MIT */
/* What the CPU has, and which of our kernels therefore run (kernels.h). */
#include "kernels.h"

#include <cpuid.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long xcr0(void)
{
	unsigned lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((unsigned long long)hi << 32) | lo;
}

void kern_cpu_isa_probe(struct kern_cpu_isa *isa)
{
	memset(isa, 0, sizeof(*isa));
	unsigned a, b, c, d, max;
	if (!__get_cpuid(0, &max, &b, &c, &d))
		return;
	char vendor[13];
	memcpy(vendor, &b, 4);
	memcpy(vendor + 4, &d, 4);
	memcpy(vendor + 8, &c, 4);
	vendor[12] = 0;
	isa->amd = !strcmp(vendor, "AuthenticAMD") || !strcmp(vendor, "HygonGenuine");
	__cpuid(1, a, b, c, d);
	isa->sse3 = c & bit_SSE3;
	isa->ssse3 = c & bit_SSSE3;
	isa->sse41 = c & bit_SSE4_1;
	isa->sse42 = c & bit_SSE4_2;
	bool f16c = c & bit_F16C;
	/* The OS saves the YMM (XCR0 bits 1-2), ZMM (5-7) and tile (17-18)
	 * state, or those registers are not usable whatever CPUID says. */
	unsigned long long x = (c & bit_OSXSAVE) ? xcr0() : 0;
	bool ymm = (x & 0x6) == 0x6, zmm = ymm && (x & 0xe0) == 0xe0;
	bool tiles = (x & 0x60000) == 0x60000;
	isa->avx = ymm && (c & bit_AVX);
	isa->fma = isa->avx && (c & bit_FMA);
	isa->f16c = isa->avx && f16c;
	if (max < 7)
		return;
	__cpuid_count(7, 0, a, b, c, d);
	unsigned leaf7_subleaves = a;
	isa->avx2 = isa->avx && (b & bit_AVX2);
	isa->avx512f = zmm && (b & bit_AVX512F);
	isa->avx512dq = zmm && (b & bit_AVX512DQ);
	isa->avx512cd = zmm && (b & bit_AVX512CD);
	isa->avx512bw = zmm && (b & bit_AVX512BW);
	isa->avx512vl = zmm && (b & bit_AVX512VL);
	isa->amx_bf16 = tiles && (d & (1u << 22)) && (d & (1u << 24)); /* AMX-BF16, AMX-TILE */
	if (leaf7_subleaves >= 1) {
		__cpuid_count(7, 1, a, b, c, d);
		isa->avx512_bf16 = isa->avx512f && (a & (1u << 5));
	}
}


static bool turned_off(const char *var)
{
	const char *no = getenv(var);
	return no && *no && *no != '0';
}

static bool cpu_avx512(void)
{
	struct kern_cpu_isa isa;
	kern_cpu_isa_probe(&isa);
	return isa.avx512f;
}

static bool has_avx512(void)
{
	return cpu_avx512() && !turned_off("PFX_NO_AVX512");
}

static bool has_avx2(void)
{
	struct kern_cpu_isa isa;
	kern_cpu_isa_probe(&isa);
	return isa.avx2 && isa.fma && isa.f16c && !turned_off("PFX_NO_AVX2");
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

bool kern_cpu_avx512(void)
{
	static _Atomic int known = -1;
	return once(&known, has_avx512);
}

bool kern_cpu_avx2(void)
{
	static _Atomic int known = -1;
	return once(&known, has_avx2);
}

const char *kern_cpu_kernels(void)
{
	if (kern_cpu_avx512())
		return "AVX-512";
	if (!kern_cpu_avx2())
		return "portable, plain C (no AVX2 with F16C, or PFX_NO_AVX2 is set)";
	return cpu_avx512() ? "AVX2 (PFX_NO_AVX512 is set)" : "AVX2 (no AVX-512 on this CPU)";
}

/* ==== bf16 products ==== */

/* Both paths pack with AVX-512 (F and BW). */
static bool cpu_bf16(enum kern_bf16_path p)
{
	struct kern_cpu_isa isa;
	kern_cpu_isa_probe(&isa);
	if (!isa.avx512f || !isa.avx512bw)
		return false;
	if (p == KERN_BF16_AVX512)
		return isa.avx512_bf16;
	return p == KERN_BF16_AMX && isa.amx_bf16;
}

bool kern_bf16_can(enum kern_bf16_path p)
{
	if (p == KERN_BF16_SGEMM)
		return true;
	return cpu_bf16(p) && (p != KERN_BF16_AMX || kern_amx_granted());
}

static bool bf16_amx(void)
{
	return kern_cpu_avx512() && !turned_off("PFX_NO_AMX") && kern_bf16_can(KERN_BF16_AMX);
}

static bool bf16_dp(void)
{
	return kern_cpu_avx512() && !turned_off("PFX_NO_AVX512_BF16") &&
	       kern_bf16_can(KERN_BF16_AVX512);
}

enum kern_bf16_path kern_bf16_path(void)
{
	static _Atomic int amx = -1, dp = -1;
	if (once(&amx, bf16_amx))
		return KERN_BF16_AMX;
	return once(&dp, bf16_dp) ? KERN_BF16_AVX512 : KERN_BF16_SGEMM;
}

const char *kern_bf16_path_name(void)
{
	switch (kern_bf16_path()) {
	case KERN_BF16_AMX:
		return "bf16, AMX-BF16 tiles";
	case KERN_BF16_AVX512:
		if (!cpu_bf16(KERN_BF16_AMX))
			return "bf16, AVX512-BF16 (no AMX-BF16 on this CPU)";
		if (turned_off("PFX_NO_AMX"))
			return "bf16, AVX512-BF16 (PFX_NO_AMX is set)";
		return "bf16, AVX512-BF16 (Linux did not grant the AMX tile state)";
	default:
		if (!kern_cpu_avx512())
			return cpu_avx512() ? "bf16, as f32 products of bf16-rounded activations "
					      "(PFX_NO_AVX512 is set)"
					    : "bf16, as f32 products of bf16-rounded activations "
					      "(no AVX-512 on this CPU)";
		if (cpu_bf16(KERN_BF16_AVX512) && turned_off("PFX_NO_AVX512_BF16"))
			return "bf16, as f32 products of bf16-rounded activations "
			       "(PFX_NO_AVX512_BF16 is set)";
		return "bf16, as f32 products of bf16-rounded activations "
		       "(no AVX512-BF16 on this CPU)";
	}
}
