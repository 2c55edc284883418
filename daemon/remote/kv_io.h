/* SPDX-License-Identifier: MIT */
/*
 * Waiting on a node's socket. Replies and SET pipelines move with
 * non-blocking calls and poll(2) between them, so a node is given up when
 * no byte has moved for the timeout: since the round started, or since its
 * last byte. A stall costs the timeout once (socket timeouts would restart
 * after each partial write), and a large transfer that keeps moving is not
 * cut short.
 */
#ifndef PD_REMOTE_KV_IO_H
#define PD_REMOTE_KV_IO_H

#include <stdint.h>

/* Monotonic nanoseconds. */
uint64_t kv_now_ns(void);

/* A node's progress in the current round. */
struct kv_clock {
	uint64_t moved_ns;   /* the round's start, then the last byte moved */
	uint64_t timeout_ns;
};

/* Waits until fd is ready for events (POLLIN, POLLOUT; an error or a hang
 * up counts as ready: the next call says what happened): 0, or -ETIMEDOUT
 * once the clock's timeout has passed since it last moved. */
int kv_wait_fd(int fd, short events, const struct kv_clock *clk);

#endif
