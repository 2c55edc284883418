/* SPDX-License-Identifier: MIT */
/*
 * The bf16 matmul (--matmul bf16): its kernels against plain sums of the
 * same bf16 values on shapes off every block size, on each path this CPU
 * has; then models, every fixture written as a bf16 checkpoint and run with
 * the bf16 matmul, against transformers' float32 logits and greedy tokens.
 * The meson runs -noamx and -nobf16 repeat this with PFX_NO_AMX and
 * PFX_NO_AVX512_BF16 set, so the model checks run on every path.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cache.h"
#include "daemon_util.h"
#include "helpers.h"
#include "kernels.h"
#include "random_model.h"
#include "safetensors.h"


static float val(uint32_t *seed)
{
	*seed = *seed * 1664525u + 1013904223u;
	return (float)((*seed >> 9) % 2001) / 1000.0f - 1.0f;
}

static const char *path_name(enum kern_bf16_path p)
{
	return p == KERN_BF16_AMX ? "AMX" : "AVX512-BF16";
}

/* y (m rows of ldy) against the plain sums of x and W rounded to bf16;
 * columns past n and the row past m untouched. */
static void check_product(enum kern_bf16_path path, int m, int n, int k, int beta, uint32_t *seed)
{
	int ldx = k + 3, ldy = n + 5, lda = kern_bf16_lda(k);
	float *x = malloc(sizeof(float) * (size_t)m * ldx);
	uint16_t *w = malloc(2 * (size_t)n * k);
	float *y = malloc(sizeof(float) * (size_t)(m + 1) * ldy);
	float *y0 = malloc(sizeof(float) * (size_t)(m + 1) * ldy);
	uint16_t *a = malloc(2 * (size_t)kern_bf16_rows(m) * lda);
	uint16_t *panel = malloc(2 * kern_bf16_panel_elems(n, k));
	for (int i = 0; i < m * ldx; i++)
		x[i] = val(seed);
	for (int i = 0; i < n * k; i++)
		w[i] = kern_f32_to_bf16(val(seed));
	for (int i = 0; i < (m + 1) * ldy; i++)
		y[i] = y0[i] = val(seed);
	kern_bf16_pack_a(0, kern_bf16_rows(m), m, k, x, ldx, a);
	kern_bf16_pack_b(n, k, w, panel);
	kern_gemm_bf16(path, m, n, k, a, panel, (float)beta, y, ldy);
	for (int r = 0; r <= m; r++)
		for (int j = 0; j < ldy; j++) {
			double want = y0[r * ldy + j];
			if (r < m && j < n) {
				double s = 0;
				for (int p = 0; p < k; p++)
					s += (double)kern_bf16_to_f32(kern_f32_to_bf16(x[r * ldx + p])) *
					     kern_bf16_to_f32(w[j * k + p]);
				want = s + beta * want;
			}
			cr_assert(fabs(y[r * ldy + j] - want) <= 1e-6 * (k + 4),
				  "%s m=%d n=%d k=%d beta=%d: y[%d][%d] = %.9g, not %.9g",
				  path_name(path), m, n, k, beta, r, j, y[r * ldy + j], want);
		}
	free(x);
	free(w);
	free(y);
	free(y0);
	free(a);
	free(panel);
}

static void check_path(enum kern_bf16_path path)
{
	if (!kern_bf16_can(path))
		cr_skip_test("no %s on this CPU (or not granted by the kernel)", path_name(path));
	/* 1 row, rows around the 8-row and 32-row blocks; outputs around 16,
	 * 32 and 48; inputs odd, around 32 and 64. */
	const int ms[] = { 1, 2, 7, 8, 9, 31, 32, 33, 70 }, ns[] = { 1, 15, 16, 17, 33, 47, 48, 50, 97 };
	const int ks[] = { 1, 2, 3, 31, 32, 33, 63, 64, 65, 130 };
	uint32_t seed = 7;
	for (size_t i = 0; i < sizeof(ms) / sizeof(*ms); i++)
		for (size_t j = 0; j < sizeof(ns) / sizeof(*ns); j++)
			for (size_t l = 0; l < sizeof(ks) / sizeof(*ks); l++)
				check_product(path, ms[i], ns[j], ks[l], (int)((i + j + l) % 2), &seed);
}

