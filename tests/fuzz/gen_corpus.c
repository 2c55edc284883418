/* SPDX-License-Identifier: MIT */
/*
 * Writes the generated seeds of the fuzz corpora: DIR/wire/ (a valid body of
 * every message, through the encoders, and whole frames) and
 * DIR/safetensors/ (small valid files). The config seeds are hand-written
 * (see README.md). Run it as
 *
 *     build/tests/fuzz/gen-corpus tests/fuzz/corpus
 *
 * after a change to the wire format; it overwrites only its own files.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_wire.h"
#include "wire.h"

static const char *root;
static int failed;

static void save(const char *sub, const char *name, const void *a, size_t an, const void *b,
		 size_t bn)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", root, sub);
	if (mkdir(path, 0755) && errno != EEXIST) {
		perror(path);
		failed = 1;
		return;
	}
	snprintf(path, sizeof(path), "%s/%s/%s", root, sub, name);
	FILE *fp = fopen(path, "wb");
	if (!fp || fwrite(a, 1, an, fp) != an || (bn && fwrite(b, 1, bn, fp) != bn) || fclose(fp)) {
		perror(path);
		failed = 1;
	}
}

/* ==== wire/ ==== */

static uint8_t body[1 << 16];

/* A wire seed: the selector, block_tokens, then n bytes of body. */
static void wire(const char *name, enum fw_sel sel, uint32_t block_tokens, size_t n)
{
	uint8_t prefix[FW_PREFIX] = { (uint8_t)sel, (uint8_t)block_tokens, (uint8_t)(block_tokens >> 8),
				      (uint8_t)(block_tokens >> 16), (uint8_t)(block_tokens >> 24) };
	if (!n) {
		fprintf(stderr, "%s: the encoder failed\n", name);
		failed = 1;
	}
	save("wire", name, prefix, sizeof(prefix), body, n);
}

static const uint8_t fp[PD_FP_SIZE] = { 0xf0, 0x0d, 1, 2, 3, [31] = 0xff };

static uint8_t hashes[4 * PD_HASH_SIZE];
static uint8_t tokens[4 * 4 * 4];

/* A stream of frames, built one at a time. */
static uint8_t stream[1 << 16];
static size_t stream_len;

static void frame(uint8_t op, uint8_t flags, uint32_t status, uint32_t opaque, size_t n)
{
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, op, flags, status, opaque, (uint32_t)n };
	pd_hdr_encode(&h, stream + stream_len);
	memcpy(stream + stream_len + PD_HDR_SIZE, body, n);
	stream_len += PD_HDR_SIZE + n;
}

