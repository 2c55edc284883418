/* SPDX-License-Identifier: MIT */
/*
 * The replies of a pipeline of GET, SET and ASKING, read off a node's
 * socket into a buffer of the node's, without hiredis's reader. hiredis
 * 0.14 reads 16 KiB at a time into its own buffer and copies each value
 * out again: 0.6-0.8 GB/s for half-megabyte values on loopback, against
 * about 2 GB/s when the socket is read in large pieces straight into the
 * buffer the values are handed out from. hiredis still connects, sends
 * the commands and reads everything else (AUTH, SELECT, CLUSTER SLOTS).
 */
#ifndef PD_REMOTE_KV_RESP_H
#define PD_REMOTE_KV_RESP_H

#include <stddef.h>

#include "kv_io.h"

/* What a call read from one node; replies are kept until the next call. */
struct kv_rbuf {
	char *buf;
	size_t cap;
	size_t end; /* bytes read */
	size_t pos; /* bytes parsed */
};

enum kv_resp_type { KV_RESP_STATUS, KV_RESP_ERROR, KV_RESP_BULK, KV_RESP_NIL };

/* A reply: its text (status, error) or value (bulk) at buf + off. */
struct kv_resp {
	enum kv_resp_type type;
	size_t off, len;
};

/* Forgets what was read, for a new call (a large buffer is let go). */
void kv_rbuf_reset(struct kv_rbuf *b);
void kv_rbuf_free(struct kv_rbuf *b);
/* Lets go of the bytes parsed so far (the caller is done with every
 * reply read): what was read past them moves to the front, and the room
 * is read into again, so that a stream of large values the caller takes
 * one by one holds one or two of them, in pages already touched. */
void kv_rbuf_compact(struct kv_rbuf *b);
/* Reads from fd until the next whole reply is in b: 0, or -ETIMEDOUT (no
 * byte for the clock's timeout; clk->moved_ns is updated as bytes come),
 * -ECONNREFUSED (closed, reset), -EPROTO (not a reply these commands get:
 * the connection cannot be trusted any more), -ENOMEM. */
int kv_resp_next(struct kv_rbuf *b, int fd, struct kv_clock *clk, struct kv_resp *r);

#endif