Test(bf16_kernels, avx512_bf16_products_equal_the_plain_sums) { check_path(KERN_BF16_AVX512); }
Test(bf16_kernels, amx_products_equal_the_plain_sums) { check_path(KERN_BF16_AMX); }

Test(bf16_kernels, rounding_is_the_scalar_one)
{
	float src[37], dst[37];
	uint32_t seed = 3;
	for (int i = 0; i < 37; i++)
		src[i] = val(&seed) * 1000.0f;
	src[5] = NAN;
	src[6] = INFINITY;
	kern_bf16_round(src, 37, dst);
	for (int i = 0; i < 37; i++) {
		uint32_t got, want;
		float w = kern_bf16_to_f32(kern_f32_to_bf16(src[i]));
		memcpy(&got, &dst[i], 4);
		memcpy(&want, &w, 4);
		cr_assert_eq(got, want, "%d: %g rounds to %08x, not %08x", i, src[i], got, want);
	}
	/* and packing rounds the same way, zero past k and past m */
	int lda = kern_bf16_lda(37);
	uint16_t *a = malloc(2 * (size_t)kern_bf16_rows(1) * lda);
	kern_bf16_pack_a(0, kern_bf16_rows(1), 1, 37, src, 37, a);
	for (int r = 0; r < kern_bf16_rows(1); r++)
		for (int p = 0; p < lda; p++) {
			uint16_t want = r == 0 && p < 37 ? kern_f32_to_bf16(src[p]) : 0;
			cr_assert_eq(a[r * lda + p], want, "a[%d][%d] = %04x, not %04x", r, p,
				     a[r * lda + p], want);
		}
	free(a);
}

static bool set(const char *var)
{
	const char *v = getenv(var);
	return v && *v && *v != '0';
}

Test(bf16_kernels, the_switches_choose_the_path)
{
	enum kern_bf16_path p = kern_bf16_path();
	enum kern_bf16_path want = KERN_BF16_SGEMM;
	bool avx512 = kern_cpu_avx512();
	if (avx512 && !set("PFX_NO_AMX") && kern_bf16_can(KERN_BF16_AMX))
		want = KERN_BF16_AMX;
	else if (avx512 && !set("PFX_NO_AVX512_BF16") && kern_bf16_can(KERN_BF16_AVX512))
		want = KERN_BF16_AVX512;
	cr_assert_eq(p, want, "path %d, not %d (%s)", p, want, kern_bf16_path_name());
	const char *name = kern_bf16_path_name();
	cr_assert(!strncmp(name, "bf16, ", 6), "%s", name);
	if (p == KERN_BF16_AVX512 && set("PFX_NO_AMX") && kern_bf16_can(KERN_BF16_AMX))
		cr_assert(strstr(name, "PFX_NO_AMX is set"), "%s", name);
	if (p == KERN_BF16_SGEMM && avx512 && set("PFX_NO_AVX512_BF16") &&
	    kern_bf16_can(KERN_BF16_AVX512))
		cr_assert(strstr(name, "PFX_NO_AVX512_BF16 is set"), "%s", name);
}

/*
 * A kernel that refuses the tile state (older than 5.16, or a sandbox):
 * ARCH_REQ_XCOMP_PERM fails here by a seccomp filter, before this test's
 * process first asks, and the AVX512-BF16 path runs instead, saying why.
 */
Test(bf16_kernels, a_refused_tile_state_falls_back_to_avx512_bf16)
{
	if (!kern_cpu_avx512() || !kern_bf16_can(KERN_BF16_AVX512) || set("PFX_NO_AMX") ||
	    set("PFX_NO_AVX512_BF16"))
		cr_skip_test("no AVX512-BF16 path to fall back to here");
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_arch_prctl, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };
	cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
	cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
	cr_assert(!kern_bf16_can(KERN_BF16_AMX), "tiles used without the kernel's leave");
	cr_assert_eq(kern_bf16_path(), KERN_BF16_AVX512);
	const char *name = kern_bf16_path_name();
	struct kern_cpu_isa isa;
	kern_cpu_isa_probe(&isa);
	if (isa.amx_bf16)
		cr_expect(strstr(name, "Linux did not grant the AMX tile state"), "%s", name);
}