static void gen_wire(void)
{
	for (size_t i = 0; i < sizeof(hashes); i++)
		hashes[i] = (uint8_t)(i * 7 + 1);
	for (size_t i = 0; i < sizeof(tokens); i += 4)
		tokens[i] = (uint8_t)(i / 4 + 100);

	/* Headers: a request and an error reply. */
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_MATCH, 0, 0, 42, 132 };
	pd_hdr_encode(&h, body);
	wire("hdr-match", FW_HDR, 0, PD_HDR_SIZE);
	h = (struct pd_hdr){ PD_MAGIC, PD_VERSION, PD_OP_RELEASE, PD_FLAG_REPLY, PD_E_NOTFOUND, 9, 13 };
	pd_hdr_encode(&h, body);
	wire("hdr-reply-notfound", FW_HDR, 0, PD_HDR_SIZE);

	struct pd_hello hello = { 1, PD_VERSION, 4, 4096, 1, fp, 5, (const uint8_t *)"salty" };
	wire("hello-salt", FW_HELLO, 0, pd_hello_encode(&hello, body, sizeof(body)));
	hello.salt_len = 0;
	hello.block_tokens = 64;
	wire("hello", FW_HELLO, 0, pd_hello_encode(&hello, body, sizeof(body)));
	struct pd_hello_reply hello_reply = { PD_VERSION, PD_MAX_HASHES, 1 << 30, 1 << 28, 1 << 20 };
	wire("hello-reply", FW_HELLO_REPLY, 0,
	     pd_hello_reply_encode(&hello_reply, body, sizeof(body)));

	struct pd_match match = { 2, hashes, tokens };
	wire("match", FW_MATCH, 4, pd_match_encode(&match, 4, body, sizeof(body)));
	match.count = 0;
	wire("match-empty", FW_MATCH, 16, pd_match_encode(&match, 16, body, sizeof(body)));
	struct pd_place places[2] = { { .arena = 1, .offset = 0 }, { .arena = 1, .flags = PD_PLACE_FROM_DISK, .offset = 4096 } };
	struct pd_arena_desc arenas[1] = { { 1, 1 << 20 } };
	wire("match-reply", FW_MATCH_REPLY, 0,
	     pd_match_reply_encode(77, 2, places, 1, arenas, body, sizeof(body)));
	wire("match-reply-miss", FW_MATCH_REPLY, 0,
	     pd_match_reply_encode(0, 0, NULL, 0, NULL, body, sizeof(body)));
	struct pd_release release = { 77 };
	wire("release", FW_RELEASE, 0, pd_release_encode(&release, body, sizeof(body)));

	struct pd_publish publish = { 77, 2, hashes + 2 * PD_HASH_SIZE, tokens + 32 };
	wire("publish", FW_PUBLISH, 4, pd_publish_encode(&publish, 4, body, sizeof(body)));
	struct pd_publish_reply publish_reply = { 1, 0, PD_STOP_COLLISION, 0 };
	wire("publish-reply", FW_PUBLISH_REPLY, 0,
	     pd_publish_reply_encode(&publish_reply, false, body, sizeof(body)));
	struct pd_publish_reply leased_reply = { 2, 1, PD_STOP_NONE, 78 };
	wire("publish-reply-leased", FW_PUBLISH_REPLY, 0,
	     pd_publish_reply_encode(&leased_reply, true, body, sizeof(body)));

	uint64_t v[PD_STATS_COUNT];
	for (int i = 0; i < PD_STATS_COUNT; i++)
		v[i] = (uint64_t)i * 1000 + 1;
	struct pd_usage usage[2] = {
		{ 1000, { 1 }, 4, 16384, 0, 3, 12, 40, 0 },
		{ 1001, { 2 }, 1, 4096, 4096, 0, 0, 8, 1 },
	};
	size_t n = pd_stats_reply_encode(v, usage, 2, body, sizeof(body));
	wire("stats-reply", FW_STATS_REPLY, 0, n);
	/* An older daemon's reply: 3 counters, no rows. */
	n = pd_stats_reply_encode(v, NULL, 0, body, sizeof(body));
	body[0] = 3;
	wire("stats-reply-old", FW_STATS_REPLY, 0, 8 + 3 * 8);
	/* A newer daemon's reply: two counters more than this side knows. */
	memset(body + n, 0xab, 16);
	body[0] = PD_STATS_COUNT + 2;
	wire("stats-reply-new", FW_STATS_REPLY, 0, n + 16);

	struct pd_list list = { 0, 100, PD_LIST_USER | PD_LIST_MODEL, 1000, { 0 } };
	memcpy(list.fp, fp, PD_FP_SIZE);
	wire("list", FW_LIST, 0, pd_list_encode(&list, body, sizeof(body)));
	struct pd_chain_row rows[2] = {
		{ { { 9, 9, 9 }, 1000 }, { 1 }, 3, 12, 1, 5, PD_CHAIN_MEMORY, 0, 12288, 2 },
		{ { { 8, 8, 8 }, 1001 }, { 2 }, 1, 4, 0, 60, PD_CHAIN_PINNED | PD_CHAIN_MEMORY, 3600,
		  4096, 0 },
	};
	wire("list-reply", FW_LIST_REPLY, 0, pd_list_reply_encode(5, rows, 2, body, sizeof(body)));

	struct pd_evict evict = { PD_EVICT_ALL, 0, 0, { 0 } };
	wire("evict-all", FW_EVICT, 0, pd_evict_encode(&evict, body, sizeof(body)));
	evict = (struct pd_evict){ PD_EVICT_ID, 1000, 0, { 9, 9, 9 } };
	wire("evict-id", FW_EVICT, 0, pd_evict_encode(&evict, body, sizeof(body)));
	evict = (struct pd_evict){ PD_EVICT_IDLE, 0, 300, { 0 } };
	wire("evict-idle", FW_EVICT, 0, pd_evict_encode(&evict, body, sizeof(body)));
	struct pd_evict_reply evict_reply = { 4, 16384, 1, 2, 0 };
	wire("evict-reply", FW_EVICT_REPLY, 0,
	     pd_evict_reply_encode(&evict_reply, body, sizeof(body)));

	struct pd_pin pin = { { { 9, 9, 9 }, 1000 }, 3600 };
	wire("pin", FW_PIN, 0, pd_pin_encode(&pin, body, sizeof(body)));
	pin.ttl_s = 0;
	wire("unpin", FW_UNPIN, 0, pd_pin_encode(&pin, body, sizeof(body)));
	struct pd_pin_reply pin_reply = { 12288, 1 << 20 };
	wire("pin-reply", FW_PIN_REPLY, 0, pd_pin_reply_encode(&pin_reply, body, sizeof(body)));

	struct pd_export ex = { PD_EXPORT_USER | PD_EXPORT_ID, 1000, { 1 }, { { 9, 9, 9 }, 1000 } };
	wire("export", FW_EXPORT, 0, pd_export_encode(&ex, body, sizeof(body)));
	struct pd_export_reply ex_reply = { 12, 12 * 12288 };
	wire("export-reply", FW_EXPORT_REPLY, 0,
	     pd_export_reply_encode(&ex_reply, body, sizeof(body)));
	struct pd_import im = { PD_IMPORT_USER, 4242 };
	wire("import", FW_IMPORT, 0, pd_import_encode(&im, body, sizeof(body)));
	struct pd_import_reply im_reply = { 10, 1, 1, 0, 10 * 8192 };
	wire("import-reply", FW_IMPORT_REPLY, 0,
	     pd_import_reply_encode(&im_reply, body, sizeof(body)));

	/* Single flight: a MATCH body after its 8 bytes; a reply before them. */
	struct pd_flight fl = { 2500, PD_FLIGHT_CLAIM };
	n = pd_flight_encode(&fl, body, sizeof(body));
	n += pd_match_encode(&match, 4, body + n, sizeof(body) - n);
	wire("flight", FW_FLIGHT, 4, n);
	struct pd_flight_reply fr = { PD_FLIGHT_WAITED, 1234 };
	n = pd_match_reply_encode(77, 2, places, 1, arenas, body, sizeof(body));
	n += pd_flight_reply_encode(&fr, body + n, sizeof(body) - n);
	wire("flight-reply", FW_FLIGHT_REPLY, 0, n);

	wire("error", FW_ERROR, 0,
	     pd_error_encode(pd_status_str(PD_E_NOSPACE), body, sizeof(body)));
	n = pd_error_encode("a NUL here", body, sizeof(body));
	body[4 + 5] = 0;
	wire("error-nul", FW_ERROR, 0, n);

	/* A client's side of a conversation: HELLO (4 tokens a block), MATCH,
	 * PUBLISH, RELEASE, STATS, LIST, EVICT, PIN, UNPIN. */
	hello.block_tokens = 4;
	frame(PD_OP_HELLO, 0, 0, 1, pd_hello_encode(&hello, body, sizeof(body)));
	match.count = 2;
	frame(PD_OP_MATCH, 0, 0, 2, pd_match_encode(&match, 4, body, sizeof(body)));
	n = pd_flight_encode(&fl, body, sizeof(body));
	frame(PD_OP_MATCH, PD_FLAG_FLIGHT, 0, 10,
	      n + pd_match_encode(&match, 4, body + n, sizeof(body) - n));
	frame(PD_OP_PUBLISH, PD_FLAG_LEASE, 0, 3, pd_publish_encode(&publish, 4, body, sizeof(body)));
	frame(PD_OP_RELEASE, PD_FLAG_NOREPLY, 0, 4, pd_release_encode(&release, body, sizeof(body)));
	frame(PD_OP_STATS, 0, 0, 5, 0);
	frame(PD_OP_LIST, 0, 0, 6, pd_list_encode(&list, body, sizeof(body)));
	frame(PD_OP_EVICT, 0, 0, 7, pd_evict_encode(&evict, body, sizeof(body)));
	frame(PD_OP_PIN, 0, 0, 8, pd_pin_encode(&pin, body, sizeof(body)));
	frame(PD_OP_UNPIN, 0, 0, 9, pd_pin_encode(&pin, body, sizeof(body)));
	memcpy(body, stream, stream_len);
	wire("frames-client", FW_FRAME, 0, stream_len);

	/* prefixd's side: a reply to each, one of them an error. */
	stream_len = 0;
	frame(PD_OP_HELLO, PD_FLAG_REPLY, 0, 1, pd_hello_reply_encode(&hello_reply, body, sizeof(body)));
	frame(PD_OP_MATCH, PD_FLAG_REPLY, 0, 2,
	      pd_match_reply_encode(77, 2, places, 1, arenas, body, sizeof(body)));
	n = pd_match_reply_encode(77, 2, places, 1, arenas, body, sizeof(body));
	frame(PD_OP_MATCH, PD_FLAG_REPLY | PD_FLAG_FLIGHT, 0, 10,
	      n + pd_flight_reply_encode(&fr, body + n, sizeof(body) - n));
	frame(PD_OP_PUBLISH, PD_FLAG_REPLY, 0, 3,
	      pd_publish_reply_encode(&publish_reply, false, body, sizeof(body)));
	frame(PD_OP_STATS, PD_FLAG_REPLY, 0, 5, pd_stats_reply_encode(v, usage, 1, body, sizeof(body)));
	frame(PD_OP_LIST, PD_FLAG_REPLY, 0, 6, pd_list_reply_encode(0, rows, 1, body, sizeof(body)));
	frame(PD_OP_EVICT, PD_FLAG_REPLY, 0, 7, pd_evict_reply_encode(&evict_reply, body, sizeof(body)));
	frame(PD_OP_PIN, PD_FLAG_REPLY, PD_E_DENIED, 8,
	      pd_error_encode(pd_status_str(PD_E_DENIED), body, sizeof(body)));
	frame(PD_OP_UNPIN, PD_FLAG_REPLY, 0, 9, 0);
	memcpy(body, stream, stream_len);
	wire("frames-daemon", FW_FRAME, 0, stream_len);
}

