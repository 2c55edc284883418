/* SPDX-License-Identifier: MIT */
/*
 * Disk records (daemon/record.c): the documented layout, round trips whole
 * and in two parts, every flipped bit and every truncation refused, fields
 * a valid checksum cannot make acceptable, records of another user, model
 * or block refused as such, absurd sizes refused without overflow, and
 * encoders that never write past their buffer. docs/FORMAT.md is checked
 * against the code: its record table and constants, and a manifest and an
 * export file a daemon wrote, read with the page's own offsets and sizes.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "daemon_util.h"
#include "prefixd.h"
#include "record.h"

enum { BT = 4, PAYLOAD = 100, HEAD = 4096, SIZE = 8192 };

/* The test's own little-endian reader and writer, not record.c's
 * rec_get_le/rec_put_le: a byte order wrong in both would read back as
 * right. */
static uint64_t le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;
	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void set_le(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

static struct rec_meta meta_of(uint32_t block_tokens, uint64_t payload, uint32_t depth)
{
	struct rec_meta m = { .ns = 1000, .block_tokens = block_tokens, .depth = depth,
			      .payload = payload };
	for (int i = 0; i < PD_HASH_SIZE; i++) {
		m.fp[i] = (uint8_t)(0x10 + i);
		m.root[i] = (uint8_t)(0x40 + i);
		m.hash[i] = (uint8_t)(0x80 + i);
		m.parent[i] = depth ? (uint8_t)(0xc0 + i) : 0;
	}
	return m;
}

static uint32_t tokens[PD_MAX_BLOCK_TOKENS];
static uint8_t payload[SIZE];

/* A record of BT tokens and PAYLOAD bytes at depth 3, in a buffer of
 * exactly its size (so AddressSanitizer sees a read past it). */
static uint8_t *small_record(struct rec_meta *m)
{
	*m = meta_of(BT, PAYLOAD, 3);
	for (uint32_t t = 0; t < PD_MAX_BLOCK_TOKENS; t++)
		tokens[t] = 0x01020304u * (t + 1);
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 7 + 1);
	uint8_t *buf = malloc(SIZE);
	cr_assert(buf);
	cr_assert_eq(rec_encode(m, tokens, payload, buf, SIZE), SIZE);
	return buf;
}

/* Recomputes the head checksum after a test changed a field it covers:
 * what a careful forger (or a buggy writer) would produce. */
static void reseal(uint8_t *buf, size_t head)
{
	set_le(buf + 8, XXH3_64bits(buf + 16, head - 16), 8);
}

/* rec_check of a copy of buf[0, len) in a buffer of exactly len bytes. */
static int check_copy(const uint8_t *buf, size_t len, const struct rec_expect *want,
		      struct rec_meta *out, const char **why)
{
	uint8_t *copy = malloc(len ? len : 1);
	cr_assert(copy);
	memcpy(copy, buf, len);
	int rc = rec_check(copy, len, want, out, why);
	free(copy);
	return rc;
}

Test(record, sizes)
{
	cr_assert_eq(rec_head_size(1), 4096);
	cr_assert_eq(rec_head_size((4096 - REC_HDR_SIZE) / 4), 4096);
	cr_assert_eq(rec_head_size((4096 - REC_HDR_SIZE) / 4 + 1), 8192);
	cr_assert_eq(rec_head_size(64), 4096);
	cr_assert_eq(rec_head_size(PD_MAX_BLOCK_TOKENS), 20480);
	cr_assert_eq(rec_head_size(0), 0);
	cr_assert_eq(rec_head_size(PD_MAX_BLOCK_TOKENS + 1), 0);
	cr_assert_eq(rec_head_size(UINT32_MAX), 0);
	cr_assert_eq(rec_payload_span(1), 4096);
	cr_assert_eq(rec_payload_span(4096), 4096);
	cr_assert_eq(rec_payload_span(4097), 8192);
	cr_assert_eq(rec_payload_span(REC_MAX_PAYLOAD), REC_MAX_PAYLOAD);
	cr_assert_eq(rec_payload_span(0), 0);
	cr_assert_eq(rec_payload_span(REC_MAX_PAYLOAD + 1ull), 0);
	cr_assert_eq(rec_payload_span(UINT64_MAX), 0);
	/* A SmolLM-135M block: 2 x 30 layers x 3 heads x 64 tokens x 64 x f32. */
	cr_assert_eq(rec_size(64, 2949120), 4096 + 2949120);
	cr_assert_eq(rec_size(BT, PAYLOAD), SIZE);
	cr_assert_eq(rec_size(PD_MAX_BLOCK_TOKENS, REC_MAX_PAYLOAD), 20480 + (size_t)REC_MAX_PAYLOAD);
	cr_assert_eq(rec_size(0, 1), 0);
	cr_assert_eq(rec_size(1, 0), 0);
	cr_assert_eq(rec_size(UINT32_MAX, UINT64_MAX), 0);
}

/* ==== docs/FORMAT.md, read as the tests below read it ==== */

/* The section of FORMAT.md under `heading` (a "## " line), up to the next
 * such line; malloc'd. */
