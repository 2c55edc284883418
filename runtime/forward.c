/* SPDX-License-Identifier: MIT */
/*
 * The forward pass over a ragged batch: validation, scratch, embedding, the
 * architecture's blocks, and the logits of the positions asked for.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "forward.h"
#include "kernels/kernels.h"
#include "profile.h"

/* Per thread: 16-bit weights converted for the f32 kernels a panel at a
 * time (ops.c), 1 MiB, in L2 on the CPUs this runs on. */
#define WPANEL_FLOATS (256u << 10)

void fwd_scratch_free(struct fwd *f)
{
	if (!f)
		return;
	free(f->row_item);
	free(f->row_pos);
	free(f->item_row);
	free(f->x);
	free(f->xn);
	free(f->xn2);
	free(f->q);
	free(f->k);
	free(f->v);
	free(f->qkv);
	free(f->att);
	free(f->h1);
	free(f->h2);
	free(f->cos);
	free(f->sin);
	free(f->tasks);
	free(f->scores);
	free(f->partials);
	free(f->xt);
	free(f->xt_call);
	free(f->wpanel);
	free(f->xbf);
	free(f);
}

/* realloc that frees on failure, keeping one release path for the scratch. */
static int grow(void *pp, size_t bytes)
{
	void **p = pp;
	void *n = realloc(*p, bytes ? bytes : 1);
	if (!n)
		return -ENOMEM;
	*p = n;
	return 0;
}

/*
 * The same for scratch whose contents need not survive a pass (activations,
 * per-thread buffers): 64-byte aligned, so the kernels' vector loads never
 * straddle two cache lines. The decode products load 64 bytes of x for
 * every 32 bf16 weights: with x 16 bytes off a line, the bf16 kernel
 * computed 45-51 GB/s instead of 56 on rows in L2, and a bf16 generate ran
 * at 103-106 tok/s instead of 119-121 (AMD EPYC family 25, 3 runs each,
 * alternated).
 */
static int grow_lines(void *pp, size_t bytes)
{
	void **p = pp;
	free(*p);
	*p = aligned_alloc(64, (bytes + 63) / 64 * 64 + (bytes ? 0 : 64));
	return *p ? 0 : -ENOMEM;
}

