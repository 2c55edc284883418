/* SPDX-License-Identifier: MIT */
/*
 * The runtime's single flight for callers that compute in their own steps
 * (pfx_session_attach_wait, pfx_cache_clone): one session claims a prompt
 * and publishes it as it grows, each publish sending only its new blocks
 * and moving the claim's deadline; another connection waits and attaches
 * what it published.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "daemon_util.h"
#include "helpers.h"

#define MODEL "llama3-tiny-ropescaled"
#define BT 4
#define N 61
#define V 512

static struct test_daemon td;

static struct prefixd_stats stats(void)
{
	struct prefixd_stats s;
	cr_assert_eq(td_stats(&td, &s), 0, "%s", prefixd_errmsg());
	return s;
}

static void prompt(int32_t *t)
{
	for (int i = 0; i < N; i++)
		t[i] = (int32_t)((i * 7919u + 13u) % V);
}

struct waiter {
	struct pfx_model *m;
	struct pfx_cache *c;
	int rc;
	enum pfx_flight flight;
	struct pfx_prefill_info info;
	float last[V];
	char why[200];
};

static void *wait_main(void *arg)
{
	struct waiter *w = arg;
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_session *s;
	int32_t t[N];
	prompt(t);
	if ((w->rc = pfx_session_new(w->m, &s, &err)))
		return NULL;
	w->rc = pfx_session_attach_wait(s, w->c, t, N, 20000, &w->flight, &w->info, &cerr, &err);
	if (!w->rc)
		w->rc = pfx_session_append(s, t + w->info.attached, N - w->info.attached,
					   PFX_LOGITS_LAST, w->last, &err);
	snprintf(w->why, sizeof(w->why), "%s / %s", err.msg, cerr.msg);
	pfx_session_free(s);
	return NULL;
}

Test(attach_wait, a_claimant_publishing_as_it_goes_feeds_a_waiter_once)
{
	/* A claim lasts 1 s without progress; the prefill takes longer in
	 * all, so only the publishes keep it alive. */
	const char *base[] = { "--block-tokens", "4", "--memory", "64M", "--claim-timeout", "1",
			       NULL };
	cr_assert_eq(td_start_args(&td, base, NULL), 0);
	struct pfx_model *m = load_fixture_model_bt(MODEL, BT);
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_cache *c, *other;
	cr_assert_eq(pfx_cache_open(m, td.sock, NULL, 0, &c, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_cache_clone(c, &other, &err), 0, "%s", err.msg);
	int32_t t[N];
	prompt(t);
	struct pfx_session *s;
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	struct pfx_prefill_info info;
	enum pfx_flight f;
	cr_assert_eq(pfx_session_attach_wait(s, c, t, N, 5000, &f, &info, &cerr, &err), 0, "%s",
		     err.msg);
	cr_expect_eq(f, PFX_FLIGHT_CLAIMED);
	cr_expect_eq(info.attached, 0);
	struct waiter w = { .m = m, .c = other };
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, wait_main, &w), 0);
	usleep(200000); /* it waits */
	float last[V];
	uint32_t published = 0;
	for (size_t done = 0; done < N;) {
		size_t end = done + 16 < N ? done + 16 : N;
		cr_assert_eq(pfx_session_append(s, t + done, end - done,
						end == N ? PFX_LOGITS_LAST : PFX_LOGITS_NONE, last,
						&err),
			     0, "%s", err.msg);
		cr_assert_eq(pfx_session_publish(s, c, t, end, &info, &cerr, &err), 0, "%s",
			     err.msg);
		cr_expect_eq(info.published, end / BT - done / BT, "only the new blocks, at %zu", end);
		cr_expect_eq(info.deduplicated, 0);
		cr_expect_eq(info.unpublished, 0);
		published += info.published;
		done = end;
		if (done < N)
			usleep(450000);
	}
	/* Published again: nothing new to send. */
	cr_assert_eq(pfx_session_publish(s, c, t, N, &info, &cerr, &err), 0);
	cr_expect_eq(info.published + info.deduplicated, 0);
	pthread_join(th, NULL);
	cr_assert_eq(w.rc, 0, "%s", w.why);
	cr_expect_eq(w.flight, PFX_FLIGHT_WAITED);
	cr_expect_eq(w.info.attached, (N - 1) / BT * BT, "the waiter attached every full block");
	float d = 0;
	for (int v = 0; v < V; v++)
		d = fmaxf(d, fabsf(w.last[v] - last[v]));
	cr_expect_leq(d, TOL_LOGITS, "the waiter's logits are off by %g", d);
	struct prefixd_stats st = stats();
	cr_expect_eq(published, N / BT);
	cr_expect_eq(st.published, N / BT, "each block stored once");
	cr_expect_eq(st.dedup, 0, "no block sent twice");
	cr_expect_eq(st.claims, 1);
	cr_expect_eq(st.waits, 1);
	cr_expect_eq(st.claims_expired, 0, "the publishes kept the claim alive");
	pfx_session_free(s);
	pfx_cache_close(other);
	pfx_cache_close(c);
	pfx_model_free(m);
	cr_expect_eq(td_stop(&td), 0);
}

