/* SPDX-License-Identifier: MIT */
/*
 * The engine's internals, shared by engine.c (thread, queue, steps),
 * job.c (a request's output and lifetime) and seq.c (one sequence).
 *
 * Locking: e->mu guards the queue and the counters; a job's lock guards
 * its choices and usage. Nothing takes e->mu while holding a job's lock
 * or the other way round, and the engine never calls notify with either.
 */
#ifndef SERVE_ENGINE_IMPL_H
#define SERVE_ENGINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include <prefixd-runtime/sample.h>
#include <prefixd-runtime/session.h>

#include "engine.h"

struct serve_job {
	atomic_int refs;          /* the caller's and, until done, the engine's */
	atomic_bool cancel;
	pthread_mutex_t lock;
	struct serve_request r;
	struct serve_choice choice[SERVE_MAX_CHOICES];
	size_t text_cap[SERVE_MAX_CHOICES], tokens_cap[SERVE_MAX_CHOICES];
	uint32_t finished;        /* choices with a finish */
	size_t eos;               /* choices ended by an EOS token (usage counts it) */
	struct serve_job_usage usage;
	int64_t submit_ns;
	char error[256];
	struct serve_job *next;   /* in the queue (e->mu) */
};

int64_t serve_now_ns(void);

/* job.c: a job's output, all under its lock. */
/* Appends text and, unless NULL, a token to choice i; fin, unless
 * SERVE_RUNNING, ends the choice. -ENOMEM (nothing appended). */
int job_append(struct serve_job *j, uint32_t i, const char *text, size_t len,
	       const struct serve_token *t, enum serve_finish fin);
/* Ends choice i with fin unless it has ended (no allocation). */
void job_finish(struct serve_job *j, uint32_t i, enum serve_finish fin);
/* Ends every choice still running with fin (SERVE_FAILED: why says why). */
void job_end_all(struct serve_job *j, enum serve_finish fin, const char *why);
void job_set_admitted(struct serve_job *j, size_t cached);
void job_put(struct serve_job *j);

/* seq.c: one choice's decode state. */
enum seq_state {
	SEQ_FREE,                 /* slot unused */
	SEQ_ATTACH,               /* choice 0 while its attach thread runs */
	SEQ_PREFILL,              /* computing its prompt (choice 0 of a job) */
	SEQ_FORK,                 /* waiting for choice 0's prompt */
	SEQ_DECODE,               /* next is its input of the next step */
};

struct seq {
	enum seq_state state;
	struct serve_job *job;
	uint32_t choice;
	struct pfx_session *s;
	struct pfx_sampler *sampler;
	struct pfx_detok_stream *detok;
	char *hold;               /* decoded text that may begin a stop string */
	size_t nhold, hold_cap;
	size_t pos;               /* prompt tokens in s (SEQ_PREFILL) */
	size_t attached;          /* of them, attached from prefixd */
	size_t chunk;             /* prompt tokens in this step's batch */
	uint32_t generated;       /* tokens sampled, EOS included */
	uint64_t order;           /* its job's admission: prompts first come first served */
	struct serve_attach *att; /* SEQ_ATTACH: its attach */
	struct pfx_cache *cache;  /* the attach's own connection, published
				   * through (NULL: the engine's) */
	bool claimed;             /* the prompt's missing blocks are its to
				   * compute: published at each step */
	int32_t next;
};

struct seq_ctx {
	const struct pfx_tokenizer *tok;
	int vocab;                /* the model's: logits rows */
	int tok_vocab;            /* the tokenizer's ids: 0 .. tok_vocab - 1 */
	size_t ctx;
	uint64_t seed;            /* the base of requests' seeds when they have none */
};

/* Prepares q for choice i of j (no session yet). -ENOMEM / -EINVAL with err. */
int seq_init(struct seq *q, struct serve_job *j, uint32_t i, const struct seq_ctx *c,
	     struct pfx_error *err);
/* Samples the next token from logits (vocab floats; those past the
 * tokenizer's ids are set to -inf) and appends its
 * output; the sequence may end (state SEQ_FREE after seq_release by the
 * caller when seq_done). -ENOMEM with err. */
int seq_token(struct seq *q, float *logits, const struct seq_ctx *c, struct pfx_error *err);
/* Whether q's choice has finished. */
bool seq_done(const struct seq *q);
/* Ends q's choice with fin unless it already has one, and frees its state. */
void seq_end(struct seq *q, enum serve_finish fin);

#endif
