/* SPDX-License-Identifier: MIT */
/*
 * The operations blocks are made of, each split over the model's worker
 * pool. Matrix products go to OpenBLAS (one BLAS thread per worker, see
 * blas.c) for many rows, and to kern_gemv for a few, where sgemm is ~10x
 * slower and sgemv does not reach the memory bandwidth. With --matmul bf16,
 * products of more rows than decode's with bf16 weights go to the bf16
 * kernels instead (kernels.h).
 */
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "forward.h"
#include "kernels/kernels.h"
#include "profile.h"

#define MAX_PIECES 512
#define ROWS_PER_TASK 16

static int row_tasks(const struct fwd *f);

/* ==== Matrix products ==== */

struct mm_piece {
	int job, o0, n;
};

struct mm_ctx {
	struct fwd *f;
	const float *x;
	bool few;        /* by kern_gemm_few */
	enum kern_bf16_path bf16; /* AMX or AVX512: by kern_gemm_bf16 from packed x */
	const uint16_t *xbf;      /* x packed by kern_bf16_pack_a */
	int ldx, in, rows;
	const struct mm_job *jobs;
	struct mm_piece pieces[MAX_PIECES];
};

/*
 * x transposed in this thread's own buffer, at its first piece of the call.
 * Each thread transposing all of x costs less than one doing it for both:
 * the other then waits, and reads the result out of the first one's cache
 * (32 tokens on 2048, runs alternated in one process: 1-4% faster than one
 * thread transposing, with the machine's state; splitting the transpose
 * between the threads gained half as much).
 */
static const float *transposed(struct mm_ctx *c, int thread)
{
	struct fwd *f = c->f;
	float *xt = f->xt + (size_t)thread * f->xt_floats;
	if (f->xt_call[thread] != f->mm_calls) {
		kern_gemm_few_transpose(c->rows, c->in, c->x, c->ldx, xt);
		f->xt_call[thread] = f->mm_calls;
	}
	return xt;
}

/*
 * The product of rows of x with n rows of W from row o0 on, into y (its
 * column o0 already applied). 16-bit W goes to the f32 kernels in panels
 * converted into this thread's buffer: gemm_few broadcasts one weight at a
 * time and sgemm packs its own copy, so neither can convert in registers,
 * and a panel that stays in L2 costs one conversion a weight, shared by
 * all the rows of x (more than GEMV_MAX_T of them here).
 */
static void mm_rows(struct mm_ctx *c, int thread, const struct mm_job *j, int o0, int n, float *y)
{
	struct fwd *f = c->f;
	struct kern_wmat w = kern_wmat_at(j->w, (size_t)o0 * c->in);
	if (c->few && w.type == KERN_W_BF16) { /* widened in registers, no panel */
		kern_gemm_few_bf16(c->rows, n, c->in, transposed(c, thread), w.p, j->beta, y, j->ldy);
		return;
	}
	int step = n;
	float *panel = NULL;
	if (w.type != KERN_W_F32) {
		panel = f->wpanel + (size_t)thread * f->wpanel_floats;
		step = (int)(f->wpanel_floats / (size_t)c->in);
		if (step >= 16)
			step &= ~15; /* whole blocks for the kernels' fast paths */
	}
	for (int i = 0; i < n; i += step) {
		int rows = n - i < step ? n - i : step;
		struct kern_wmat wi = kern_wmat_at(w, (size_t)i * c->in);
		const float *wf = wi.p;
		if (panel) {
			kern_wmat_to_f32(wi, (size_t)rows * c->in, panel);
			wf = panel;
		}
		if (c->few)
			kern_gemm_few(c->rows, rows, c->in, transposed(c, thread), wf, j->beta, y + i,
				     j->ldy);
		else
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->rows, rows, c->in, 1.0f,
				    c->x, c->ldx, wf, c->in, j->beta, y + i, j->ldy);
	}
}

/*
 * The same on the bf16 paths: W's bf16 rows packed a panel at a time into
 * this thread's buffer (sized for L2, as above), each panel multiplied by
 * all the rows of the packed x.
 */
