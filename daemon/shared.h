/* SPDX-License-Identifier: MIT */
/*
 * The shared namespace (prefixd --shared-group, --shared-publishers): one
 * namespace that members of a group attach by choice (a HELLO with the
 * SHARED flag) and that only the listed publishers and root write, so that
 * no member can poison what the others attach. Its chains are filed under
 * PREFIXD_SHARED_USER, a uid nobody has.
 */
#ifndef PD_SHARED_H
#define PD_SHARED_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "prefixd_proto.h"

#define PD_NS_SHARED PREFIXD_SHARED_USER
#define SHARED_MAX_PUBLISHERS 64

struct shared_cfg {
	int on;                 /* --shared-group given */
	gid_t gid;
	uint32_t npub;
	uid_t pub[SHARED_MAX_PUBLISHERS];
};

/* What a peer may do with the shared namespace. */
enum shared_role {
	SHARED_UNKNOWN = 0,     /* not looked up yet */
	SHARED_NONE,            /* neither a member nor a publisher */
	SHARED_MEMBER,          /* may attach */
	SHARED_PUBLISHER,       /* may attach and publish (root too) */
};

/* A group's id from its name or its number (0 to INT32_MAX): --group's
 * and --shared-group's. 0, or -1 when there is no such group. */
int shared_group_id(const char *arg, gid_t *gid);

/* --shared-group GROUP (a name or a gid): 0, or -ENOENT when there is no
 * such group. */
int shared_parse_group(struct shared_cfg *s, const char *arg);
/* --shared-publishers UID[,UID...] (uids or user names): 0, or -errno and
 * *why; *at is then the name it stopped at, within arg up to its comma
 * (NULL: none). */
int shared_parse_publishers(struct shared_cfg *s, const char *arg, const char **why,
			    const char **at);

/* The role of the peer on fd with credentials cred: membership is its
 * primary group or one of its supplementary groups (SO_PEERGROUPS, as
 * they were when it connected). */
enum shared_role shared_role_of(const struct shared_cfg *s, int fd, const struct ucred *cred);

#endif