Test(attach_wait, no_wait_is_pfx_session_attach_and_bad_arguments_are_refused)
{
	const char *base[] = { "--block-tokens", "4", "--memory", "64M", NULL };
	cr_assert_eq(td_start_args(&td, base, NULL), 0);
	struct pfx_model *m = load_fixture_model_bt(MODEL, BT);
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_cache *c, *d;
	cr_expect_eq(pfx_cache_clone(NULL, &d, &err), -EINVAL);
	cr_assert_eq(pfx_cache_open(m, td.sock, NULL, 0, &c, &err), 0, "%s", err.msg);
	int32_t t[N];
	prompt(t);
	struct pfx_session *s;
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	struct pfx_prefill_info info;
	enum pfx_flight f = PFX_FLIGHT_CLAIMED;
	cr_expect_eq(pfx_session_attach_wait(s, c, t, N, PFX_ATTACH_WAIT_MAX_MS + 1, &f, &info,
					     &cerr, &err),
		     -EINVAL);
	cr_expect(strstr(err.msg, "600000"), "%s", err.msg);
	cr_assert_eq(pfx_session_attach_wait(s, c, t, N, 0, &f, &info, &cerr, &err), 0, "%s",
		     err.msg);
	cr_expect_eq(f, PFX_FLIGHT_NONE);
	struct prefixd_stats st = stats();
	cr_expect_eq(st.claims, 0, "a match without a wait claims nothing");
	/* Published in two parts: the second sends only its own blocks. */
	cr_assert_eq(pfx_session_append(s, t, N, PFX_LOGITS_NONE, NULL, &err), 0);
	cr_assert_eq(pfx_session_publish(s, c, t, 20, &info, &cerr, &err), 0);
	cr_expect_eq(info.published, 5);
	cr_assert_eq(pfx_session_publish(s, c, t, N, &info, &cerr, &err), 0);
	cr_expect_eq(info.published, N / BT - 5);
	cr_expect_eq(info.deduplicated, 0);
	pfx_session_free(s);
	/* A clone attaches what the first connection published. */
	cr_assert_eq(pfx_cache_clone(c, &d, &err), 0, "%s", err.msg);
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	cr_assert_eq(pfx_session_attach_wait(s, d, t, N, 1000, &f, &info, &cerr, &err), 0);
	cr_expect_eq(f, PFX_FLIGHT_NONE);
	cr_expect_eq(info.attached, (N - 1) / BT * BT);
	st = stats();
	cr_expect_eq(st.published, N / BT);
	cr_expect_eq(st.dedup, 0);
	pfx_session_free(s);
	pfx_cache_close(d);
	pfx_cache_close(c);
	pfx_model_free(m);
	cr_expect_eq(td_stop(&td), 0);
}