/* ==== Models ==== */

static char tmp[] = "/tmp/pfx-mm16-XXXXXX";

static void setup(void)
{
	cr_assert(mkdtemp(tmp), "mkdtemp");
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	cr_expect_eq(system(cmd), 0);
}

/* tmp/<name>: fixture name's f32 checkpoint in bf16. */
static const char *write_bf16(const char *name)
{
	static char dir[600], src[600];
	snprintf(dir, sizeof(dir), "%s/%s", tmp, name);
	snprintf(src, sizeof(src), "%s/%s", fixtures_dir(), name);
	return write_16bit_checkpoint(src, dir, "BF16");
}

static struct pfx_model *load_mm(const char *dir, enum pfx_matmul mm)
{
	struct pfx_model_opts o = { .threads = 2, .matmul = mm };
	return load_model_opts(dir, &o);
}

/* n greedy tokens after prompt: its prefill on m's products, decode in
 * f32 (malloc'd). */
static int32_t *greedy(struct pfx_model *m, const int32_t *prompt, size_t np, size_t n)
{
	struct pfx_error err;
	struct pfx_session *s;
	int V = pfx_model_config(m)->vocab;
	float *g = calloc((size_t)V, sizeof(float));
	int32_t *out = calloc(n, sizeof(int32_t));
	cr_assert(g && out);
	cr_assert_eq(pfx_session_new(m, &s, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_append(s, prompt, np, PFX_LOGITS_LAST, g, &err), 0, "%s", err.msg);
	for (size_t i = 0; i < n; i++) {
		out[i] = argmax(g, V);
		cr_assert_eq(pfx_session_decode(s, out[i], g, &err), 0, "%s", err.msg);
	}
	pfx_session_free(s);
	free(g);
	return out;
}

/* A fixture's bounds: logits from transformers' (which ran the f32
 * weights) and from f32 products of the same bf16 checkpoint (the error
 * the bf16 matmul adds), each the measured worst plus a fifth; greedy
 * tokens that agree, of 20, with transformers and with f32 products
 * (docs/perf/2026-11-26-bf16-matmul.md). */
struct bf16_fixture {
	const char *name;
	float tol, added;
	int greedy, greedy_self;
};

/* The fixture's logits, cached suffix and greedy tokens with the bf16
 * matmul, against transformers; and against the same bf16 checkpoint with
 * f32 products, which must differ (the option does something). */
static void check_fixture(const struct bf16_fixture *f)
{
	const char *name = f->name;
	const char *dir = write_bf16(name);
	struct pfx_model *m = load_mm(dir, PFX_MATMUL_BF16), *m32 = load_mm(dir, PFX_MATMUL_F32);
	cr_assert_str_eq(pfx_model_matmul(m), kern_bf16_path_name());
	cr_assert_str_eq(pfx_model_matmul(m32), "f32");
	size_t nt, nl, ns, ng, np;
	int32_t *tok = expected_i32(name, "tokens", &nt);
	float *full = expected_f32(name, "logits_full", &nl);
	float *suffix = expected_f32(name, "logits_suffix_cached", &ns);
	int32_t *gp = expected_i32(name, "greedy_prompt", &np);
	int32_t *gout = expected_i32(name, "greedy_out", &ng);
	float *l = logits_uncached(m, tok, nt), *l32 = logits_uncached(m32, tok, nt);
	float d = max_abs_diff(l, full, nl), d32 = max_abs_diff(l32, full, nl);
	float self = max_abs_diff(l, l32, nl);
	cr_log_info("%s: bf16 matmul %.3g, f32 matmul %.3g from transformers; %.3g apart", name,
		    d, d32, self);
	cr_expect(d <= f->tol, "%s: bf16 matmul logits %g from transformers'", name, d);
	cr_expect(self > 0.0f, "%s: the bf16 matmul gave the f32 matmul's logits", name);
	cr_expect(self <= f->added, "%s: the bf16 matmul moved the logits by %g", name, self);

	/* 32 tokens cached, then 16 in one call */
	struct pfx_error err;
	struct pfx_session *s;
	float *out = calloc(ns, sizeof(float));
	cr_assert_eq(pfx_session_new(m, &s, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_append(s, tok, 32, PFX_LOGITS_NONE, NULL, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_append(s, tok + 32, nt - 32, PFX_LOGITS_ALL, out, &err), 0, "%s",
		     err.msg);
	d = max_abs_diff(out, suffix, ns);
	cr_expect(d <= f->tol, "%s: cached suffix %g from transformers'", name, d);
	pfx_session_free(s);

	/* greedy: the prompt's prefill on the bf16 matmul, decode in f32,
	 * against transformers and against f32 products of the same bf16
	 * checkpoint (whose weights' rounding alone may already part from
	 * transformers' f32 weights on a model of flat logits: phi3-tiny) */
	int32_t *mine = greedy(m, gp, np, ng), *ref = greedy(m32, gp, np, ng);
	int agree = 0, same = 0;
	for (size_t i = 0; i < ng; i++) {
		agree += mine[i] == gout[i];
		same += mine[i] == ref[i];
	}
	cr_log_info("%s: greedy %d of %zu as transformers, %d as f32 products", name, agree, ng,
		    same);
	cr_expect_geq(agree, f->greedy, "%s: greedy tokens agree %d of %zu", name, agree, ng);
	cr_expect_geq(same, f->greedy_self, "%s: %d of %zu greedy tokens as f32 products", name,
		      same, ng);
	free(mine);
	free(ref);
	free(out);
	free(l);
	free(l32);
	free(tok);
	free(full);
	free(suffix);
	free(gp);
	free(gout);
	pfx_model_free(m);
	pfx_model_free(m32);
}

TestSuite(matmul16, .init = setup, .fini = teardown);


static const struct bf16_fixture fixtures16[] = {
	/* measured: 0.196 0.124 20 20 */
	{ "neox-tiny", 0.24f, 0.15f, 20, 20 },
	/* 0.419 0.254 20 20 */
	{ "neox-tiny-seq", 0.51f, 0.31f, 20, 20 },
	/* 0.713 0.316 20 20 */
	{ "llama-tiny-gqa", 0.86f, 0.38f, 20, 20 },
	/* 0.999 0.529 20 20 */
	{ "llama3-tiny-ropescaled", 1.2f, 0.64f, 20, 20 },
	/* 0.72 0.446 16 20: the weights' rounding parts from transformers */
	{ "qwen2-tiny", 0.87f, 0.54f, 16, 20 },
	/* 1.13 0.393 20 20 (f32 products of the bf16 weights: 1.28) */
	{ "mistral-tiny-swa", 1.36f, 0.48f, 20, 20 },
	/* 0.617 0.276 3 20: flat logits, as with bf16 KV (test_kv16.c) */
	{ "phi3-tiny", 0.75f, 0.34f, 3, 20 },
	/* 0.409 0.266 20 20 */
	{ "gemma-tiny", 0.5f, 0.32f, 20, 20 },
};

Test(matmul16, neox_tiny) { check_fixture(&fixtures16[0]); }
Test(matmul16, neox_tiny_seq) { check_fixture(&fixtures16[1]); }
Test(matmul16, llama_tiny_gqa) { check_fixture(&fixtures16[2]); }
Test(matmul16, llama3_tiny_ropescaled) { check_fixture(&fixtures16[3]); }
Test(matmul16, qwen2_tiny) { check_fixture(&fixtures16[4]); }
Test(matmul16, mistral_tiny_swa) { check_fixture(&fixtures16[5]); }
Test(matmul16, phi3_tiny) { check_fixture(&fixtures16[6]); }
Test(matmul16, gemma_tiny) { check_fixture(&fixtures16[7]); }

Test(matmul16, a_model_without_bf16_weights_is_refused)
{
	struct pfx_model_opts o = { .threads = 1, .matmul = PFX_MATMUL_BF16 };
	expect_opts_refused(&o, "holds none");
	struct pfx_model_opts up = { .threads = 1, .matmul = PFX_MATMUL_BF16,
				     .weights = PFX_WEIGHTS_F32 };
	struct pfx_model *m;
	struct pfx_error err;
	cr_assert_eq(pfx_model_load(write_bf16("llama-tiny-gqa"), &up, &m, &err), -EINVAL,
		     "upcast bf16 weights are f32: nothing for the bf16 matmul");
	cr_expect(strstr(err.msg, "holds none"), "%s", err.msg);
}

Test(matmul16, an_unknown_matmul_option_is_refused)
{
	struct pfx_model_opts o = { .threads = 1, .matmul = (enum pfx_matmul)7 };
	expect_opts_refused(&o, "matmul option 7");
}

/*
 * Widths where one thread's share of a product spans several panels of W
 * and no size is a multiple of a block (70 rows, 1000 and 2900 inputs):
 * the bf16 matmul's logits stay as close to the f32 products' as on the
 * fixtures, relative to their size. A misplaced panel or row would move
 * them by as much as they are.
 */
Test(matmul16, products_across_panels)
{
	struct pfx_config c = {
		.arch = "LlamaForCausalLM", .hidden = 1000, .n_layers = 1, .n_heads = 10,
		.n_kv_heads = 5, .head_dim = 100, .intermediate = 2900, .vocab = 301,
		.max_positions = 256, .rotary_dim = 100, .rope_base = 10000.0f, .norm_eps = 1e-5f,
		.norm = PFX_NORM_RMS, .act = PFX_ACT_SILU,
	};
	char dir[600];
	struct pfx_error err;
	snprintf(dir, sizeof(dir), "%s/wide", tmp);
	cr_assert_eq(pfx_random_checkpoint(dir, &c, "BF16", 5, &err), 0, "%s", err.msg);
	struct pfx_model *m = load_mm(dir, PFX_MATMUL_BF16), *m32 = load_mm(dir, PFX_MATMUL_F32);
	enum { N = 70 };
	int32_t tok[N];
	for (int i = 0; i < N; i++)
		tok[i] = (i * 37 + 11) % c.vocab;
	float *l = logits_uncached(m, tok, N), *l32 = logits_uncached(m32, tok, N);
	float big = 0;
	for (size_t i = 0; i < (size_t)N * c.vocab; i++)
		big = fabsf(l32[i]) > big ? fabsf(l32[i]) : big;
	float d = max_abs_diff(l, l32, (size_t)N * c.vocab);
	cr_log_info("wide: bf16 matmul %.3g from f32 products, logits |max| %.3g", d, big);
	cr_expect(d > 0.0f && d <= 0.02f * big, "bf16 matmul %g from f32 products (|max| %g)", d,
		  big);
	free(l);
	free(l32);
	pfx_model_free(m);
	pfx_model_free(m32);
}

/*
 * Through prefixd: KV prefilled on the bf16 matmul and on f32 products
 * never attach each other's blocks (a process on the f32 path stays within
 * its 1e-4), while two processes on the bf16 matmul share theirs, and the
 * rows computed after the attached prefix equal an uncached bf16 run's.
 */
Test(matmul16, processes_share_bf16_matmul_blocks_with_each_other_only)
{
	const char *dir = write_bf16("llama-tiny-gqa");
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "32", "--memory", "64M", NULL };
	cr_assert_eq(td_start(&td, args), 0);
	size_t n;
	int32_t *tok = expected_i32("llama-tiny-gqa", "tokens", &n);
	char *head = tokens_csv(tok, 32), *all = tokens_csv(tok, n);
	char out[PATH_MAX + 32];
	snprintf(out, sizeof(out), "%s/logits.npy", td.dir);
	struct cmd_result r = run("logits --model %s --block-tokens 32 --socket %s --tokens %s --out %s",
				  dir, td.sock, head, out);
	cr_assert_eq(r.status, 0, "%s", r.out);
	r = run("logits --model %s --block-tokens 32 --matmul bf16 --socket %s --tokens %s --out %s",
		dir, td.sock, all, out);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "0 attached from the cache, 48 computed"),
		  "the bf16 matmul never attaches f32 blocks: %s", r.out);
	r = run("logits --model %s --block-tokens 32 --matmul bf16 --socket %s --tokens %s --out %s",
		dir, td.sock, all, out);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "32 attached from the cache, 16 computed"), "%s", r.out);
	struct pfx_model_opts o = { .threads = 2, .block_tokens = 32, .matmul = PFX_MATMUL_BF16 };
	struct pfx_model *m = load_model_opts(dir, &o);
	size_t V = (size_t)pfx_model_config(m)->vocab, rows = n - 32;
	float *want = logits_uncached(m, tok, n), *got = read_npy(out, rows, V);
	float d = max_abs_diff(got, want + 32 * V, rows * V);
	cr_expect(d <= TOL_SELF, "bf16 matmul KV attached from prefixd vs computed here: %g", d);
	/* and the f32 path attaches none of the bf16 matmul's */
	r = run("logits --model %s --block-tokens 32 --socket %s --tokens %s --out %s", dir, td.sock,
		all, out);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "32 attached from the cache, 16 computed"),
		  "the f32 path attaches its own block: %s", r.out);
	free(want);
	free(got);
	pfx_model_free(m);
	free(head);
	free(all);
	free(tok);
	cr_expect_eq(td_stop(&td), 0);
}