static void mm_bf16(struct mm_ctx *c, int thread, const struct mm_job *j, int o0, int n, float *y)
{
	struct fwd *f = c->f;
	const uint16_t *w = (const uint16_t *)j->w.p + (size_t)o0 * c->in;
	uint16_t *panel = (uint16_t *)(f->wpanel + (size_t)thread * f->wpanel_floats);
	size_t per16 = kern_bf16_panel_elems(16, c->in);
	int step = (int)(f->wpanel_floats * 2 / per16) * 16;
	if (step >= 32)
		step &= ~31; /* whole AMX blocks */
	for (int i = 0; i < n; i += step) {
		int cols = n - i < step ? n - i : step;
		kern_bf16_pack_b(cols, c->in, w + (size_t)i * c->in, panel);
		kern_gemm_bf16(c->bf16, c->rows, cols, c->in, c->xbf, panel, j->beta, y + i, j->ldy);
	}
}

static void mm_task(void *ctx, int t, int thread)
{
	struct mm_ctx *c = ctx;
	const struct mm_piece *p = &c->pieces[t];
	const struct mm_job *j = &c->jobs[p->job];
	float *y = j->y + p->o0;
	if (c->bf16 != KERN_BF16_SGEMM)
		mm_bf16(c, thread, j, p->o0, p->n, y);
	else if (c->rows <= GEMV_MAX_T)
		kern_gemv(c->rows, p->n, c->in, kern_wmat_at(j->w, (size_t)p->o0 * c->in), c->x, c->ldx,
			 j->beta, y, j->ldy);
	else
		mm_rows(c, thread, j, p->o0, p->n, y);
	if (j->b)
		for (int r = 0; r < c->rows; r++)
			for (int i = 0; i < p->n; i++)
				y[(size_t)r * j->ldy + i] += j->b[p->o0 + i];
}

/*
 * Decode-sized products: every thread owns a contiguous share of the rows of
 * all jobs (one sequential stream, which is what reaches the memory
 * bandwidth) and takes it from the front in chunks. A thread that runs out
 * takes the back half of the largest share left, so a thread slowed down
 * by the machine (a descheduled vCPU) does not hold up the whole step.
 */
#define STEAL_MAX_THREADS 64
#define CHUNK_FLOATS 16384 /* 64 KiB of weights per claim */
#define MAX_STEAL_JOBS 8

struct share {
	_Alignas(64) _Atomic uint64_t range; /* lo << 32 | hi, in rows of all jobs */
};

struct steal_ctx {
	const float *x;
	int ldx, in, rows, njobs, nshares, chunk;
	const struct mm_job *jobs;
	int start[MAX_STEAL_JOBS + 1]; /* first row of each job; start[njobs] = total */
	struct share shares[STEAL_MAX_THREADS];
};

static uint64_t pack(uint32_t lo, uint32_t hi)
{
	return (uint64_t)lo << 32 | hi;
}

/* Rows [r0, r1) of all jobs, split at job boundaries. */
static void steal_rows(const struct steal_ctx *c, int r0, int r1)
{
	for (int j = 0; j < c->njobs && r0 < r1; j++) {
		if (r0 >= c->start[j + 1])
			continue;
		const struct mm_job *jb = &c->jobs[j];
		int o0 = r0 - c->start[j], n = (r1 < c->start[j + 1] ? r1 : c->start[j + 1]) - r0;
		float *y = jb->y + o0;
		kern_gemv(c->rows, n, c->in, kern_wmat_at(jb->w, (size_t)o0 * c->in), c->x, c->ldx,
			 jb->beta, y, jb->ldy);
		if (jb->b)
			for (int r = 0; r < c->rows; r++)
				for (int i = 0; i < n; i++)
					y[(size_t)r * jb->ldy + i] += jb->b[o0 + i];
		r0 += n;
	}
}

/* Claims up to chunk rows from the front of share s; false when it is empty. */
static bool claim_front(struct steal_ctx *c, int s, int *r0, int *r1)
{
	uint64_t v = atomic_load_explicit(&c->shares[s].range, memory_order_relaxed);
	for (;;) {
		uint32_t lo = (uint32_t)(v >> 32), hi = (uint32_t)v;
		if (lo >= hi)
			return false;
		uint32_t end = hi - lo > (uint32_t)c->chunk ? lo + (uint32_t)c->chunk : hi;
		if (atomic_compare_exchange_weak_explicit(&c->shares[s].range, &v, pack(end, hi),
							  memory_order_relaxed, memory_order_relaxed)) {
			*r0 = (int)lo;
			*r1 = (int)end;
			return true;
		}
	}
}

