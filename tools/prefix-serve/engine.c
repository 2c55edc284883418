/* SPDX-License-Identifier: MIT */
/*
 * The engine thread: admits queued jobs between steps, runs every running
 * sequence in one ragged pfx_forward a step (a decode token for each one
 * decoding, prompt chunks for those prefilling), samples, and hands the
 * output to the jobs.
 *
 * A job's choices take one slot each of `parallel`; its prompt is computed
 * once (by choice 0) from the longest prefix found in prefixd or in the
 * process's frozen prompts, and the other choices fork it when it is done.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <prefixd-runtime/cache.h>

#include "attach.h"
#include "engine_impl.h"
#include "local_prefix.h"

struct serve_engine {
	struct serve_engine_opts o;
	size_t B;
	struct seq_ctx sc;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t wake;      /* the engine: work, or stop */
	pthread_cond_t idle;      /* drain: nothing queued or running */
	/* Under mu: */
	struct serve_job *qhead, *qtail;
	unsigned nqueued, queued_slots, running; /* running: choices admitted, not ended */
	unsigned ending;          /* jobs off the queue being ended: not idle yet */
	bool draining, cancel_all, stopping;
	uint64_t steps;
	size_t local_bytes;       /* local_prefix_bytes after the last step */
	unsigned landed;          /* attach threads finished, not reaped yet */
	unsigned attaching;       /* slots in SEQ_ATTACH */
	/* The engine thread's: */
	struct seq *seqs;         /* (parallel) */
	struct pfx_batch_item *items;
	struct seq **item_seq;
	float *logits;            /* (parallel x vocab) */
	struct pollfd *pfd;
	struct local_prefix *local;
	uint64_t jobs;            /* admitted so far */
	bool *chosen;             /* (parallel): build's */
	struct serve_job **touched; /* jobs with new output this step */
	size_t ntouched;
	struct serve_attach **orphans; /* attaches whose jobs left: reaped
					* once their threads finish */
	size_t norphans, orphans_cap;
};

/* ==== Jobs entering and leaving ==== */

static void touch(struct serve_engine *e, struct serve_job *j)
{
	for (size_t i = 0; i < e->ntouched; i++)
		if (e->touched[i] == j)
			return;
	e->touched[e->ntouched++] = j;
}

/* An attach thread finished: one less to wait for. */
static void landed_one(struct serve_engine *e)
{
	pthread_mutex_lock(&e->mu);
	e->landed--;
	pthread_mutex_unlock(&e->mu);
}

/* The attach of a job that left: it stops at its next slice, and is
 * reaped (its thread joined, its session and connection freed) once it
 * has, without the engine waiting for it. */
static void orphan(struct serve_engine *e, struct serve_attach *a)
{
	attach_abandon(a);
	if (e->norphans == e->orphans_cap) {
		size_t cap = e->orphans_cap ? 2 * e->orphans_cap : 8;
		struct serve_attach **o = realloc(e->orphans, cap * sizeof(*o));
		if (!o) {
			/* No room to remember it: wait for it here (a slice). */
			attach_free(a); /* joined: it has landed */
			landed_one(e);
			return;
		}
		e->orphans = o;
		e->orphans_cap = cap;
	}
	e->orphans[e->norphans++] = a;
}

/* Orphans whose threads finished (all: also waiting for the others). */
static void reap_orphans(struct serve_engine *e, bool all)
{
	size_t k = 0;
	for (size_t i = 0; i < e->norphans; i++) {
		struct serve_attach *a = e->orphans[i];
		if (!all && !attach_landed(a)) {
			e->orphans[k++] = a;
			continue;
		}
		attach_free(a);
		landed_one(e);
	}
	e->norphans = k;
}

static void count_attaching(struct serve_engine *e, int d)
{
	pthread_mutex_lock(&e->mu);
	e->attaching += (unsigned)d;
	pthread_mutex_unlock(&e->mu);
}

