/* SPDX-License-Identifier: MIT */
/* The shared namespace's configuration and roles (shared.h). */
#include "shared.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A whole decimal number from 0 to max, or -1. */
static long long number(const char *s, long long max)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	return errno || end == s || *end || v < 0 || v > max ? -1 : v;
}

int shared_group_id(const char *arg, gid_t *gid)
{
	struct group *g = getgrnam(arg);
	long long v = g ? (long long)g->gr_gid : number(arg, INT32_MAX);
	if (v < 0)
		return -1;
	*gid = (gid_t)v;
	return 0;
}

int shared_parse_group(struct shared_cfg *s, const char *arg)
{
	if (shared_group_id(arg, &s->gid))
		return -ENOENT;
	s->on = 1;
	return 0;
}

#define STR_(x) #x
#define STR(x) STR_(x)

int shared_parse_publishers(struct shared_cfg *s, const char *arg, const char **why,
			    const char **at)
{
	*at = NULL;
	char *copy = strdup(arg), *save = NULL;
	if (!copy) {
		*why = "out of memory";
		return -ENOMEM;
	}
	int rc = 0;
	s->npub = 0;
	for (char *t = strtok_r(copy, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save)) {
		struct passwd *pw = getpwnam(t);
		long long v = pw ? (long long)pw->pw_uid : number(t, INT32_MAX);
		if (v < 0) {
			*why = "no user";
			*at = arg + (t - copy);
			rc = -ENOENT;
		} else if (s->npub == SHARED_MAX_PUBLISHERS) {
			*why = "at most " STR(SHARED_MAX_PUBLISHERS) " users";
			rc = -E2BIG;
		} else {
			s->pub[s->npub++] = (uid_t)v;
		}
	}
	if (!rc && !s->npub) {
		*why = "no user given (give uids or user names, separated by commas)";
		rc = -EINVAL;
	}
	free(copy);
	return rc;
}

/* Whether the peer's supplementary groups hold gid. */
static int in_peer_groups(int fd, gid_t gid)
{
	gid_t small[64], *v = small;
	socklen_t len = sizeof(small);
	int found = 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, v, &len)) {
		if (errno != ERANGE || !(v = malloc(len)))
			return 0;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, v, &len))
			len = 0;
	}
	for (size_t i = 0; i < len / sizeof(gid_t) && !found; i++)
		found = v[i] == gid;
	if (v != small)
		free(v);
	return found;
}

enum shared_role shared_role_of(const struct shared_cfg *s, int fd, const struct ucred *cred)
{
	if (!s->on)
		return SHARED_NONE;
	if (cred->uid == 0)
		return SHARED_PUBLISHER;
	for (uint32_t i = 0; i < s->npub; i++)
		if (s->pub[i] == cred->uid)
			return SHARED_PUBLISHER;
	return cred->gid == s->gid || in_peer_groups(fd, s->gid) ? SHARED_MEMBER : SHARED_NONE;
}
