/* SPDX-License-Identifier: MIT */
/*
 * OpenBLAS set-up.
 *
 * Kernels: Debian's OpenBLAS 0.3.21 is a DYNAMIC_ARCH build that picks its
 * kernels from a table of CPU models, and a model it does not know falls
 * to a weaker core: a current AVX-512 Xeon (family 6 model 0xcf) runs the
 * SSE3 "Prescott" kernels at a quarter of the speed, some AMD Zen 4 parts
 * get AVX2 ones. So we choose from the CPU's instruction sets instead: the
 * best core whose instructions the CPU has (kern_blas_best_core), among the
 * cores this OpenBLAS was built with (its gotoblas_<CORE> tables), and
 * re-run OpenBLAS's selection with that choice. A user who set
 * OPENBLAS_CORETYPE keeps theirs. The two entry points are exported by every
 * DYNAMIC_ARCH build but not declared in cblas.h, so they are weak: with a
 * build that lacks them nothing changes.
 *
 * Threads: the runtime splits every matrix product over its own worker
 * pool, so OpenBLAS is told to use one thread per call. Two thread pools
 * each sized to the core count would oversubscribe the machine.
 */
#include "kernels.h"
#include "model.h"

#include <cblas.h>
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *expected;   /* set once by init_once */
static char user_core[32];     /* OPENBLAS_CORETYPE as the user set it */
static bool switch_refused;    /* OpenBLAS ran another core than asked for */

/* ==== Which core ==== */

static bool skx(const struct kern_cpu_isa *i)
{
	return i->avx512f && i->avx512dq && i->avx512bw && i->avx512vl && i->avx512cd && i->avx2 &&
	       i->fma;
}

static bool has_sapphirerapids(const struct kern_cpu_isa *i)
{
	return skx(i) && i->avx512_bf16 && i->amx_bf16;
}
static bool has_cooperlake(const struct kern_cpu_isa *i) { return skx(i) && i->avx512_bf16; }
static bool has_zen(const struct kern_cpu_isa *i) { return i->amd && i->avx2 && i->fma; }
static bool has_haswell(const struct kern_cpu_isa *i) { return i->avx2 && i->fma; }
static bool has_sandybridge(const struct kern_cpu_isa *i) { return i->avx && i->sse42; }
static bool has_nehalem(const struct kern_cpu_isa *i) { return i->sse42 && i->sse41 && i->ssse3; }
static bool has_core2(const struct kern_cpu_isa *i) { return i->ssse3 && i->sse3; }
static bool has_prescott(const struct kern_cpu_isa *i) { return i->sse3; }

/* Best first. An AMD part with AVX-512 still takes SkylakeX: the Zen
 * tables are AVX2 kernels. */
static const struct {
	const char *name;
	bool (*fits)(const struct kern_cpu_isa *);
} cores[] = {
	{ "SapphireRapids", has_sapphirerapids },
	{ "Cooperlake", has_cooperlake },
	{ "SkylakeX", skx },
	{ "Zen", has_zen },
	{ "Haswell", has_haswell },
	{ "Sandybridge", has_sandybridge },
	{ "Nehalem", has_nehalem },
	{ "Core2", has_core2 },
	{ "Prescott", has_prescott },
};

const char *kern_blas_best_core(const struct kern_cpu_isa *isa,
				bool (*has)(const char *core, void *ctx), void *ctx)
{
	for (size_t i = 0; i < sizeof(cores) / sizeof(cores[0]); i++)
		if (cores[i].fits(isa) && has(cores[i].name, ctx))
			return cores[i].name;
	return NULL;
}

/* Whether the OpenBLAS this process runs has a kernel table for core:
 * a DYNAMIC_ARCH build exports gotoblas_<CORE> for each core it built. */
static bool openblas_has(const char *core, void *handle)
{
	char sym[64] = "gotoblas_";
	size_t n = strlen(sym);
	for (const char *p = core; *p && n + 1 < sizeof(sym); p++)
		sym[n++] = (char)toupper((unsigned char)*p);
	sym[n] = 0;
	return dlsym(handle, sym) != NULL;
}

/* The loaded OpenBLAS, looked up from one of its own functions, so that
 * this works when the runtime itself was loaded RTLD_LOCAL. */
