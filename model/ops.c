/* SPDX-License-Identifier: MIT */
/*
 * The operations blocks are made of, each split over the model's worker
 * pool. Matrix products go to OpenBLAS (one BLAS thread per worker, see
 * blas.c): sgemm for many rows, sgemv for one, where sgemm is ~10x slower.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "forward.h"

#define MAX_PIECES 512
#define ROWS_PER_TASK 16

/* ==== Matrix products ==== */

struct mm_piece {
	int job, o0, n;
};

struct mm_ctx {
	const float *x;
	int ldx, in, rows;
	const struct mm_job *jobs;
	struct mm_piece pieces[MAX_PIECES];
};

static void mm_task(void *ctx, int t, int thread)
{
	struct mm_ctx *c = ctx;
	const struct mm_piece *p = &c->pieces[t];
	const struct mm_job *j = &c->jobs[p->job];
	const float *w = j->w + (size_t)p->o0 * c->in;
	float *y = j->y + p->o0;
	if (c->rows == 1)
		cblas_sgemv(CblasRowMajor, CblasNoTrans, p->n, c->in, 1.0f, w, c->in, c->x, 1,
			    j->beta, y, 1);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->rows, p->n, c->in, 1.0f,
			    c->x, c->ldx, w, c->in, j->beta, y, j->ldy);
	if (j->b)
		for (int r = 0; r < c->rows; r++)
			for (int i = 0; i < p->n; i++)
				y[(size_t)r * j->ldy + i] += j->b[p->o0 + i];
}

void op_matmul(struct fwd *f, const float *x, int ldx, int in, const struct mm_job *jobs, int njobs)
{
	struct mm_ctx c = { .x = x, .ldx = ldx, .in = in, .rows = f->T, .jobs = jobs };
	int threads = pfx_pool_threads(f->m->pool), np = 0;
	/* A few pieces per thread balance the load; multiples of 16 outputs
	 * keep the BLAS kernels on their fast path. */
	int per = f->T == 1 ? threads : 2 * threads;
	for (int j = 0; j < njobs; j++) {
		int out = jobs[j].out;
		int chunk = (out + per - 1) / per;
		chunk = (chunk + 15) & ~15;
		if (chunk < 64)
			chunk = 64;
		for (int o = 0; o < out && np < MAX_PIECES; o += chunk)
			c.pieces[np++] = (struct mm_piece){ j, o, out - o < chunk ? out - o : chunk };
	}
	pfx_pool_run(f->m->pool, mm_task, &c, np);
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
			double ss = 0;
			for (int i = 0; i < H; i++)
				ss += (double)x[i] * x[i];
			float inv = (float)(1.0 / sqrt(ss / H + cfg->norm_eps));
			for (int i = 0; i < H; i++)
				y[i] = c->w[i] * (x[i] * inv);
		} else {
			double mean = 0, var = 0;
			for (int i = 0; i < H; i++)
				mean += x[i];
			mean /= H;
			for (int i = 0; i < H; i++)
				var += (x[i] - mean) * (x[i] - mean);
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
	pfx_pool_run(f->m->pool, norm_task, &c, row_tasks(f));
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
	pfx_pool_run(f->m->pool, rope_task, &c, row_tasks(f));
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
	for (size_t i = (size_t)t * ROWS_PER_TASK * c->n; i < (size_t)r1 * c->n; i++) {
		float v = c->y[i];
		if (act == PFX_ACT_SILU)
			c->y[i] = v / (1.0f + expf(-v)) * c->up[i];
		else if (act == PFX_ACT_GELU)
			c->y[i] = gelu(v);
		else
			c->y[i] = gelu_tanh(v);
	}
}

void op_act(struct fwd *f, float *y, int n, const float *up)
{
	struct rows_ctx c = { .f = f, .y = y, .n = n, .up = up };
	pfx_pool_run(f->m->pool, act_task, &c, row_tasks(f));
}

/* ==== KV and attention ==== */