/* ==== safetensors/ ==== */

/* A safetensors file: header padded with spaces to a multiple of 8 (as the
 * reference writer does), then data bytes 0, 1, 2, ... */
static void safetensors(const char *name, const char *header, size_t data_len)
{
	static uint8_t file[1 << 16];
	size_t hlen = strlen(header), padded = (hlen + 7) / 8 * 8;
	for (int i = 0; i < 8; i++)
		file[i] = (uint8_t)(padded >> (8 * i));
	memcpy(file + 8, header, hlen);
	memset(file + 8 + hlen, ' ', padded - hlen);
	for (size_t i = 0; i < data_len; i++)
		file[8 + padded + i] = (uint8_t)i;
	save("safetensors", name, file, 8 + padded + data_len, NULL, 0);
}

static void gen_safetensors(void)
{
	safetensors("empty", "{}", 0);
	safetensors("metadata-only", "{\"__metadata__\":{\"format\":\"pt\"}}", 0);
	safetensors("f32-vector", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
	safetensors("mixed",
		    "{\"__metadata__\":{\"format\":\"pt\"},"
		    "\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
		    "\"scalar\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[12,20]},"
		    "\"quant\":{\"dtype\":\"Q4_0\",\"shape\":[3],\"data_offsets\":[20,25]},"
		    "\"empty\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[25,25]}}",
		    25);
	safetensors("all-dtypes",
		    "{\"a\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]},"
		    "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
		    "\"c\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[2,3]},"
		    "\"d\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[3,4]},"
		    "\"e\":{\"dtype\":\"F8_E5M2\",\"shape\":[1],\"data_offsets\":[4,5]},"
		    "\"f\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[5,7]},"
		    "\"g\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[7,9]},"
		    "\"h\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[9,11]},"
		    "\"i\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[11,13]},"
		    "\"j\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[13,17]},"
		    "\"k\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[17,21]},"
		    "\"l\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[21,25]},"
		    "\"m\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[25,33]},"
		    "\"n\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[33,41]},"
		    "\"o\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[41,49]}}",
		    49);
	safetensors("eight-dims",
		    "{\"x\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,2,3],\"data_offsets\":[0,6]}}", 6);
	/* Listed out of offset order, as writers that sort by name do. */
	safetensors("unordered",
		    "{\"v\":{\"dtype\":\"I32\",\"shape\":[1,2],\"data_offsets\":[32,40]},"
		    "\"q\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
		    "\"k\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}",
		    40);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
		return 2;
	}
	root = argv[1];
	if (mkdir(root, 0755) && errno != EEXIST) {
		perror(root);
		return 1;
	}
	gen_wire();
	gen_safetensors();
	return failed;
}
