/* SPDX-License-Identifier: MIT */
/*
 * prefix-serve's engine: one thread owns the model and runs every admitted
 * request's sequences together, one ragged pfx_forward per step (decode
 * tokens of running sequences beside chunks of prompts being prefilled).
 * Finished sequences leave and queued jobs join between steps.
 *
 * Prefix reuse: a new sequence starts from the longest run of the prompt's
 * full blocks found either in prefixd (attached, zero-copy) or in this
 * process's own frozen sessions (forked); the prompt's new full blocks are
 * published to prefixd and kept locally. With single flight (wait_ms), a
 * prompt's attach runs on a thread of its own (attach.h) and the job joins
 * the batch when it returns; a prompt it claimed publishes its full blocks
 * step by step.
 *
 * The HTTP side (http.c) submits jobs and reads their output; the engine
 * thread writes it. Locking: the engine takes a job's lock only to append
 * output and calls notify() after releasing it, so notify may take the
 * caller's own locks (and MHD's).
 */
#ifndef SERVE_ENGINE_H
#define SERVE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <prefixd-runtime/cache.h>
#include <prefixd-runtime/text.h>

#define SERVE_MAX_CHOICES 16     /* n */
#define SERVE_MAX_TOP_LOGPROBS 20
#define SERVE_MAX_STOPS 8        /* stop strings per request */

struct serve_engine_opts {
	struct pfx_model *model;
	const struct pfx_tokenizer *tok;
	struct pfx_cache *cache;   /* NULL: no prefixd (--no-cache, or none answered) */
	unsigned parallel;         /* sequences running at once (choices count) */
	unsigned queue;            /* jobs waiting beyond those (counted in
				    * choices: -EAGAIN past parallel + queue) */
	size_t ctx;                /* prompt + generated tokens of one sequence
				    * (at most the model's max_positions: a
				    * sequence past them fails its request) */
	size_t step_tokens;        /* prompt tokens per step, all sequences (0: 256) */
	size_t local_bytes;        /* KV bytes kept in local frozen sessions (0: none) */
	uint32_t wait_ms;          /* single flight: how long a new prompt may wait
				    * for another process computing the same
				    * blocks in prefixd (claiming those no one
				    * computes, and publishing them as they
				    * complete); at most PFX_ATTACH_WAIT_MAX_MS.
				    * 0: never wait nor claim (--no-wait). The
				    * wait runs on a thread of its own: other
				    * sequences keep running meanwhile */
	/* Called (engine thread, no lock held) after each round of notify
	 * calls, once a step at most: a caller that batches what notify asks
	 * for (prefix-serve wakes its HTTP thread once a step, not once a
	 * stream) acts on the batch here. NULL: none. */
	void (*notified)(void *arg);
	void *notified_arg;
};

struct serve_engine;

/* Starts the engine thread. 0, or -errno with err. */
int serve_engine_start(const struct serve_engine_opts *o, struct serve_engine **out,
		       struct pfx_error *err);
/* Stops admitting: later submits get -ESHUTDOWN. Returns when every job
 * finished, or after grace_ms, when the rest are cancelled. */
void serve_engine_drain(struct serve_engine *e, int grace_ms);
/* Cancels what runs, joins the thread, frees e (jobs still held by the
 * HTTP side stay valid until released). NULL is fine. */
void serve_engine_stop(struct serve_engine *e);

struct serve_engine_stats {
	unsigned running;          /* sequences */
	unsigned queued;           /* jobs */
	unsigned attaching;        /* jobs whose prompt's attach runs (single
				    * flight: it may wait for another process) */
	uint64_t steps;
	size_t local_bytes;        /* KV bytes of the local frozen prompts
				    * (counted per prompt, shared blocks too) */
};
void serve_engine_stats(struct serve_engine *e, struct serve_engine_stats *out);