static int reserve_scratch(struct fwd *f, int T, int nitems, int ntasks, size_t score_ld)
{
	const struct pfx_config *c = f->c;
	size_t t = (size_t)T, H = (size_t)c->hidden, qd = (size_t)c->n_heads * c->head_dim;
	size_t kvd = (size_t)c->n_kv_heads * c->head_dim, I = (size_t)c->intermediate;
	size_t half = (size_t)c->rotary_dim / 2 + 1, threads = (size_t)pool_threads(f->m->pool);
	if (t > f->cap_T) {
		if (grow(&f->row_item, t * sizeof(int)) || grow(&f->row_pos, t * sizeof(int)) ||
		    grow_lines(&f->x, t * H * 4) || grow_lines(&f->xn, t * H * 4) ||
		    grow_lines(&f->xn2, t * H * 4) || grow_lines(&f->q, t * qd * 4) ||
		    grow_lines(&f->k, t * kvd * 4) || grow_lines(&f->v, t * kvd * 4) ||
		    grow_lines(&f->qkv, t * 3 * H * 4) || grow_lines(&f->att, t * qd * 4) ||
		    grow_lines(&f->h1, t * I * 4) || grow_lines(&f->h2, t * I * 4) ||
		    grow(&f->cos, t * half * 4) || grow(&f->sin, t * half * 4))
			return -ENOMEM;
		f->cap_T = t;
	}
	if (!f->xt && kern_gemm_few_ok()) { /* only ops.c's gemm_few path reads it */
		size_t in = H > qd ? H : qd;
		in = in > I ? in : I;
		f->xt_floats = in * GEMM_FEW_MAX_T;
		if (grow_lines(&f->xt, threads * f->xt_floats * 4) ||
		    grow(&f->xt_call, threads * sizeof(*f->xt_call)))
			return -ENOMEM;
		memset(f->xt_call, 0, threads * sizeof(*f->xt_call));
	}
	if (!f->wpanel && f->m->held16) { /* ops.c's 16-bit panels */
		size_t in = H > qd ? H : qd;
		in = in > I ? in : I;
		f->wpanel_floats = in > WPANEL_FLOATS ? in : WPANEL_FLOATS;
		/* The bf16 panels: 32 rows of W at least, an AMX block. */
		if (f->m->matmul_bf16 && f->wpanel_floats < kern_bf16_panel_elems(32, (int)in) / 2)
			f->wpanel_floats = kern_bf16_panel_elems(32, (int)in) / 2;
		if (grow_lines(&f->wpanel, threads * f->wpanel_floats * 4))
			return -ENOMEM;
	}
	if (f->m->matmul_bf16) { /* ops.c's packed or rounded x: the larger of both */
		size_t in = H > qd ? H : qd;
		in = in > I ? in : I;
		size_t packed = (size_t)kern_bf16_rows(T) * (size_t)kern_bf16_lda((int)in) * 2;
		size_t bytes = packed > t * in * 4 ? packed : t * in * 4;
		if (bytes > f->cap_xbf) {
			if (grow_lines(&f->xbf, bytes))
				return -ENOMEM;
			f->cap_xbf = bytes;
		}
	}
	if ((size_t)nitems > f->cap_items) {
		if (grow(&f->item_row, (size_t)nitems * sizeof(int)))
			return -ENOMEM;
		f->cap_items = (size_t)nitems;
	}
	if ((size_t)ntasks > f->cap_tasks) {
		if (grow(&f->tasks, (size_t)ntasks * sizeof(*f->tasks)))
			return -ENOMEM;
		f->cap_tasks = (size_t)ntasks;
	}
	size_t np = att_partials_floats(f, ntasks);
	if (np > f->cap_partials) {
		if (grow(&f->partials, np * sizeof(float)))
			return -ENOMEM;
		f->cap_partials = np;
	}
	/* Per thread: scores, packed queries and outputs (attention.c). */
	f->score_ld = score_ld;
	size_t sc = threads * att_thread_floats(f);
	if (sc > f->cap_scores) {
		if (grow_lines(&f->scores, sc * sizeof(float)))
			return -ENOMEM;
		f->cap_scores = sc;
	}
	return 0;
}

static int validate(struct pfx_model *m, struct pfx_batch_item *items, size_t nitems,
		    struct pfx_error *err)
{
	const struct pfx_config *c = &m->cfg;
	if (nitems == 0 || nitems > (1u << 20))
		return pfx_errorf(err, -EINVAL, "a batch needs 1 to %u items", 1u << 20);
	size_t total = 0;
	for (size_t i = 0; i < nitems; i++) {
		const struct pfx_batch_item *it = &items[i];
		if (!it->s || it->s->m != m)
			return pfx_errorf(err, -EINVAL, "batch item %zu: session of another model", i);
		if (it->n == 0 || !it->tokens)
			return pfx_errorf(err, -EINVAL, "batch item %zu: no tokens", i);
		if (it->want != PFX_LOGITS_NONE && !it->logits)
			return pfx_errorf(err, -EINVAL, "batch item %zu: no logits buffer", i);
		if (it->s->len + it->n > (size_t)c->max_positions)
			return pfx_errorf(err, -E2BIG,
					  "batch item %zu: %zu + %zu tokens exceed the model's %d positions",
					  i, it->s->len, it->n, c->max_positions);
		for (size_t j = 0; j < it->n; j++)
			if (it->tokens[j] < 0 || it->tokens[j] >= c->vocab)
				return pfx_errorf(err, -EINVAL,
						  "batch item %zu: token %d at %zu is outside the vocabulary [0, %d)",
						  i, it->tokens[j], j, c->vocab);
		for (size_t j = 0; j < i; j++)
			if (items[j].s == it->s)
				return pfx_errorf(err, -EINVAL,
						  "batch items %zu and %zu use the same session", j, i);
		total += it->n;
	}
	if (total > (1u << 24))
		return pfx_errorf(err, -E2BIG, "%zu tokens in one batch is too many", total);
	return 0;
}

