/* SPDX-License-Identifier: MIT */
/*
 * A message buffer reused from one request to the next, by the daemon and
 * by libprefixd: a fresh allocation per MATCH of 8192 tokens faulted in and
 * zeroed ~10 pages on each side (bench/share's attach). Once a message
 * needed more than PD_BUF_KEEP bytes the buffer is let go, so an idle
 * connection holds little.
 */
#ifndef PD_BUF_H
#define PD_BUF_H

#include <stddef.h>
#include <stdint.h>

#define PD_BUF_KEEP (128u << 10)

struct pd_buf {
	uint8_t *p;
	size_t cap;
};

/* The buffer, grown to at least n bytes; NULL when out of memory. */
uint8_t *pd_buf_reserve(struct pd_buf *b, size_t n);
/* After a message: frees the buffer if it grew past PD_BUF_KEEP. */
void pd_buf_trim(struct pd_buf *b);
void pd_buf_free(struct pd_buf *b);

#endif