/* Frees the sequence in slot q at once, ending its choice with fin. */
static void seq_drop(struct serve_engine *e, struct seq *q, enum serve_finish fin)
{
	if (q->att) {
		orphan(e, q->att);
		count_attaching(e, -1);
	}
	q->att = NULL;
	seq_end(q, fin);
	pthread_mutex_lock(&e->mu);
	e->running--;
	if (!e->running && !e->nqueued && !e->ending)
		pthread_cond_broadcast(&e->idle);
	pthread_mutex_unlock(&e->mu);
}

static void seq_leave(struct serve_engine *e, struct seq *q, enum serve_finish fin)
{
	touch(e, q->job);
	seq_drop(e, q, fin);
}

/* Ends every sequence of j with fin (SERVE_FAILED: why). */
static void job_leave(struct serve_engine *e, struct serve_job *j, enum serve_finish fin,
		      const char *why)
{
	job_end_all(j, fin, why);
	for (unsigned i = 0; i < e->o.parallel; i++)
		if (e->seqs[i].state != SEQ_FREE && e->seqs[i].job == j)
			seq_leave(e, &e->seqs[i], fin);
}

/* After a step: notify, and drop the engine's reference to finished jobs
 * (every choice ended: no slot holds them). */
static void notify_touched(struct serve_engine *e)
{
	for (size_t i = 0; i < e->ntouched; i++) {
		struct serve_job *j = e->touched[i];
		serve_job_lock(j);
		bool done = serve_job_done(j);
		serve_job_unlock(j);
		if (j->r.notify)
			j->r.notify(j->r.notify_arg);
		if (done)
			job_put(j);
	}
	e->ntouched = 0;
}

/* A job that holds no slot any more ends now (fin; SERVE_FAILED: why):
 * notified, and the engine's reference dropped. */
static void end_now(struct serve_job *j, enum serve_finish fin, const char *why)
{
	job_end_all(j, fin, why);
	if (j->r.notify)
		j->r.notify(j->r.notify_arg);
	job_put(j);
}

/* The prompt's start: the longest reuse of its whole blocks, from prefixd
 * (attached) or this process's frozen prompts (forked), leaving a token to
 * compute. Ties go to prefixd: the publish then continues the attach's
 * lease, where blocks forked locally would all be sent to the daemon
 * again (to be found there and dropped). */
static int start_prompt(struct serve_engine *e, struct seq *q, struct pfx_error *err)
{
	const struct serve_request *r = &q->job->r;
	size_t max = (r->nprompt - 1) / e->B * e->B, local = 0;
	struct pfx_session *ls = e->local ? local_prefix_find(e->local, r->prompt, r->nprompt, max,
								   &local)
					  : NULL;
	int rc;
	if (e->o.cache && max) {
		struct pfx_prefill_info info;
		struct pfx_error cerr;
		if ((rc = pfx_session_new(e->o.model, &q->s, err)))
			return rc;
		/* A cache failure is no error: the prompt is computed here. */
		rc = pfx_session_attach(q->s, e->o.cache, r->prompt, r->nprompt, &info, &cerr, err);
		if (rc)
			return rc;
		if (info.attached && info.attached >= local) {
			q->pos = q->attached = info.attached;
			return 0;
		}
		pfx_session_free(q->s);
		q->s = NULL;
	}
	if (ls) {
		q->pos = local;
		return pfx_session_fork_prefix(ls, local, &q->s, err);
	}
	return pfx_session_new(e->o.model, &q->s, err);
}

/* Takes a job's choices into free slots (reserved by the caller);
 * choice 0 starts its prompt. */