void op_store_kv(struct fwd *f, int layer)
{
	const struct pfx_config *c = f->c;
	size_t B = (size_t)f->m->block_tokens, hd = (size_t)c->head_dim;
	for (int r = 0; r < f->T; r++) {
		struct pfx_session *s = f->items[f->row_item[r]].s;
		size_t p = (size_t)f->row_pos[r];
		float *blk = s->blocks[p / B]->data;
		for (int h = 0; h < c->n_kv_heads; h++) {
			const float *k = f->k + ((size_t)r * c->n_kv_heads + h) * hd;
			const float *v = f->v + ((size_t)r * c->n_kv_heads + h) * hd;
			memcpy(blk + kv_offset(f->m, layer, 0, h, (int)(p % B)), k, hd * sizeof(float));
			memcpy(blk + kv_offset(f->m, layer, 1, h, (int)(p % B)), v, hd * sizeof(float));
		}
	}
}

static void att_task(void *ctx, int t, int thread)
{
	struct fwd *f = ctx;
	const struct pfx_config *c = f->c;
	const struct att_task *a = &f->tasks[t];
	const struct pfx_session *s = f->items[a->item].s;
	int B = f->m->block_tokens, hd = c->head_dim, qd = c->n_heads * hd;
	int kvh = a->head / (c->n_heads / c->n_kv_heads);
	int nq = a->r1 - a->r0;
	size_t len0 = f->item_len[a->item];
	int nk = (int)len0 + a->r1; /* keys the last query row sees */
	int nb = (nk + B - 1) / B;
	size_t ld = f->score_ld;
	float *S = f->scores + (size_t)thread * ATT_CHUNK * ld;
	size_t row0 = (size_t)f->item_row[a->item] + a->r0;
	const float *q = f->q + row0 * qd + (size_t)a->head * hd;
	float *o = f->att + row0 * qd + (size_t)a->head * hd;
	float scale = 1.0f / sqrtf((float)hd);

	for (int b = 0; b < nb; b++) {
		int kb = nk - b * B < B ? nk - b * B : B;
		const float *K = s->blocks[b]->data + kv_offset(f->m, f->layer, 0, kvh, 0);
		if (nq == 1)
			cblas_sgemv(CblasRowMajor, CblasNoTrans, kb, hd, scale, K, hd, q, 1, 0.0f,
				    S + (size_t)b * B, 1);
		else
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, kb, hd, scale, q, qd,
				    K, hd, 0.0f, S + (size_t)b * B, (int)ld);
	}
	for (int r = 0; r < nq; r++) {
		float *row = S + (size_t)r * ld;
		int valid = (int)len0 + a->r0 + r + 1; /* causal: keys 0 .. position */
		float mx = row[0];
		for (int j = 1; j < valid; j++)
			mx = row[j] > mx ? row[j] : mx;
		float sum = 0;
		for (int j = 0; j < valid; j++) {
			row[j] = expf(row[j] - mx);
			sum += row[j];
		}
		float inv = 1.0f / sum;
		for (int j = 0; j < valid; j++)
			row[j] *= inv;
		for (int j = valid; j < nk; j++)
			row[j] = 0.0f;
	}
	for (int b = 0; b < nb; b++) {
		int kb = nk - b * B < B ? nk - b * B : B;
		const float *V = s->blocks[b]->data + kv_offset(f->m, f->layer, 1, kvh, 0);
		float beta = b ? 1.0f : 0.0f;
		if (nq == 1)
			cblas_sgemv(CblasRowMajor, CblasTrans, kb, hd, 1.0f, V, hd, S + (size_t)b * B, 1,
				    beta, o, 1);
		else
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hd, kb, 1.0f,
				    S + (size_t)b * B, (int)ld, V, hd, beta, o, qd);
	}
}

void op_attention(struct fwd *f, int layer)
{
	f->layer = layer;
	pfx_pool_run(f->m->pool, att_task, f, f->ntasks);
}