/* The bf16 matmul's chains take 20 bytes of the salt: a longer salt than
 * the rest is refused before any daemon is asked. */
Test(matmul16, a_salt_too_long_for_the_bf16_matmul_is_refused)
{
	struct pfx_model_opts o = { .threads = 1, .matmul = PFX_MATMUL_BF16 };
	struct pfx_model *m = load_model_opts(write_bf16("neox-tiny"), &o);
	char salt[PREFIXD_MAX_SALT];
	memset(salt, 's', sizeof(salt));
	struct pfx_cache *c = NULL;
	struct pfx_error err = { "" };
	cr_expect_eq(pfx_cache_open(m, "/nonexistent/sock", salt, 45, &c, &err), -EINVAL);
	cr_expect(strstr(err.msg, "with the bf16 matmul it may have 44 at most"), "%s", err.msg);
	cr_expect_null(c);
	pfx_model_free(m);
}

/* prefix-run: --matmul parsed, refused where it cannot run, and info
 * naming the path. */
Test(matmul16, prefix_run_takes_matmul_and_info_says_which_path_runs)
{
	const char *dir = write_bf16("neox-tiny");
	char want[256];
	struct cmd_result r = run("info --model %s --matmul bf16 --socket /nonexistent 2>&1", dir);
	snprintf(want, sizeof(want), "\nmatmul           %s (--matmul)\n", kern_bf16_path_name());
	cr_expect(strstr(r.out, want), "no '%s' in: %s", want, r.out);
	r = run("info --model %s/neox-tiny --socket /nonexistent 2>&1", fixtures_dir());
	snprintf(want, sizeof(want), "\nmatmul           f32 (--matmul; bf16 would run %s)\n",
		 kern_bf16_path_name() + 6);
	cr_expect(strstr(r.out, want), "no '%s' in: %s", want, r.out);
	r = run("info --model %s/neox-tiny --matmul bf16", fixtures_dir());
	cr_expect_eq(r.status, 1, "%s", r.out);
	cr_expect(strstr(r.out, "this model holds none (weights F32"), "%s", r.out);
	r = run("logits --model %s --matmul bf17 --tokens 1 --out /dev/null", dir);
	cr_expect_eq(r.status, 2, "%s", r.out);
	cr_expect(strstr(r.out, "--matmul is f32 or bf16, not 'bf17'"), "%s", r.out);
	r = run("random-model --out %s/x --matmul bf16", tmp);
	cr_expect_eq(r.status, 2, "random-model loads no model: %s", r.out);
}

/* Decode steps and prompts of up to 4 tokens run the f32 products either
 * way: their logits equal the f32 matmul's up to summation order. */
Test(matmul16, a_few_rows_stay_f32)
{
	const char *dir = write_bf16("llama-tiny-gqa");
	struct pfx_model *m = load_mm(dir, PFX_MATMUL_BF16), *m32 = load_mm(dir, PFX_MATMUL_F32);
	size_t n;
	int32_t *tok = expected_i32("llama-tiny-gqa", "tokens", &n);
	float *l = logits_uncached(m, tok, 4), *l32 = logits_uncached(m32, tok, 4);
	size_t V = (size_t)pfx_model_config(m)->vocab;
	float d = max_abs_diff(l, l32, 4 * V);
	cr_expect(d <= 1e-5, "4 tokens: the bf16 matmul's logits %g from the f32 products'", d);
	free(l);
	free(l32);
	free(tok);
	pfx_model_free(m);
	pfx_model_free(m32);
}
