/* SPDX-License-Identifier: MIT */
/*
 * Blocks that arrive without a connection (records found at start,
 * imported ones): the index block a checked record describes, and the
 * partition and group a HELLO of that user, chain root and block size would
 * have made, each made once and held until group_set_release.
 */
#ifndef PD_GROUPS_H
#define PD_GROUPS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "record.h"

struct group_set {
	struct group_held *v;
	size_t n, cap;
};

/* The group, and in *store (if not NULL) its partition's store; or NULL
 * with *err: partitions_get's errors, -ENOMEM, or -EXDEV when the root's
 * group holds blocks of another size (a forged root). */
struct idx_group *group_set_get(struct group_set *s, struct daemon *d, uint32_t ns,
				const uint8_t *h0, const uint8_t *fp, uint64_t block_bytes,
				struct store **store, int *err);
/* Lets every group and partition go (those with blocks stay, held by them). */
void group_set_release(struct group_set *s, struct daemon *d);

/* The block of a record whose head passed its checks (record.h): its
 * payload must be whole f32 values per token and its hash must follow its
 * chain (from its parent's hash, or the root). 0 and *b (b->tokens is
 * tokens, block_tokens ids in host order), or -EBADMSG with *why. */
int groups_record_block(const struct rec_meta *m, uint32_t block_tokens, uint32_t *tokens,
			struct idx_block *b, const char **why);

#endif
