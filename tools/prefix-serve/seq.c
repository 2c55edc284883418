/* SPDX-License-Identifier: MIT */
/*
 * One sequence's decode state: its sampler, its streaming detokenizer
 * (special tokens left out), stop strings and EOS, logprobs.
 *
 * Text is final once appended, so a stop string must be decided before
 * its bytes go out: the decoded text that could still begin one is held
 * back (hold) until a later token either completes it (the text ends
 * before it) or rules it out.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <prefixd-runtime/text.h>

#include "engine_impl.h"

int seq_init(struct seq *q, struct serve_job *j, uint32_t i, const struct seq_ctx *c,
	     struct pfx_error *err)
{
	memset(q, 0, sizeof(*q));
	q->job = j;
	q->choice = i;
	struct pfx_sampler_opts o = {
		.temperature = j->r.temperature,
		.top_k = j->r.top_k,
		.top_p = j->r.top_p,
		.seed = j->r.seed + i, /* the engine set one if the request did not */
	};
	int rc = pfx_sampler_new(&o, c->vocab, &q->sampler, err);
	if (!rc)
		rc = pfx_detok_stream_new(c->tok, PFX_TEXT_SKIP_SPECIAL, &q->detok, err);
	if (rc) {
		seq_end(q, SERVE_RUNNING);
		return rc;
	}
	q->state = i ? SEQ_FORK : SEQ_PREFILL;
	return 0;
}

bool seq_done(const struct seq *q)
{
	return q->job->choice[q->choice].finish != SERVE_RUNNING;
}

void seq_end(struct seq *q, enum serve_finish fin)
{
	if (fin != SERVE_RUNNING)
		job_finish(q->job, q->choice, fin);
	pfx_session_free(q->s);
	pfx_cache_close(q->cache);
	pfx_sampler_free(q->sampler);
	pfx_detok_stream_free(q->detok);
	free(q->hold);
	memset(q, 0, sizeof(*q));
}

/* The stop string found earliest in the held text: its offset, or -1. */
static long stop_at(const struct seq *q)
{
	const struct serve_request *r = &q->job->r;
	long best = -1;
	for (size_t s = 0; s < r->nstop; s++) {
		size_t sl = strlen(r->stop[s]);
		for (size_t at = 0; sl && at + sl <= q->nhold; at++)
			if (!memcmp(q->hold + at, r->stop[s], sl)) {
				if (best < 0 || (long)at < best)
					best = (long)at;
				break;
			}
	}
	return best;
}

/* How many bytes at the end of the held text could begin a stop string. */
static size_t stop_prefix(const struct seq *q)
{
	const struct serve_request *r = &q->job->r;
	size_t keep = 0;
	for (size_t s = 0; s < r->nstop; s++) {
		size_t sl = strlen(r->stop[s]);
		for (size_t k = sl - 1 < q->nhold ? sl - 1 : q->nhold; k > keep; k--)
			if (!memcmp(q->hold + q->nhold - k, r->stop[s], k)) {
				keep = k;
				break;
			}
	}
	return keep;
}

static int hold_add(struct seq *q, const char *p, size_t n)
{
	if (q->nhold + n > q->hold_cap) {
		size_t cap = q->hold_cap ? q->hold_cap : 64;
		while (cap < q->nhold + n)
			cap *= 2;
		char *h = realloc(q->hold, cap);
		if (!h)
			return -ENOMEM;
		q->hold = h;
		q->hold_cap = cap;
	}
	if (n)
		memcpy(q->hold + q->nhold, p, n);
	q->nhold += n;
	return 0;
}

/* Appends what of the held text is decided, with t (may be NULL); fin
 * ends the choice (then all the held text is decided: no token follows). */
