/* SPDX-License-Identifier: MIT */
/*
 * Causal attention over each session's KV blocks.
 *
 * DESIGN. Prefill rows go in tasks of (session, KV head, ATT_CHUNK / G
 * rows): the G query heads that share the KV head are packed into one
 * matrix of at most ATT_CHUNK rows, and scores and the weighted sum of
 * values are one product each per KV block, by gemm_few_t on the block in
 * place (sgemm without AVX-512).
 * A few rows (2 to ATT_FEW_MAX_ROWS) over a long context, a short suffix
 * after an attached prefix, take the split path (few_task) where the
 * AVX-512 kernels run: the same tasks with the keys split over them when
 * the heads leave a thread idle, and per block a softmax step online, so
 * the scores stay in L1 (1.2x less CPU at 2048 keys, 1.3x at 8192;
 * docs/perf/2026-11-29-warm-attention.md).
 * A single new row (decode) is bound by reading the KV, so its tasks are
 * (session, range of whole blocks of keys), every head in each: a block's
 * keys and values of one layer are read once, front to back, for all the
 * query heads (grouped-query attention reads each block once, not once per
 * query head), and splitting the keys gives every thread work whatever the
 * number of heads. Each such task keeps a softmax per head online (running
 * max, sum, unnormalised output), and the partials of one head are merged
 * after the parallel loop. The
 * decode tasks use gemv.c's vector kernels rather than sgemm, whose set-up
 * on G-row products (3 for SmolLM) cost more than the arithmetic: with the
 * KV in cache, attention at 512 keys of context takes 0.6-0.7 ms per token
 * instead of ~1.0; from memory (as in decode, where the weights stream
 * through the caches in between) both take ~1.3 ms, bound by the reads.
 *
 * A sliding window (Mistral) of W: position p sees keys from
 * max(0, p - W + 1) on. Decode reads just those; prefill starts at the
 * block holding its first row's first key and masks, per row, the keys
 * before its own window with -inf (weight 0 after the softmax).
 */
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "env_switch.h"
#include "forward.h"
#include "kernels/kernels.h"
#include "profile.h"

/* The first key position p attends to. */
static int first_key(const struct fwd *f, int p)
{
	int W = f->c->sliding_window;
	return W && p >= W ? p - W + 1 : 0;
}

/* Keys per decode task at least; fewer are not worth a task of their own. */
#define MIN_SPLIT_KEYS 128

/* Key ranges of a decode row: a few per thread, so that a thread the
 * machine holds up does not hold up the step; whole blocks each. */
static int decode_splits(const struct fwd *f, size_t keys, size_t blocks)
{
	size_t want = 2 * (size_t)pool_threads(f->m->pool), most = keys / MIN_SPLIT_KEYS;
	if (want > most)
		want = most;
	if (want > blocks)
		want = blocks;
	return want > 1 ? (int)want : 1;
}

/* New rows per prefill task: its G query heads' rows fill one score
 * buffer of ATT_CHUNK rows. */
static int att_rows_per_task(const struct fwd *f)
{
	int G = f->c->n_heads / f->c->n_kv_heads;
	return ATT_CHUNK / G > 0 ? ATT_CHUNK / G : 1;
}

/* A thread's scores, packed queries and outputs (prefill), or the scores
 * of every query head on one run of keys (decode); its KV buffer follows. */
static size_t rows_floats(const struct fwd *f)
{
	size_t prefill = ATT_CHUNK * (f->score_ld + 2 * (size_t)f->c->head_dim);
	size_t decode = (size_t)f->c->n_heads * (size_t)f->m->block_tokens;
	return prefill > decode ? prefill : decode;
}

size_t att_thread_floats(const struct fwd *f)
{
	size_t kv = f->m->kv_type == KERN_W_F32 ? 0 : (size_t)f->m->block_tokens * f->c->head_dim;
	return rows_floats(f) + kv;
}

float *att_thread_scratch(const struct fwd *f, int thread)
{
	return f->scores + (size_t)thread * att_thread_floats(f);
}