static char *format_section(const char *heading)
{
	const char *all = td_read_file(FORMAT_MD);
	cr_assert(*all, "cannot read %s", FORMAT_MD);
	size_t hl = strlen(heading);
	const char *s = NULL;
	for (const char *l = all; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, heading, hl) && (l[hl] == '\n' || l[hl] == ' ')) {
			s = l;
			break;
		}
	cr_assert_not_null(s, "%s has no section \"%s\"", FORMAT_MD, heading);
	char *end = strstr(s + hl, "\n## ");
	return strndup(s, end ? (size_t)(end - s) + 1 : strlen(s));
}

/* The value of row `name` of a section's "| property | value |" table,
 * backquotes dropped and "\0" made a NUL byte: its length, or -1. */
static int format_prop(const char *sec, const char *name, char *out, size_t cap)
{
	char key[96];
	snprintf(key, sizeof(key), "\n| %s | ", name);
	const char *p = strstr(sec, key);
	if (!p)
		return -1;
	p += strlen(key);
	size_t n = 0;
	for (; *p && *p != '\n' && strncmp(p, " |", 2) && n + 1 < cap; p++) {
		if (*p == '`')
			continue;
		if (p[0] == '\\' && p[1] == '0') {
			out[n++] = 0;
			p++;
		} else {
			out[n++] = *p;
		}
	}
	out[n] = 0;
	return (int)n;
}

static uint64_t format_num(const char *sec, const char *name)
{
	char v[64], *end;
	cr_assert_geq(format_prop(sec, name, v, sizeof(v)), 1, "%s: no \"%s\" in the table", FORMAT_MD,
		      name);
	uint64_t x = strtoull(v, &end, 10);
	cr_assert(end != v && !*end, "%s: \"%s\" is %s, not a number", FORMAT_MD, name, v);
	return x;
}

/* The rows "| offset | bytes | ..." with both cells plain numbers of the
 * k-th run of such rows in a section (a table of fields, up to its first
 * row of another kind): their count, at most max. */
static size_t format_fields(const char *sec, int k, unsigned rows[][2], size_t max)
{
	size_t n = 0;
	int run = -1;
	bool in_run = false;
	for (const char *l = sec; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		unsigned off, bytes;
		int end = 0;
		bool row = sscanf(l, "| %u | %u |%n", &off, &bytes, &end) == 2 && end > 0;
		if (row && !in_run)
			run++;
		in_run = row;
		if (row && run == k && n < max) {
			rows[n][0] = off;
			rows[n][1] = bytes;
			n++;
		}
	}
	return n;
}

/* A section's k-th table of fields is `want`, row by row. */
static void expect_fields(const char *heading, int k, const unsigned want[][2], size_t nwant)
{
	char *sec = format_section(heading);
	unsigned rows[64][2];
	size_t n = format_fields(sec, k, rows, 64);
	free(sec);
	cr_expect_eq(n, nwant, "%s, %s, table %d: %zu rows of fields, the format has %zu",
		     FORMAT_MD, heading, k, n, nwant);
	for (size_t i = 0; i < n && i < nwant; i++)
		cr_expect(rows[i][0] == want[i][0] && rows[i][1] == want[i][1],
			  "%s, %s, table %d, row %zu: offset %u, %u bytes; the format has %u, %u",
			  FORMAT_MD, heading, k, i, rows[i][0], rows[i][1], want[i][0], want[i][1]);
}

/* The fixed header's fields, (offset, bytes), as the test below reads them. */
static const unsigned header_fields[][2] = {
	{ 0, 8 },   { 8, 8 },   { 16, 8 },  { 24, 2 },  { 26, 2 },  { 28, 4 },
	{ 32, 4 },  { 36, 4 },  { 40, 8 },  { 48, 8 },  { 56, 4 },  { 60, 4 },
	{ 64, 32 }, { 96, 32 }, { 128, 32 }, { 160, 32 },
};

/* docs/FORMAT.md's table of the record's fields lists these, in this
 * order: the page the format is specified on says what the code does. */
Test(record, format_md_table_is_the_layout)
{
	expect_fields("## Records", 0, header_fields, sizeof(header_fields) / sizeof(header_fields[0]));
}

/* Its magic, version, sizes and limits are the code's. */
Test(record, format_md_constants_are_the_code)
{
	char *sec = format_section("## Records");
	char magic[16];
	struct rec_meta m;
	uint8_t *b = small_record(&m);
	cr_expect_eq(format_prop(sec, "magic", magic, sizeof(magic)), 8);
	cr_expect(!memcmp(magic, b, 8), "%s: the record's magic is not the one written", FORMAT_MD);
	cr_expect_eq(format_num(sec, "version"), REC_VERSION);
	cr_expect_eq(format_num(sec, "header size"), REC_HDR_SIZE);
	cr_expect_eq(format_num(sec, "alignment"), REC_ALIGN);
	cr_expect_eq(format_num(sec, "max block_tokens"), REC_MAX_BLOCK_TOKENS);
	cr_expect_eq(format_num(sec, "max payload"), REC_MAX_PAYLOAD);
	free(b);
	free(sec);
}

/* Every field where docs/FORMAT.md puts it, checksums computed with
 * libxxhash directly: the format is the documented one, not merely one
 * this encoder and checker agree on. */
