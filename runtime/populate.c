/* SPDX-License-Identifier: MIT */
/*
 * The page tables of attached blocks, filled at the attach on the model's
 * workers. Otherwise the first pass over them takes their read faults in
 * attention, both workers faulting on the same mapping (a 2048-token
 * prefix of the SmolLM shape: ~1500-1700 faults for 94 MB; see
 * docs/perf/2026-11-30-warm-touch.md). Advice only: a kernel without
 * MADV_POPULATE_READ (before 5.14) or a busy model leaves the faults to
 * the pass. No value changes: the pages are the same, read-only.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "env_switch.h"
#include "kv.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

/* PFX_NO_POPULATE set (as PFX_NO_KV_PREFETCH is, read once) turns it off, to compare. */
static bool populate_off(void)
{
	static _Atomic int off = -1;
	return env_switch_off(&off, "PFX_NO_POPULATE");
}

struct populate_ctx {
	const void *const *blocks;
	size_t bytes, page;
};

static void populate_task(void *ctx, int t, int thread)
{
	const struct populate_ctx *c = ctx;
	uintptr_t a = (uintptr_t)c->blocks[t], e = a + c->bytes;
	a &= ~(uintptr_t)(c->page - 1);
	e = (e + c->page - 1) & ~(uintptr_t)(c->page - 1);
	(void)madvise((void *)a, e - a, MADV_POPULATE_READ);
}

int kv_populate(struct pfx_model *m, const void *const *blocks, size_t n)
{
	if (!n || populate_off())
		return 0;
	/* The pool runs one loop at a time: a pass of another session holds
	 * it, and waiting for that pass would cost more than the faults. */
	if (pthread_mutex_trylock(&m->fwd_lock))
		return 0;
	long page = sysconf(_SC_PAGESIZE);
	struct populate_ctx c = { blocks, kv_block_bytes(m), page > 0 ? (size_t)page : 4096 };
	pool_run(m->pool, populate_task, &c, (int)n);
	pthread_mutex_unlock(&m->fwd_lock);
	return (int)n;
}
