/* SPDX-License-Identifier: MIT */
/*
 * prefixctl's parts: the command line (prefixctl.c) parses every option
 * into one struct ctl_args, and each command (prefixctl_chains.c,
 * prefixctl_stats.c, prefixctl_transfer.c) runs from it with the shared
 * helpers of prefixctl_util.c. Commands return the exit status.
 */
#ifndef PREFIXCTL_H
#define PREFIXCTL_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "prefixd.h"

enum { CTL_OK = 0, CTL_FAILED = 1, CTL_USAGE = 2 }; /* exit statuses */

/* Options, one bit each: a command lists the ones it takes. */
enum ctl_opt {
	O_JSON = 1 << 0, O_SORT = 1 << 1, O_LIMIT = 1 << 2, O_USER = 1 << 3,
	O_MODEL = 1 << 4, O_ALL = 1 << 5, O_ID = 1 << 6, O_IDLE = 1 << 7,
	O_TTL = 1 << 8, O_PROMETHEUS = 1 << 9, O_WATCH = 1 << 10,
};

enum ctl_sort { SORT_BYTES, SORT_HITS, SORT_IDLE, SORT_TOKENS };

struct ctl_args;

/* One command: what it takes and its help. */
struct ctl_command {
	const char *name;
	int (*run)(const struct ctl_args *a);
	unsigned allowed, required; /* enum ctl_opt bits */
	const char *operand;        /* its one positional argument (pin, unpin, export,
				     * import), or NULL */
	const char *synopsis;       /* its usage line after "prefixctl " */
	const char *summary;        /* one line for prefixctl --help */
	const char *help;           /* the rest of prefixctl COMMAND --help */
};

struct ctl_args {
	const struct ctl_command *cmd;
	const char *socket;     /* NULL: libprefixd's default */
	unsigned seen;          /* enum ctl_opt bits given */
	const char *arg;        /* the positional argument (pin, unpin: the id;
				 * export, import: the file) */
	int json, prometheus;
	enum ctl_sort sort;
	uint64_t limit, idle_s;
	uint32_t user, ttl_s, watch_s;
	const char *model;      /* a fingerprint (ls, evict, export) */
	const char *id;
};

int cmd_ls(const struct ctl_args *a);
int cmd_evict(const struct ctl_args *a);
int cmd_pin(const struct ctl_args *a);
int cmd_unpin(const struct ctl_args *a);
int cmd_stats(const struct ctl_args *a);
int cmd_info(const struct ctl_args *a);
int cmd_export(const struct ctl_args *a);
int cmd_import(const struct ctl_args *a);

/* ---- prefixctl_util.c ---- */

/* "prefixctl: <why>" and the command's --help hint on stderr; CTL_USAGE. */
__attribute__((format(printf, 2, 3))) int ctl_usage(const struct ctl_args *a, const char *fmt,
						     ...);
/* "prefixctl: <why>" on stderr; CTL_FAILED. */
__attribute__((format(printf, 1, 2))) int ctl_fail(const char *fmt, ...);
/* ctl_fail() with the reason of libprefixd's last failed call. */
int ctl_daemon_fail(void);
/* An allocation that cannot fail: a command line has nothing better to do
 * than to say so and stop. */
void *ctl_alloc(size_t n, size_t size);

/* Connects without a layout (the admin calls); CTL_FAILED after saying why. */
int ctl_connect(const struct ctl_args *a, struct prefixd **c);

#define CTL_TEXT 48 /* room for any one formatted value below */
/* "512 B", "96.0 KiB", "1.5 MiB": binary units, one decimal. */
const char *fmt_bytes(uint64_t bytes, char buf[CTL_TEXT]);
/* "42s", "5m", "2h", "3d": the largest whole unit. */
const char *fmt_duration(uint64_t s, char buf[CTL_TEXT]);
/* Lowercase hex of n bytes into out (2n + 1 chars). */
void hex_encode(const uint8_t *b, size_t n, char *out);
/* Exactly 2n hex digits (either case) into n bytes; -1 if not. */
int hex_decode(const char *s, uint8_t *out, size_t n);
/* The model and id columns: the first chars of the hex. */
#define CTL_SHORT_MODEL 8
#define CTL_SHORT_ID 12
/* "memory", "disk", "both" for enum prefixd_where, "+remote" after them
 * for a chain also in the remote tier. */
const char *where_name(unsigned where);

/* Prints a JSON value (pretty, slashes as they are) and frees it. */
void ctl_print_json(json_object *o);
/* o[key] = v. */
void ctl_json_u64(json_object *o, const char *key, uint64_t v);
void ctl_json_str(json_object *o, const char *key, const char *v);

/* Whether text can name an id or a fingerprint of full_len hex digits:
 * all of it, or a prefix of at least CTL_MIN_PREFIX digits. CTL_USAGE
 * (after saying why, naming the flag) when not. */
#define CTL_MIN_PREFIX 8
int ctl_check_hex(const struct ctl_args *a, const char *flag, const char *text, size_t full_len);
/* The cached chain an id or a prefix of one names; CTL_FAILED after saying
 * why when none or several do. */
int ctl_resolve_id(struct prefixd *c, const char *text, struct prefixd_id *out);
/* The fingerprint a prefix names among the models of the cached chains:
 * 0, with *found 0 when no cached chain has such a model; CTL_FAILED
 * (after saying why) when several models do or the daemon fails. */
int ctl_resolve_model(struct prefixd *c, const char *text, uint8_t out[PREFIXD_FINGERPRINT_BYTES],
		      int *found);

/* An aligned text table: a header line, then rows of cells. */
struct ctl_table {
	size_t ncols, nrows, cap;
	const char *const *head; /* column titles */
	const char *align;       /* per column: 'l' text, 'r' numbers */
	char (*cells)[CTL_TEXT];
};
/* The ncols cells of a new row, to write into. */
char (*ctl_table_row(struct ctl_table *t))[CTL_TEXT];
void ctl_table_print(const struct ctl_table *t);
void ctl_table_free(struct ctl_table *t);

#endif