/* Where the thread's KV buffer is. */
static float *kv_buffer(const struct fwd *f, const float *scratch)
{
	return (float *)scratch + rows_floats(f);
}

/*
 * n tokens of K (kv 0) or V (kv 1) of this layer's KV head `head` in one
 * block, from token `off` on, as f32: in place when the KV is f32, else
 * converted into buf (n x head_dim floats), where the kernels then read
 * them from L1 or L2 once the 16-bit values came from memory at half the
 * bytes. The f32 math is that of f32 KV holding the same values.
 */
static const float *kv_run(const struct fwd *f, const void *block, int kv, int head, int off,
			   int n, float *buf)
{
	struct kern_wmat w = kv_at(f->m, block, kv_offset(f->m, f->layer, kv, head, off));
	if (w.type == KERN_W_F32)
		return w.p;
	kern_wmat_to_f32(w, (size_t)n * f->c->head_dim, buf);
	return buf;
}

/*
 * Asks for the n tokens of K or V of KV head `head` in a block ahead of
 * their use. A head's keys of one layer are 16 KiB runs, one per block,
 * blocks apart (a block holds every layer): the hardware prefetchers stop
 * at each page's end and see no stream across runs, so without this every
 * run starts with misses to memory, the most on the first pass over KV
 * that another process wrote (an attach). Prefetches change no value.
 */
/* PFX_NO_KV_PREFETCH set (as PFX_NO_AVX512 is, read once) turns it off, to compare. */
static bool kv_prefetch_off(void)
{
	static _Atomic int off = -1;
	return env_switch_off(&off, "PFX_NO_KV_PREFETCH");
}

static void kv_prefetch(const struct fwd *f, const void *block, int kv, int head, int n)
{
	if (kv_prefetch_off())
		return;
	struct kern_wmat w = kv_at(f->m, block, kv_offset(f->m, f->layer, kv, head, 0));
	const char *p = w.p;
	size_t bytes = (size_t)n * f->c->head_dim * kern_wtype_size(w.type);
	for (size_t o = 0; o < bytes; o += 64)
		__builtin_prefetch(p + o, 0, 2);
}

static _Atomic int split_mode = ATT_SPLIT_AUTO;

void att_split_set(enum att_split mode)
{
	split_mode = mode;
}

/* Context (keys before the new rows) from which the split path runs
 * unasked, with f32 and with 16-bit KV (converted a block at a time on
 * both paths, where the split path gained nothing at 2048 keys but 1.2x at
 * 8192): docs/perf/2026-11-29-warm-attention.md. */
#define FEW_MIN_CONTEXT 512
#define FEW_MIN_CONTEXT_16 4096

/* PFX_NO_ATT_SPLIT set (as PFX_NO_KV_PREFETCH is, read once) keeps the
 * reference path where it would be chosen, to compare whole programs. */
static bool split_off_env(void)
{
	static _Atomic int off = -1;
	return env_switch_off(&off, "PFX_NO_ATT_SPLIT");
}

/* Whether item's rows take the split path (few_task). */
static bool few_rows(const struct fwd *f, const struct pfx_batch_item *it)
{
	int mode = split_mode, G = f->c->n_heads / f->c->n_kv_heads;
	if (mode == ATT_SPLIT_AUTO && split_off_env())
		return false;
	if (mode == ATT_SPLIT_OFF || !kern_gemm_few_ok() || G > ATT_CHUNK)
		return false;
	if (it->n < 2 || it->n > ATT_FEW_MAX_ROWS)
		return false;
	size_t min = f->m->kv_type == KERN_W_F32 ? FEW_MIN_CONTEXT : FEW_MIN_CONTEXT_16;
	return mode != ATT_SPLIT_AUTO || it->s->len >= min;
}

/* Blocks a split of keys holds at least; splits of a group at most. */
#define FEW_MIN_SPLIT_BLOCKS 4
#define FEW_MAX_SPLITS 16

/*
 * Tasks of (KV head, chunk of R rows, range of keys): the keys are split
 * in whole blocks when the heads and chunks alone would leave a thread
 * idle (3 KV heads of 16 rows on 2 threads: 2 tasks on one, 1 on the
 * other), and the partial softmaxes of a group merged after the loop.
 */