static void *openblas_handle(void)
{
	Dl_info info;
	if (!dladdr((void *)openblas_get_corename, &info) || !info.dli_fname)
		return NULL;
	return dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
}

/*
 * OpenBLAS's first buffer allocation in any thread runs its core selection
 * too (0.3.21 memory.c), and its server threads make theirs when they start:
 * one that does so while select_core has the kernel table emptied writes it
 * under us (a crash about once in 3,000 starts). One product, too large for
 * the small-matrix kernels that need no buffer, makes that first allocation
 * here, under OpenBLAS's lock: any later one skips the selection.
 */
static void openblas_settle(void)
{
	enum { N = 128 };
	static float a[N * N], c[N * N];
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, a, N, 0.0f, c,
		    N);
}

/* Re-runs OpenBLAS's core selection with OPENBLAS_CORETYPE=core (NULL:
 * its own choice); the variable is removed again so that children of this
 * process choose for themselves. */
static void select_core(const char *core)
{
	if (core)
		setenv("OPENBLAS_CORETYPE", core, 1);
	gotoblas_dynamic_quit();
	gotoblas_dynamic_init();
	if (core)
		unsetenv("OPENBLAS_CORETYPE");
}

/* Whether core can run here: this OpenBLAS has its table and, unless the
 * user chose, switching to it sticks (OpenBLAS falls back to a core of its
 * own choosing for a name it cannot force, e.g. a newer OpenBLAS that
 * lists SapphireRapids but cannot select it). Tried best first, so a
 * refused core gives way to the next best, not to OpenBLAS's default. */
static bool usable(const char *core, void *handle)
{
	if (!openblas_has(core, handle))
		return false;
	if (user_core[0] || !strcasecmp(openblas_get_corename(), core))
		return true;
	select_core(core);
	if (strcasecmp(openblas_get_corename(), core)) {
		switch_refused = true;
		return false;
	}
	return true;
}

static void init_once(void)
{
	const char *user = getenv("OPENBLAS_CORETYPE");
	if (user && *user)
		snprintf(user_core, sizeof(user_core), "%s", user);
	void *h = gotoblas_dynamic_init && gotoblas_dynamic_quit ? openblas_handle() : NULL;
	if (h) {
		struct kern_cpu_isa isa;
		kern_cpu_isa_probe(&isa);
		if (!user_core[0])
			openblas_settle();
		expected = kern_blas_best_core(&isa, usable, h);
		dlclose(h);
		if (!expected && switch_refused)
			select_core(NULL);
	}
	openblas_set_num_threads(1);
}

void kern_blas_init(void)
{
	pthread_once(&once, init_once);
}

/* Also at load: switching cores sets the environment and briefly empties
 * OpenBLAS's kernel table, which is only safe while no other thread of the
 * host program reads either, as before its main() starts threads. */
__attribute__((constructor)) static void blas_at_load(void)
{
	kern_blas_init();
}

void pfx_kernels_describe(struct pfx_kernels *out)
{
	memset(out, 0, sizeof(*out));
	out->blas_core = pfx_blas_corename();
	out->blas_best = kern_blas_expected_core();
	struct pfx_error why = { "" };
	out->blas_is_best = kern_blas_core_ok(&why);
	snprintf(out->blas_why, sizeof(out->blas_why), "%s", why.msg);
	out->own = kern_cpu_kernels();
	out->bf16 = kern_bf16_path_name() + strlen("bf16, ");
}

const char *pfx_blas_corename(void)
{
	kern_blas_init();
	return openblas_get_corename();
}

const char *kern_blas_expected_core(void)
{
	kern_blas_init();
	return expected;
}

bool kern_blas_core_ok(struct pfx_error *why)
{
	kern_blas_init();
	if (!expected || !strcasecmp(openblas_get_corename(), expected))
		return true;
	if (user_core[0])
		pfx_errorf(why, 0, "OPENBLAS_CORETYPE=%s is set", user_core);
	else if (switch_refused)
		pfx_errorf(why, 0, "this OpenBLAS did not switch to it");
	else
		pfx_errorf(why, 0, "OpenBLAS chose another core");
	return false;
}