/* Moves the back half of the fullest other share into share s. */
static bool steal(struct steal_ctx *c, int s)
{
	for (;;) {
		int victim = -1;
		uint32_t most = 0;
		uint64_t v = 0;
		for (int i = 0; i < c->nshares; i++) {
			uint64_t w = atomic_load_explicit(&c->shares[i].range, memory_order_relaxed);
			uint32_t left = (uint32_t)w - (uint32_t)(w >> 32);
			if (i != s && (uint32_t)(w >> 32) < (uint32_t)w && left > most) {
				most = left;
				victim = i;
				v = w;
			}
		}
		if (victim < 0)
			return false;
		uint32_t lo = (uint32_t)(v >> 32), hi = (uint32_t)v;
		/* A last chunk is taken whole; otherwise the back half. */
		uint32_t mid = hi - lo <= (uint32_t)c->chunk ? lo : lo + (hi - lo) / 2;
		if (atomic_compare_exchange_strong_explicit(&c->shares[victim].range, &v, pack(lo, mid),
							    memory_order_relaxed, memory_order_relaxed)) {
			atomic_store_explicit(&c->shares[s].range, pack(mid, hi), memory_order_relaxed);
			return true;
		}
	}
}

static void steal_task(void *ctx, int t, int thread)
{
	struct steal_ctx *c = ctx;
	int r0, r1;
	do {
		while (claim_front(c, t, &r0, &r1))
			steal_rows(c, r0, r1);
	} while (steal(c, t));
}

static void matmul_decode(struct fwd *f, const float *x, int ldx, int in, const struct mm_job *jobs,
			  int njobs)
{
	struct steal_ctx c = { .x = x, .ldx = ldx, .in = in, .rows = f->T, .njobs = njobs, .jobs = jobs };
	int threads = pool_threads(f->m->pool);
	c.nshares = threads < STEAL_MAX_THREADS ? threads : STEAL_MAX_THREADS;
	c.chunk = CHUNK_FLOATS / in > 0 ? CHUNK_FLOATS / in : 1;
	for (int j = 0; j < njobs; j++)
		c.start[j + 1] = c.start[j] + jobs[j].out;
	int total = c.start[njobs];
	for (int i = 0; i < c.nshares; i++)
		atomic_init(&c.shares[i].range, pack((uint32_t)((int64_t)total * i / c.nshares),
						     (uint32_t)((int64_t)total * (i + 1) / c.nshares)));
	pool_run(f->m->pool, steal_task, &c, c.nshares);
}

struct pack_ctx {
	const float *x;
	int ldx, in, rows;
	uint16_t *a;
};

static void pack_task(void *ctx, int t, int thread)
{
	struct pack_ctx *c = ctx;
	kern_bf16_pack_a(32 * t, 32 * t + 32, c->rows, c->in, c->x, c->ldx, c->a);
}

static void round_task(void *ctx, int t, int thread)
{
	struct pack_ctx *c = ctx;
	int r1 = (t + 1) * ROWS_PER_TASK < c->rows ? (t + 1) * ROWS_PER_TASK : c->rows;
	for (int r = t * ROWS_PER_TASK; r < r1; r++)
		kern_bf16_round(c->x + (size_t)r * c->ldx, (size_t)c->in,
				(float *)c->a + (size_t)r * c->in);
}

/* With --matmul bf16, products of more rows than decode's whose weights
 * are all bf16 take x rounded to bf16: packed for the bf16 kernels, or as
 * f32 values for the f32 ones (KERN_BF16_SGEMM). Returns the path, *x and
 * *ldx replaced in the latter case. */
static enum kern_bf16_path bf16_input(struct fwd *f, const float **x, int *ldx, int in,
				      const struct mm_job *jobs, int njobs, struct mm_ctx *c)
{
	for (int j = 0; j < njobs; j++)
		if (jobs[j].w.type != KERN_W_BF16)
			return KERN_BF16_SGEMM;
	struct pack_ctx p = { .x = *x, .ldx = *ldx, .in = in, .rows = f->T, .a = f->xbf };
	enum kern_bf16_path path = kern_bf16_path();
	if (path == KERN_BF16_SGEMM) {
		pool_run(f->m->pool, round_task, &p, row_tasks(f));
		*x = (const float *)f->xbf;
		*ldx = in;
	} else {
		pool_run(f->m->pool, pack_task, &p, kern_bf16_rows(f->T) / 32);
		c->xbf = f->xbf;
	}
	return path;
}

