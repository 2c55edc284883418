/* SPDX-License-Identifier: MIT */
/*
 * The arena a template and a render allocate from: freed at once, so an
 * error anywhere in a render (which unwinds by longjmp) leaks nothing, and
 * bounded, so a template cannot take more memory than its limit.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

struct chunk {
	struct chunk *next;
	size_t used, cap;
	_Alignas(max_align_t) unsigned char mem[];
};

struct jarena {
	struct chunk *head;
	size_t used, limit;
};

struct jarena *ja_new(size_t limit)
{
	struct jarena *a = calloc(1, sizeof(*a));
	if (a)
		a->limit = limit;
	return a;
}

void ja_free(struct jarena *a)
{
	if (!a)
		return;
	for (struct chunk *c = a->head, *next; c; c = next) {
		next = c->next;
		free(c);
	}
	free(a);
}

size_t ja_used(const struct jarena *a)
{
	return a->used;
}

void *ja_alloc(struct jarena *a, size_t size)
{
	size_t need = (size + 15) & ~(size_t)15;
	if (need < size || need > a->limit - a->used || a->used > a->limit)
		return NULL;
	struct chunk *c = a->head;
	if (!c || c->cap - c->used < need) {
		size_t cap = need > 32768 ? need : 32768;
		c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->used = 0;
		c->cap = cap;
		c->next = a->head;
		a->head = c;
	}
	void *p = c->mem + c->used;
	c->used += need;
	a->used += need;
	memset(p, 0, size);
	return p;
}