Test(record, layout_is_the_documented_one)
{
	struct rec_meta m;
	uint8_t *b = small_record(&m);
	cr_assert(!memcmp(b, "PFXDREC", 8));
	cr_assert_eq(le(b + 8, 8), XXH3_64bits(b + 16, HEAD - 16));
	cr_assert_eq(le(b + 16, 8), XXH3_64bits(payload, PAYLOAD));
	cr_assert_eq(le(b + 24, 2), 1);
	cr_assert_eq(le(b + 26, 2), 192);
	cr_assert_eq(le(b + 28, 4), 0);
	cr_assert_eq(le(b + 32, 4), 1000);
	cr_assert_eq(le(b + 36, 4), BT);
	cr_assert_eq(le(b + 40, 8), PAYLOAD);
	cr_assert_eq(le(b + 48, 8), HEAD);
	cr_assert_eq(le(b + 56, 4), 3);
	cr_assert_eq(le(b + 60, 4), 0);
	cr_assert(!memcmp(b + 64, m.fp, 32));
	cr_assert(!memcmp(b + 96, m.root, 32));
	cr_assert(!memcmp(b + 128, m.hash, 32));
	cr_assert(!memcmp(b + 160, m.parent, 32));
	/* Each field ends where the next begins, the last at the tokens. */
	for (size_t i = 0; i + 1 < sizeof(header_fields) / sizeof(header_fields[0]); i++)
		cr_assert_eq(header_fields[i][0] + header_fields[i][1], header_fields[i + 1][0]);
	cr_assert_eq(header_fields[15][0] + header_fields[15][1], 192);
	for (int t = 0; t < BT; t++)
		cr_assert_eq(le(b + 192 + 4 * t, 4), tokens[t]);
	for (size_t i = 192 + 4 * BT; i < HEAD; i++)
		cr_assert_eq(b[i], 0, "head padding at %zu", i);
	cr_assert(!memcmp(b + HEAD, payload, PAYLOAD));
	for (size_t i = HEAD + PAYLOAD; i < SIZE; i++)
		cr_assert_eq(b[i], 0, "payload padding at %zu", i);
	free(b);
}

static void assert_meta(const struct rec_meta *got, const struct rec_meta *m, const uint8_t *buf)
{
	cr_assert_eq(got->ns, m->ns);
	cr_assert_eq(got->block_tokens, m->block_tokens);
	cr_assert_eq(got->depth, m->depth);
	cr_assert_eq(got->payload, m->payload);
	cr_assert(!memcmp(got->fp, m->fp, PD_FP_SIZE));
	cr_assert(!memcmp(got->root, m->root, PD_HASH_SIZE));
	cr_assert(!memcmp(got->hash, m->hash, PD_HASH_SIZE));
	cr_assert(!memcmp(got->parent, m->parent, PD_HASH_SIZE));
	cr_assert_eq(got->tokens, buf + REC_HDR_SIZE);
	for (uint32_t t = 0; t < m->block_tokens; t++)
		cr_assert_eq(pd_token_at(got->tokens, got->block_tokens, 0, t), tokens[t]);
	cr_assert_eq(got->payload_off, rec_head_size(m->block_tokens));
	cr_assert_eq(got->payload_sum, rec_payload_sum(payload, m->payload));
}

Test(record, round_trip)
{
	struct rec_meta m, got;
	uint8_t *b = small_record(&m);
	struct idx_root root = { .ns = m.ns };
	memcpy(root.h0, m.root, PD_HASH_SIZE);
	struct rec_expect want = { .block_tokens = BT, .payload = PAYLOAD, .root = &root,
				   .fp = m.fp, .hash = m.hash };
	const char *why = NULL;
	cr_assert_eq(rec_check(b, SIZE, &want, &got, &why), 0, "%s", why);
	assert_meta(&got, &m, b);
	cr_assert(!memcmp(b + got.payload_off, payload, PAYLOAD));
	/* Nothing asked: any intact record. */
	memset(&got, 0, sizeof(got));
	cr_assert_eq(rec_check(b, SIZE, NULL, &got, &why), 0, "%s", why);
	assert_meta(&got, &m, b);
	/* The first block of a chain: depth 0, no parent. */
	struct rec_meta first = meta_of(BT, PAYLOAD, 0);
	uint8_t *f = malloc(SIZE);
	cr_assert_eq(rec_encode(&first, tokens, payload, f, SIZE), SIZE);
	cr_assert_eq(rec_check(f, SIZE, NULL, &got, &why), 0, "%s", why);
	cr_assert_eq(got.depth, 0);
	free(f);
	free(b);
}

/* The restore's way: the head alone (exactly its bytes, or with the start
 * of the payload after it), then the payload where it landed, with or
 * without its padding. The head written alone is the whole record's. */
Test(record, head_and_payload_apart)
{
	struct rec_meta m, got;
	uint8_t *b = small_record(&m);
	const char *why = NULL;
	struct rec_expect want = { .block_tokens = BT, .payload = PAYLOAD };
	uint8_t *head = malloc(HEAD);
	memcpy(head, b, HEAD);
	cr_assert_eq(rec_check_head(head, HEAD, &want, &got, &why), 0, "%s", why);
	assert_meta(&got, &m, head);
	cr_assert_eq(rec_check_head(b, SIZE, &want, &got, &why), 0, "%s", why);
	uint8_t *slot = malloc(SIZE - HEAD);
	memcpy(slot, b + HEAD, SIZE - HEAD);
	cr_assert_eq(rec_check_payload(&got, slot, PAYLOAD, &why), 0, "%s", why);
	cr_assert_eq(rec_check_payload(&got, slot, SIZE - HEAD, &why), 0, "%s", why);
	/* Any other length is not this payload's. */
	cr_assert_eq(rec_check_payload(&got, slot, PAYLOAD - 1, &why), -EBADMSG);
	cr_assert_str_eq(why, "payload length");
	cr_assert_eq(rec_check_payload(&got, slot, PAYLOAD + 1, &why), -EBADMSG);
	cr_assert_eq(rec_check_payload(&got, slot, SIZE - HEAD - 1, &why), -EBADMSG);

	uint8_t *alone = malloc(HEAD);
	cr_assert_eq(rec_encode_head(&m, tokens, rec_payload_sum(payload, PAYLOAD), alone, HEAD), HEAD);
	cr_assert(!memcmp(alone, b, HEAD));
	free(alone);
	free(slot);
	free(head);
	free(b);
}