static int plan_few(const struct fwd *f, const struct pfx_batch_item *it, int item, int R,
		    int chunks, struct att_task *tasks)
{
	int B = f->m->block_tokens, len0 = (int)it->s->len, n = (int)it->n, t = 0;
	int groups = f->c->n_kv_heads * chunks, want = 2 * pool_threads(f->m->pool);
	for (int h = 0; h < f->c->n_kv_heads; h++)
		for (int r0 = 0; r0 < n; r0 += R) {
			int r1 = r0 + R < n ? r0 + R : n;
			int lo = first_key(f, len0 + r0), hi = len0 + r1;
			int b0 = lo / B, blocks = (hi + B - 1) / B - b0;
			int ns = groups >= want ? 1 : (want + groups - 1) / groups;
			if (split_mode == ATT_SPLIT_MOST)
				ns = FEW_MAX_SPLITS;
			if (ns > FEW_MAX_SPLITS)
				ns = FEW_MAX_SPLITS;
			if (ns > blocks / FEW_MIN_SPLIT_BLOCKS)
				ns = blocks / FEW_MIN_SPLIT_BLOCKS;
			if (ns < 1)
				ns = 1;
			for (int s = 0; s < ns; s++, t++) {
				int k0 = (b0 + blocks * s / ns) * B, k1 = (b0 + blocks * (s + 1) / ns) * B;
				if (tasks)
					tasks[t] = (struct att_task){ item, h, r0, r1, s, ns, true,
								      k0 > lo ? k0 : lo, k1 < hi ? k1 : hi };
			}
		}
	return t;
}

int att_plan(const struct fwd *f, const struct pfx_batch_item *items, int nitems,
	     struct att_task *tasks)
{
	const struct pfx_config *c = f->c;
	int t = 0;
	for (int i = 0; i < nitems; i++) {
		size_t n = items[i].n;
		if (n == 1) {
			int B = f->m->block_tokens, keys = (int)items[i].s->len + 1;
			int lo = first_key(f, keys - 1), b0 = lo / B, blocks = (keys + B - 1) / B - b0;
			int ns = decode_splits(f, (size_t)(keys - lo), (size_t)blocks);
			for (int s = 0; s < ns; s++, t++) {
				int k0 = (b0 + blocks * s / ns) * B, k1 = (b0 + blocks * (s + 1) / ns) * B;
				if (tasks)
					tasks[t] = (struct att_task){ .item = i, .r0 = k0 > lo ? k0 : lo,
								      .r1 = k1 < keys ? k1 : keys,
								      .split = s, .nsplit = ns };
			}
			continue;
		}
		/* Equal chunks: 32 rows in 16 + 16, not 21 + 11, keep the
		 * threads evenly loaded on a short suffix. */
		size_t R = (size_t)att_rows_per_task(f), chunks = (n + R - 1) / R;
		R = (n + chunks - 1) / chunks;
		if (few_rows(f, &items[i])) {
			t += plan_few(f, &items[i], i, (int)R, (int)chunks, tasks ? tasks + t : NULL);
			continue;
		}
		for (int h = 0; h < c->n_kv_heads; h++)
			for (size_t r0 = 0; r0 < n; r0 += R, t++)
				if (tasks)
					tasks[t] = (struct att_task){
						.item = i, .head = h, .r0 = (int)r0,
						.r1 = (int)(r0 + R < n ? r0 + R : n),
					};
	}
	return t;
}

/* The G query heads' rows of a prefill task, packed head-major: row
 * g * nq + r is query head kvh * G + g of new token r0 + r. */
struct rows {
	int G, nq, kvh;
	size_t row0; /* the item's first row in the batch + r0 */
};

/* Prefetches block b's K (kv 0) or V (kv 1) of head, of the nk keys:
 * the loops below ask for the next block while they compute on this one,
 * the K loop for the first V block at its end. */
