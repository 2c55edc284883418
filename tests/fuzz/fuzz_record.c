/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the disk records' checks (daemon/record.h). Input: one byte of
 * options, then the record. Option bit 0 reseals the head checksum and bit
 * 1 the payload checksum before the check (where the sizes allow), so that
 * mutated inputs get past the checksums to the checks behind them. Beyond
 * "no crash, no sanitizer report" it checks:
 *  - rec_check returns 0, -EBADMSG, -ENOTSUP or -EACCES (never -EACCES
 *    without expectations), and names the failed check;
 *  - a record that passes has exactly rec_size bytes, re-encodes to the
 *    very same bytes (the format is canonical), and an encoder given one
 *    byte less refuses it and writes nothing;
 *  - the head and payload checked apart agree with the whole check: they
 *    pass when it passes, a head that passes leaves only the length and
 *    the payload to fail it, and a head that fails fails it the same way
 *    (or on the record's length, which the whole check tests first);
 *  - the record is accepted when asked for as itself, refused (-EACCES)
 *    for another namespace.
 */
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "fuzz.h"
#include "record.h"

/* Buffers of exactly the size asked for, so AddressSanitizer sees a read
 * or write one byte past them. */
static uint8_t *buf_of(size_t n)
{
	uint8_t *b = malloc(n ? n : 1);
	FUZZ_CHECK(b);
	return b;
}

static int is_payload_failure(const char *why)
{
	return !strcmp(why, "truncated") || !strcmp(why, "trailing bytes") ||
	       !strcmp(why, "payload checksum") || !strcmp(why, "payload padding");
}

/* Seals the checksums the options ask for, at the places the header's own
 * sizes give (docs/FORMAT.md's layout), when they lie within n. */
static void reseal(uint8_t *p, size_t n, uint8_t opts)
{
	if (n < REC_HDR_SIZE)
		return;
	size_t head = rec_head_size((uint32_t)rec_get_le(p + 36, 4));
	uint64_t payload = rec_get_le(p + 40, 8);
	if ((opts & 2) && head && head <= n && rec_payload_span(payload) && payload <= n - head)
		rec_put_le(p + 16, XXH3_64bits(p + head, (size_t)payload), 8);
	if ((opts & 1) && head && head <= n)
		rec_put_le(p + 8, XXH3_64bits(p + 16, head - 16), 8);
}

static void accepted(const uint8_t *p, size_t n, const struct rec_meta *m)
{
	size_t size = rec_size(m->block_tokens, m->payload);
	FUZZ_CHECK(size == n && m->payload_off == rec_head_size(m->block_tokens));
	FUZZ_CHECK(m->tokens == p + REC_HDR_SIZE);

	/* Re-encoded from what the check read: the same bytes. */
	uint32_t *tokens = malloc(4 * (size_t)m->block_tokens);
	FUZZ_CHECK(tokens);
	for (uint32_t t = 0; t < m->block_tokens; t++)
		tokens[t] = pd_token_at(m->tokens, m->block_tokens, 0, t);
	uint8_t *out = buf_of(n);
	FUZZ_CHECK(rec_encode(m, tokens, p + m->payload_off, out, n) == (int)n);
	FUZZ_CHECK(!memcmp(out, p, n));
	free(out);
	out = buf_of(n - 1);
	memset(out, 0xa5, n - 1);
	FUZZ_CHECK(rec_encode(m, tokens, p + m->payload_off, out, n - 1) == -ENOBUFS);
	for (size_t i = 0; i < n - 1; i++)
		FUZZ_CHECK(out[i] == 0xa5);
	free(out);
	out = buf_of(m->payload_off);
	FUZZ_CHECK(rec_encode_head(m, tokens, m->payload_sum, out, m->payload_off) ==
		   (int)m->payload_off);
	FUZZ_CHECK(!memcmp(out, p, m->payload_off));
	free(out);
	free(tokens);

	/* Apart: the head alone, then the payload with and without padding. */
	struct rec_meta h;
	const char *why = NULL;
	uint8_t *head = buf_of(m->payload_off);
	memcpy(head, p, m->payload_off);
	FUZZ_CHECK(rec_check_head(head, m->payload_off, NULL, &h, &why) == 0);
	FUZZ_CHECK(h.payload == m->payload && h.payload_sum == m->payload_sum &&
		   h.ns == m->ns && !memcmp(h.hash, m->hash, PD_HASH_SIZE));
	free(head);
	size_t span = n - m->payload_off;
	uint8_t *slot = buf_of(span);
	memcpy(slot, p + m->payload_off, span);
	FUZZ_CHECK(rec_check_payload(m, slot, span, &why) == 0);
	FUZZ_CHECK(rec_check_payload(m, slot, (size_t)m->payload, &why) == 0);
	free(slot);

	/* Asked for as itself: accepted; for another user: refused as such. */
	struct idx_root root = { .ns = m->ns };
	memcpy(root.h0, m->root, PD_HASH_SIZE);
	struct rec_expect want = { .block_tokens = m->block_tokens, .payload = m->payload,
				   .root = &root, .fp = m->fp, .hash = m->hash };
	struct rec_meta again;
	FUZZ_CHECK(rec_check(p, n, &want, &again, &why) == 0);
	root.ns ^= 1;
	FUZZ_CHECK(rec_check(p, n, &want, &again, &why) == -EACCES);
	FUZZ_CHECK(!strcmp(why, "another namespace"));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t n = size - 1;
	uint8_t *p = buf_of(n);
	memcpy(p, data + 1, n);
	reseal(p, n, data[0]);

	struct rec_meta m;
	const char *why = NULL;
	int rc = rec_check(p, n, NULL, &m, &why);
	FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -ENOTSUP);
	FUZZ_CHECK(rc == 0 || why);

	struct rec_meta h;
	const char *hwhy = NULL;
	int hrc = rec_check_head(p, n, NULL, &h, &hwhy);
	FUZZ_CHECK(hrc == 0 || hrc == -EBADMSG || hrc == -ENOTSUP);
	if (rc == 0)
		FUZZ_CHECK(hrc == 0);
	else if (hrc == 0)
		FUZZ_CHECK(is_payload_failure(why));
	else  /* the same failure, unless the whole record's length failed first */
		FUZZ_CHECK((hrc == rc && !strcmp(hwhy, why)) || !strcmp(why, "truncated") ||
			   !strcmp(why, "trailing bytes"));

	if (rc == 0)
		accepted(p, n, &m);
	free(p);
	return 0;
}
