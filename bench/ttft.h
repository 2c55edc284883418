/* SPDX-License-Identifier: MIT */
/*
 * Time to first token, as bench/share and bench/disk measure it: a prompt
 * of random tokens (the same prefix every time, a suffix of its own seed)
 * through a model with 2 threads, in a fresh process, timed from the
 * prompt in hand (model loaded, as in a server) to the first sampled
 * (greedy) token, through a prefixd or alone.
 */
#ifndef PFX_BENCH_TTFT_H
#define PFX_BENCH_TTFT_H

#include <stdint.h>

#include "model.h"
#include "profile.h"

struct bench_ttft {
	double ms;
	double attached;  /* prompt tokens attached from the cache */
	double first;     /* the first token */
	double from_disk; /* blocks the daemon read back from disk */
	double published; /* blocks this run published */
	/* Where the ms went: opening the cache (connect and HELLO), picking
	 * the token from the logits, and the runtime's profile of the prefill
	 * (attach, forward pass: profile.h). */
	double connect_ms, sample_ms;
	struct pfx_profile prof;
	/* The same suffix computed again on the attached prefix, in the same
	 * process (its KV pages mapped, caches warm): what the first touch and
	 * cold caches cost the first time. Zero when nothing was attached. */
	struct pfx_profile again;
};

/* Runs prefix + suffix tokens through the model in model_dir, its KV of
 * dtype kv, with the daemon at sock (NULL: alone), in a child process.
 * Errors go to stderr after "who: ". 0, or -1 when the run failed. */
int bench_ttft(const char *who, const char *model_dir, const char *sock, int prefix, int suffix,
	       uint32_t suffix_seed, enum pfx_kv_dtype kv, struct bench_ttft *out);

#endif
