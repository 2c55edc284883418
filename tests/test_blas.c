/* SPDX-License-Identifier: MIT */
/*
 * OpenBLAS's kernels (runtime/kernels/blas.c): the core chosen from the CPU's
 * instruction sets, on made-up CPUs; this process running the core chosen
 * for this CPU; a user's OPENBLAS_CORETYPE kept, and then prefix-run info
 * and bench/forward saying that it is not the best (bench/forward refusing
 * to measure).
 */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels.h"
#include "daemon_util.h"
#include "helpers.h"
#include "model.h"

static bool every_core(const char *core, void *ctx)
{
	(void)ctx;
	return true;
}

/* ctx: a NULL-terminated list of the cores an OpenBLAS build has. */
static bool listed(const char *core, void *ctx)
{
	for (const char *const *c = ctx; *c; c++)
		if (!strcmp(*c, core))
			return true;
	return false;
}

#define SSE .sse3 = true, .ssse3 = true, .sse41 = true, .sse42 = true
#define AVX2 SSE, .avx = true, .avx2 = true, .fma = true
#define SKX AVX2, .avx512f = true, .avx512dq = true, .avx512bw = true, .avx512vl = true, \
	    .avx512cd = true

Test(blas, best_core_from_the_instruction_sets)
{
	static const struct {
		struct kern_cpu_isa isa;
		const char *want;
	} cases[] = {
		/* This machine: AVX-512 with BF16 and AMX, which 0.3.21 calls Prescott. */
		{ { SKX, .avx512_bf16 = true, .amx_bf16 = true }, "SapphireRapids" },
		{ { SKX, .avx512_bf16 = true }, "Cooperlake" },
		{ { SKX }, "SkylakeX" },
		{ { SKX, .amd = true }, "SkylakeX" },         /* Zen 4: AVX-512 beats Zen's AVX2 */
		{ { AVX2, .avx512f = true, .avx512cd = true }, "Haswell" }, /* Knights Landing: no BW/DQ/VL */
		{ { AVX2 }, "Haswell" },
		{ { AVX2, .amd = true }, "Zen" },
		{ { SSE, .avx = true }, "Sandybridge" },
		{ { SSE, .avx = true, .fma = true }, "Sandybridge" }, /* FMA without AVX2 */
		{ { SSE }, "Nehalem" },
		{ { .sse3 = true, .ssse3 = true }, "Core2" },
		{ { .sse3 = true }, "Prescott" },
		{ { 0 }, NULL },
		/* Instructions the OS does not save are absent (the probe's job). */
		{ { SSE, .avx512f = false, .avx2 = false }, "Nehalem" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *got = kern_blas_best_core(&cases[i].isa, every_core, NULL);
		if (!cases[i].want)
			cr_expect_null(got, "case %zu: %s", i, got);
		else
			cr_expect(got && !strcmp(got, cases[i].want), "case %zu: %s, not %s", i,
				  got ? got : "NULL", cases[i].want);
	}
}

/* Only the cores the OpenBLAS build has: Debian 12's 0.3.21 has no
 * SapphireRapids (nor does a build without a compiler for Cooperlake). */
Test(blas, best_core_the_openblas_build_has)
{
	struct kern_cpu_isa spr = { SKX, .avx512_bf16 = true, .amx_bf16 = true };
	static const char *const debian12[] = { "Prescott", "Core2", "Nehalem", "Sandybridge",
						"Haswell", "Zen", "SkylakeX", "Cooperlake", NULL };
	static const char *const no_bf16[] = { "Prescott", "Core2", "Nehalem", "Sandybridge",
					       "Haswell", "Zen", "SkylakeX", NULL };
	static const char *const generic[] = { "Prescott", NULL };
	static const char *const none[] = { NULL };
	cr_expect_str_eq(kern_blas_best_core(&spr, listed, (void *)debian12), "Cooperlake");
	cr_expect_str_eq(kern_blas_best_core(&spr, listed, (void *)no_bf16), "SkylakeX");
	cr_expect_str_eq(kern_blas_best_core(&spr, listed, (void *)generic), "Prescott");
	cr_expect_null(kern_blas_best_core(&spr, listed, (void *)none));
}

/* The probe agrees with the compiler's own view of this CPU. */
Test(blas, probe_sees_this_cpu)
{
	struct kern_cpu_isa isa;
	kern_cpu_isa_probe(&isa);
	__builtin_cpu_init();
	cr_expect_eq(isa.avx2, !!__builtin_cpu_supports("avx2"));
	cr_expect_eq(isa.avx512f, !!__builtin_cpu_supports("avx512f"));
	cr_expect_eq(isa.avx512bw, !!__builtin_cpu_supports("avx512bw"));
	cr_expect_eq(isa.sse42, !!__builtin_cpu_supports("sse4.2"));
}

/* Whether /proc/cpuinfo lists flag for the first CPU: the kernel's view,
 * which also drops what the OS does not save (XCR0). */
static bool cpuinfo_has(const char *flag)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	cr_assert(f);
	char line[8192];
	bool found = false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "flags", 5)) {
			for (char *w = strtok(strchr(line, ':') + 1, " \n"); w; w = strtok(NULL, " \n"))
				found |= !strcmp(w, flag);
			break;
		}
	fclose(f);
	return found;
}

/* Every bit the choice reads, against the kernel's reading of CPUID: a
 * wrong leaf, subleaf or bit shows on a CPU that has the feature. */