/* A record as large as a real block, written head and payload apart. */
Test(record, a_real_block)
{
	enum { TOK = 64 };
	const uint64_t bytes = 2949120;
	struct rec_meta m = meta_of(TOK, bytes, 31), got;
	size_t size = rec_size(TOK, bytes);
	uint8_t *kv = malloc(bytes), *b = malloc(size);
	cr_assert(kv && b);
	for (uint64_t i = 0; i < bytes; i++)
		kv[i] = (uint8_t)(i >> 9 ^ i);
	for (uint32_t t = 0; t < TOK; t++)
		tokens[t] = 49152 - t;
	cr_assert_eq(rec_encode(&m, tokens, kv, b, size), (int)size);
	cr_assert_eq(rec_encode_head(&m, tokens, rec_payload_sum(kv, bytes), b, 4096), 4096);
	const char *why = NULL;
	cr_assert_eq(rec_check(b, size, NULL, &got, &why), 0, "%s", why);
	cr_assert_eq(got.payload_off, 4096);
	cr_assert(!memcmp(b + 4096, kv, bytes));
	kv[bytes / 2] ^= 1;
	cr_assert_eq(rec_check_payload(&got, kv, bytes, &why), -EBADMSG);
	cr_assert_str_eq(why, "payload checksum");
	free(kv);
	free(b);
}

/* Every bit of every byte: header, checksums, tokens, padding, payload,
 * payload padding. Each flip is refused, whole and split. */
Test(record, every_flipped_bit_is_refused)
{
	struct rec_meta m, got;
	uint8_t *b = small_record(&m);
	const char *why;
	for (size_t i = 0; i < SIZE; i++)
		for (int bit = 0; bit < 8; bit++) {
			b[i] ^= (uint8_t)(1u << bit);
			why = NULL;
			int rc = rec_check(b, SIZE, NULL, &got, &why);
			cr_assert(rc == -EBADMSG || rc == -ENOTSUP,
				  "byte %zu bit %d: rc %d (%s)", i, bit, rc, why ? why : "-");
			cr_assert(why);
			if (i < HEAD) {
				cr_assert_neq(rec_check_head(b, HEAD, NULL, &got, &why), 0,
					      "head byte %zu bit %d", i, bit);
			} else {
				/* The head is intact; the payload fails where it lies. */
				cr_assert_eq(rec_check_head(b, HEAD, NULL, &got, &why), 0);
				cr_assert_eq(rec_check_payload(&got, b + HEAD, SIZE - HEAD, &why),
					     -EBADMSG, "payload byte %zu bit %d", i, bit);
			}
			b[i] ^= (uint8_t)(1u << bit);
		}
	cr_assert_eq(rec_check(b, SIZE, NULL, &got, &why), 0);
	free(b);
}

/* Cut short at every length, and one byte too long. */
Test(record, truncation_is_refused)
{
	struct rec_meta m, got;
	uint8_t *b = small_record(&m);
	const char *why;
	for (size_t len = 0; len < SIZE; len++) {
		why = NULL;
		cr_assert_eq(check_copy(b, len, NULL, &got, &why), -EBADMSG, "length %zu", len);
		cr_assert(why);
		if (len < HEAD) {
			uint8_t *copy = malloc(len ? len : 1);
			memcpy(copy, b, len);
			cr_assert_eq(rec_check_head(copy, len, NULL, &got, &why), -EBADMSG,
				     "head length %zu", len);
			free(copy);
		}
	}
	cr_assert_eq(check_copy(b, REC_HDR_SIZE - 1, NULL, &got, &why), -EBADMSG);
	cr_assert_str_eq(why, "truncated header");
	cr_assert_eq(check_copy(b, HEAD, NULL, &got, &why), -EBADMSG);
	cr_assert_str_eq(why, "truncated");
	uint8_t *longer = calloc(1, SIZE + 1);
	memcpy(longer, b, SIZE);
	cr_assert_eq(rec_check(longer, SIZE + 1, NULL, &got, &why), -EBADMSG);
	cr_assert_str_eq(why, "trailing bytes");
	free(longer);
	free(b);
}

/* An intact record that is not the one asked for: planted by another user,
 * left by another model or block size, filed under another block's name. */
