/* SPDX-License-Identifier: MIT */
#include "buf.h"

#include <stdlib.h>

uint8_t *pd_buf_reserve(struct pd_buf *b, size_t n)
{
	if (n > b->cap) {
		uint8_t *p = realloc(b->p, n);
		if (!p)
			return NULL;
		b->p = p;
		b->cap = n;
	}
	return b->p;
}

void pd_buf_trim(struct pd_buf *b)
{
	if (b->cap > PD_BUF_KEEP)
		pd_buf_free(b);
}

void pd_buf_free(struct pd_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->cap = 0;
}
