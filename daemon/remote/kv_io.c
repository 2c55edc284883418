/* SPDX-License-Identifier: MIT */
#include "kv_io.h"

#include <errno.h>
#include <poll.h>
#include <time.h>

uint64_t kv_now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int kv_wait_fd(int fd, short events, const struct kv_clock *clk)
{
	uint64_t deadline = clk->moved_ns + clk->timeout_ns;
	for (;;) {
		uint64_t now = kv_now_ns();
		/* Past the deadline, one look without waiting: what is already
		 * there (a node read after a slow one) is still taken. */
		int ms = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
		struct pollfd p = { .fd = fd, .events = events };
		int n = poll(&p, 1, ms);
		if (n > 0)
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 && kv_now_ns() < deadline)
			continue; /* woke early (ms rounding) */
		return -ETIMEDOUT;
	}
}