/* What a request asks for (validated by api.c before submit). */
struct serve_request {
	int32_t *prompt;           /* malloc'd ids: the job owns them after submit */
	size_t nprompt;            /* >= 1; nprompt + max_tokens <= ctx */
	uint32_t max_tokens;       /* >= 1 */
	uint32_t n;                /* choices, 1 .. SERVE_MAX_CHOICES: forks of one prefill */
	float temperature;         /* 0: greedy */
	float top_p;               /* 1: off */
	int top_k;                 /* 0: off */
	uint64_t seed;             /* choice i samples with seed + i */
	bool has_seed;             /* else the engine picks one */
	char *stop[SERVE_MAX_STOPS]; /* malloc'd, owned by the job; the text
				      * ends before the first one found */
	size_t nstop;
	bool ignore_eos;
	bool logprobs;             /* record each token's logprob */
	uint32_t top_logprobs;     /* 0 .. SERVE_MAX_TOP_LOGPROBS */
	int client_fd;             /* polled for a hang-up each step (-1: none) */
	void (*notify)(void *arg); /* called (from the engine thread, no lock
				    * held) after new output or the end */
	void *notify_arg;
};

enum serve_finish {
	SERVE_RUNNING = 0,
	SERVE_STOP,                /* EOS or a stop string */
	SERVE_LENGTH,              /* max_tokens or ctx */
	SERVE_CANCELLED,
	SERVE_FAILED,              /* job error says why */
};

struct serve_token {
	int32_t id;
	float logprob;             /* log-softmax of the raw logits (of the
				    * tokenizer's ids: an embedding's padding
				    * rows past them are never sampled) */
	uint32_t ntop;
	int32_t top_id[SERVE_MAX_TOP_LOGPROBS];
	float top_logprob[SERVE_MAX_TOP_LOGPROBS];
};

/* One choice's output so far; read under serve_job_lock. text grows and
 * is final (never revised; stop strings held back until decided). */
struct serve_choice {
	char *text;                /* NUL-terminated, "" before any output */
	size_t text_len;
	struct serve_token *tokens; /* every generated token (EOS excluded); its
				    * logprob and top ones when logprobs */
	size_t ntokens;            /* generated tokens (also without logprobs) */
	enum serve_finish finish;
};

struct serve_job;

/* Queues the request. 0 and *out (one reference for the caller), or
 * -EAGAIN (queue full: 429), -ESHUTDOWN (draining: 503), -EINVAL (also n
 * past parallel, a prompt id past the model's vocabulary, an empty stop
 * string), -ENOMEM with err. The request's allocations are the job's even
 * on failure. A job whose client hangs up (client_fd), running or queued,
 * is cancelled between two steps. */
int serve_engine_submit(struct serve_engine *e, struct serve_request *r, struct serve_job **out,
			struct pfx_error *err);
/* Cancels at the next step (a client went away); the job still ends with
 * SERVE_CANCELLED and a notify. */
void serve_job_cancel(struct serve_job *j);
/* Drops the caller's reference (cancels the job if it still runs). */
void serve_job_release(struct serve_job *j);

void serve_job_lock(struct serve_job *j);
void serve_job_unlock(struct serve_job *j);
/* Under the lock: */
uint32_t serve_job_choices(const struct serve_job *j);
const struct serve_choice *serve_job_choice(const struct serve_job *j, uint32_t i);
/* Every choice finished. */
bool serve_job_done(const struct serve_job *j);
/* SERVE_FAILED's reason. */
const char *serve_job_error(const struct serve_job *j);

/* Figures for usage, the log line and /metrics (final once done); takes
 * the job's lock itself (a recursive one: holding it already is fine). */
struct serve_job_usage {
	size_t prompt_tokens;
	size_t cached_tokens;      /* attached from prefixd or forked locally */
	size_t completion_tokens;  /* all choices (an EOS that ended one too) */
	int64_t queued_ns;         /* submit -> admitted */
	int64_t ttft_ns;           /* submit -> first token of any choice */
	int64_t total_ns;          /* submit -> done */
};
void serve_job_usage(const struct serve_job *j, struct serve_job_usage *out);

#endif