static void setup(struct fwd *f)
{
	const struct pfx_config *c = f->c;
	int half = c->rotary_dim / 2, r = 0;
	for (int i = 0; i < f->nitems; i++) {
		const struct pfx_batch_item *it = &f->items[i];
		f->item_row[i] = r;
		for (size_t j = 0; j < it->n; j++, r++) {
			f->row_item[r] = i;
			f->row_pos[r] = (int)(it->s->len + j);
			kern_wmat_to_f32(kern_wmat_at(f->m->w.embed, (size_t)it->tokens[j] * c->hidden),
					(size_t)c->hidden, f->x + (size_t)r * c->hidden);
			if (c->embed_scale) /* Gemma: in float32, as transformers */
				for (int k = 0; k < c->hidden; k++)
					f->x[(size_t)r * c->hidden + k] *= c->embed_scale;
			/* Angles in float32 as transformers computes them, so
			 * positions round the same way. */
			for (int k = 0; k < half; k++) {
				float ang = (float)f->row_pos[r] * f->m->inv_freq[k];
				f->cos[(size_t)r * half + k] = (float)cos((double)ang);
				f->sin[(size_t)r * half + k] = (float)sin((double)ang);
			}
		}
	}
	att_plan(f, f->items, f->nitems, f->tasks);
}

/*
 * At the load, the scratch of a short pass (up to GEMM_FEW_MAX_T rows: a
 * suffix after an attach) allocated and written once, so that the first
 * pass after the load does not take its first touches (see kv.c's spare
 * blocks: under KVM a fresh page's first write cost 4-42 us in
 * bench/share). Attention's buffers depend on the context and are sized
 * by the pass.
 */
int fwd_scratch_prepare(struct pfx_model *m)
{
	struct fwd *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	m->scratch = f;
	f->m = m;
	f->c = &m->cfg;
	const struct pfx_config *c = f->c;
	size_t T = GEMM_FEW_MAX_T, H = (size_t)c->hidden, I = (size_t)c->intermediate;
	size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
	if (reserve_scratch(f, (int)T, 1, 0, 0))
		return -ENOMEM;
	const struct {
		void *p;
		size_t floats;
	} rows[] = { { f->x, T * H }, { f->xn, T * H }, { f->xn2, T * H }, { f->q, T * qd },
		     { f->k, T * kvd }, { f->v, T * kvd }, { f->qkv, T * 3 * H },
		     { f->att, T * qd }, { f->h1, T * I }, { f->h2, T * I },
		     { f->xt, f->xt ? (size_t)pool_threads(m->pool) * f->xt_floats : 0 } };
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (rows[i].p)
			memset(rows[i].p, 0, rows[i].floats * sizeof(float));
	return 0;
}

