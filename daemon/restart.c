/* SPDX-License-Identifier: MIT */
/*
 * Warm restart (restart.h): a scan of the directory, every head read and
 * checked, then the blocks loaded parents first (by depth), each into the
 * group and partition its HELLO would have made.
 */
#include "restart.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chain.h"
#include "groups.h"
#include "record.h"

struct found {
	struct idx_block b;
	uint64_t payload;
	uint32_t *tokens;
};

static bool has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n > k && !strcmp(s + n - k, suf);
}

/* Reads and checks one record's head: 0, -EBADMSG (damaged or not what
 * its name says), -EACCES (another block size) or -errno. */
static int read_one(int dirfd, const char *name, uint32_t bt, uint8_t *head, size_t head_bytes,
		    struct found *f, const char **why)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = 0;
	ssize_t r = fstat(fd, &st) ? -1 : pread(fd, head, head_bytes, 0);
	if (r < 0)
		rc = -errno;
	close(fd);
	if (rc)
		return rc;
	struct rec_meta m;
	struct rec_expect want = { .block_tokens = bt };
	if ((size_t)r != head_bytes) {
		*why = "it is shorter than a record's head";
		return -EBADMSG;
	}
	if ((rc = rec_check_head(head, head_bytes, &want, &m, why)))
		return rc == -ENOTSUP ? -EBADMSG : rc;
	if ((uint64_t)st.st_size != rec_size(bt, m.payload)) {
		*why = "its size is not its record's (cut short, or grown)";
		return -EBADMSG;
	}
	if (m.payload % ((uint64_t)bt * 4)) {
		*why = "its payload is not a whole number of f32 values per token";
		return -EBADMSG;
	}
	char own[TIER_NAME_MAX];
	tier_name(m.ns, m.hash, ".rec", own);
	if (strcmp(own, name)) {
		*why = "it is filed under another block's name";
		return -EBADMSG;
	}
	if (!(f->tokens = malloc(bt * sizeof(uint32_t))))
		return -ENOMEM;
	for (uint32_t i = 0; i < bt; i++)
		f->tokens[i] = pd_token_at(m.tokens, bt, 0, i);
	uint8_t h[PD_HASH_SIZE];
	pd_chain_next(m.depth ? m.parent : m.root, f->tokens, bt, h);
	if (memcmp(h, m.hash, PD_HASH_SIZE)) {
		free(f->tokens);
		f->tokens = NULL;
		*why = "its hash does not follow its chain";
		return -EBADMSG;
	}
	f->b = (struct idx_block){ .ns = m.ns, .depth = m.depth, .tokens = f->tokens,
				   .sum = m.payload_sum };
	memcpy(f->b.hash, m.hash, PD_HASH_SIZE);
	memcpy(f->b.parent, m.parent, PD_HASH_SIZE);
	memcpy(f->b.h0, m.root, PD_HASH_SIZE);
	memcpy(f->b.fp, m.fp, PD_FP_SIZE);
	f->payload = m.payload;
	return 0;
}

static int by_depth(const void *a, const void *b)
{
	const struct found *x = a, *y = b;
	return (x->b.depth > y->b.depth) - (x->b.depth < y->b.depth);
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

int restart_load(struct daemon *d, struct pd_tier *t, struct restart_report *r)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	memset(r, 0, sizeof(*r));
	int dirfd = tier_dirfd(t), fd = dup(dirfd);
	DIR *dir = fd < 0 ? NULL : fdopendir(fd);
	if (!dir) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return -e;
	}
	uint32_t bt = d->block_tokens;
	size_t head_bytes = rec_head_size(bt);
	uint8_t *head = malloc(head_bytes);
	struct found *fs = NULL;
	size_t n = 0, cap = 0;
	int rc = head ? 0 : -ENOMEM;
	struct dirent *de;
	while (!rc && (de = readdir(dir))) {
		const char *name = de->d_name;
		if (has_suffix(name, ".tmp")) {
			/* A write the stop cut short: never renamed, never seen. */
			unlinkat(dirfd, name, 0);
			r->torn++;
			continue;
		}
		if (!has_suffix(name, ".rec"))
			continue;
		r->records++;
		if (n == cap) {
			size_t c = cap ? 2 * cap : 256;
			struct found *m = realloc(fs, c * sizeof(*m));
			if (!m) {
				rc = -ENOMEM;
				break;
			}
			fs = m;
			cap = c;
		}
		const char *why = NULL;
		int e = read_one(dirfd, name, bt, head, head_bytes, &fs[n], &why);
		if (!e) {
			n++;
			continue;
		}
		if (e == -ENOMEM) {
			rc = e;
			break;
		}
		if (e == -EACCES) {
			pd_log("disk tier: %s: a record of another block size (this daemon's blocks have %u tokens): deleted",
			       name, bt);
			r->dropped++;
		} else {
			pd_log("disk tier: %s: %s: deleted", name, why ? why : strerror(-e));
			r->corrupt++;
		}
		unlinkat(dirfd, name, 0);
	}
	closedir(dir);
	free(head);
	qsort(fs, n, sizeof(*fs), by_depth);
	struct group_set gs = { 0 };
	for (size_t i = 0; i < n; i++) {
		struct found *f = &fs[i];
		int e = 0;
		struct idx_group *g = rc ? NULL : group_set_get(&gs, d, f->b.ns, f->b.h0, f->b.fp,
								 f->payload, NULL, &e);
		if (g)
			e = idx_load(d->idx, g, &f->b);
		if (!e) {
			r->loaded++;
			r->bytes += rec_size(bt, f->payload);
		} else if (!rc) {
			char name[TIER_NAME_MAX];
			tier_name(f->b.ns, f->b.hash, ".rec", name);
			unlinkat(dirfd, name, 0);
			r->dropped++;
			static const char *const reason[] = { "its parent is not there",
							      "the disk budget is full",
							      "no partition is left for its user and block size" };
			pd_log("disk tier: %s: %s: deleted", name,
			       e == -ENOENT || e == -EEXIST ? reason[0]
			       : e == -ENOSPC && g ? reason[1]
			       : e == -EUSERS || e == -EMFILE ? reason[2] : strerror(-e));
		}
		free(f->tokens);
	}
	free(fs);
	group_set_release(&gs, d);
	idx_count_corrupt(d->idx, r->corrupt);
	r->ms = ms_since(&t0);
	return rc;
}