static void prefetch_next(const struct fwd *f, const struct pfx_session *s, int kv, int head,
			  int b, int nk)
{
	/* Only blocks attached from prefixd, which another process wrote:
	 * those this one computed (a cold prefill's) were written moments ago
	 * and sit in the caches, where the prefetches would be instructions
	 * for nothing (a 1024-token cold prefill's attention took 3% more CPU
	 * with them, within the noise; this keeps the cold path as it was). */
	if (!s->blocks[b]->lease)
		return;
	int B = f->m->block_tokens, kb = nk - b * B < B ? nk - b * B : B;
	kv_prefetch(f, s->blocks[b]->data, kv, head, kb);
}

/*
 * Scores, weights and outputs transposed (keys x rows), K and V read in
 * their blocks: S^T = K Q^T and O^T = V^T P^T, each one gemm_few_t call
 * per KV block, whose k-loop runs over a head's dims or a block's keys with
 * a vector of 16 rows per accumulator. The softmax then runs down the
 * columns, with no horizontal sums either. Against one sgemm per block
 * (which repacks Q and the block every time) or copying each head's keys
 * and values out first, this reads them once, where they are.
 */
static void prefill_rows_t(struct fwd *f, const struct pfx_session *s, const struct rows *q,
			   int b0, int nk, const int *lo, const int *valid, float *S, float *QT,
			   float *OT, float *kvbuf)
{
	int B = f->m->block_tokens, hd = f->c->head_dim, qd = f->c->n_heads * hd;
	int rows = q->G * q->nq, ld = kern_gemm_few_ld(rows);
	float scale = 1.0f / sqrtf((float)hd), inv[ATT_CHUNK];

	for (int d = 0; d < hd; d++) {
		for (int g = 0; g < q->G; g++)
			for (int r = 0; r < q->nq; r++)
				QT[(size_t)d * ld + g * q->nq + r] =
					scale * f->q[(q->row0 + r) * qd + ((size_t)q->kvh * q->G + g) * hd + d];
		for (int t = rows; t < ld; t++)
			QT[(size_t)d * ld + t] = 0.0f;
	}
	for (int b = b0; b * B < nk; b++) {
		int kb = nk - b * B < B ? nk - b * B : B;
		if (b + 1 < (nk + B - 1) / B)
			prefetch_next(f, s, 0, q->kvh, b + 1, nk);
		else
			prefetch_next(f, s, 1, q->kvh, b0, nk);
		const float *K = kv_run(f, s->blocks[b]->data, 0, q->kvh, 0, kb, kvbuf);
		kern_gemm_few_t(rows, kb, hd, QT, K, hd, 1, 0.0f, S + (size_t)(b - b0) * B * ld, ld);
	}
	for (int t = 0; t < rows; t++)
		for (int j = 0; j < lo[t]; j++)
			S[(size_t)j * ld + t] = -INFINITY;
	kern_softmax_cols(S, nk - b0 * B, ld, valid, inv);
	for (int b = b0; b * B < nk; b++) {
		int kb = nk - b * B < B ? nk - b * B : B;
		if (b + 1 < (nk + B - 1) / B)
			prefetch_next(f, s, 1, q->kvh, b + 1, nk);
		const float *V = kv_run(f, s->blocks[b]->data, 1, q->kvh, 0, kb, kvbuf);
		kern_gemm_few_t(rows, hd, kb, S + (size_t)(b - b0) * B * ld, V, 1, hd,
				b > b0 ? 1.0f : 0.0f, OT, ld);
	}
	for (int g = 0; g < q->G; g++)
		for (int r = 0; r < q->nq; r++) {
			int t = g * q->nq + r;
			float *dst = f->att + (q->row0 + r) * qd + ((size_t)q->kvh * q->G + g) * hd;
			for (int d = 0; d < hd; d++)
				dst[d] = OT[(size_t)d * ld + t] * inv[t];
		}
}

/*
 * The same with sgemm, where the kernels above do not run: one call per KV
 * block for all G x rows, so each block is read once per group.
 */
