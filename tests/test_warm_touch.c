/* SPDX-License-Identifier: MIT */
/*
 * First touches on the warm path (docs/perf/2026-11-30-warm-touch.md): the
 * model's spare KV blocks (runtime/kv.c), written once at the load and
 * refilled by the blocks sessions drop, so that a pass's new block does not
 * fault page by page; their stale contents change no logit. The scratch
 * of a short pass, made at the load. And the attached blocks' page tables,
 * filled at the attach (runtime/populate.c).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "daemon_asserts.h"
#include "helpers.h"
#include "forward.h"
#include "kv.h"

/* The last position's logits of t[0 .. n) after a prefix of p tokens. */
static void logits_of(struct pfx_model *m, const int32_t *t, size_t p, size_t n, float *out)
{
	struct pfx_session *s;
	struct pfx_error err;
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	cr_assert_eq(pfx_session_append(s, t, p, PFX_LOGITS_NONE, NULL, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_append(s, t + p, n - p, PFX_LOGITS_LAST, out, &err), 0, "%s",
		     err.msg);
	pfx_session_free(s);
}

Test(warm_touch, a_model_keeps_spare_blocks_that_passes_take_and_sessions_give_back)
{
	struct pfx_model *m = load_fixture_model_bt("llama-tiny-gqa", 16);
	int V = pfx_model_config(m)->vocab;
	cr_assert_eq(kv_spare_count(m), KV_SPARE_MAX, "the load filled %d spares, not %d",
		     kv_spare_count(m), KV_SPARE_MAX);
	void *spare[KV_SPARE_MAX];
	memcpy(spare, m->spare.data, sizeof(spare));

	int32_t *t = random_tokens(40, V, 3);
	struct pfx_session *s;
	struct pfx_error err;
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	/* One block of 16: one spare taken, the other left. */
	cr_assert_eq(pfx_session_append(s, t, 10, PFX_LOGITS_NONE, NULL, &err), 0, "%s", err.msg);
	cr_expect_eq(kv_spare_count(m), KV_SPARE_MAX - 1);
	bool from_spare = false;
	for (int i = 0; i < KV_SPARE_MAX; i++)
		from_spare |= s->blocks[0]->data == spare[i];
	cr_expect(from_spare, "the session's block is not one of the spares");
	/* Three blocks: both spares and a new one. */
	cr_assert_eq(pfx_session_append(s, t + 10, 30, PFX_LOGITS_NONE, NULL, &err), 0, "%s",
		     err.msg);
	cr_expect_eq(kv_spare_count(m), 0);
	/* Rewound to one block: the two it drops become spares. */
	cr_assert_eq(pfx_session_rewind(s, 16, &err), 0, "%s", err.msg);
	cr_expect_eq(kv_spare_count(m), 2);
	pfx_session_free(s);
	/* At most KV_SPARE_MAX are kept (ASan: the others are freed). */
	cr_expect_eq(kv_spare_count(m), KV_SPARE_MAX);
	free(t);
	pfx_model_free(m);
}

/* Spares hold what an earlier session wrote there (or NaNs below): a pass
 * reads only positions it or an earlier pass of its session wrote. */
Test(warm_touch, stale_spare_blocks_change_no_logit)
{
	const enum pfx_kv_dtype kvs[] = { PFX_KV_F32, PFX_KV_F16 };
	const char *models[] = { "llama-tiny-gqa", "mistral-tiny-swa" };
	for (size_t mi = 0; mi < 2; mi++)
		for (size_t k = 0; k < 2; k++) {
			struct pfx_model_opts o = { .threads = 2, .block_tokens = 16,
						    .kv_dtype = kvs[k] };
			struct pfx_model *m = load_model_opts(models[mi], &o);
			int V = pfx_model_config(m)->vocab;
			size_t n = 50, p = 37;
			int32_t *t = random_tokens(n, V, 11 + mi), *u = random_tokens(n, V, 99);
			float *fresh = malloc((size_t)V * sizeof(float));
			float *again = malloc((size_t)V * sizeof(float));
			logits_of(m, t, p, n, fresh);
			/* Another prompt's KV left in the spares... */
			logits_of(m, u, 20, n, again);
			logits_of(m, t, p, n, again);
			cr_expect_eq(memcmp(fresh, again, (size_t)V * sizeof(float)), 0,
				     "%s, KV %d: another session's blocks changed the logits",
				     models[mi], (int)kvs[k]);
			/* ... or NaNs everywhere. */
			cr_assert_eq(kv_spare_count(m), KV_SPARE_MAX);
			for (int i = 0; i < KV_SPARE_MAX; i++)
				memset(m->spare.data[i], 0xff, kv_block_bytes(m));
			logits_of(m, t, p, n, again);
			cr_expect_eq(memcmp(fresh, again, (size_t)V * sizeof(float)), 0,
				     "%s, KV %d: NaN-filled spares changed the logits", models[mi],
				     (int)kvs[k]);
			free(fresh);
			free(again);
			free(t);
			free(u);
			pfx_model_free(m);
		}
}

/* The load makes the scratch of passes up to GEMM_FEW_MAX_T rows: a short
 * suffix's pass reuses it as it is (no buffer grown, so none first touched
 * in the pass). */
Test(warm_touch, the_load_prepares_the_scratch_of_a_short_pass)
{
	struct pfx_model *m = load_fixture_model_bt("llama-tiny-gqa", 16);
	struct fwd *f = m->scratch;
	cr_assert_not_null(f, "no scratch after the load");
	cr_expect_geq(f->cap_T, (size_t)GEMM_FEW_MAX_T);
	void *x = f->x, *h1 = f->h1, *xt = f->xt;
	int V = pfx_model_config(m)->vocab;
	int32_t *t = random_tokens(GEMM_FEW_MAX_T + 8, V, 5);
	float *lg = malloc((size_t)V * sizeof(float));
	logits_of(m, t, 8, GEMM_FEW_MAX_T + 8, lg);
	cr_expect(m->scratch == f && f->x == x && f->h1 == h1 && f->xt == xt,
		  "a pass of %d rows grew the scratch made at the load", GEMM_FEW_MAX_T);
	free(lg);
	free(t);
	pfx_model_free(m);
}

/* Pages of [p, p + bytes) present in this process's page tables
 * (/proc/self/pagemap's bit 63, readable without privileges). */
static size_t pages_present(const void *p, size_t bytes, size_t *pages)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = 0;
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)(pg - 1), e = (uintptr_t)p + bytes;
	int fd = open("/proc/self/pagemap", O_RDONLY);
	cr_assert_geq(fd, 0, "cannot open /proc/self/pagemap");
	*pages = 0;
	for (; a < e; a += pg, (*pages)++) {
		uint64_t entry = 0;
		cr_assert_eq(pread(fd, &entry, sizeof(entry), (off_t)(a / pg * sizeof(entry))),
			     (ssize_t)sizeof(entry));
		n += entry >> 63;
	}
	close(fd);
	return n;
}