static void matmul(struct fwd *f, const float *x, int ldx, int in, const struct mm_job *jobs,
		   int njobs)
{
	if (f->T <= GEMV_MAX_T && njobs <= MAX_STEAL_JOBS) {
		matmul_decode(f, x, ldx, in, jobs, njobs);
		return;
	}
	struct mm_ctx c = { .f = f, .in = in, .rows = f->T, .jobs = jobs };
	if (f->m->matmul_bf16 && f->T > GEMV_MAX_T)
		c.bf16 = bf16_input(f, &x, &ldx, in, jobs, njobs, &c);
	c.x = x;
	c.ldx = ldx;
	if (c.bf16 == KERN_BF16_SGEMM && f->T <= GEMM_FEW_MAX_T && kern_gemm_few_ok()) {
		c.few = true;
		if (++f->mm_calls == 0) { /* wrapped: 0 must not match a stale xt */
			memset(f->xt_call, 0, (size_t)pool_threads(f->m->pool) * sizeof(*f->xt_call));
			f->mm_calls = 1;
		}
	}
	int threads = pool_threads(f->m->pool), np = 0;
	/* A few pieces per thread balance the load; multiples of 16 outputs
	 * keep the BLAS kernels on their fast path. */
	int per = 2 * threads;
	for (int j = 0; j < njobs; j++) {
		int out = jobs[j].out;
		int chunk = (out + per - 1) / per;
		chunk = (chunk + 15) & ~15;
		if (chunk < 64)
			chunk = 64;
		for (int o = 0; o < out && np < MAX_PIECES; o += chunk)
			c.pieces[np++] = (struct mm_piece){ j, o, out - o < chunk ? out - o : chunk };
	}
	pool_run(f->m->pool, mm_task, &c, np);
}

void op_matmul(struct fwd *f, const float *x, int ldx, int in, const struct mm_job *jobs, int njobs)
{
	if (!f->prof) {
		matmul(f, x, ldx, in, jobs, njobs);
		return;
	}
	double t0 = pfx_profile_now(), c0 = pfx_profile_cpu();
	matmul(f, x, ldx, in, jobs, njobs);
	if (!f->head) { /* the head's product is the head's (forward.c) */
		f->prof->matmul_s += pfx_profile_now() - t0;
		f->prof->matmul_cpu_s += pfx_profile_cpu() - c0;
	}
}

/* ==== Row-wise operations ==== */

struct rows_ctx {
	struct fwd *f;
	const float *x;
	float *y;
	const float *w, *b, *up;
	int n;
	float *rot;
	int nheads;
};