static void prefill_rows(struct fwd *f, const struct pfx_session *s, const struct rows *q,
			 int b0, int nk, const int *lo, const int *valid, float *S, float *Q, float *O,
			 float *kvbuf)
{
	int B = f->m->block_tokens, hd = f->c->head_dim, qd = f->c->n_heads * hd;
	int rows = q->G * q->nq;
	size_t ld = f->score_ld;
	float scale = 1.0f / sqrtf((float)hd), inv[ATT_CHUNK], mx;

	for (int g = 0; g < q->G; g++)
		for (int r = 0; r < q->nq; r++)
			memcpy(Q + ((size_t)g * q->nq + r) * hd,
			       f->q + (q->row0 + r) * qd + ((size_t)q->kvh * q->G + g) * hd,
			       (size_t)hd * sizeof(float));
	for (int b = b0; b * B < nk; b++) {
		int kb = nk - b * B < B ? nk - b * B : B;
		const float *K = kv_run(f, s->blocks[b]->data, 0, q->kvh, 0, kb, kvbuf);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kb, hd, scale, Q, hd, K, hd,
			    0.0f, S + (size_t)(b - b0) * B, (int)ld);
	}
	for (int i = 0; i < rows; i++) {
		float *row = S + (size_t)i * ld;
		for (int j = 0; j < lo[i]; j++)
			row[j] = -INFINITY;
		inv[i] = 1.0f / kern_exp_sum(row, valid[i], &mx);
		memset(row + valid[i], 0, (size_t)(nk - b0 * B - valid[i]) * sizeof(float));
	}
	for (int b = b0; b * B < nk; b++) {
		int kb = nk - b * B < B ? nk - b * B : B;
		const float *V = kv_run(f, s->blocks[b]->data, 1, q->kvh, 0, kb, kvbuf);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, kb, 1.0f,
			    S + (size_t)(b - b0) * B, (int)ld, V, hd, b > b0 ? 1.0f : 0.0f, O, hd);
	}
	/* Normalised on the way out rather than over every score. */
	for (int g = 0; g < q->G; g++)
		for (int r = 0; r < q->nq; r++) {
			const float *src = O + ((size_t)g * q->nq + r) * hd;
			float *dst = f->att + (q->row0 + r) * qd + ((size_t)q->kvh * q->G + g) * hd;
			float w = inv[g * q->nq + r];
			for (int d = 0; d < hd; d++)
				dst[d] = src[d] * w;
		}
}

/* Rows of new tokens for the G query heads of one KV head, causal: row r
 * sees the keys up to its own position (within its window), counted from
 * the first block any of them sees. */
static void prefill_task(struct fwd *f, const struct att_task *a, int thread)
{
	const struct pfx_config *c = f->c;
	const struct pfx_session *s = f->items[a->item].s;
	int hd = c->head_dim, G = c->n_heads / c->n_kv_heads;
	struct rows q = { G, a->r1 - a->r0, a->head, (size_t)f->item_row[a->item] + a->r0 };
	size_t len0 = s->len; /* committed only after the pass */
	int nk = (int)len0 + a->r1; /* keys the last query row sees */
	float *S = att_thread_scratch(f, thread);        /* (rows, score_ld) or its transpose */
	float *Q = S + (size_t)ATT_CHUNK * f->score_ld;  /* (rows, hd) or its transpose */
	float *O = Q + (size_t)ATT_CHUNK * hd;           /* (rows, hd) or its transpose */
	int valid[ATT_CHUNK], lo[ATT_CHUNK];
	int p0 = (int)len0 + a->r0, b0 = first_key(f, p0) / f->m->block_tokens;
	int k0 = b0 * f->m->block_tokens;

	for (int t = 0; t < ATT_CHUNK; t++) {
		int p = p0 + t % q.nq;
		valid[t] = t < G * q.nq ? p + 1 - k0 : 1;
		lo[t] = t < G * q.nq ? first_key(f, p) - k0 : 0;
	}
	if (kern_gemm_few_ok())
		prefill_rows_t(f, s, &q, b0, nk, lo, valid, S, Q, O, kv_buffer(f, S));
	else
		prefill_rows(f, s, &q, b0, nk, lo, valid, S, Q, O, kv_buffer(f, S));
}

