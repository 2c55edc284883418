/* SPDX-License-Identifier: MIT */
/*
 * EXPORT and IMPORT: prefixes moved between daemons or machines as a file
 * of records in the disk tier's format (record.h), parents first. The
 * client opens the file and passes its descriptor, so the file is the
 * client's (its permissions, its path), never a path the daemon opens. An
 * import reads the whole file and checks every record (checksums, the
 * chain's hashes, the block size) before it stores any: a damaged or
 * foreign file is refused whole. Both run in the worker of the request,
 * like an eviction; they are admin commands.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "groups.h"
#include "peer.h"
#include "reaper.h"
#include "record.h"
#include "tier.h"

/* The one descriptor a request carries, a regular file open for reading
 * or writing (a write to a pipe or socket could block the worker), taken
 * into *fd. 0; else the descriptor is closed and the refusal queued: 1,
 * or -1 when the connection must close. */
static int file_arg(struct conn *c, const char *op, bool write, int *fd)
{
	struct stat st;
	int fl = -1;
	const char *why = NULL;
	if (c->nfds != 1 || c->extra_fds)
		return conn_fail(c, PD_E_MALFORMED, "%s carries exactly one descriptor (the file)",
				 op) ? -1 : 1;
	*fd = c->fds[0];
	c->nfds = 0;
	if (fstat(*fd, &st) || !S_ISREG(st.st_mode) || (fl = fcntl(*fd, F_GETFL)) < 0)
		why = "is not a regular file";
	else if (write ? (fl & O_ACCMODE) == O_RDONLY : (fl & O_ACCMODE) == O_WRONLY)
		why = write ? "is not open for writing" : "is not open for reading";
	if (!why)
		return 0;
	reaper_close(*fd, c->cred.uid); /* a socket's close may block */
	return conn_fail(c, PD_E_MALFORMED, "%s: the descriptor %s", op, why) ? -1 : 1;
}