/* A prefix published by one session, attached by another; returns how
 * many of the attached blocks' pages the attach left mapped, of *pages. */
static size_t attached_pages_present(size_t *pages)
{
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "16", "--memory", "64M", NULL };
	t_start(&td, args, NULL);
	struct pfx_model *m = load_fixture_model_bt("llama-tiny-gqa", 16);
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_cache *c;
	cr_assert_eq(pfx_cache_open(m, td.sock, NULL, 0, &c, &err), 0, "%s", err.msg);
	int V = pfx_model_config(m)->vocab;
	size_t n = 16 * 12;
	int32_t *t = random_tokens(n + 5, V, 21); /* 5 more: every block attached, none copied */
	struct pfx_session *a, *b;
	struct pfx_prefill_info info;
	cr_assert_eq(pfx_session_new(m, &a, &err), 0);
	cr_assert_eq(pfx_session_append(a, t, n, PFX_LOGITS_NONE, NULL, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_publish(a, c, t, n, &info, &cerr, &err), 0, "%s", err.msg);
	cr_assert_eq(info.published, n / 16);
	pfx_session_free(a);

	cr_assert_eq(pfx_session_new(m, &b, &err), 0);
	cr_assert_eq(pfx_session_attach(b, c, t, n + 5, &info, &cerr, &err), 0, "%s", err.msg);
	cr_assert_eq(info.attached, n);
	size_t present = 0;
	*pages = 0;
	for (size_t i = 0; i < b->nblocks; i++) {
		cr_assert_not_null(b->blocks[i]->lease, "block %zu is not attached", i);
		size_t pg;
		present += pages_present(b->blocks[i]->data, kv_block_bytes(m), &pg);
		*pages += pg;
	}
	pfx_session_free(b);
	pfx_cache_close(c);
	free(t);
	pfx_model_free(m);
	t_stop(&td);
	return present;
}

Test(warm_touch, an_attach_maps_the_attached_blocks_pages)
{
	size_t pages, present = attached_pages_present(&pages);
	cr_expect_eq(present, pages, "%zu of the attached blocks' %zu pages mapped after the attach",
		     present, pages);
}

/* The baseline the test above needs: without the populate, the attach maps
 * nothing (the pass's first reads fault). */
Test(warm_touch, without_the_populate_an_attach_maps_no_page)
{
	setenv("PFX_NO_POPULATE", "1", 1);
	size_t pages, present = attached_pages_present(&pages);
	cr_expect_eq(present, 0, "%zu of %zu pages mapped without the populate", present, pages);
}