/* Floats between the partials of one decode task and the next: tasks on
 * different threads write theirs as they go, so a cache line between them
 * would travel from core to core; a line's worth of gap past a whole number
 * of lines keeps them apart however the buffer is aligned. */
static size_t partials_stride(const struct fwd *f)
{
	size_t floats = (size_t)f->c->n_heads * (f->c->head_dim + 2);
	size_t few = (size_t)ATT_CHUNK * (f->c->head_dim + 2); /* few_task's */
	floats = floats > few ? floats : few;
	return (floats + 15) / 16 * 16 + 16;
}

size_t att_partials_floats(const struct fwd *f, int ntasks)
{
	return (size_t)ntasks * partials_stride(f);
}

/* Partial results of one decode task for query head h: (max, sum, out). */
static float *partial(const struct fwd *f, int task, int h)
{
	return f->partials + (size_t)task * partials_stride(f) + (size_t)h * (f->c->head_dim + 2);
}

/* Keys [j, k1) of a task: the first run lies inside one block. */
static const float *run(const struct fwd *f, const struct pfx_session *s, int kv, int head, int j,
			int k1, int *kb, float *buf)
{
	int B = f->m->block_tokens, off = j % B;
	*kb = B - off < k1 - j ? B - off : k1 - j;
	return kv_run(f, s->blocks[j / B]->data, kv, head, off, *kb, buf);
}

/*
 * Folds the scores of one run of keys into a head's partial softmax
 * (online softmax): the scores become their weights relative to the
 * running max, and what was summed before is scaled down when the max
 * grows.
 */
static void fold_run(float *p, float *score, int n, int hd)
{
	float mx, sum = kern_exp_sum(score, n, &mx);
	if (mx > p[0]) {
		float w = expf(p[0] - mx); /* 0 for the first run */
		p[0] = mx;
		p[1] = p[1] * w + sum;
		for (int d = 0; d < hd; d++)
			p[2 + d] *= w;
	} else {
		float w = expf(mx - p[0]);
		p[1] += sum * w;
		for (int t = 0; t < n; t++)
			score[t] *= w;
	}
}

/*
 * One new row and a range of keys, for every head: block after block, the
 * scores of all query heads on the block's keys, then their weighted sum
 * of its values. A block holds a layer's keys of every KV head, then its
 * values, one after the other: this reads them in that order, one
 * sequential run of 2 x kv_heads x B x head_dim values a block, where a
 * pass per KV head over its keys and then over its values started a new
 * stream every B x head_dim values and read the KV at about half the
 * bandwidth the weights stream at (perf of a decode step).
 */
static void decode_task(struct fwd *f, const struct att_task *a, int task, int thread)
{
	const struct pfx_config *c = f->c;
	const struct pfx_session *s = f->items[a->item].s;
	int hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads, G = nh / nkv;
	int B = f->m->block_tokens, kb = 0;
	float *S = att_thread_scratch(f, thread); /* (nh, B): query head h's scores at h * B */
	float *buf = kv_buffer(f, S);
	const float *q = f->q + (size_t)f->item_row[a->item] * nh * hd;
	float scale = 1.0f / sqrtf((float)hd);

	for (int h = 0; h < nh; h++) {
		float *p = partial(f, task, h);
		p[0] = -INFINITY;
		p[1] = 0.0f;
		memset(p + 2, 0, (size_t)hd * sizeof(float));
	}
	for (int j = a->r0; j < a->r1; j += kb) {
		for (int h = 0; h < nkv; h++) {
			const float *K = run(f, s, 0, h, j, a->r1, &kb, buf);
			kern_dots(G, kb, hd, q + (size_t)h * G * hd, hd, K, scale, S + (size_t)h * G * B, B);
		}
		for (int h = 0; h < nh; h++)
			fold_run(partial(f, task, h), S + (size_t)h * B, kb, hd);
		for (int h = 0; h < nkv; h++) {
			const float *V = run(f, s, 1, h, j, a->r1, &kb, buf);
			kern_axpys(G, kb, hd, S + (size_t)h * G * B, B, V, partial(f, task, h * G) + 2,
				  hd + 2);
		}
	}
}