Test(record, another_user_model_or_block_is_refused)
{
	struct rec_meta m, got;
	uint8_t *b = small_record(&m);
	const char *why;
	struct idx_root root = { .ns = m.ns };
	memcpy(root.h0, m.root, PD_HASH_SIZE);
	struct rec_expect want = { .block_tokens = BT, .payload = PAYLOAD, .root = &root,
				   .fp = m.fp, .hash = m.hash };
	cr_assert_eq(rec_check(b, SIZE, &want, &got, &why), 0);

	struct rec_expect w = want;
	struct idx_root other = root;
	other.ns = 1001;
	w.root = &other;
	cr_assert_eq(rec_check(b, SIZE, &w, &got, &why), -EACCES);
	cr_assert_str_eq(why, "another namespace");
	other = root;
	other.h0[31] ^= 1;
	cr_assert_eq(rec_check(b, SIZE, &w, &got, &why), -EACCES);
	cr_assert_str_eq(why, "another chain root");
	cr_assert_eq(rec_check_head(b, HEAD, &w, &got, &why), -EACCES);

	uint8_t bytes[PD_HASH_SIZE];
	memcpy(bytes, m.fp, PD_FP_SIZE);
	bytes[0] ^= 0x80;
	w = want;
	w.fp = bytes;
	cr_assert_eq(rec_check(b, SIZE, &w, &got, &why), -EACCES);
	cr_assert_str_eq(why, "another model");
	memcpy(bytes, m.hash, PD_HASH_SIZE);
	bytes[17] ^= 4;
	w = want;
	w.hash = bytes;
	cr_assert_eq(rec_check(b, SIZE, &w, &got, &why), -EACCES);
	cr_assert_str_eq(why, "another block");
	w = want;
	w.block_tokens = 2 * BT;
	cr_assert_eq(rec_check(b, SIZE, &w, &got, &why), -EACCES);
	cr_assert_str_eq(why, "another block size");
	w = want;
	w.payload = PAYLOAD + 1;
	cr_assert_eq(rec_check(b, SIZE, &w, &got, &why), -EACCES);
	cr_assert_str_eq(why, "another payload size");

	/* Another user's record, however well formed, for this user. */
	struct rec_meta theirs = m;
	theirs.ns = 0;
	uint8_t *t = malloc(SIZE);
	cr_assert_eq(rec_encode(&theirs, tokens, payload, t, SIZE), SIZE);
	cr_assert_eq(rec_check(t, SIZE, &want, &got, &why), -EACCES);
	cr_assert_str_eq(why, "another namespace");
	free(t);
	free(b);
}

/* Fields a checksum alone would not refuse: a record sealed with them
 * (a forger, a newer writer, a bug) is refused all the same. */
Test(record, malformed_fields_are_refused_under_a_valid_checksum)
{
	struct rec_meta m, got;
	const char *why;
	static const struct {
		int off, bytes;
		uint64_t v;
		int rc;
		const char *why;
	} cases[] = {
		{ 0, 1, 'Q', -EBADMSG, "magic" },
		{ 7, 1, 1, -EBADMSG, "magic" },
		{ 24, 2, 0, -ENOTSUP, "version" },
		{ 24, 2, 2, -ENOTSUP, "version" },
		{ 26, 2, 200, -EBADMSG, "header size" },
		{ 28, 4, 1, -EBADMSG, "flags" },
		{ 60, 4, 1u << 31, -EBADMSG, "reserved" },
		{ 48, 8, 8192, -EBADMSG, "payload offset" },
		{ 48, 8, 0, -EBADMSG, "payload offset" },
		{ 56, 4, 0, -EBADMSG, "depth and parent" },  /* a parent, depth 0 */
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint8_t *b = small_record(&m);
		set_le(b + cases[c].off, cases[c].v, cases[c].bytes);
		reseal(b, HEAD);
		why = NULL;
		cr_assert_eq(rec_check(b, SIZE, NULL, &got, &why), cases[c].rc, "case %zu", c);
		cr_assert_str_eq(why, cases[c].why, "case %zu", c);
		cr_assert_eq(rec_check_head(b, HEAD, NULL, &got, &why), cases[c].rc, "case %zu", c);
		free(b);
	}

	/* depth > 0 without a parent. */
	uint8_t *b = small_record(&m);
	memset(b + 160, 0, PD_HASH_SIZE);
	reseal(b, HEAD);
	cr_assert_eq(rec_check(b, SIZE, NULL, &got, &why), -EBADMSG);
	cr_assert_str_eq(why, "depth and parent");
	free(b);

	/* Padding after the tokens is covered by the head's checksum, and
	 * must be zero under a valid one too (one encoding per record)... */
	b = small_record(&m);
	b[HEAD - 1] = 1;
	cr_assert_eq(rec_check(b, SIZE, NULL, &got, &why), -EBADMSG);
	cr_assert_str_eq(why, "header checksum");
	reseal(b, HEAD);
	cr_assert_eq(rec_check(b, SIZE, NULL, &got, &why), -EBADMSG);
	cr_assert_str_eq(why, "header padding");
	cr_assert_eq(rec_check_head(b, HEAD, NULL, &got, &why), -EBADMSG);
	b[HEAD - 1] = 0;
	b[REC_HDR_SIZE + 4 * BT] = 1;   /* the first byte after the tokens */
	reseal(b, HEAD);
	cr_assert_eq(rec_check(b, SIZE, NULL, &got, &why), -EBADMSG);
	cr_assert_str_eq(why, "header padding");
	b[REC_HDR_SIZE + 4 * BT] = 0;
	reseal(b, HEAD);
	cr_assert_eq(rec_check(b, SIZE, NULL, &got, &why), 0);
	/* ...after the payload, by its own check. */
	b[SIZE - 1] = 1;
	cr_assert_eq(rec_check(b, SIZE, NULL, &got, &why), -EBADMSG);
	cr_assert_str_eq(why, "payload padding");
	cr_assert_eq(rec_check_head(b, HEAD, NULL, &got, &why), 0);
	cr_assert_eq(rec_check_payload(&got, b + HEAD, PAYLOAD, &why), 0);
	cr_assert_eq(rec_check_payload(&got, b + HEAD, SIZE - HEAD, &why), -EBADMSG);
	cr_assert_str_eq(why, "payload padding");
	b[SIZE - 1] = 0;

	/* The payload's checksum, sealed in the head, holds it. */
	b[HEAD + 5] ^= 0x20;
	cr_assert_eq(rec_check(b, SIZE, NULL, &got, &why), -EBADMSG);
	cr_assert_str_eq(why, "payload checksum");
	free(b);
}

