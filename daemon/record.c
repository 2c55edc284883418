/* SPDX-License-Identifier: MIT */
/*
 * Disk records (record.h; the format is docs/FORMAT.md). Fields are written and
 * read one by one in little-endian at fixed offsets, never as a memcpy of a
 * struct. A check reads nothing before it knows the bytes are there, and
 * bounds every size by its limit before it computes with it: with
 * block_tokens <= 4096 and payload <= 1 GiB, no sum below overflows.
 */
#include "record.h"

#include <errno.h>
#include <string.h>
#include "xxh.h"

static const uint8_t rec_magic[8] = { 'P', 'F', 'X', 'D', 'R', 'E', 'C', 0 };

/* Offsets of the header's fields. */
enum {
	OFF_MAGIC = 0,
	OFF_HEAD_SUM = 8,       /* XXH3-64 of bytes [OFF_SUMMED, payload_off) */
	OFF_PAYLOAD_SUM = 16,   /* XXH3-64 of the payload bytes */
	OFF_SUMMED = 16,        /* the head checksum covers everything from here */
	OFF_VERSION = 24,
	OFF_HDR_SIZE = 26,
	OFF_FLAGS = 28,
	OFF_NS = 32,
	OFF_BLOCK_TOKENS = 36,
	OFF_PAYLOAD = 40,
	OFF_PAYLOAD_OFF = 48,
	OFF_DEPTH = 56,
	OFF_RESERVED = 60,
	OFF_FP = 64,
	OFF_ROOT = 96,
	OFF_HASH = 128,
	OFF_PARENT = 160,
	OFF_TOKENS = REC_HDR_SIZE,
};

_Static_assert(OFF_PARENT + PD_HASH_SIZE == REC_HDR_SIZE, "header fields fill the header");
_Static_assert(REC_HDR_SIZE % 8 == 0, "tokens start 8-aligned");
_Static_assert((uint64_t)REC_ALIGN * 2 + REC_HDR_SIZE + 4ull * REC_MAX_BLOCK_TOKENS +
		       REC_MAX_PAYLOAD < 0x7fffffffull,
	       "a record's size fits an int");