/* A few task's partial softmax: its output transposed (hd x ld), then
 * each row's running max and sum of weights. */
struct few_part {
	float *OT, *m, *l;
	int ld;
};

static struct few_part few_part(const struct fwd *f, const struct att_task *a, int task)
{
	int G = f->c->n_heads / f->c->n_kv_heads, hd = f->c->head_dim;
	int ld = kern_gemm_few_ld(G * (a->r1 - a->r0));
	float *p = f->partials + (size_t)task * partials_stride(f);
	return (struct few_part){ p, p + (size_t)hd * ld, p + (size_t)hd * ld + ld, ld };
}

/*
 * A few rows over a range of keys, for the G query heads of one KV head
 * (rows packed as in prefill_rows_t): block after block, its scores
 * (S^T = K Q^T, gemm_few_t), an online softmax step on them while they
 * are in L1 (kern_att_online), and their weighted sum of the block's
 * values into the unnormalised output (O^T += V^T P^T). Against
 * prefill_rows_t, the scores of all keys never go through L2 (and past
 * ~8192 keys out of it), and the keys may be split over several tasks.
 */
static void few_task(struct fwd *f, const struct att_task *a, int task, int thread)
{
	const struct pfx_config *c = f->c;
	const struct pfx_session *s = f->items[a->item].s;
	int B = f->m->block_tokens, hd = c->head_dim, qd = c->n_heads * hd, G = c->n_heads / c->n_kv_heads;
	int nq = a->r1 - a->r0, rows = G * nq, len0 = (int)s->len;
	size_t row0 = (size_t)f->item_row[a->item] + a->r0;
	struct few_part P = few_part(f, a, task);
	int ld = P.ld, lo[ATT_CHUNK], hi[ATT_CHUNK], blo[ATT_CHUNK], bhi[ATT_CHUNK];
	float *QT = att_thread_scratch(f, thread), *S = QT + (size_t)hd * ld, *kvbuf = kv_buffer(f, QT);
	float scale = 1.0f / sqrtf((float)hd);

	for (int d = 0; d < hd; d++) {
		for (int g = 0; g < G; g++)
			for (int r = 0; r < nq; r++)
				QT[(size_t)d * ld + g * nq + r] =
					scale * f->q[(row0 + r) * qd + ((size_t)a->head * G + g) * hd + d];
		for (int t = rows; t < ld; t++)
			QT[(size_t)d * ld + t] = 0.0f;
	}
	for (int t = 0; t < ld; t++) {
		int p = len0 + a->r0 + t % nq;
		lo[t] = t < rows ? first_key(f, p) : 0;
		hi[t] = t < rows ? p + 1 : 0;
		P.m[t] = -INFINITY;
		P.l[t] = 0.0f;
	}
	memset(P.OT, 0, (size_t)hd * ld * sizeof(float));
	for (int j = a->k0, kb; j < a->k1; j += kb) {
		int b = j / B, off = j - b * B;
		kb = B - off < a->k1 - j ? B - off : a->k1 - j;
		const float *K = kv_run(f, s->blocks[b]->data, 0, a->head, off, kb, kvbuf);
		kern_gemm_few_t(rows, kb, hd, QT, K, hd, 1, 0.0f, S, ld);
		for (int t = 0; t < ld; t++) {
			blo[t] = lo[t] - j;
			bhi[t] = hi[t] - j;
		}
		/* The block's values, asked for while the softmax step computes:
		 * the products on V had waited on them (1.5x the time of those
		 * on K, which gemm_few_t prefetches as it walks the rows). */
		struct kern_wmat vw =
			kv_at(f->m, s->blocks[b]->data, kv_offset(f->m, f->layer, 1, a->head, off));
		size_t vbytes = (size_t)kb * hd * kern_wtype_size(vw.type);
		kern_att_online(S, kb, ld, blo, bhi, P.m, P.l, P.OT, hd, vw.p,
				kv_prefetch_off() ? 0 : vbytes);
		const float *V = kv_run(f, s->blocks[b]->data, 1, a->head, off, kb, kvbuf);
		kern_gemm_few_t(rows, hd, kb, S, V, 1, hd, 1.0f, P.OT, ld);
	}
}