static void admit(struct serve_engine *e, struct serve_job *j)
{
	struct pfx_error err = { "" };
	struct seq *first = NULL;
	uint32_t ok = 0;
	int rc = 0;
	/* Every request samples from a seed of its own unless it names one. */
	uint64_t order = ++e->jobs;
	if (!j->r.has_seed)
		j->r.seed = e->sc.seed + order * 0x9e3779b97f4a7c15ull;
	for (unsigned i = 0; i < e->o.parallel && ok < j->r.n && !rc; i++) {
		if (e->seqs[i].state != SEQ_FREE)
			continue;
		rc = seq_init(&e->seqs[i], j, ok, &e->sc, &err);
		e->seqs[i].order = order;
		if (!rc && !ok)
			first = &e->seqs[i];
		ok += !rc;
	}
	/* Single flight: the attach may wait, on a thread of its own; the
	 * job joins the batch when it lands. One that cannot start a thread
	 * attaches here without waiting. */
	if (!rc && e->o.wait_ms && e->o.cache && (j->r.nprompt - 1) / e->B) {
		struct attach_signal sig = { &e->mu, &e->wake, &e->landed };
		if (!attach_start(e->o.model, e->o.cache, j, e->o.wait_ms, sig, &first->att, &err)) {
			first->state = SEQ_ATTACH;
			count_attaching(e, 1);
			return;
		}
	}
	if (!rc)
		rc = start_prompt(e, first, &err);
	job_set_admitted(j, rc ? 0 : first->pos);
	if (!rc)
		return;
	char why[300];
	snprintf(why, sizeof(why), "starting the request failed: %s", err.msg);
	job_end_all(j, SERVE_FAILED, why);
	for (unsigned i = 0; i < e->o.parallel; i++)
		if (e->seqs[i].state != SEQ_FREE && e->seqs[i].job == j)
			seq_drop(e, &e->seqs[i], SERVE_FAILED);
	/* The slots of choices that never got one. */
	pthread_mutex_lock(&e->mu);
	e->running -= j->r.n - ok;
	if (!e->running && !e->nqueued && !e->ending)
		pthread_cond_broadcast(&e->idle);
	pthread_mutex_unlock(&e->mu);
	end_now(j, SERVE_FAILED, why);
}

/* q's attach landed: its session, or a longer prefix kept locally, as
 * start_prompt chooses. */
static int start_landed(struct serve_engine *e, struct seq *q, struct pfx_error *err)
{
	const struct serve_request *r = &q->job->r;
	struct pfx_session *s;
	size_t attached;
	int rc = attach_take(q->att, &s, &q->cache, &attached, &q->claimed, err);
	attach_free(q->att);
	q->att = NULL;
	landed_one(e);
	count_attaching(e, -1);
	if (rc)
		return rc;
	size_t max = (r->nprompt - 1) / e->B * e->B, local = 0;
	struct pfx_session *ls = e->local ? local_prefix_find(e->local, r->prompt, r->nprompt, max,
								   &local)
					  : NULL;
	if (!ls || attached >= local) {
		q->s = s;
		q->pos = q->attached = attached;
		return 0;
	}
	pfx_session_free(s);
	q->pos = local;
	return pfx_session_fork_prefix(ls, local, &q->s, err);
}

/* Jobs whose attach landed join the batch. */
static void land(struct serve_engine *e)
{
	for (unsigned i = 0; i < e->o.parallel; i++) {
		struct seq *q = &e->seqs[i];
		if (q->state != SEQ_ATTACH || !attach_landed(q->att))
			continue;
		struct pfx_error err = { "" };
		struct serve_job *j = q->job;
		int rc = start_landed(e, q, &err);
		job_set_admitted(j, rc ? 0 : q->pos);
		if (!rc) {
			q->state = SEQ_PREFILL;
			continue;
		}
		char why[300];
		snprintf(why, sizeof(why), "starting the request failed: %s", err.msg);
		job_leave(e, j, SERVE_FAILED, why);
	}
}

/* fd (unless -1 or there already) added to pfd[0, np); the new np. */
static size_t add_fd(struct pollfd *pfd, size_t np, int fd)
{
	size_t k = 0;
	while (k < np && pfd[k].fd != fd)
		k++;
	if (fd >= 0 && k == np)
		pfd[np++] = (struct pollfd){ .fd = fd, .events = POLLRDHUP };
	return np;
}