static int row_tasks(const struct fwd *f)
{
	return (f->T + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
}

/*
 * Row-wise operations (norms, RoPE, activations) of a few rows run on the
 * calling thread: at a short suffix's 32 rows each is a few microseconds
 * of work, less than handing half of it to another thread costs on a
 * shared machine, and the workers keep spinning for the next product.
 * Rows are independent: the results are those of the pool. (32 rows on
 * 2048, alternating in one process: 18 CPU-ms a pass outside the products,
 * attention and head, against 27 through the pool.)
 */
#define INLINE_ROWS 32

static void rows_run(struct fwd *f, pool_fn fn, void *ctx)
{
	int n = row_tasks(f);
	if (f->T <= INLINE_ROWS) {
		for (int t = 0; t < n; t++)
			fn(ctx, t, 0);
		return;
	}
	pool_run(f->m->pool, fn, ctx, n);
}

static void norm_task(void *ctx, int t, int thread)
{
	struct rows_ctx *c = ctx;
	const struct pfx_config *cfg = c->f->c;
	int H = cfg->hidden, r1 = (t + 1) * ROWS_PER_TASK;
	if (r1 > c->f->T)
		r1 = c->f->T;
	for (int r = t * ROWS_PER_TASK; r < r1; r++) {
		const float *x = c->x + (size_t)r * H;
		float *y = c->y + (size_t)r * H;
		if (cfg->norm == PFX_NORM_RMS) {
			double ss = kern_row_sum(x, H, 0.0, true);
			float inv = (float)(1.0 / sqrt(ss / H + cfg->norm_eps));
			for (int i = 0; i < H; i++)
				y[i] = c->w[i] * (x[i] * inv);
		} else {
			double mean = kern_row_sum(x, H, 0.0, false) / H;
			double var = kern_row_sum(x, H, mean, true);
			float inv = (float)(1.0 / sqrt(var / H + cfg->norm_eps));
			float mu = (float)mean;
			for (int i = 0; i < H; i++)
				y[i] = (x[i] - mu) * inv * c->w[i] + (c->b ? c->b[i] : 0.0f);
		}
	}
}

void op_norm(struct fwd *f, const float *x, float *y, const float *w, const float *b)
{
	struct rows_ctx c = { .f = f, .x = x, .y = y, .w = w, .b = b };
	rows_run(f, norm_task, &c);
}

static void rope_task(void *ctx, int t, int thread)
{
	struct rows_ctx *c = ctx;
	const struct pfx_config *cfg = c->f->c;
	int half = cfg->rotary_dim / 2, hd = cfg->head_dim, r1 = (t + 1) * ROWS_PER_TASK;
	if (r1 > c->f->T)
		r1 = c->f->T;
	for (int r = t * ROWS_PER_TASK; r < r1; r++) {
		const float *cs = c->f->cos + (size_t)r * half, *sn = c->f->sin + (size_t)r * half;
		for (int h = 0; h < c->nheads; h++) {
			float *v = c->rot + ((size_t)r * c->nheads + h) * hd;
			for (int j = 0; j < half; j++) {
				float a = v[j], b = v[j + half];
				v[j] = a * cs[j] - b * sn[j];
				v[j + half] = b * cs[j] + a * sn[j];
			}
		}
	}
}

void op_rope(struct fwd *f, float *x, int nheads)
{
	struct rows_ctx c = { .f = f, .rot = x, .nheads = nheads };
	rows_run(f, rope_task, &c);
}

static float gelu(float x)
{
	return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2));
}

static float gelu_tanh(float x)
{
	return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

static void act_task(void *ctx, int t, int thread)
{
	struct rows_ctx *c = ctx;
	enum pfx_act act = c->f->c->act;
	int r1 = (t + 1) * ROWS_PER_TASK;
	if (r1 > c->f->T)
		r1 = c->f->T;
	size_t i0 = (size_t)t * ROWS_PER_TASK * c->n, i1 = (size_t)r1 * c->n;
	if (act == PFX_ACT_SILU) {
		/* Vectorised: at one row per decode step this runs on one thread. */
		for (int r = t * ROWS_PER_TASK; r < r1; r++)
			kern_silu_mul(c->y + (size_t)r * c->n, c->up + (size_t)r * c->n, c->n);
		return;
	}
	for (size_t i = i0; i < i1; i++) {
		float v = c->y[i];
		if (act == PFX_ACT_GELU)
			c->y[i] = gelu(v);
		else
			c->y[i] = gelu_tanh(v);
		if (c->up) /* GeGLU (Gemma) */
			c->y[i] *= c->up[i];
	}
}

void op_act(struct fwd *f, float *y, int n, const float *up)
{
	struct rows_ctx c = { .f = f, .y = y, .n = n, .up = up };
	rows_run(f, act_task, &c);
}

/* ==== KV cache ==== */

void op_store_kv(struct fwd *f, int layer)
{
	const struct pfx_config *c = f->c;
	size_t B = (size_t)f->m->block_tokens, hd = (size_t)c->head_dim;
	for (int r = 0; r < f->T; r++) {
		struct pfx_session *s = f->items[f->row_item[r]].s;
		size_t p = (size_t)f->row_pos[r];
		char *blk = s->blocks[p / B]->data;
		size_t esz = kern_wtype_size(f->m->kv_type);
		for (int h = 0; h < c->n_kv_heads; h++) {
			const float *k = f->k + ((size_t)r * c->n_kv_heads + h) * hd;
			const float *v = f->v + ((size_t)r * c->n_kv_heads + h) * hd;
			kern_f32_to_wtype(f->m->kv_type, k, hd,
					 blk + kv_offset(f->m, layer, 0, h, (int)(p % B)) * esz);
			kern_f32_to_wtype(f->m->kv_type, v, hd,
					 blk + kv_offset(f->m, layer, 1, h, (int)(p % B)) * esz);
		}
	}
}
