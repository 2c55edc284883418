/* SPDX-License-Identifier: MIT */
/*
 * A job: one request's output as the engine appends it and the HTTP side
 * reads it, and its lifetime (two references: the caller's, and the
 * engine's until every choice finished).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_impl.h"

int64_t serve_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 64;
	while (c < need)
		c *= 2;
	void *n = realloc(*p, c * size);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = c;
	return 0;
}

/* Under the lock: the job is done once its last choice ends. */
static void finish_choice(struct serve_job *j, uint32_t i, enum serve_finish fin)
{
	if (j->choice[i].finish != SERVE_RUNNING)
		return;
	j->choice[i].finish = fin;
	if (++j->finished == j->r.n)
		j->usage.total_ns = serve_now_ns() - j->submit_ns;
}

int job_append(struct serve_job *j, uint32_t i, const char *text, size_t len,
	       const struct serve_token *t, enum serve_finish fin)
{
	struct serve_choice *c = &j->choice[i];
	serve_job_lock(j);
	/* Room for a NUL: the text is a C string too. */
	int rc = grow((void **)&c->text, &j->text_cap[i], c->text_len + len + 1, 1);
	if (!rc && t)
		rc = grow((void **)&c->tokens, &j->tokens_cap[i], c->ntokens + 1, sizeof(*t));
	if (!rc) {
		if (len)
			memcpy(c->text + c->text_len, text, len);
		c->text_len += len;
		c->text[c->text_len] = 0;
		if (t) {
			c->tokens[c->ntokens++] = *t;
			j->usage.completion_tokens++;
			if (!j->usage.ttft_ns)
				j->usage.ttft_ns = serve_now_ns() - j->submit_ns;
		}
		if (fin != SERVE_RUNNING)
			finish_choice(j, i, fin);
	}
	serve_job_unlock(j);
	return rc;
}

void job_finish(struct serve_job *j, uint32_t i, enum serve_finish fin)
{
	serve_job_lock(j);
	finish_choice(j, i, fin);
	serve_job_unlock(j);
}

void job_end_all(struct serve_job *j, enum serve_finish fin, const char *why)
{
	serve_job_lock(j);
	if (fin == SERVE_FAILED && !j->error[0])
		snprintf(j->error, sizeof(j->error), "%s", why);
	for (uint32_t i = 0; i < j->r.n; i++)
		finish_choice(j, i, fin);
	serve_job_unlock(j);
}

void job_set_admitted(struct serve_job *j, size_t cached)
{
	serve_job_lock(j);
	j->usage.queued_ns = serve_now_ns() - j->submit_ns;
	j->usage.cached_tokens = cached;
	serve_job_unlock(j);
}

void job_put(struct serve_job *j)
{
	if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) != 1)
		return;
	for (uint32_t i = 0; i < SERVE_MAX_CHOICES; i++) {
		free(j->choice[i].text);
		free(j->choice[i].tokens);
	}
	free(j->r.prompt);
	for (size_t i = 0; i < SERVE_MAX_STOPS; i++)
		free(j->r.stop[i]);
	pthread_mutex_destroy(&j->lock);
	free(j);
}

void serve_job_cancel(struct serve_job *j)
{
	atomic_store(&j->cancel, true);
}

void serve_job_release(struct serve_job *j)
{
	if (!j)
		return;
	serve_job_cancel(j);
	job_put(j);
}

void serve_job_lock(struct serve_job *j) { pthread_mutex_lock(&j->lock); }
void serve_job_unlock(struct serve_job *j) { pthread_mutex_unlock(&j->lock); }
uint32_t serve_job_choices(const struct serve_job *j) { return j->r.n; }

const struct serve_choice *serve_job_choice(const struct serve_job *j, uint32_t i)
{
	return i < j->r.n ? &j->choice[i] : NULL;
}

bool serve_job_done(const struct serve_job *j) { return j->finished == j->r.n; }
const char *serve_job_error(const struct serve_job *j) { return j->error; }

void serve_job_usage(const struct serve_job *j, struct serve_job_usage *out)
{
	/* The engine writes them as it goes: read under the lock. */
	struct serve_job *w = (struct serve_job *)j;
	serve_job_lock(w);
	*out = j->usage;
	/* EOS tokens were generated (and computed) but are no output. */
	out->completion_tokens += j->eos;
	serve_job_unlock(w);
}