/* Merges the key ranges of a few task's group into its rows of att. */
static void merge_few(struct fwd *f, int t0)
{
	const struct att_task *a = &f->tasks[t0];
	int G = f->c->n_heads / f->c->n_kv_heads, hd = f->c->head_dim, qd = f->c->n_heads * hd;
	int nq = a->r1 - a->r0, rows = G * nq, ns = a->nsplit;
	size_t row0 = (size_t)f->item_row[a->item] + a->r0;
	float w[FEW_MAX_SPLITS][ATT_CHUNK], inv[ATT_CHUNK];
	struct few_part P[FEW_MAX_SPLITS];

	for (int s = 0; s < ns; s++)
		P[s] = few_part(f, a + s, t0 + s);
	for (int t = 0; t < rows; t++) {
		float mx = -INFINITY, sum = 0;
		for (int s = 0; s < ns; s++)
			mx = fmaxf(mx, P[s].m[t]);
		for (int s = 0; s < ns; s++) {
			/* A split with none of the row's keys (a window) adds nothing. */
			w[s][t] = P[s].m[t] == -INFINITY ? 0.0f : expf(P[s].m[t] - mx);
			sum += w[s][t] * P[s].l[t];
		}
		inv[t] = 1.0f / sum;
	}
	for (int t = 0; t < rows; t++) {
		float *dst = f->att + (row0 + t % nq) * qd + ((size_t)a->head * G + t / nq) * hd;
		for (int d = 0; d < hd; d++) {
			float o = 0;
			for (int s = 0; s < ns; s++)
				o += w[s][t] * P[s].OT[(size_t)d * P[s].ld + t];
			dst[d] = o * inv[t];
		}
	}
}

static void att_task(void *ctx, int t, int thread)
{
	struct fwd *f = ctx;
	const struct att_task *a = &f->tasks[t];
	if (a->few)
		few_task(f, a, t, thread);
	else if (a->nsplit)
		decode_task(f, a, t, thread);
	else
		prefill_task(f, a, thread);
}

/* Merges the key ranges of each decode row: softmax over all of them. */
static void merge_partials(struct fwd *f)
{
	const struct pfx_config *c = f->c;
	int hd = c->head_dim, qd = c->n_heads * hd;
	for (int t = 0; t < f->ntasks; t++) {
		const struct att_task *a = &f->tasks[t];
		if (!a->nsplit || a->split)
			continue;
		if (a->few) {
			merge_few(f, t);
			continue;
		}
		for (int h = 0; h < c->n_heads; h++) {
			float mx = -INFINITY, sum = 0;
			for (int s = 0; s < a->nsplit; s++)
				mx = fmaxf(mx, partial(f, t + s, h)[0]);
			float *o = f->att + (size_t)f->item_row[a->item] * qd + (size_t)h * hd;
			memset(o, 0, (size_t)hd * sizeof(float));
			for (int s = 0; s < a->nsplit; s++) {
				const float *p = partial(f, t + s, h);
				float w = expf(p[0] - mx);
				sum += w * p[1];
				for (int d = 0; d < hd; d++)
					o[d] += w * p[2 + d];
			}
			for (int d = 0; d < hd; d++)
				o[d] /= sum;
		}
	}
}

void op_attention(struct fwd *f, int layer)
{
	double t0 = f->prof ? pfx_profile_now() : 0, c0 = f->prof ? pfx_profile_cpu() : 0;
	f->layer = layer;
	pool_run(f->m->pool, att_task, f, f->ntasks);
	merge_partials(f);
	if (f->prof) {
		f->prof->attention_s += pfx_profile_now() - t0;
		f->prof->attention_cpu_s += pfx_profile_cpu() - c0;
	}
}