static int write_all(int fd, const void *p, size_t n)
{
	for (const uint8_t *b = p; n;) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_at(int fd, void *p, size_t n, off_t off)
{
	for (uint8_t *b = p; n;) {
		ssize_t r = pread(fd, b, n, off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -ENODATA;
		b += r;
		n -= (size_t)r;
		off += r;
	}
	return 0;
}

/* ==== Export ==== */

/* One block's record, from its slot, or copied from its record on disk. */
static int export_one(struct daemon *d, const struct idx_block *b, int fd, uint8_t *head,
		      uint8_t *buf, const char **why)
{
	uint64_t len = b->store.block_bytes;
	size_t head_bytes = rec_head_size(d->block_tokens), span = rec_payload_span(len);
	if (!b->resident) {
		int rc = tier_read_record(d->tier, b, buf, head_bytes + span, why);
		return rc ? rc : write_all(fd, buf, head_bytes + span);
	}
	const uint8_t *payload = store_slot(b->store.ctx, b->loc);
	struct rec_meta m;
	rec_meta_of(b, d->block_tokens, &m);
	int rc = rec_encode_head(&m, b->tokens, rec_payload_sum(payload, len), head, head_bytes);
	if (rc < 0)
		return rc;
	/* The padding from zeros: a slot's tail past the block is not ours. */
	memset(buf, 0, span);
	memcpy(buf, payload, len);
	if ((rc = write_all(fd, head, head_bytes)))
		return rc;
	return write_all(fd, buf, span);
}

int admin_export(struct conn *c)
{
	struct daemon *d = c->d;
	ADMIT(c, "export");
	struct pd_export m;
	int fd, rc = pd_export_decode(c->body, c->h.body_len, &m);
	if (rc)
		return conn_fail(c, rc, "%s", conn_decode_error(rc));
	if ((rc = file_arg(c, "EXPORT", true, &fd)))
		return rc < 0 ? -1 : 0;
	struct idx_block *bs;
	uint32_t n;
	if ((rc = idx_export_take(d->idx, &m, &bs, &n))) {
		close(fd);
		return rc == -ENOENT ? conn_fail(c, PD_E_NOTFOUND, "no chain with that id is cached")
				     : conn_fail(c, PD_E_INTERNAL, "out of memory");
	}
	struct pd_export_reply r = { 0, 0 };
	size_t head_bytes = rec_head_size(d->block_tokens), most = 0;
	for (uint32_t i = 0; i < n; i++)
		if (rec_payload_span(bs[i].store.block_bytes) > most)
			most = rec_payload_span(bs[i].store.block_bytes);
	uint8_t *head = malloc(head_bytes), *buf = malloc(head_bytes + most + 1);
	const char *why = NULL;
	rc = head && buf ? 0 : -ENOMEM;
	for (uint32_t i = 0; !rc && i < n; i++) {
		if (!(rc = export_one(d, &bs[i], fd, head, buf, &why))) {
			r.blocks++;
			r.bytes += head_bytes + rec_payload_span(bs[i].store.block_bytes);
		}
	}
	free(head);
	free(buf);
	idx_export_done(d->idx, bs, n);
	close(fd);
	if (rc)
		return conn_fail(c, PD_E_INTERNAL, "export stopped after %llu blocks: %s",
				 (unsigned long long)r.blocks,
				 why ? why : rc == -ENOSPC ? "the file's disk is full" : strerror(-rc));
	pd_log("uid %u exported %llu blocks (%llu bytes)", (unsigned)c->cred.uid,
	       (unsigned long long)r.blocks, (unsigned long long)r.bytes);
	uint8_t *b = conn_reply(c, PD_OK, PD_EXPORT_REPLY_SIZE);
	return b && pd_export_reply_encode(&r, b, PD_EXPORT_REPLY_SIZE) == PD_EXPORT_REPLY_SIZE ? 0
												 : -1;
}

/* ==== Import ==== */

struct reader {
	int fd;
	uint32_t bt;
	size_t head_bytes;
	uint8_t *head;
	uint8_t *payload;         /* room for the largest payload span */
	size_t cap;
	uint32_t tokens[PD_MAX_BLOCK_TOKENS];
};

/* Reads and checks the record at *off, moving *off past it: 0, or -errno
 * with *why. */
static int read_record(struct reader *rd, off_t *off, struct rec_meta *m, struct idx_block *b,
		       const char **why)
{
	int rc = read_at(rd->fd, rd->head, rd->head_bytes, *off);
	if (rc) {
		*why = "the file ends inside a record";
		return rc;
	}
	struct rec_expect want = { .block_tokens = rd->bt };
	if ((rc = rec_check_head(rd->head, rd->head_bytes, &want, m, why))) {
		if (rc == -EACCES)
			*why = "its blocks are not of this daemon's size (--block-tokens)";
		return rc;
	}
	size_t span = rec_payload_span(m->payload);
	if (span > rd->cap) {
		uint8_t *p = realloc(rd->payload, span);
		if (!p)
			return -ENOMEM;
		rd->payload = p;
		rd->cap = span;
	}
	if ((rc = read_at(rd->fd, rd->payload, span, *off + (off_t)rd->head_bytes))) {
		*why = "the file ends inside a record";
		return rc;
	}
	if ((rc = rec_check_payload(m, rd->payload, span, why)) ||
	    (rc = groups_record_block(m, rd->bt, rd->tokens, b, why)))
		return rc;
	*off += (off_t)(rd->head_bytes + span);
	return 0;
}

/* Stores the checked records of the file, each in its group. */
static int import_all(struct conn *c, struct reader *rd, off_t size, const struct pd_import *m,
		      struct pd_import_reply *r, const char **why)
{
	struct group_set gs = { 0 };
	struct idx_held held = { 0 };
	int rc = 0;
	for (off_t off = 0; !rc && off < size;) {
		struct rec_meta meta;
		struct idx_block b;
		if ((rc = read_record(rd, &off, &meta, &b, why)))
			break;
		uint32_t ns = b.ns = m->flags & PD_IMPORT_USER ? m->uid : meta.ns;
		struct store *store;
		int err;
		struct idx_group *g = group_set_get(&gs, c->d, ns, meta.root, meta.fp, meta.payload,
						    &store, &err);
		if (!g) {
			/* -EXDEV: its root's blocks are of another size here. */
			if (err == -EXDEV)
				r->skipped++;
			else
				r->refused++;
			continue;
		}
		struct store_copy f = { store, rd->payload, meta.payload };
		bool there;
		err = idx_import(c->d->idx, g, &b, store_fill_copy, &f, &there, &held);
		if (!err && there)
			r->dedup++;
		else if (!err) {
			r->blocks++;
			r->bytes += meta.payload;
		} else if (err == -ENOENT || err == -EEXIST)
			r->skipped++;
		else if (err == -ENOSPC || err == -EDQUOT)
			r->refused++;
		else
			rc = err;
	}
	idx_import_end(c->d->idx, &held);
	group_set_release(&gs, c->d);
	return rc;
}

int admin_import(struct conn *c)
{
	struct daemon *d = c->d;
	ADMIT(c, "import");
	struct pd_import m;
	int fd, rc = pd_import_decode(c->body, c->h.body_len, &m);
	if (rc)
		return conn_fail(c, rc, "%s", conn_decode_error(rc));
	if ((rc = file_arg(c, "IMPORT", false, &fd)))
		return rc < 0 ? -1 : 0;
	struct stat st;
	struct reader rd = { .fd = fd, .bt = d->block_tokens,
			     .head_bytes = rec_head_size(d->block_tokens) };
	rd.head = malloc(rd.head_bytes);
	rc = rd.head && !fstat(fd, &st) ? 0 : -ENOMEM;
	/* Every record checked first: a bad file stores nothing. */
	uint64_t records = 0;
	const char *why = NULL;
	off_t off = 0;
	while (!rc && off < st.st_size) {
		struct rec_meta meta;
		struct idx_block b;
		if (!(rc = read_record(&rd, &off, &meta, &b, &why)))
			records++;
	}
	struct pd_import_reply r = { 0 };
	if (!rc)
		rc = import_all(c, &rd, st.st_size, &m, &r, &why);
	free(rd.head);
	free(rd.payload);
	close(fd);
	if (rc == -ENOMEM)
		return conn_fail(c, PD_E_INTERNAL, "out of memory");
	if (rc)
		return conn_fail(c, PD_E_MALFORMED, "not a file of prefixd records, or a damaged one: record %llu (at byte %lld): %s; nothing was imported",
				 (unsigned long long)records, (long long)off,
				 why ? why : strerror(-rc));
	pd_log("uid %u imported %llu blocks (%llu bytes); %llu there already, %llu without a parent, %llu refused",
	       (unsigned)c->cred.uid, (unsigned long long)r.blocks, (unsigned long long)r.bytes,
	       (unsigned long long)r.dedup, (unsigned long long)r.skipped,
	       (unsigned long long)r.refused);
	uint8_t *b = conn_reply(c, PD_OK, PD_IMPORT_REPLY_SIZE);
	return b && pd_import_reply_encode(&r, b, PD_IMPORT_REPLY_SIZE) == PD_IMPORT_REPLY_SIZE ? 0
												 : -1;
}