Test(blas, probe_agrees_with_the_kernel)
{
	struct kern_cpu_isa isa;
	kern_cpu_isa_probe(&isa);
	static const struct {
		const char *flag;
		size_t off;
	} bits[] = {
		{ "pni", offsetof(struct kern_cpu_isa, sse3) },
		{ "ssse3", offsetof(struct kern_cpu_isa, ssse3) },
		{ "sse4_1", offsetof(struct kern_cpu_isa, sse41) },
		{ "sse4_2", offsetof(struct kern_cpu_isa, sse42) },
		{ "avx", offsetof(struct kern_cpu_isa, avx) },
		{ "avx2", offsetof(struct kern_cpu_isa, avx2) },
		{ "fma", offsetof(struct kern_cpu_isa, fma) },
		{ "avx512f", offsetof(struct kern_cpu_isa, avx512f) },
		{ "avx512dq", offsetof(struct kern_cpu_isa, avx512dq) },
		{ "avx512bw", offsetof(struct kern_cpu_isa, avx512bw) },
		{ "avx512vl", offsetof(struct kern_cpu_isa, avx512vl) },
		{ "avx512cd", offsetof(struct kern_cpu_isa, avx512cd) },
		{ "avx512_bf16", offsetof(struct kern_cpu_isa, avx512_bf16) },
	};
	for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
		cr_expect_eq(*(const bool *)((const char *)&isa + bits[i].off),
			     cpuinfo_has(bits[i].flag), "%s", bits[i].flag);
	cr_expect_eq(isa.amx_bf16, cpuinfo_has("amx_bf16") && cpuinfo_has("amx_tile"));
}

/* This process runs the core chosen for this CPU, unless the environment
 * chose one (OPENBLAS_CORETYPE), which is kept. */
Test(blas, this_process_runs_the_core_chosen_for_this_cpu)
{
	const char *user = getenv("OPENBLAS_CORETYPE");
	const char *want = kern_blas_expected_core(), *got = pfx_blas_corename();
	cr_assert(want, "no core expected for this CPU (running %s)", got);
	struct pfx_error why = { "" };
	if (user && *user) {
		/* OpenBLAS's reading of it is its own (0.3.21 runs Cooperlake for
		 * "SapphireRapids"): what must hold is that it was left alone. */
		cr_expect_str_eq(getenv("OPENBLAS_CORETYPE"), user);
		if (strcasecmp(got, want)) {
			cr_expect(!kern_blas_core_ok(&why));
			cr_expect(strstr(why.msg, "OPENBLAS_CORETYPE="), "%s", why.msg);
		}
		return;
	}
	cr_expect_eq(strcasecmp(got, want), 0, "OpenBLAS runs %s, not %s", got, want);
	cr_expect(kern_blas_core_ok(&why), "%s", why.msg);
	/* Children choose for themselves: the choice is not left in the environment. */
	cr_expect_null(getenv("OPENBLAS_CORETYPE"));
}

/* A user's OPENBLAS_CORETYPE is kept, and prefix-run info says what the
 * CPU would have had. */
Test(blas, a_users_coretype_is_kept_and_info_says_so)
{
	const char *want = kern_blas_expected_core();
	cr_assert(want);
	if (!strcasecmp(want, "Prescott"))
		cr_skip_test("Prescott is the best this CPU supports");
	struct cmd_result r = run("info --model %s/neox-tiny", fixtures_dir());
	cr_assert_eq(r.status, 0, "%s", r.out);
	const char *user = getenv("OPENBLAS_CORETYPE");
	char line[160];
	if (!user || !*user) {
		snprintf(line, sizeof(line), "BLAS kernels     %s\n", want);
		cr_expect(strstr(r.out, line), "no '%s' in:\n%s", line, r.out);
	}
	struct cmd_result forced;
	forced.status = td_sh(forced.out, sizeof(forced.out),
			      "OPENBLAS_CORETYPE=Prescott %s info --model %s/neox-tiny", PREFIX_RUN,
			      fixtures_dir());
	cr_assert_eq(forced.status, 0, "%s", forced.out);
	snprintf(line, sizeof(line),
		 "BLAS kernels     Prescott, not %s, the best this CPU supports "
		 "(OPENBLAS_CORETYPE=Prescott is set)\n", want);
	cr_expect(strstr(forced.out, line), "no '%s' in:\n%s", line, forced.out);
}

/* No figure measured on the wrong kernels: bench/forward names both cores
 * and exits non-zero before it measures anything. */
Test(blas, bench_forward_refuses_to_measure_on_other_kernels)
{
	const char *want = kern_blas_expected_core();
	cr_assert(want);
	if (!strcasecmp(want, "Prescott"))
		cr_skip_test("Prescott is the best this CPU supports");
	char out[4096];
	int st = td_sh(out, sizeof(out), "OPENBLAS_CORETYPE=Prescott %s", BENCH_FORWARD);
	cr_expect_eq(st, 1, "status %d: %s", st, out);
	char line[160];
	snprintf(line, sizeof(line), "blas_core Prescott, expected %s for this CPU", want);
	cr_expect(strstr(out, line), "no '%s' in:\n%s", line, out);
	cr_expect(strstr(out, "nothing measured"), "%s", out);
	cr_expect(!strstr(out, "prefill_tok_s"), "it measured: %s", out);
}