/* Between steps: cancelled and hung-up jobs leave, queued ones join. */
static bool schedule(struct serve_engine *e)
{
	/* Hang-ups: one poll over the running and the queued jobs'
	 * connections. A queued job whose client left is cancelled here and
	 * leaves the queue below, at once rather than once it would run.
	 * Queued jobs stay in the queue until this thread takes them out. */
	size_t np = 0;
	for (unsigned i = 0; i < e->o.parallel; i++) {
		struct seq *q = &e->seqs[i];
		np = add_fd(e->pfd, np, q->state != SEQ_FREE ? q->job->r.client_fd : -1);
	}
	pthread_mutex_lock(&e->mu);
	for (struct serve_job *j = e->qhead; j; j = j->next)
		np = add_fd(e->pfd, np, j->r.client_fd);
	pthread_mutex_unlock(&e->mu);
	if (np && poll(e->pfd, np, 0) > 0)
		for (size_t k = 0; k < np; k++) {
			if (!(e->pfd[k].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
				continue;
			for (unsigned i = 0; i < e->o.parallel; i++)
				if (e->seqs[i].state != SEQ_FREE &&
				    e->seqs[i].job->r.client_fd == e->pfd[k].fd)
					atomic_store(&e->seqs[i].job->cancel, true);
			pthread_mutex_lock(&e->mu);
			for (struct serve_job *j = e->qhead; j; j = j->next)
				if (j->r.client_fd == e->pfd[k].fd)
					atomic_store(&j->cancel, true);
			pthread_mutex_unlock(&e->mu);
		}
	pthread_mutex_lock(&e->mu);
	bool all = e->cancel_all, stop = e->stopping;
	pthread_mutex_unlock(&e->mu);
	for (unsigned i = 0; i < e->o.parallel; i++) {
		struct seq *q = &e->seqs[i];
		if (q->state != SEQ_FREE && (all || stop || atomic_load(&q->job->cancel)))
			job_leave(e, q->job, SERVE_CANCELLED, "");
	}
	reap_orphans(e, false);
	land(e);
	/* The queue: cancelled jobs leave wherever they are; the others join
	 * first come, first served, while their choices fit. */
	for (;;) {
		pthread_mutex_lock(&e->mu);
		struct serve_job **pp = &e->qhead, *j = NULL, *prev = NULL;
		for (; *pp; prev = *pp, pp = &(*pp)->next)
			if (all || stop || atomic_load(&(*pp)->cancel) ||
			    (!prev && e->running + (*pp)->r.n <= e->o.parallel))
				break;
		bool cancelled = false;
		if (*pp) {
			j = *pp;
			*pp = j->next;
			if (e->qtail == j)
				e->qtail = prev;
			e->nqueued--;
			e->queued_slots -= j->r.n;
			cancelled = all || stop || atomic_load(&j->cancel);
			if (!cancelled)
				e->running += j->r.n;
			else
				e->ending++;
		}
		pthread_mutex_unlock(&e->mu);
		if (!j)
			break;
		if (!cancelled) {
			admit(e, j);
			continue;
		}
		end_now(j, SERVE_CANCELLED, "");
		pthread_mutex_lock(&e->mu);
		if (!--e->ending && !e->running && !e->nqueued)
			pthread_cond_broadcast(&e->idle);
		pthread_mutex_unlock(&e->mu);
	}
	return !stop;
}

/* ==== A step ==== */

/* Choice 0 computed its prompt: keep its full blocks (frozen, published,
 * kept locally), start the other choices from it, sample every choice's
 * first token from its last logits. */
static int prompt_done(struct serve_engine *e, struct seq *q0, float *logits,
		       struct pfx_error *err)
{
	struct serve_job *j = q0->job;
	const struct serve_request *r = &j->r;
	size_t full = r->nprompt / e->B * e->B;
	int rc = 0;
	if (full > pfx_session_frozen(q0->s))
		rc = pfx_session_freeze_at(q0->s, full, err);
	/* A prompt of whole blocks that attached them all computed only its
	 * last token, in a copy of a block the daemon has. */
	bool cached = q0->attached + 1 == r->nprompt && r->nprompt % e->B == 0;
	/* Neither a publish cut short nor a local copy that could not be
	 * kept is the request's failure: a later prompt computes more. */
	if (!rc && e->o.cache && !cached) {
		struct pfx_prefill_info info = { 0 };
		struct pfx_error cerr;
		pfx_session_publish(q0->s, q0->cache ? q0->cache : e->o.cache, r->prompt, r->nprompt,
				    &info, &cerr, NULL);
	}
	/* Kept locally only when its blocks are this process's own: attached
	 * ones are prefixd's already, and a lease kept here would hold them
	 * against the daemon's eviction. */
	if (!rc && e->local && !q0->attached)
		local_prefix_put(e->local, q0->s, r->prompt, full, NULL);
	for (unsigned i = 0; !rc && i < e->o.parallel; i++) {
		struct seq *q = &e->seqs[i];
		if (q->state == SEQ_FORK && q->job == j)
			rc = pfx_session_fork(q0->s, &q->s, err);
	}
	for (unsigned i = 0; !rc && i < e->o.parallel; i++) {
		struct seq *q = &e->seqs[i];
		if (q->job != j || q->state == SEQ_FREE)
			continue;
		q->state = SEQ_DECODE;
		rc = seq_token(q, logits, &e->sc, err);
		touch(e, j);
	}
	return rc;
}

/* The prefilling sequence admitted first among those not in the batch
 * yet (chosen: false), or NULL. */
static struct seq *next_prefill(struct serve_engine *e, const bool *chosen)
{
	struct seq *best = NULL;
	for (unsigned i = 0; i < e->o.parallel; i++) {
		struct seq *q = &e->seqs[i];
		if (q->state == SEQ_PREFILL && !chosen[i] && (!best || q->order < best->order))
			best = q;
	}
	return best;
}

static void add(struct serve_engine *e, size_t *n, struct seq *q, struct pfx_batch_item it)
{
	it.logits = it.want == PFX_LOGITS_NONE ? NULL : e->logits + *n * (size_t)e->sc.vocab;
	e->items[*n] = it;
	e->item_seq[(*n)++] = q;
}

/* One batch: a token of every decoding sequence, then prompt chunks, first
 * come first served, up to step_tokens in all (so a long prompt neither
 * stalls the streams nor, for long, the prompts behind it). Returns the
 * number of items. */
static size_t build(struct serve_engine *e)
{
	size_t n = 0, budget = e->o.step_tokens;
	for (unsigned i = 0; i < e->o.parallel; i++) {
		struct seq *q = &e->seqs[i];
		e->chosen[i] = false;
		if (q->state == SEQ_DECODE)
			add(e, &n, q, (struct pfx_batch_item){ .s = q->s, .tokens = &q->next, .n = 1,
							       .commit = true, .want = PFX_LOGITS_LAST });
	}
	struct seq *q;
	while (budget && (q = next_prefill(e, e->chosen))) {
		e->chosen[q - e->seqs] = true;
		size_t left = q->job->r.nprompt - q->pos, take = left < budget ? left : budget;
		/* Chunks end on block boundaries where they can: whole blocks
		 * are what a later prompt reuses. */
		size_t end = q->pos + take;
		if (take < left && end / e->B * e->B > q->pos)
			take = end / e->B * e->B - q->pos;
		budget -= take;
		q->chunk = take;
		add(e, &n, q, (struct pfx_batch_item){
			.s = q->s, .tokens = q->job->r.prompt + q->pos, .n = take, .commit = true,
			.want = take == left ? PFX_LOGITS_LAST : PFX_LOGITS_NONE });
	}
	return n;
}

/* What a computed item gives its sequence. */
static void after(struct serve_engine *e, struct seq *q, float *logits)
{
	struct pfx_error err = { "" };
	struct serve_job *j = q->job;
	int rc = 0;
	if (q->state == SEQ_PREFILL) {
		q->pos += q->chunk;
		if (q->pos == j->r.nprompt) {
			rc = prompt_done(e, q, logits, &err);
		} else if (q->claimed && q->pos / e->B > (q->pos - q->chunk) / e->B) {
			/* Claimed: the blocks this step completed go out now, so
			 * processes waiting for them attach early and the claim
			 * stays alive. A publish cut short is no failure. */
			struct pfx_prefill_info info;
			struct pfx_error cerr;
			pfx_session_publish(q->s, q->cache, j->r.prompt, q->pos, &info, &cerr, NULL);
		}
	} else {
		rc = seq_token(q, logits, &e->sc, &err);
		touch(e, j);
	}
	if (rc) {
		char why[300];
		snprintf(why, sizeof(why), "%s", err.msg);
		job_leave(e, j, SERVE_FAILED, why);
		return;
	}
	for (unsigned i = 0; i < e->o.parallel; i++)
		if (e->seqs[i].state != SEQ_FREE && e->seqs[i].job == j && seq_done(&e->seqs[i]))
			seq_leave(e, &e->seqs[i], SERVE_RUNNING);
}

/* Returns the items computed. */
static size_t step(struct serve_engine *e)
{
	size_t n = build(e);
	if (!n)
		return 0;
	struct pfx_error err = { "" };
	if (pfx_forward(e->o.model, e->items, n, &err)) {
		/* Nothing was committed: each item alone says whose it was. */
		for (size_t k = 0; k < n; k++) {
			struct pfx_batch_item it = e->items[k];
			struct seq *q = e->item_seq[k];
			/* A job failed by an earlier item: its sessions are gone. */
			if (q->state == SEQ_FREE || q->s != it.s) {
				e->item_seq[k] = NULL;
				continue;
			}
			if (pfx_forward(e->o.model, &it, 1, &err)) {
				char why[300];
				snprintf(why, sizeof(why), "the forward pass failed: %s", err.msg);
				job_leave(e, q->job, SERVE_FAILED, why);
				e->item_seq[k] = NULL;
			}
		}
	}
	/* Counted before the output it gives: a job seen done has its steps
	 * counted. */
	pthread_mutex_lock(&e->mu);
	e->steps++;
	pthread_mutex_unlock(&e->mu);
	for (size_t k = 0; k < n; k++) {
		struct seq *q = e->item_seq[k];
		/* A failed job's other items are gone too. */
		if (q && q->state != SEQ_FREE && q->s == e->items[k].s)
			after(e, q, e->items[k].logits);
	}
	size_t kept = e->local ? local_prefix_bytes(e->local) : 0;
	pthread_mutex_lock(&e->mu);
	e->local_bytes = kept;
	pthread_mutex_unlock(&e->mu);
	return n;
}

/* Nothing to compute while attaches wait: sleep until one lands or a job
 * comes, looking at cancels and hang-ups every few milliseconds. */
static void idle(struct serve_engine *e)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += 20 * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&e->mu);
	if (!e->landed && !e->stopping && !e->cancel_all)
		pthread_cond_timedwait(&e->wake, &e->mu, &until);
	pthread_mutex_unlock(&e->mu);
}

