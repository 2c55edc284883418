/* SPDX-License-Identifier: MIT */
/*
 * A pipeline of commands written with writev(2), values referred to where
 * they are rather than copied: hiredis 0.14 formats each argument into a
 * new string and appends that to its output buffer, two copies of every
 * value a SET sends (and its buffer's growth). Used for SET; GET's small
 * commands go through hiredis.
 */
#ifndef PD_REMOTE_KV_SEND_H
#define PD_REMOTE_KV_SEND_H

#include <stddef.h>

#include "kv_io.h"

#define KV_SEND_SEGS 256

struct kv_send {
	int fd;
	struct kv_clock *clk;
	char *copy; /* small pieces, copied */
	size_t copy_len, copy_cap;
	struct kv_seg {
		const void *p; /* NULL: in copy at off */
		size_t off, len;
	} seg[KV_SEND_SEGS];
	int n_seg;
	int rc; /* the first error; later pieces are dropped */
};

void kv_send_init(struct kv_send *s, int fd, struct kv_clock *clk);
/* A command's argument count ("*N\r\n") and one argument ("$len\r\n...\r\n"). */
void kv_send_array(struct kv_send *s, unsigned n);
void kv_send_arg(struct kv_send *s, const void *p, size_t len);
/* Writes what is left: 0, or -ETIMEDOUT (no byte taken for the clock's
 * timeout), -ECONNREFUSED (the node is gone), -ENOMEM. Frees s's memory. */
int kv_send_finish(struct kv_send *s);

#endif
