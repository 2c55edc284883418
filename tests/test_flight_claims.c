/* SPDX-License-Identifier: MIT */
/*
 * daemon/flight.c's decisions, without a daemon: a MATCH that looks the
 * index up while a PUBLISH has indexed its blocks but not yet moved the
 * claim past them (the window that made serve_engine's
 * two_engines_starting_one_prompt_compute_it_once see two claims and
 * blocks sent twice under load) waits on the claim instead of claiming
 * the rest again.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "flight.h"

#define NS 1000u
#define N 6

static void chain_of(uint8_t *h, uint8_t seed)
{
	for (size_t i = 0; i < (size_t)N * PD_HASH_SIZE; i++)
		h[i] = (uint8_t)(seed + i * 7 + i / PD_HASH_SIZE);
}

Test(flight_claims, a_match_ahead_of_a_claims_key_waits_on_it)
{
	struct flight *f;
	cr_assert_eq(flight_new(5000, &f), 0);
	struct flight_conn a, b, c;
	flight_conn_init(&a, NS);
	flight_conn_init(&b, NS);
	flight_conn_init(&c, NS);
	uint8_t chain[N * PD_HASH_SIZE], other[N * PD_HASH_SIZE];
	chain_of(chain, 1);
	chain_of(other, 99);
	uint64_t wake = 0;
	struct flight_ask qa = { NS, chain, N, true, true, flight_seq(f) };
	cr_assert_eq(flight_decide(f, &a, &qa, 100, &wake), FLIGHT_CLAIMED);
	/* b saw blocks 0 and 1 indexed by a's PUBLISH, which has not moved
	 * the claim yet: the seq it read is still current. */
	struct flight_ask qb = { NS, chain + 2 * PD_HASH_SIZE, N - 2, true, true, flight_seq(f) };
	cr_expect_eq(flight_decide(f, &b, &qb, 101, &wake), FLIGHT_WAIT,
		     "a block a's claim computes was claimed again");
	cr_expect_eq(wake, 5100);
	/* A prompt that shares nothing still claims. */
	struct flight_ask qc = { NS, other, N, true, true, flight_seq(f) };
	cr_expect_eq(flight_decide(f, &c, &qc, 102, &wake), FLIGHT_CLAIMED);
	/* The PUBLISH moves the claim: b is woken and asks again, waiting on. */
	flight_published(f, NS, chain, 2, 103);
	flight_unpark(f, &b);
	qb.seq = flight_seq(f);
	cr_expect_eq(flight_decide(f, &b, &qb, 104, &wake), FLIGHT_WAIT);
	struct flight_stats st;
	flight_get_stats(f, &st);
	cr_expect_eq(st.claims, 2, "a's and c's");
	flight_conn_close(f, &b);
	flight_conn_close(f, &a);
	flight_conn_close(f, &c);
	flight_free(f);
}