static void *run(void *arg)
{
	struct serve_engine *e = arg;
	for (;;) {
		pthread_mutex_lock(&e->mu);
		while (!e->stopping && !e->nqueued && !e->running && !e->landed)
			pthread_cond_wait(&e->wake, &e->mu);
		pthread_mutex_unlock(&e->mu);
		bool go = schedule(e);
		size_t n = step(e);
		notify_touched(e);
		if (e->o.notified)
			e->o.notified(e->o.notified_arg);
		if (!go)
			break;
		if (!n && e->running)
			idle(e);
	}
	/* Every job left: their attaches stop within a slice. */
	reap_orphans(e, true);
	if (e->o.notified)
		e->o.notified(e->o.notified_arg);
	return NULL;
}

/* ==== The API ==== */

static void engine_free(struct serve_engine *e)
{
	local_prefix_free(e->local);
	free(e->seqs);
	free(e->items);
	free(e->item_seq);
	free(e->pfd);
	free(e->touched);
	free(e->chosen);
	free(e->logits);
	free(e->orphans);
	free(e);
}

int serve_engine_start(const struct serve_engine_opts *o, struct serve_engine **out,
		       struct pfx_error *err)
{
	if (!o || !o->model || !o->tok || !o->parallel || o->ctx < 2)
		return pfx_errorf(err, -EINVAL,
				  "the engine needs a model, a tokenizer, parallel >= 1 and ctx >= 2");
	if (o->wait_ms > PFX_ATTACH_WAIT_MAX_MS)
		return pfx_errorf(err, -EINVAL, "a wait of %u ms is past the longest, %u ms",
				  o->wait_ms, PFX_ATTACH_WAIT_MAX_MS);
	const struct pfx_config *c = pfx_model_config(o->model);
	if (pfx_tokenizer_vocab_size(o->tok) > (size_t)c->vocab)
		return pfx_errorf(err, -EINVAL,
				  "the tokenizer has %zu ids but the model's vocabulary only %d",
				  pfx_tokenizer_vocab_size(o->tok), c->vocab);
	struct serve_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	e->o = *o;
	if (!e->o.step_tokens)
		e->o.step_tokens = 256;
	e->B = (size_t)pfx_model_block_tokens(o->model);
	e->sc = (struct seq_ctx){ .tok = o->tok, .vocab = c->vocab,
				  .tok_vocab = (int)pfx_tokenizer_vocab_size(o->tok), .ctx = o->ctx,
				  .seed = (uint64_t)serve_now_ns() * 0x9e3779b97f4a7c15ull };
	unsigned P = o->parallel;
	e->seqs = calloc(P, sizeof(*e->seqs));
	e->items = calloc(P, sizeof(*e->items));
	e->item_seq = calloc(P, sizeof(*e->item_seq));
	/* The running jobs' connections and the queued ones' (at most
	 * parallel + queue jobs: each takes a choice's place at least). */
	e->pfd = calloc(2 * (size_t)P + o->queue, sizeof(*e->pfd));
	/* Touched in a step: jobs that left their slots between steps, and
	 * those in the slots during it. */
	e->touched = calloc(2 * (size_t)P, sizeof(*e->touched));
	e->chosen = calloc(P, sizeof(*e->chosen));
	e->logits = malloc((size_t)P * (size_t)c->vocab * sizeof(float));
	int rc = 0;
	if (!e->seqs || !e->items || !e->item_seq || !e->pfd || !e->touched || !e->chosen ||
	    !e->logits)
		rc = -ENOMEM;
	if (!rc && o->local_bytes)
		rc = local_prefix_new(o->local_bytes, e->B,
				      pfx_kv_bytes_per_token(c, pfx_model_kv_dtype(o->model)), &e->local);
	if (rc) {
		engine_free(e);
		return pfx_errorf(err, rc, "out of memory");
	}
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->wake, NULL);
	pthread_cond_init(&e->idle, NULL);
	rc = -pthread_create(&e->thread, NULL, run, e);
	/* Named so that /proc tells its CPU from the HTTP threads' (bench/serve). */
	if (!rc)
		pthread_setname_np(e->thread, "serve-engine");
	if (rc) {
		pthread_mutex_destroy(&e->mu);
		pthread_cond_destroy(&e->wake);
		pthread_cond_destroy(&e->idle);
		engine_free(e);
		return pfx_errorf(err, rc, "cannot start the engine thread: %s", strerror(-rc));
	}
	*out = e;
	return 0;
}

