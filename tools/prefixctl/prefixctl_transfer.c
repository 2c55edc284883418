/* SPDX-License-Identifier: MIT */
/* prefixctl export and import: prefixes as a file of records, between daemons or machines. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "prefixctl.h"

int cmd_export(const struct ctl_args *a)
{
	if (a->model && ctl_check_hex(a, "--model", a->model, 2 * PREFIXD_FINGERPRINT_BYTES))
		return CTL_USAGE;
	if (a->id && ctl_check_hex(a, "--id", a->id, PREFIXD_ID_CHARS))
		return CTL_USAGE;
	struct prefixd *c;
	if (ctl_connect(a, &c))
		return CTL_FAILED;
	struct prefixd_filter f = { .by_user = !!(a->seen & O_USER), .user = a->user };
	struct prefixd_id id;
	int found = 1, rc = CTL_OK;
	if (a->model) {
		f.by_model = 1;
		rc = ctl_resolve_model(c, a->model, f.model, &found);
		if (!rc && !found)
			rc = ctl_fail("no cached chain has a model whose fingerprint starts with %s",
				      a->model);
	}
	if (!rc && a->id)
		rc = ctl_resolve_id(c, a->id, &id);
	/* Only now the file: a command that fails early leaves nothing behind. */
	int fd = rc ? -1 : open(a->arg, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (!rc && fd < 0)
		rc = ctl_fail("cannot write %s: %s", a->arg, strerror(errno));
	uint64_t blocks, bytes;
	if (!rc && prefixd_export(c, &f, a->id ? &id : NULL, fd, &blocks, &bytes)) {
		rc = ctl_daemon_fail();
		unlink(a->arg); /* half a file is no export */
	}
	if (fd >= 0 && close(fd) && !rc) {
		rc = ctl_fail("writing %s: %s", a->arg, strerror(errno));
		unlink(a->arg);
	}
	prefixd_close(c);
	if (rc)
		return rc;
	char size[CTL_TEXT];
	printf("exported %llu block%s (%s) to %s\n", (unsigned long long)blocks,
	       blocks == 1 ? "" : "s", fmt_bytes(bytes, size), a->arg);
	return CTL_OK;
}

int cmd_import(const struct ctl_args *a)
{
	int fd = open(a->arg, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ctl_fail("cannot read %s: %s", a->arg, strerror(errno));
	struct prefixd *c;
	if (ctl_connect(a, &c)) {
		close(fd);
		return CTL_FAILED;
	}
	struct prefixd_imported r;
	uint32_t user = a->user;
	int rc = prefixd_import(c, fd, a->seen & O_USER ? &user : NULL, &r) ? ctl_daemon_fail()
									       : CTL_OK;
	close(fd);
	prefixd_close(c);
	if (rc)
		return rc;
	char size[CTL_TEXT];
	printf("imported %llu block%s (%s) from %s; %llu already cached, %llu without a parent, %llu refused (memory full of held blocks)\n",
	       (unsigned long long)r.blocks, r.blocks == 1 ? "" : "s", fmt_bytes(r.bytes, size),
	       a->arg, (unsigned long long)r.deduplicated, (unsigned long long)r.skipped,
	       (unsigned long long)r.refused);
	/* A block the file has and the daemon now lacks is a failed import. */
	if (r.skipped || r.refused)
		return ctl_fail("%llu of the file's %llu blocks were not imported: %llu refused (the daemon's memory, or its disk budget, is full of blocks it must keep: give it a --disk-dir or more --memory), %llu without a parent (theirs was refused, or is in neither the file nor the cache)",
				(unsigned long long)(r.skipped + r.refused),
				(unsigned long long)(r.blocks + r.deduplicated + r.skipped + r.refused),
				(unsigned long long)r.refused, (unsigned long long)r.skipped);
	return CTL_OK;
}