/* Sizes no record can have, in headers that are otherwise whole: refused
 * on their limits, with no arithmetic on them and no read past len. */
Test(record, absurd_sizes_are_refused)
{
	struct rec_meta m, got;
	const char *why;
	static const struct {
		uint32_t block_tokens;
		uint64_t payload;
		const char *why;
	} cases[] = {
		{ 0, PAYLOAD, "block_tokens" },
		{ PD_MAX_BLOCK_TOKENS + 1, PAYLOAD, "block_tokens" },
		{ UINT32_MAX, PAYLOAD, "block_tokens" },
		{ 0x40000000u, PAYLOAD, "block_tokens" },   /* x 4 wraps a u32 to 0 */
		{ BT, 0, "payload size" },
		{ BT, REC_MAX_PAYLOAD + 1ull, "payload size" },
		{ BT, UINT64_MAX, "payload size" },
		{ BT, UINT64_MAX - 4000, "payload size" },  /* rounding up wraps */
		{ BT, 1ull << 32, "payload size" },
		{ PD_MAX_BLOCK_TOKENS, REC_MAX_PAYLOAD, "truncated" }, /* fine, but not in 8 KiB */
		{ BT, REC_MAX_PAYLOAD, "truncated" },
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint8_t *b = small_record(&m);
		set_le(b + 36, cases[c].block_tokens, 4);
		set_le(b + 40, cases[c].payload, 8);
		size_t head = rec_head_size(cases[c].block_tokens);
		if (head)
			set_le(b + 48, head, 8);  /* consistent, so the size is what fails */
		if (head && head <= SIZE)
			reseal(b, head);
		why = NULL;
		cr_assert_eq(check_copy(b, SIZE, NULL, &got, &why), -EBADMSG, "case %zu", c);
		cr_assert_str_eq(why, cases[c].why, "case %zu", c);
		free(b);
	}
}

Test(record, encode_refuses_bad_input_and_small_buffers)
{
	struct rec_meta m;
	uint8_t *b = small_record(&m);
	free(b);
	/* A buffer one byte short: refused, and not a byte written. */
	uint8_t *out = malloc(SIZE);
	memset(out, 0xa5, SIZE);
	cr_assert_eq(rec_encode(&m, tokens, payload, out, SIZE - 1), -ENOBUFS);
	cr_assert_eq(rec_encode(&m, tokens, payload, out, 0), -ENOBUFS);
	cr_assert_eq(rec_encode_head(&m, tokens, 0, out, HEAD - 1), -ENOBUFS);
	for (size_t i = 0; i < SIZE; i++)
		cr_assert_eq(out[i], 0xa5, "byte %zu written", i);

	/* What no check would accept is not written either. */
	struct rec_meta bad[] = { m, m, m, m, m, m, m };
	bad[0].block_tokens = 0;
	bad[1].block_tokens = PD_MAX_BLOCK_TOKENS + 1;
	bad[2].payload = 0;
	bad[3].payload = REC_MAX_PAYLOAD + 1ull;
	bad[4].payload = UINT64_MAX;
	bad[5].depth = 0;                          /* with a parent */
	memset(bad[6].parent, 0, PD_HASH_SIZE);    /* depth 3, none */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(rec_encode(&bad[i], tokens, payload, out, SIZE), -EINVAL, "case %zu", i);
		cr_assert_eq(rec_encode_head(&bad[i], tokens, 0, out, SIZE), -EINVAL, "case %zu", i);
	}
	for (size_t i = 0; i < SIZE; i++)
		cr_assert_eq(out[i], 0xa5, "byte %zu written", i);

	/* Exactly the size is enough, and a larger buffer is left alone past it. */
	uint8_t *big = malloc(SIZE + 64);
	memset(big, 0xa5, SIZE + 64);
	cr_assert_eq(rec_encode(&m, tokens, payload, big, SIZE + 64), SIZE);
	for (size_t i = SIZE; i < SIZE + 64; i++)
		cr_assert_eq(big[i], 0xa5);
	cr_assert_eq(rec_encode(&m, tokens, payload, out, SIZE), SIZE);
	cr_assert(!memcmp(out, big, SIZE));
	free(big);
	free(out);
}

/* ==== The manifest and the export file, as a daemon writes them ==== */

enum { A_BLOCKS = 3, B_BLOCKS = 2, MATCHES = 2, PIN_TTL = 3600 };

struct written {
	char disk[PATH_MAX];
	uint8_t *manifest, *export;
	size_t manifest_len, export_len;
	uint64_t t0, t1;   /* Unix seconds around the daemon's life */
	uint64_t exported;
};

static uint8_t *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	uint8_t *b = malloc((size_t)st.st_size + 1);
	cr_assert(b);
	cr_assert_eq(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return b;
}