static int emit(struct seq *q, const struct serve_token *t, enum serve_finish fin)
{
	long at = stop_at(q);
	size_t out;
	if (at >= 0) {
		out = (size_t)at;
		fin = SERVE_STOP;
	} else {
		out = fin != SERVE_RUNNING ? q->nhold : q->nhold - stop_prefix(q);
	}
	int rc = job_append(q->job, q->choice, q->hold, out, t, fin);
	if (rc)
		return rc;
	if (out)
		memmove(q->hold, q->hold + out, q->nhold - out);
	q->nhold -= out;
	return 0;
}

/* The rest of the detokenizer's text, then the choice ends with fin. */
static int finish(struct seq *q, const struct serve_token *t, enum serve_finish fin,
		  struct pfx_error *err)
{
	const char *p;
	size_t n;
	int rc = pfx_detok_stream_finish(q->detok, &p, &n, err);
	if (!rc && hold_add(q, p, n))
		rc = -ENOMEM;
	return rc ? rc : emit(q, t, fin);
}

/* Logprobs of the raw logits (over the tokenizer's ids): log-softmax, in
 * double for the sum. */
static void logprobs(const float *l, int V, uint32_t ntop, struct serve_token *t)
{
	float mx = l[0];
	for (int i = 1; i < V; i++)
		mx = l[i] > mx ? l[i] : mx;
	double sum = 0;
	for (int i = 0; i < V; i++)
		sum += exp((double)l[i] - mx);
	double lse = mx + log(sum);
	t->logprob = (float)(l[t->id] - lse);
	/* The ntop largest, first maximum first (as argmax picks). */
	t->ntop = 0;
	for (int i = 0; i < V; i++) {
		uint32_t at = t->ntop;
		while (at > 0 && l[i] > l[t->top_id[at - 1]])
			at--;
		if (at >= ntop)
			continue;
		uint32_t last = t->ntop < ntop ? t->ntop : ntop - 1;
		memmove(t->top_id + at + 1, t->top_id + at, (last - at) * sizeof(t->top_id[0]));
		t->top_id[at] = i;
		if (t->ntop < ntop)
			t->ntop++;
	}
	for (uint32_t k = 0; k < t->ntop; k++)
		t->top_logprob[k] = (float)(l[t->top_id[k]] - lse);
}

static bool is_eos(const struct pfx_tokenizer *tok, int32_t id)
{
	size_t n;
	const int32_t *e = pfx_tokenizer_eos(tok, &n);
	for (size_t i = 0; i < n; i++)
		if (e[i] == id)
			return true;
	return false;
}

int seq_token(struct seq *q, float *logits, const struct seq_ctx *c, struct pfx_error *err)
{
	const struct serve_request *r = &q->job->r;
	/* An embedding padded past the tokenizer's ids (a multiple of 64, say)
	 * has rows that are no token: never sampled, no probability. */
	for (int v = c->tok_vocab; v < c->vocab; v++)
		logits[v] = -INFINITY;
	int32_t id = pfx_sample(q->sampler, logits);
	if (id < 0)
		return pfx_errorf(err, id, "sampling failed");
	q->generated++;
	if (!r->ignore_eos && is_eos(c->tok, id)) {
		serve_job_lock(q->job);
		q->job->eos++;
		serve_job_unlock(q->job);
		return finish(q, NULL, SERVE_STOP, err);
	}
	struct serve_token t = { .id = id };
	if (r->logprobs)
		logprobs(logits, c->vocab, r->top_logprobs, &t);
	const char *p;
	size_t n;
	int rc = pfx_detok_stream_push(q->detok, id, &p, &n, err);
	if (rc)
		return rc;
	if (hold_add(q, p, n))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	/* The session holds the prompt and every token but this one. */
	if (q->generated >= r->max_tokens || r->nprompt + q->generated >= c->ctx)
		rc = finish(q, &t, SERVE_LENGTH, err);
	else
		rc = emit(q, &t, SERVE_RUNNING);
	if (rc == -ENOMEM)
		return pfx_errorf(err, rc, "out of memory");
	q->next = id;
	return rc;
}
