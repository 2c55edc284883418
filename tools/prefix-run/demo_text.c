/* SPDX-License-Identifier: MIT */
/*
 * prefix-run demo with a tokenizer: one system prompt, several questions.
 * The tokens every chat starts with (the system turn) are computed once and
 * frozen; each question is answered on a fork of them and again from
 * scratch, timed, and the two answers compared.
 */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "prefix_run.h"
#include "session.h"

static const char system_prompt[] =
	"You are the help desk of a public library. Answer in one or two short sentences, "
	"politely and plainly. The library opens at nine in the morning and closes at eight in "
	"the evening on weekdays, and at five on Saturdays; it is closed on Sundays and public "
	"holidays. Members may borrow up to twelve items at once: books for three weeks, films "
	"and music for one week. An item may be renewed twice, online or at the desk, unless "
	"another member has reserved it. Late returns cost twenty cents a day per item, up to "
	"the item's price. Membership is free for residents; bring an identity card and a proof "
	"of address. The reading rooms are on the first floor, children's books on the ground "
	"floor, and the study rooms, which can be booked for two hours, on the second floor. "
	"Printing costs ten cents a page. If you do not know the answer, say so and suggest "
	"asking at the desk.";

static const char *const questions[] = {
	"When do you close on Saturday?",
	"How many books can I borrow?",
	"What does a late film cost me?",
	"Where are the study rooms?",
	"Can I renew a book three times?",
	"How do I become a member?",
	"Is the library open on Sundays?",
	"How much is printing?",
};
#define NQ (sizeof(questions) / sizeof(questions[0]))

/* Greedy answer of at most max_new tokens to the session's last logits,
 * stopping after an end-of-sequence id: the ids in out, their count. */
static long answer(struct pfx_session *s, float *logits, int V, size_t nv, const int32_t *eos,
		   size_t neos, long max_new, int32_t *out, struct pfx_error *err)
{
	long made = 0;
	while (made < max_new) {
		int32_t best = 0;
		for (size_t i = 1; i < nv && i < (size_t)V; i++)
			if (logits[i] > logits[best])
				best = (int32_t)i;
		out[made++] = best;
		for (size_t e = 0; e < neos; e++)
			if (eos[e] == best)
				return made;
		if (made < max_new && pfx_session_decode(s, best, logits, err))
			return -1;
	}
	return made;
}

/* The chat of question q, encoded (malloc'd). */
static int encode(const struct pfx_tokenizer *tok, const char *q, int32_t **ids, size_t *n)
{
	struct pfx_error err = { "" };
	int rc;
	if (pfx_tokenizer_has_chat_template(tok)) {
		struct pfx_chat_message m[2] = { { "system", system_prompt }, { "user", q } };
		rc = pfx_chat_encode(tok, m, 2, true, 0, ids, n, &err);
	} else {
		/* A base model's tokenizer: the same shape in plain text. */
		char text[sizeof(system_prompt) + 512];
		snprintf(text, sizeof(text), "%s\n\nQuestion: %s\nAnswer:", system_prompt, q);
		rc = pfx_tokenize(tok, text, strlen(text), PFX_TEXT_ADD_SPECIAL, ids, n, &err);
	}
	if (rc)
		fprintf(stderr, "prefix-run demo: cannot encode the chat: %s\n", err.msg);
	return rc;
}

