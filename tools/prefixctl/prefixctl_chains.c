/* SPDX-License-Identifier: MIT */
/* prefixctl ls, evict, pin and unpin: the cached chains. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prefixctl.h"

static uint64_t sort_value(const struct prefixd_chain *ch, enum ctl_sort key)
{
	switch (key) {
	case SORT_HITS: return ch->hits;
	case SORT_IDLE: return ch->idle_s;
	case SORT_TOKENS: return ch->tokens;
	case SORT_BYTES: break;
	}
	return ch->bytes;
}

/* Largest first; equal ones by id, so that a listing is repeatable. */
static int by_key(const void *pa, const void *pb, void *pkey)
{
	const struct prefixd_chain *a = pa, *b = pb;
	enum ctl_sort key = *(const enum ctl_sort *)pkey;
	uint64_t va = sort_value(a, key), vb = sort_value(b, key);
	if (va != vb)
		return va < vb ? 1 : -1;
	int c = memcmp(a->id.key, b->id.key, sizeof(a->id.key));
	return c ? c : (a->id.user > b->id.user) - (a->id.user < b->id.user);
}

static json_object *chain_json(const struct prefixd_chain *ch)
{
	char id[PREFIXD_ID_CHARS + 1], model[2 * PREFIXD_FINGERPRINT_BYTES + 1];
	prefixd_id_format(&ch->id, id);
	hex_encode(ch->model, sizeof(ch->model), model);
	json_object *o = json_object_new_object();
	ctl_json_str(o, "id", id);
	ctl_json_u64(o, "user", ch->id.user);
	ctl_json_str(o, "namespace", ch->id.user == PREFIXD_SHARED_USER ? "shared" : "user");
	ctl_json_str(o, "model", model);
	ctl_json_u64(o, "tokens", ch->tokens);
	ctl_json_u64(o, "blocks", ch->blocks);
	ctl_json_u64(o, "bytes", ch->bytes);
	ctl_json_u64(o, "hits", ch->hits);
	ctl_json_u64(o, "leases", ch->leases);
	json_object_object_add(o, "pinned", json_object_new_boolean(ch->pinned));
	ctl_json_u64(o, "pin_ttl_s", ch->pinned ? ch->pin_ttl_s : 0);
	ctl_json_u64(o, "idle_s", ch->idle_s);
	ctl_json_str(o, "where", where_name(ch->where));
	return o;
}

static void chain_row(struct ctl_table *t, const struct prefixd_chain *ch)
{
	char id[PREFIXD_ID_CHARS + 1], model[2 * PREFIXD_FINGERPRINT_BYTES + 1], ttl[CTL_TEXT];
	char(*cell)[CTL_TEXT] = ctl_table_row(t);
	prefixd_id_format(&ch->id, id);
	hex_encode(ch->model, sizeof(ch->model), model);
	snprintf(cell[0], CTL_TEXT, "%.*s", CTL_SHORT_ID, id);
	if (ch->id.user == PREFIXD_SHARED_USER)
		snprintf(cell[1], CTL_TEXT, "shared");
	else
		snprintf(cell[1], CTL_TEXT, "%u", ch->id.user);
	snprintf(cell[2], CTL_TEXT, "%.*s", CTL_SHORT_MODEL, model);
	snprintf(cell[3], CTL_TEXT, "%u", ch->tokens);
	snprintf(cell[4], CTL_TEXT, "%u", ch->blocks);
	fmt_bytes(ch->bytes, cell[5]);
	snprintf(cell[6], CTL_TEXT, "%llu", (unsigned long long)ch->hits);
	snprintf(cell[7], CTL_TEXT, "%u", ch->leases);
	if (!ch->pinned)
		snprintf(cell[8], CTL_TEXT, "-");
	else if (ch->pin_ttl_s)
		snprintf(cell[8], CTL_TEXT, "yes (ttl %s)", fmt_duration(ch->pin_ttl_s, ttl));
	else
		snprintf(cell[8], CTL_TEXT, "yes");
	fmt_duration(ch->idle_s, cell[9]);
	snprintf(cell[10], CTL_TEXT, "%s", where_name(ch->where));
}

static void print_chains(const struct prefixd_chain *ch, size_t shown, size_t n, int json)
{
	if (json) {
		json_object *arr = json_object_new_array();
		for (size_t i = 0; i < shown; i++)
			json_object_array_add(arr, chain_json(&ch[i]));
		ctl_print_json(arr);
		return;
	}
	static const char *const head[] = { "ID",     "USER",  "MODEL", "TOKENS", "BLOCKS", "SIZE",
					    "HITS",   "LEASES", "PINNED", "IDLE",  "WHERE" };
	struct ctl_table t = { .ncols = 11, .head = head, .align = "lrlrrrrrlrl" };
	for (size_t i = 0; i < shown; i++)
		chain_row(&t, &ch[i]);
	ctl_table_print(&t);
	ctl_table_free(&t);
	if (shown < n)
		printf("%zu of %zu chains\n", shown, n);
	else
		printf("%zu chain%s\n", n, n == 1 ? "" : "s");
}

int cmd_ls(const struct ctl_args *a)
{
	if (a->model && ctl_check_hex(a, "--model", a->model, 2 * PREFIXD_FINGERPRINT_BYTES))
		return CTL_USAGE;
	struct prefixd *c;
	if (ctl_connect(a, &c))
		return CTL_FAILED;
	struct prefixd_filter f = { .by_user = !!(a->seen & O_USER), .user = a->user };
	struct prefixd_chain *ch = NULL;
	size_t n = 0;
	int found = 1, rc = CTL_OK;
	if (a->model) {
		f.by_model = 1;
		rc = ctl_resolve_model(c, a->model, f.model, &found);
	}
	/* A model that no chain has is a filter that selects nothing. */
	if (!rc && found && prefixd_list(c, &f, &ch, &n))
		rc = ctl_daemon_fail();
	prefixd_close(c);
	if (rc)
		return rc;
	enum ctl_sort key = a->sort;
	if (n) /* ch is NULL when nothing is cached */
		qsort_r(ch, n, sizeof(*ch), by_key, &key);
	print_chains(ch, a->limit && a->limit < n ? (size_t)a->limit : n, n, a->json);
	free(ch);
	return CTL_OK;
}