static void prompt_of(uint32_t base, uint32_t blocks, uint32_t *t)
{
	for (uint32_t i = 0; i < blocks * TD_BLOCK_TOKENS; i++)
		t[i] = base + i;
}

/* A daemon with a disk tier holds chain A (matched MATCHES times, pinned
 * for PIN_TTL s) and chain B (never matched); it exports all of it and
 * stops gracefully, which writes the manifest. */
static void daemon_writes(struct written *w)
{
	snprintf(w->disk, sizeof(w->disk), "/tmp/pfx-format-XXXXXX");
	cr_assert(mkdtemp(w->disk));
	struct test_daemon td;
	const char *args[] = { "--block-tokens", "4", "--disk-dir", w->disk, NULL };
	w->t0 = (uint64_t)time(NULL);
	cr_assert_eq(td_start(&td, args), 0);
	struct prefixd_layout l = td_layout(1);
	struct prefixd *c;
	cr_assert_eq(prefixd_connect(td.sock, &l, &c), 0, "%s", prefixd_errmsg());
	uint32_t a[A_BLOCKS * TD_BLOCK_TOKENS], b[B_BLOCKS * TD_BLOCK_TOKENS], stored, dedup;
	prompt_of(100, A_BLOCKS, a);
	prompt_of(900, B_BLOCKS, b);
	cr_assert_eq(td_publish(c, 0, a, 0, A_BLOCKS, &stored, &dedup), 0, "%s", prefixd_errmsg());
	cr_assert_eq(td_publish(c, 0, b, 0, B_BLOCKS, &stored, &dedup), 0, "%s", prefixd_errmsg());
	for (int i = 0; i < MATCHES; i++) {
		uint64_t lease;
		uint32_t hit;
		const void *kv[A_BLOCKS];
		cr_assert_eq(prefixd_match(c, a, A_BLOCKS, &lease, &hit, kv), 0, "%s",
			     prefixd_errmsg());
		cr_assert_eq(hit, A_BLOCKS);
		cr_assert_eq(prefixd_release(c, lease), 0);
	}
	struct prefixd_prompt *p;
	struct prefixd_id id;
	cr_assert_eq(prefixd_prompt_new(&l, &p), 0);
	cr_assert_eq(prefixd_prompt_append(p, a, A_BLOCKS * TD_BLOCK_TOKENS), 0);
	cr_assert_eq(prefixd_prompt_id(p, &id), 0);
	prefixd_prompt_free(p);
	cr_assert_eq(prefixd_pin(c, &id, PIN_TTL, NULL), 0, "%s", prefixd_errmsg());

	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/all.pfx", w->disk);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(prefixd_export(c, NULL, NULL, fd, &w->exported, NULL), 0, "%s",
		     prefixd_errmsg());
	close(fd);
	prefixd_close(c);
	cr_assert_eq(td_stop(&td), 0, "prefixd stops cleanly on SIGTERM");
	w->t1 = (uint64_t)time(NULL);
	w->export = slurp(path, &w->export_len);
	snprintf(path, sizeof(path), "%s/manifest", w->disk);
	w->manifest = slurp(path, &w->manifest_len);
}

static void written_free(struct written *w)
{
	char out[256];
	free(w->manifest);
	free(w->export);
	td_sh(out, sizeof(out), "rm -rf '%s'", w->disk);
}

/* The fields of the manifest's header and of a record's use, as
 * daemon/restart.c writes them. */
static const unsigned manifest_fields[][2] = {
	{ 0, 8 }, { 8, 4 }, { 12, 4 }, { 16, 8 }, { 24, 8 },
};
static const unsigned use_fields[][2] = {
	{ 0, 8 }, { 8, 8 }, { 16, 8 }, { 24, 4 }, { 28, 4 }, { 32, 8 },
};
enum { M_MAGIC, M_VERSION, M_BLOCK_TOKENS, M_COUNT, M_RESERVED };
enum { U_HITS, U_LAST_USE, U_CLOCK, U_FLAGS, U_RESERVED, U_PIN_END };

/* A manifest a daemon wrote is the one FORMAT.md specifies: read with the
 * page's own offsets, sizes, magic and version, every field holds what it
 * should. */