int serve_engine_submit(struct serve_engine *e, struct serve_request *r, struct serve_job **out,
			struct pfx_error *err)
{
	struct serve_job *j = calloc(1, sizeof(*j));
	if (!j) {
		free(r->prompt);
		for (size_t i = 0; i < SERVE_MAX_STOPS; i++)
			free(r->stop[i]);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	/* The job owns the request's allocations from here on, whatever
	 * happens. */
	atomic_init(&j->refs, 2);
	atomic_init(&j->cancel, false);
	/* Recursive: serve_job_usage locks, and callers may hold the lock
	 * already (reading choices and usage together). */
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&j->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	j->r = *r;
	j->submit_ns = serve_now_ns();
	j->usage.prompt_tokens = r->nprompt;
	int V = e->sc.vocab, rc = 0;
	if (!r->prompt || r->nprompt < 1 || r->max_tokens < 1 || r->n < 1 ||
	    r->n > SERVE_MAX_CHOICES || r->nstop > SERVE_MAX_STOPS ||
	    r->top_logprobs > SERVE_MAX_TOP_LOGPROBS)
		rc = pfx_errorf(err, -EINVAL, "a request out of range (prompt, max_tokens, n, stop, "
					      "top_logprobs)");
	else if (!(r->temperature >= 0) || !isfinite(r->temperature) || !(r->top_p >= 0) ||
		 !isfinite(r->top_p) || r->top_k < 0)
		rc = pfx_errorf(err, -EINVAL, "sampling options out of range (temperature and top_p "
					      "finite and >= 0, top_k >= 0)");
	else if (r->n > e->o.parallel)
		rc = pfx_errorf(err, -EINVAL, "n = %u choices cannot run on %u parallel sequences",
				r->n, e->o.parallel);
	else if (r->nprompt + r->max_tokens > e->o.ctx)
		rc = pfx_errorf(err, -EINVAL,
				"the prompt's %zu tokens and max_tokens %u exceed the context of %zu",
				r->nprompt, r->max_tokens, e->o.ctx);
	for (size_t i = 0; !rc && i < r->nprompt; i++)
		if (r->prompt[i] < 0 || r->prompt[i] >= V)
			rc = pfx_errorf(err, -EINVAL, "prompt token %zu is %d, outside [0, %d)", i,
					r->prompt[i], V);
	for (size_t i = 0; !rc && i < r->nstop; i++)
		if (!r->stop[i] || !r->stop[i][0])
			rc = pfx_errorf(err, -EINVAL, "stop string %zu is empty", i);
	/* Texts are C strings from the start, empty until output comes. */
	for (uint32_t i = 0; !rc && i < r->n; i++) {
		j->choice[i].text = calloc(1, 64);
		j->text_cap[i] = 64;
		if (!j->choice[i].text)
			rc = pfx_errorf(err, -ENOMEM, "out of memory");
	}
	if (!rc) {
		pthread_mutex_lock(&e->mu);
		if (e->draining || e->stopping)
			rc = pfx_errorf(err, -ESHUTDOWN, "the server is shutting down");
		else if (e->running + e->queued_slots + r->n > e->o.parallel + e->o.queue)
			rc = pfx_errorf(err, -EAGAIN, "the queue is full (%u waiting)", e->nqueued);
		else {
			if (e->qtail)
				e->qtail->next = j;
			else
				e->qhead = j;
			e->qtail = j;
			e->nqueued++;
			e->queued_slots += r->n;
			pthread_cond_signal(&e->wake);
		}
		pthread_mutex_unlock(&e->mu);
	}
	if (rc) {
		atomic_store(&j->refs, 1);
		job_put(j);
		return rc;
	}
	*out = j;
	return 0;
}

void serve_engine_drain(struct serve_engine *e, int grace_ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += grace_ms / 1000;
	until.tv_nsec += (long)(grace_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&e->mu);
	e->draining = true;
	int rc = 0;
	while (rc != ETIMEDOUT && (e->running || e->nqueued || e->ending))
		rc = pthread_cond_timedwait(&e->idle, &e->mu, &until);
	if (e->running || e->nqueued || e->ending) {
		e->cancel_all = true;
		pthread_cond_signal(&e->wake);
		while (e->running || e->nqueued || e->ending)
			pthread_cond_wait(&e->idle, &e->mu);
	}
	pthread_mutex_unlock(&e->mu);
}

void serve_engine_stop(struct serve_engine *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->mu);
	e->stopping = true;
	pthread_cond_signal(&e->wake);
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->thread, NULL);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->wake);
	pthread_cond_destroy(&e->idle);
	engine_free(e);
}

void serve_engine_stats(struct serve_engine *e, struct serve_engine_stats *out)
{
	pthread_mutex_lock(&e->mu);
	out->running = e->running;
	out->queued = e->nqueued;
	out->attaching = e->attaching;
	out->steps = e->steps;
	out->local_bytes = e->local_bytes;
	pthread_mutex_unlock(&e->mu);
}