#define EVICT_SELECTORS (O_ALL | O_ID | O_MODEL | O_USER | O_IDLE)

/* The selector the options name; ids and fingerprints may be prefixes,
 * looked up on c. */
static int evict_selector(const struct ctl_args *a, struct prefixd *c, struct prefixd_evict_sel *sel)
{
	int found = 1;
	switch (a->seen & EVICT_SELECTORS) {
	case O_ALL:
		sel->by = PREFIXD_EVICT_ALL;
		return CTL_OK;
	case O_USER:
		sel->by = PREFIXD_EVICT_USER;
		sel->user = a->user;
		return CTL_OK;
	case O_IDLE:
		sel->by = PREFIXD_EVICT_IDLE;
		sel->idle_s = a->idle_s;
		return CTL_OK;
	case O_ID:
		sel->by = PREFIXD_EVICT_ID;
		return ctl_resolve_id(c, a->id, &sel->id);
	default: /* O_MODEL: cmd_evict let exactly one selector through */
		sel->by = PREFIXD_EVICT_MODEL;
		if (ctl_resolve_model(c, a->model, sel->model, &found))
			return CTL_FAILED;
		/* Unlike ls, nothing to evict is worth saying: likely a typo. */
		return found ? CTL_OK
			     : ctl_fail("no cached chain is of a model whose fingerprint starts with '%s'",
					a->model);
	}
}

static void print_evicted(const struct prefixd_evicted *e, int json)
{
	if (json) {
		json_object *o = json_object_new_object();
		ctl_json_u64(o, "evicted_blocks", e->blocks);
		ctl_json_u64(o, "evicted_bytes", e->bytes);
		ctl_json_u64(o, "kept_leased", e->kept_leased);
		ctl_json_u64(o, "kept_pinned", e->kept_pinned);
		ctl_json_u64(o, "kept_parent", e->kept_parent);
		ctl_print_json(o);
		return;
	}
	char b[CTL_TEXT];
	printf("evicted %llu block%s (%s); kept %llu leased, %llu pinned, %llu parent\n",
	       (unsigned long long)e->blocks, e->blocks == 1 ? "" : "s", fmt_bytes(e->bytes, b),
	       (unsigned long long)e->kept_leased, (unsigned long long)e->kept_pinned,
	       (unsigned long long)e->kept_parent);
}

int cmd_evict(const struct ctl_args *a)
{
	unsigned sel_bits = a->seen & EVICT_SELECTORS;
	if (!sel_bits || (sel_bits & (sel_bits - 1)))
		return ctl_usage(a, "evict takes exactly one of --all, --id, --model, --user and --idle");
	if ((a->id && ctl_check_hex(a, "--id", a->id, PREFIXD_ID_CHARS)) ||
	    (a->model && ctl_check_hex(a, "--model", a->model, 2 * PREFIXD_FINGERPRINT_BYTES)))
		return CTL_USAGE;
	struct prefixd *c;
	if (ctl_connect(a, &c))
		return CTL_FAILED;
	struct prefixd_evict_sel sel = { 0 };
	struct prefixd_evicted e;
	int rc = evict_selector(a, c, &sel);
	if (!rc && prefixd_evict(c, &sel, &e))
		rc = ctl_daemon_fail();
	prefixd_close(c);
	if (!rc)
		print_evicted(&e, a->json);
	return rc;
}

/* Connects, finds the chain the operand names, and acts on it. */
static int on_chain(const struct ctl_args *a,
		    int (*act)(const struct ctl_args *a, struct prefixd *c, const struct prefixd_id *id))
{
	if (ctl_check_hex(a, a->cmd->name, a->arg, PREFIXD_ID_CHARS))
		return CTL_USAGE;
	struct prefixd *c;
	struct prefixd_id id;
	if (ctl_connect(a, &c))
		return CTL_FAILED;
	int rc = ctl_resolve_id(c, a->arg, &id);
	if (!rc)
		rc = act(a, c, &id);
	prefixd_close(c);
	return rc;
}

static int pin(const struct ctl_args *a, struct prefixd *c, const struct prefixd_id *id)
{
	char full[PREFIXD_ID_CHARS + 1], held[CTL_TEXT], ttl[CTL_TEXT] = "";
	uint64_t pinned;
	if (prefixd_pin(c, id, a->ttl_s, &pinned))
		return ctl_daemon_fail();
	prefixd_id_format(id, full);
	if (a->ttl_s)
		snprintf(ttl, sizeof(ttl), " for %u s", a->ttl_s);
	printf("pinned %.*s%s (pins hold %s)\n", CTL_SHORT_ID, full, ttl, fmt_bytes(pinned, held));
	return CTL_OK;
}

static int unpin(const struct ctl_args *a, struct prefixd *c, const struct prefixd_id *id)
{
	char full[PREFIXD_ID_CHARS + 1];
	if (prefixd_unpin(c, id))
		return ctl_daemon_fail();
	prefixd_id_format(id, full);
	printf("unpinned %.*s\n", CTL_SHORT_ID, full);
	return CTL_OK;
}

int cmd_pin(const struct ctl_args *a) { return on_chain(a, pin); }

int cmd_unpin(const struct ctl_args *a) { return on_chain(a, unpin); }