Test(format, the_manifest_is_the_documented_one, .timeout = 120)
{
	expect_fields("## The manifest", 0, manifest_fields,
		      sizeof(manifest_fields) / sizeof(manifest_fields[0]));
	expect_fields("## The manifest", 1, use_fields, sizeof(use_fields) / sizeof(use_fields[0]));

	struct written w;
	daemon_writes(&w);
	char *sec = format_section("## The manifest");
	unsigned hf[8][2], uf[8][2];
	cr_assert_eq(format_fields(sec, 0, hf, 8), 5, "%s: the manifest's header has 5 fields", FORMAT_MD);
	cr_assert_eq(format_fields(sec, 1, uf, 8), 6, "%s: a record's use has 6 fields", FORMAT_MD);
	char magic[16];
	size_t hdr = format_num(sec, "header size"), use = format_num(sec, "use size"),
	       tail = format_num(sec, "trailer size"), head = rec_head_size(TD_BLOCK_TOKENS);
	const uint8_t *b = w.manifest;
	cr_assert_gt(w.manifest_len, hdr + tail);

	cr_expect_eq(format_prop(sec, "magic", magic, sizeof(magic)), (int)hf[M_MAGIC][1]);
	cr_expect(!memcmp(b + hf[M_MAGIC][0], magic, hf[M_MAGIC][1]), "the manifest's magic");
	cr_expect_eq(le(b + hf[M_VERSION][0], (int)hf[M_VERSION][1]), format_num(sec, "version"));
	cr_expect_eq(le(b + hf[M_BLOCK_TOKENS][0], (int)hf[M_BLOCK_TOKENS][1]), TD_BLOCK_TOKENS);
	uint64_t count = le(b + hf[M_COUNT][0], (int)hf[M_COUNT][1]);
	cr_expect_eq(count, A_BLOCKS + B_BLOCKS, "every record is listed");
	cr_expect_eq(le(b + hf[M_RESERVED][0], (int)hf[M_RESERVED][1]), 0);
	cr_assert_eq(w.manifest_len, hdr + count * (head + use) + tail,
		     "header, %llu entries of a head and its use, trailer", (unsigned long long)count);
	cr_expect_eq(le(b + w.manifest_len - tail, (int)tail), XXH3_64bits(b, w.manifest_len - tail),
		     "the trailer is the XXH3-64 of the rest");

	int pin_ends = 0;
	for (uint64_t i = 0; i < count; i++) {
		const uint8_t *e = b + hdr + i * (head + use), *u = e + head;
		struct rec_meta m;
		const char *why = "";
		struct rec_expect want = { .block_tokens = TD_BLOCK_TOKENS };
		cr_assert_eq(rec_check_head(e, head, &want, &m, &why), 0, "entry %llu: %s",
			     (unsigned long long)i, why);
		bool in_a = pd_token_at(m.tokens, TD_BLOCK_TOKENS, 0, 0) < 900;
		cr_expect_eq(le(u + uf[U_HITS][0], (int)uf[U_HITS][1]), in_a ? MATCHES : 0,
			     "entry %llu: its hits", (unsigned long long)i);
		uint64_t last = le(u + uf[U_LAST_USE][0], (int)uf[U_LAST_USE][1]);
		cr_expect(last >= w.t0 - 1 && last <= w.t1 + 1, "entry %llu: last use %llu, not in %llu-%llu",
			  (unsigned long long)i, (unsigned long long)last, (unsigned long long)w.t0,
			  (unsigned long long)w.t1);
		cr_expect_gt(le(u + uf[U_CLOCK][0], (int)uf[U_CLOCK][1]), 0, "entry %llu: its LRU clock",
			     (unsigned long long)i);
		uint64_t flags = le(u + uf[U_FLAGS][0], (int)uf[U_FLAGS][1]);
		bool pin_end = in_a && m.depth == A_BLOCKS - 1;
		cr_expect_eq(flags, pin_end ? 1 : 0, "entry %llu: flags %llu", (unsigned long long)i,
			     (unsigned long long)flags);
		cr_expect_eq(le(u + uf[U_RESERVED][0], (int)uf[U_RESERVED][1]), 0);
		uint64_t until = le(u + uf[U_PIN_END][0], (int)uf[U_PIN_END][1]);
		if (pin_end) {
			pin_ends++;
			cr_expect(until >= w.t0 + PIN_TTL - 1 && until <= w.t1 + PIN_TTL + 1,
				  "the pin's end, %llu, is its TTL after it was pinned",
				  (unsigned long long)until);
		} else {
			cr_expect_eq(until, 0, "entry %llu: no pin ends here", (unsigned long long)i);
		}
	}
	cr_expect_eq(pin_ends, 1, "one pin, one entry where it ends");
	free(sec);
	written_free(&w);
}

/* An export file is what FORMAT.md says: no header of its own, whole
 * records of the documented version back to back, parents first. */
Test(format, the_export_file_is_the_documented_one, .timeout = 120)
{
	struct written w;
	daemon_writes(&w);
	char *sec = format_section("## The export file");
	size_t off = format_num(sec, "header size");
	uint64_t version = format_num(sec, "record version");
	cr_expect_eq(version, REC_VERSION);
	cr_expect_eq(w.exported, A_BLOCKS + B_BLOCKS);
	uint64_t n = 0;
	uint32_t depth = 0;
	while (off < w.export_len) {
		const uint8_t *r = w.export + off;
		struct rec_meta m;
		const char *why = "";
		struct rec_expect want = { .block_tokens = TD_BLOCK_TOKENS };
		cr_assert_eq(rec_check_head(r, w.export_len - off, &want, &m, &why), 0,
			     "record %llu at byte %zu: %s", (unsigned long long)n, off, why);
		size_t size = rec_size(m.block_tokens, m.payload);
		cr_assert_leq(size, w.export_len - off, "record %llu is cut short", (unsigned long long)n);
		cr_assert_eq(rec_check(r, size, &want, &m, &why), 0, "record %llu: %s",
			     (unsigned long long)n, why);
		cr_expect_eq(le(r + 24, 2), version);
		cr_expect_geq(m.depth, depth, "record %llu: depth %u after %u", (unsigned long long)n,
			      m.depth, depth);
		depth = m.depth;
		off += size;
		n++;
	}
	cr_expect_eq(off, w.export_len, "nothing follows the last record");
	cr_expect_eq(n, w.exported, "%llu records, %llu exported", (unsigned long long)n,
		     (unsigned long long)w.exported);
	free(sec);
	written_free(&w);
}