/* Final norm and the output head for the rows whose logits were asked for. */
static void logits(struct fwd *f)
{
	const struct pfx_config *c = f->c;
	size_t H = (size_t)c->hidden;
	int R = 0;
	for (int i = 0; i < f->nitems; i++) {
		const struct pfx_batch_item *it = &f->items[i];
		size_t first = it->want == PFX_LOGITS_ALL ? 0 : it->n - 1;
		if (it->want == PFX_LOGITS_NONE)
			continue;
		for (size_t j = first; j < it->n; j++)
			memcpy(f->xn2 + (size_t)R++ * H, f->x + (f->item_row[i] + j) * H, H * sizeof(float));
	}
	if (!R)
		return;
	double t0 = f->prof ? pfx_profile_now() : 0, c0 = f->prof ? pfx_profile_cpu() : 0;
	f->head = true;
	int T = f->T;
	f->T = R; /* the row-parallel ops below work on the R gathered rows */
	op_norm(f, f->xn2, f->xn, f->m->w.norm_w, f->m->w.norm_b);
	R = 0;
	for (int i = 0; i < f->nitems; i++) {
		const struct pfx_batch_item *it = &f->items[i];
		if (it->want == PFX_LOGITS_NONE)
			continue;
		int rows = it->want == PFX_LOGITS_ALL ? (int)it->n : 1;
		struct mm_job job = { f->m->w.lm_head, NULL, it->logits, c->vocab, c->vocab, 0.0f };
		f->T = rows;
		op_matmul(f, f->xn + (size_t)R * H, (int)H, (int)H, &job, 1);
		R += rows;
	}
	f->T = T;
	f->head = false;
	if (f->prof) {
		f->prof->head_s += pfx_profile_now() - t0;
		f->prof->head_cpu_s += pfx_profile_cpu() - c0;
	}
}

/* Minor page faults of the process so far: first touches of mapped KV. */
static long minor_faults(void)
{
	struct rusage ru;
	return getrusage(RUSAGE_SELF, &ru) ? 0 : ru.ru_minflt;
}

int pfx_forward(struct pfx_model *m, struct pfx_batch_item *items, size_t nitems,
		struct pfx_error *err)
{
	int rc = validate(m, items, nitems, err);
	if (rc)
		return rc;
	const struct pfx_config *c = &m->cfg;
	size_t T = 0, max_ctx = 0;
	for (size_t i = 0; i < nitems; i++) {
		T += items[i].n;
		size_t end = items[i].s->len + items[i].n;
		max_ctx = end > max_ctx ? end : max_ctx;
		if ((rc = kv_reserve(items[i].s, end)))
			return pfx_errorf(err, rc, "out of memory for the KV of %zu tokens", end);
	}
	size_t B = (size_t)m->block_tokens;
	size_t score_ld = (max_ctx + B - 1) / B * B;

	pthread_mutex_lock(&m->fwd_lock);
	if (!m->scratch) {
		m->scratch = calloc(1, sizeof(*m->scratch));
		if (!m->scratch) {
			pthread_mutex_unlock(&m->fwd_lock);
			return pfx_errorf(err, -ENOMEM, "out of memory");
		}
	}
	struct fwd *f = m->scratch;
	f->m = m;
	f->c = c;
	int ntasks = att_plan(f, items, (int)nitems, NULL);
	if (reserve_scratch(f, (int)T, (int)nitems, ntasks, score_ld)) {
		pthread_mutex_unlock(&m->fwd_lock);
		return pfx_errorf(err, -ENOMEM, "out of memory for a batch of %zu tokens", T);
	}
	f->items = items;
	f->nitems = (int)nitems;
	f->T = (int)T;
	f->ntasks = ntasks;
	f->prof = m->prof;
	f->head = false;
	double t0 = f->prof ? pfx_profile_now() : 0, c0 = f->prof ? pfx_profile_cpu() : 0;
	long flt0 = f->prof ? minor_faults() : 0;
	setup(f);
	for (int l = 0; l < c->n_layers; l++)
		m->arch->block(f, l);
	logits(f);
	if (f->prof) {
		f->prof->passes++;
		f->prof->rows += T;
		f->prof->forward_s += pfx_profile_now() - t0;
		f->prof->forward_cpu_s += pfx_profile_cpu() - c0;
		f->prof->faults += minor_faults() - flt0;
	}
	pthread_mutex_unlock(&m->fwd_lock);

	for (size_t i = 0; i < nitems; i++)
		if (items[i].commit)
			kv_commit(items[i].s, items[i].n);
	return 0;
}