int cmd_demo_text(struct run_args *a, struct pfx_model *m, const struct pfx_tokenizer *tok)
{
	const struct pfx_config *c = pfx_model_config(m);
	int V = c->vocab;
	size_t N = (size_t)a->nsuffixes < NQ ? (size_t)a->nsuffixes : NQ;
	long S = a->suffix;
	size_t nv = pfx_tokenizer_vocab_size(tok), neos = 0;
	const int32_t *eos = pfx_tokenizer_eos(tok, &neos);
	int32_t *chat[NQ] = { 0 }, *ans = malloc((size_t)S * 2 * sizeof(*ans));
	size_t len[NQ], P = SIZE_MAX;
	float *logits = malloc((size_t)V * sizeof(float));
	struct pfx_session *s = NULL, *f = NULL;
	struct pfx_error err = { "" };
	int rc = 1;
	if (!ans || !logits)
		goto fail;
	/* The shared prefix: what every chat's tokens start with. */
	for (size_t i = 0; i < N; i++) {
		if (encode(tok, questions[i], &chat[i], &len[i]))
			goto out;
		size_t k = 0;
		while (i && k < len[0] && k < len[i] && chat[0][k] == chat[i][k])
			k++;
		if (i && k < P)
			P = k;
		if (len[i] + (size_t)S > (size_t)c->max_positions) {
			fprintf(stderr, "prefix-run demo: a chat of %zu tokens and --suffix %ld answer tokens exceed the model's %d positions\n",
				len[i], S, c->max_positions);
			rc = 2;
			goto out;
		}
	}
	if (N == 1 || P >= len[0])
		P = len[0] - 1;
	printf("\nModel: %s, %lld parameters, %d threads; text mode (DIR has tokenizer.json)\n", c->arch,
	       (long long)pfx_model_params(m), pfx_model_threads(m));
	printf("(A model of random weights, as prefix-run random-model writes, answers gibberish:\n"
	       "then the timings and that both ways give the same answer are what it shows.)\n");
	if (pfx_session_new(m, &s, &err))
		goto fail;
	double t0 = cli_now();
	if (pfx_session_append(s, chat[0], P, PFX_LOGITS_NONE, NULL, &err) ||
	    pfx_session_freeze(s, &err))
		goto fail;
	printf("System prompt: %zu tokens computed once in %.1f ms, then frozen\n\n", P,
	       (cli_now() - t0) * 1e3);
	double sum_c = 0, sum_s = 0;
	int all_same = 1;
	for (size_t i = 0; i < N; i++) {
		/* On a fork of the frozen system prompt ... */
		t0 = cli_now();
		if (pfx_session_fork(s, &f, &err) ||
		    pfx_session_append(f, chat[i] + P, len[i] - P, PFX_LOGITS_LAST, logits, &err))
			goto fail;
		long n1 = answer(f, logits, V, nv, eos, neos, S, ans, &err);
		double tc = cli_now() - t0;
		pfx_session_free(f);
		f = NULL;
		/* ... and from scratch. */
		t0 = cli_now();
		if (n1 < 0 || pfx_session_new(m, &f, &err) ||
		    pfx_session_append(f, chat[i], len[i], PFX_LOGITS_LAST, logits, &err))
			goto fail;
		long n2 = answer(f, logits, V, nv, eos, neos, S, ans + S, &err);
		double ts = cli_now() - t0;
		pfx_session_free(f);
		f = NULL;
		if (n2 < 0)
			goto fail;
		int same = n1 == n2 && !memcmp(ans, ans + S, (size_t)n1 * sizeof(*ans));
		all_same &= same;
		char *text = NULL;
		size_t tl;
		if (pfx_detokenize(tok, ans, (size_t)n1, PFX_TEXT_SKIP_SPECIAL, &text, &tl, &err))
			goto fail;
		/* Quoted, as JSON: a random model's answer is control characters
		 * and stray bytes as often as letters. */
		json_object *js = json_object_new_string_len(text, (int)tl);
		printf("Q%zu: %s\nA%zu: %s\n    %ld tokens: %.1f ms on the system prompt, %.1f ms from scratch (%.1fx); %s\n\n",
		       i + 1, questions[i], i + 1,
		       js ? json_object_to_json_string_ext(js, JSON_C_TO_STRING_NOSLASHESCAPE) : "?", n1, tc * 1e3, ts * 1e3, ts / tc,
		       same ? "the same answer from scratch" : "A DIFFERENT ANSWER FROM SCRATCH");
		json_object_put(js);
		free(text);
		sum_c += tc;
		sum_s += ts;
	}
	printf("%zu questions: %.1f ms on the frozen system prompt vs %.1f ms from scratch (%.1fx)%s\n",
	       N, sum_c * 1e3, sum_s * 1e3, sum_s / sum_c,
	       all_same ? "; every answer the same both ways" : "");
	rc = all_same ? 0 : 1;
	goto out;
fail:
	fprintf(stderr, "prefix-run demo: %s\n", err.msg[0] ? err.msg : "out of memory");
out:
	pfx_session_free(f);
	pfx_session_free(s);
	for (size_t i = 0; i < NQ; i++)
		free(chat[i]);
	free(ans);
	free(logits);
	return rc;
}