void rec_put_le(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

uint64_t rec_get_le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;
	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static size_t align_up(size_t n)
{
	return (n + REC_ALIGN - 1) / REC_ALIGN * REC_ALIGN;
}

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

size_t rec_head_size(uint32_t block_tokens)
{
	if (!block_tokens || block_tokens > REC_MAX_BLOCK_TOKENS)
		return 0;
	return align_up(REC_HDR_SIZE + 4 * (size_t)block_tokens);
}

size_t rec_payload_span(uint64_t payload)
{
	if (!payload || payload > REC_MAX_PAYLOAD)
		return 0;
	return align_up((size_t)payload);
}

size_t rec_size(uint32_t block_tokens, uint64_t payload)
{
	size_t head = rec_head_size(block_tokens), span = rec_payload_span(payload);
	return head && span ? head + span : 0;
}

uint64_t rec_payload_sum(const void *payload, uint64_t len)
{
	return XXH3_64bits(payload, (size_t)len);
}

/* ==== Encoding ==== */

/* 0, or -EINVAL for what no check would accept. */
static int meta_ok(const struct rec_meta *m)
{
	if (!rec_size(m->block_tokens, m->payload))
		return -EINVAL;
	if ((m->depth == 0) != all_zero(m->parent, PD_HASH_SIZE))
		return -EINVAL;
	return 0;
}

static void write_head(const struct rec_meta *m, const uint32_t *tokens, uint64_t payload_sum,
		       uint8_t *out, size_t head)
{
	memset(out, 0, head);
	memcpy(out + OFF_MAGIC, rec_magic, sizeof(rec_magic));
	rec_put_le(out + OFF_PAYLOAD_SUM, payload_sum, 8);
	rec_put_le(out + OFF_VERSION, REC_VERSION, 2);
	rec_put_le(out + OFF_HDR_SIZE, REC_HDR_SIZE, 2);
	rec_put_le(out + OFF_FLAGS, 0, 4);
	rec_put_le(out + OFF_NS, m->ns, 4);
	rec_put_le(out + OFF_BLOCK_TOKENS, m->block_tokens, 4);
	rec_put_le(out + OFF_PAYLOAD, m->payload, 8);
	rec_put_le(out + OFF_PAYLOAD_OFF, head, 8);
	rec_put_le(out + OFF_DEPTH, m->depth, 4);
	rec_put_le(out + OFF_RESERVED, 0, 4);
	memcpy(out + OFF_FP, m->fp, PD_FP_SIZE);
	memcpy(out + OFF_ROOT, m->root, PD_HASH_SIZE);
	memcpy(out + OFF_HASH, m->hash, PD_HASH_SIZE);
	memcpy(out + OFF_PARENT, m->parent, PD_HASH_SIZE);
	for (uint32_t t = 0; t < m->block_tokens; t++)
		rec_put_le(out + OFF_TOKENS + 4 * (size_t)t, tokens[t], 4);
	/* Last: it covers every byte above from OFF_SUMMED on. */
	rec_put_le(out + OFF_HEAD_SUM, XXH3_64bits(out + OFF_SUMMED, head - OFF_SUMMED), 8);
}

int rec_encode_head(const struct rec_meta *m, const uint32_t *tokens, uint64_t payload_sum,
		    uint8_t *out, size_t cap)
{
	int rc = meta_ok(m);
	if (rc)
		return rc;
	size_t head = rec_head_size(m->block_tokens);
	if (cap < head)
		return -ENOBUFS;
	write_head(m, tokens, payload_sum, out, head);
	return (int)head;
}

int rec_encode(const struct rec_meta *m, const uint32_t *tokens, const void *payload,
	       uint8_t *out, size_t cap)
{
	int rc = meta_ok(m);
	if (rc)
		return rc;
	size_t head = rec_head_size(m->block_tokens), size = rec_size(m->block_tokens, m->payload);
	if (cap < size)
		return -ENOBUFS;
	write_head(m, tokens, rec_payload_sum(payload, m->payload), out, head);
	memcpy(out + head, payload, (size_t)m->payload);
	memset(out + head + m->payload, 0, size - head - (size_t)m->payload);
	return (int)size;
}

/* ==== Checking ==== */

static int fail(const char **why, const char *what, int rc)
{
	if (why)
		*why = what;
	return rc;
}

/* Checks a head whose first len bytes are in buf; whole says len must be
 * the exact size of the record (else at least its head). */
static int check(const uint8_t *buf, size_t len, int whole, const struct rec_expect *want,
		 struct rec_meta *out, const char **why)
{
	if (len < REC_HDR_SIZE)
		return fail(why, "truncated header", -EBADMSG);
	if (memcmp(buf + OFF_MAGIC, rec_magic, sizeof(rec_magic)))
		return fail(why, "magic", -EBADMSG);
	/* Another version may lay out everything after the magic otherwise,
	 * its checksums too: nothing else of it is read. */
	if (rec_get_le(buf + OFF_VERSION, 2) != REC_VERSION)
		return fail(why, "version", -ENOTSUP);
	if (rec_get_le(buf + OFF_HDR_SIZE, 2) != REC_HDR_SIZE)
		return fail(why, "header size", -EBADMSG);
	if (rec_get_le(buf + OFF_FLAGS, 4))
		return fail(why, "flags", -EBADMSG);
	if (rec_get_le(buf + OFF_RESERVED, 4))
		return fail(why, "reserved", -EBADMSG);

	/* Sizes: each within its limit before any arithmetic on it. */
	uint32_t block_tokens = (uint32_t)rec_get_le(buf + OFF_BLOCK_TOKENS, 4);
	uint64_t payload = rec_get_le(buf + OFF_PAYLOAD, 8);
	size_t head = rec_head_size(block_tokens), span = rec_payload_span(payload);
	if (!head)
		return fail(why, "block_tokens", -EBADMSG);
	if (!span)
		return fail(why, "payload size", -EBADMSG);
	if (rec_get_le(buf + OFF_PAYLOAD_OFF, 8) != head)
		return fail(why, "payload offset", -EBADMSG);
	if (len < (whole ? head + span : head))
		return fail(why, "truncated", -EBADMSG);
	if (whole && len > head + span)
		return fail(why, "trailing bytes", -EBADMSG);

	/* Every byte of the head but the magic and this sum is covered, the
	 * tokens' padding included; the fields checked above were too. */
	if (rec_get_le(buf + OFF_HEAD_SUM, 8) != XXH3_64bits(buf + OFF_SUMMED, head - OFF_SUMMED))
		return fail(why, "header checksum", -EBADMSG);

	/* Canonical: one encoding per record, so nothing can ride along. */
	if (!all_zero(buf + OFF_TOKENS + 4 * (size_t)block_tokens,
		      head - OFF_TOKENS - 4 * (size_t)block_tokens))
		return fail(why, "header padding", -EBADMSG);

	uint32_t depth = (uint32_t)rec_get_le(buf + OFF_DEPTH, 4);
	if ((depth == 0) != all_zero(buf + OFF_PARENT, PD_HASH_SIZE))
		return fail(why, "depth and parent", -EBADMSG);

	/* Intact: now is it the record asked for? */
	uint32_t ns = (uint32_t)rec_get_le(buf + OFF_NS, 4);
	if (want) {
		if (want->block_tokens && block_tokens != want->block_tokens)
			return fail(why, "another block size", -EACCES);
		if (want->payload && payload != want->payload)
			return fail(why, "another payload size", -EACCES);
		if (want->root && ns != want->root->ns)
			return fail(why, "another namespace", -EACCES);
		if (want->root && memcmp(buf + OFF_ROOT, want->root->h0, PD_HASH_SIZE))
			return fail(why, "another chain root", -EACCES);
		if (want->fp && memcmp(buf + OFF_FP, want->fp, PD_FP_SIZE))
			return fail(why, "another model", -EACCES);
		if (want->hash && memcmp(buf + OFF_HASH, want->hash, PD_HASH_SIZE))
			return fail(why, "another block", -EACCES);
	}

	if (whole) {
		const uint8_t *p = buf + head;
		if (rec_get_le(buf + OFF_PAYLOAD_SUM, 8) != rec_payload_sum(p, payload))
			return fail(why, "payload checksum", -EBADMSG);
		if (!all_zero(p + payload, span - (size_t)payload))
			return fail(why, "payload padding", -EBADMSG);
	}

	out->ns = ns;
	out->block_tokens = block_tokens;
	out->depth = depth;
	out->payload = payload;
	memcpy(out->fp, buf + OFF_FP, PD_FP_SIZE);
	memcpy(out->root, buf + OFF_ROOT, PD_HASH_SIZE);
	memcpy(out->hash, buf + OFF_HASH, PD_HASH_SIZE);
	memcpy(out->parent, buf + OFF_PARENT, PD_HASH_SIZE);
	out->tokens = buf + OFF_TOKENS;
	out->payload_off = head;
	out->payload_sum = rec_get_le(buf + OFF_PAYLOAD_SUM, 8);
	return 0;
}

int rec_check(const uint8_t *buf, size_t len, const struct rec_expect *want,
	      struct rec_meta *out, const char **why)
{
	return check(buf, len, 1, want, out, why);
}

int rec_check_head(const uint8_t *buf, size_t len, const struct rec_expect *want,
		   struct rec_meta *out, const char **why)
{
	return check(buf, len, 0, want, out, why);
}

int rec_check_payload(const struct rec_meta *m, const void *payload, size_t len,
		      const char **why)
{
	size_t span = rec_payload_span(m->payload);
	if (!span || (len != m->payload && len != span))
		return fail(why, "payload length", -EBADMSG);
	const uint8_t *p = payload;
	if (rec_payload_sum(p, m->payload) != m->payload_sum)
		return fail(why, "payload checksum", -EBADMSG);
	if (!all_zero(p + m->payload, len - (size_t)m->payload))
		return fail(why, "payload padding", -EBADMSG);
	return 0;
}

void rec_meta_of(const struct idx_block *b, uint32_t block_tokens, struct rec_meta *m)
{
	*m = (struct rec_meta){ .ns = b->ns, .block_tokens = block_tokens, .depth = b->depth,
				.payload = b->store.block_bytes };
	memcpy(m->fp, b->fp, PD_FP_SIZE);
	memcpy(m->root, b->h0, PD_HASH_SIZE);
	memcpy(m->hash, b->hash, PD_HASH_SIZE);
	memcpy(m->parent, b->parent, PD_HASH_SIZE);
}
