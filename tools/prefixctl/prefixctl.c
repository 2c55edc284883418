/* SPDX-License-Identifier: MIT */
/* prefixctl: the prefixd admin command line. Parses it; the commands run elsewhere. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prefixctl.h"
#include "prefixd_version.h"

enum { OPT_SOCKET = 1 << 16, OPT_VERSION = 1 << 17, OPT_HELP = 'h' };

static const struct option longopts[] = {
	{ "json", no_argument, NULL, O_JSON },
	{ "sort", required_argument, NULL, O_SORT },
	{ "limit", required_argument, NULL, O_LIMIT },
	{ "user", required_argument, NULL, O_USER },
	{ "model", required_argument, NULL, O_MODEL },
	{ "all", no_argument, NULL, O_ALL },
	{ "id", required_argument, NULL, O_ID },
	{ "idle", required_argument, NULL, O_IDLE },
	{ "ttl", required_argument, NULL, O_TTL },
	{ "prometheus", no_argument, NULL, O_PROMETHEUS },
	{ "watch", required_argument, NULL, O_WATCH },
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "help", no_argument, NULL, OPT_HELP },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ 0 },
};

static const char *const sort_keys[] = {
	[SORT_BYTES] = "bytes", [SORT_HITS] = "hits", [SORT_IDLE] = "idle", [SORT_TOKENS] = "tokens",
};

/* Option help shared by commands: the text after the option's name. */
#define HELP_INDENT "                  "
#define FP_TEXT                                                                \
	"a model fingerprint (64 hex digits, as 'prefix-run info'\n" HELP_INDENT \
	"prints it) or a prefix of at least 8 of its digits that only\n"       \
	HELP_INDENT "one cached model's fingerprint has\n"
#define ID_TEXT                                                                 \
	"a chain id from 'prefixctl ls' (72 hex digits) or a prefix\n" HELP_INDENT \
	"of at least 8 of its digits, such as the ID column, that\n" HELP_INDENT   \
	"only one cached chain's id has\n"
/* Lines of a synopsis after the first, under "usage: prefixctl [--socket PATH] ". */
#define SYNOPSIS_INDENT "                                 "

static const struct ctl_command commands[] = {
	{ "ls", cmd_ls, O_JSON | O_SORT | O_LIMIT | O_USER | O_MODEL, 0, NULL,
	  "ls [--json] [--sort hits|bytes|idle|tokens]\n" SYNOPSIS_INDENT
	  "   [--limit N] [--user UID] [--model FP]",
	  "the cached chains (prefixes), largest first",
	  "Lists the cached chains: prefixes from their first block to a block that no\n"
	  "cached block continues, and pinned prefixes that longer chains continue.\n"
	  "A block that chains share counts in each of them.\n"
	  "The ID column (the first 12 digits of an id) names a chain to pin, unpin\n"
	  "and evict --id.\n"
	  "\n"
	  "The USER column is the chain's namespace: a uid, or \"shared\" (prefixd\n"
	  "--shared-group).\n"
	  "\n"
	  "  --json          a JSON array of objects: id, user, namespace (\"user\" or\n"
	  "                  \"shared\"), model, tokens, blocks, bytes, hits, leases,\n"
	  "                  pinned, pin_ttl_s, idle_s, where\n"
	  "  --sort KEY      largest first by bytes (the default), hits, idle (seconds\n"
	  "                  since last used) or tokens\n"
	  "  --limit N       only the first N chains after sorting\n"
	  "  --user UID      only this user's chains (a uid, a user name, or \"shared\"\n"
	  "                  for the shared namespace)\n"
	  "  --model FP      only the chains of model FP:\n" HELP_INDENT FP_TEXT },
	{ "evict", cmd_evict, O_ALL | O_ID | O_MODEL | O_USER | O_IDLE | O_JSON, 0, NULL,
	  "evict (--all | --id ID | --model FP |\n" SYNOPSIS_INDENT
	  "       --user UID | --idle SECS) [--json]",
	  "frees cached blocks: all, a chain's, a model's, a user's or idle ones",
	  "Evicts the selected blocks now, except those a process holds (leased),\n"
	  "pinned ones, and blocks that others left in place continue (parents). Give\n"
	  "exactly one selector:\n"
	  "\n"
	  "  --all           every block\n"
	  "  --id ID         the blocks of chain ID that no other chain continues:\n"
	  HELP_INDENT ID_TEXT
	  "  --model FP      the blocks of model FP, of every user:\n" HELP_INDENT FP_TEXT
	  "  --user UID      one user's blocks (a uid or a user name)\n"
	  "  --idle SECS     blocks unused for SECS seconds or more\n"
	  "  --json          the counts as one JSON object: evicted_blocks,\n"
	  "                  evicted_bytes, kept_leased, kept_pinned, kept_parent\n" },
	{ "pin", cmd_pin, O_TTL, 0, "ID", "pin ID [--ttl SECS]",
	  "keeps a chain from eviction",
	  "Pins a cached chain: neither the memory budget nor evict removes its blocks\n"
	  "while the pin lasts. Pinning a pinned chain sets its TTL anew. Pins hold at\n"
	  "most the daemon's --pin-max; one past it is refused.\n"
	  "\n"
	  "  ID              " ID_TEXT
	  "  --ttl SECS      the pin ends after SECS seconds (1 to 4294967295); without\n"
	  "                  it, at 'prefixctl unpin'\n" },
	{ "unpin", cmd_unpin, 0, 0, "ID", "unpin ID", "ends a pin",
	  "Ends the pin of a chain: its blocks can be evicted again.\n"
	  "\n"
	  "  ID              " ID_TEXT },
	{ "stats", cmd_stats, O_JSON | O_PROMETHEUS | O_WATCH, 0, NULL,
	  "stats [--json | --prometheus] [--watch SECS]",
	  "the daemon's counters, and what each user and model holds and did",
	  "Prints every counter of the daemon, then the cache's use by user and by\n"
	  "model.\n"
	  "\n"
	  "  --json          one JSON object: each counter by name; \"users\" and \"models\":\n"
	  "                  the use summed by user and by model; \"usage\": one row per\n"
	  "                  user and model\n"
	  "  --prometheus    the Prometheus text format. Daemon-wide metrics have no\n"
	  "                  labels: prefixd_prefix_cache_queries_total and _hits_total\n"
	  "                  (prompt tokens in full blocks), prefixd_cache_usage_bytes,\n"
	  "                  ...; the series of one user's use of one model are named\n"
	  "                  prefixd_user_model_* and labelled user (a uid) and model\n"
	  "                  (its fingerprint, 64 hex digits)\n"
	  "  --watch SECS    prints it again every SECS seconds until interrupted (on a\n"
	  "                  terminal, in place); into a pipe, --json prints one object\n"
	  "                  a line and --prometheus one exposition ending '# EOF'\n" },
	{ "info", cmd_info, 0, 0, NULL, "info",
	  "moved: 'prefix-run info --model DIR' prices a model's prefixes",
	  "Moved to prefix-run: 'prefix-run info --model DIR [--socket PATH]' loads a\n"
	  "checkpoint and prints what its prefixes cost in prefixd and how many fit in\n"
	  "the daemon's memory budget, one user's quota and --pin-max. prefixctl does\n"
	  "not load models (it does not link the model runtime).\n" },
	{ "export", cmd_export, O_USER | O_MODEL | O_ID, 0, "FILE",
	  "export [--user UID] [--model FP] [--id ID] FILE",
	  "writes cached prefixes to a file, to import elsewhere",
	  "Writes the records of cached blocks, in memory or on the daemon's disk, to\n"
	  "FILE (made, or emptied, with mode 0600): every block, or those the options\n"
	  "select (they combine). The records are the disk tier's, checksums and all;\n"
	  "'prefixctl import' stores them in another daemon with the same\n"
	  "--block-tokens.\n"
	  "\n"
	  "  --user UID      only this user's blocks (a uid or a user name)\n"
	  "  --model FP      only the blocks of model FP:\n" HELP_INDENT FP_TEXT
	  "  --id ID         only chain ID's blocks, from its first:\n" HELP_INDENT ID_TEXT },
	{ "import", cmd_import, O_USER, 0, "FILE", "import [--user UID] FILE",
	  "stores the prefixes of an exported file",
	  "Stores the blocks of a file 'prefixctl export' wrote, each under its user\n"
	  "(or all under --user), as a publish would: memory permitting, and on the\n"
	  "daemon's disk too when it has one. The daemon checks every record first\n"
	  "(checksums, hash chain, block size): a damaged file, or one of another\n"
	  "block size, is refused and nothing is stored.\n"
	  "\n"
	  "  --user UID      store every block in this user's namespace (a uid or a\n"
	  "                  user name), whoever's it was where it was exported\n" },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fputs("usage: prefixctl [--socket PATH] COMMAND [OPTIONS]\n"
	      "\n"
	      "Administers a running prefixd: what it caches, for whom, and at what cost.\n"
	      "\n"
	      "commands:\n",
	      f);
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-7s %s\n", commands[i].name, commands[i].summary);
	fputs("\n"
	      "  --socket PATH   the daemon's socket (default: $PREFIXD_SOCKET, else\n"
	      "                  $XDG_RUNTIME_DIR/prefixd.sock, else /run/prefixd.sock)\n"
	      "  -h, --help      this text; 'prefixctl COMMAND --help' or 'prefixctl help\n"
	      "                  COMMAND' describes a command\n"
	      "  --version       the version\n"
	      "\n"
	      "The daemon's own user and root see and steer every user's chains; another\n"
	      "user lists, evicts, pins and counts only their own (and lists the shared\n"
	      "namespace's when they may attach it). export and import are for the\n"
	      "daemon's user and root.\n"
	      "Exit status: 0 done, 1 the daemon refused or cannot be reached, 2 bad usage.\n",
	      f);
}

static void command_help(const struct ctl_command *c)
{
	printf("usage: prefixctl [--socket PATH] %s\n\n%s\n"
	       "  --socket PATH   the daemon's socket (default: $PREFIXD_SOCKET, else\n"
	       "                  $XDG_RUNTIME_DIR/prefixd.sock, else /run/prefixd.sock)\n"
	       "  -h, --help      this text\n",
	       c->synopsis, c->help);
}

static const struct ctl_command *find_command(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

/* "ls, evict, ...": for messages. */
static const char *command_names(void)
{
	static char names[128];
	for (size_t i = 0, at = 0; i < NCOMMANDS && at < sizeof(names); i++)
		at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", i ? ", " : "",
				       commands[i].name);
	return names;
}

static const char *opt_name(int code)
{
	for (const struct option *o = longopts; o->name; o++)
		if (o->val == code)
			return o->name;
	return "?";
}

/* A whole number in [lo, hi]: no sign, no blanks, no units. */
static int parse_uint(const struct ctl_args *a, int code, const char *s, uint64_t lo, uint64_t hi,
		      uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s < '0' || *s > '9' || v < lo || v > hi)
		return ctl_usage(a, "--%s takes a whole number from %llu to %llu, not '%s'",
				 opt_name(code), (unsigned long long)lo, (unsigned long long)hi, s);
	*out = v;
	return CTL_OK;
}

static int parse_user(const struct ctl_args *a, const char *s, uint32_t *out)
{
	struct passwd *pw = getpwnam(s);
	uint64_t v = 0;
	if (pw)
		v = pw->pw_uid;
	else if (!strcmp(s, "shared"))
		v = PREFIXD_SHARED_USER;
	else if (*s < '0' || *s > '9')
		return ctl_usage(a, "--user: no user '%s' (give a uid, a user name or \"shared\")", s);
	else if (parse_uint(a, O_USER, s, 0, UINT32_MAX, &v))
		return CTL_USAGE;
	*out = (uint32_t)v;
	return CTL_OK;
}

static int parse_sort(const struct ctl_args *a, const char *s, enum ctl_sort *out)
{
	for (size_t i = 0; i < sizeof(sort_keys) / sizeof(sort_keys[0]); i++)
		if (!strcmp(s, sort_keys[i])) {
			*out = (enum ctl_sort)i;
			return CTL_OK;
		}
	return ctl_usage(a, "--sort takes hits, bytes, idle or tokens, not '%s'", s);
}

/* One option of the command into a. */
static int parse_value(struct ctl_args *a, int code, const char *val)
{
	uint64_t v = 0;
	int rc = CTL_OK;
	switch (code) { /* --all needs nothing but its bit in seen */
	case O_JSON: a->json = 1; break;
	case O_PROMETHEUS: a->prometheus = 1; break;
	case O_MODEL: a->model = val; break;
	case O_ID: a->id = val; break;
	case O_SORT: rc = parse_sort(a, val, &a->sort); break;
	case O_USER: rc = parse_user(a, val, &a->user); break;
	case O_LIMIT: rc = parse_uint(a, code, val, 1, UINT32_MAX, &a->limit); break;
	case O_IDLE: rc = parse_uint(a, code, val, 0, UINT32_MAX, &a->idle_s); break;
	case O_TTL: rc = parse_uint(a, code, val, 1, UINT32_MAX, &v); a->ttl_s = (uint32_t)v; break;
	case O_WATCH: rc = parse_uint(a, code, val, 1, UINT32_MAX, &v); a->watch_s = (uint32_t)v; break;
	}
	a->seen |= (unsigned)code;
	return rc;
}

/* An option as getopt_long returned it: code, value, and the word that
 * named it (for messages). */
struct given {
	int code;
	const char *val, *word;
};

/*
 * Options may come before or after the command word, so all of them are
 * read first (GNU getopt moves the other words to the end) and checked
 * against the command afterwards, in their order.
 */
static int apply(struct ctl_args *a, const struct given *g, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int code = g[i].code;
		if (code == '?')
			return ctl_usage(a, "unknown option '%s'", g[i].word);
		if (code == ':')
			return ctl_usage(a, "option '%s' needs a value", g[i].word);
		if (code == OPT_HELP) {
			if (a->cmd)
				command_help(a->cmd);
			else
				usage(stdout);
			return -1;
		}
		if (code == OPT_VERSION) {
			printf("prefixctl %s\n", PREFIXD_VERSION);
			return -1;
		}
		if (code == OPT_SOCKET) {
			a->socket = g[i].val;
			continue;
		}
		if (!a->cmd)
			continue; /* said below: no command */
		if (!(a->cmd->allowed & (unsigned)code))
			return ctl_usage(a, "%s takes no --%s", a->cmd->name, opt_name(code));
		int rc = parse_value(a, code, g[i].val);
		if (rc)
			return rc;
	}
	return CTL_OK;
}

/* The command's operands and required options. */
static int check_operands(struct ctl_args *a, char **words, int n)
{
	const struct ctl_command *c = a->cmd;
	if (c->operand && n < 1)
		return strcmp(c->operand, "ID")
			       ? ctl_usage(a, "%s needs a %s", c->name, c->operand)
			       : ctl_usage(a, "%s needs a chain %s (from 'prefixctl ls')", c->name,
					   c->operand);
	if (n > (c->operand ? 1 : 0))
		return ctl_usage(a, "unexpected argument '%s'", words[c->operand ? 1 : 0]);
	a->arg = n ? words[0] : NULL;
	unsigned missing = c->required & ~a->seen;
	for (unsigned bit = 1; missing; bit <<= 1)
		if (missing & bit)
			return ctl_usage(a, "%s needs --%s", c->name, opt_name((int)bit));
	return CTL_OK;
}

int cmd_info(const struct ctl_args *a)
{
	(void)a;
	fprintf(stderr, "prefixctl: info moved to prefix-run: 'prefix-run info --model DIR "
			"[--socket PATH] [--block-tokens B] [--kv-dtype DTYPE]' loads the model and "
			"asks the daemon (prefixctl does not load models); see 'prefixctl info --help'.\n");
	return CTL_USAGE;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return CTL_USAGE;
	}
	struct given *g = ctl_alloc((size_t)argc, sizeof(*g));
	size_t n = 0;
	int code;
	opterr = 0;
	/* ':' first: a missing value is told apart from an unknown option. */
	while ((code = getopt_long(argc, argv, ":h", longopts, NULL)) != -1)
		g[n++] = (struct given){ code, optarg, argv[optind - 1] };
	struct ctl_args a = { 0 };
	/* "help COMMAND" is "COMMAND --help", as in prefix-run. */
	if (optind < argc && !strcmp(argv[optind], "help")) {
		free(g);
		const struct ctl_command *c = optind + 1 < argc ? find_command(argv[optind + 1]) : NULL;
		if (optind + 1 < argc && !c)
			return ctl_usage(NULL, "unknown command '%s' (the commands: %s)",
					 argv[optind + 1], command_names());
		if (c)
			command_help(c);
		else
			usage(stdout);
		return CTL_OK;
	}
	if (optind < argc && !(a.cmd = find_command(argv[optind]))) {
		free(g);
		return ctl_usage(NULL, "unknown command '%s' (the commands: %s)", argv[optind],
				 command_names());
	}
	/* Whatever options came with it, they were info's, now prefix-run's:
	 * only --help is still prefixctl's. */
	bool help = false;
	for (size_t i = 0; i < n; i++)
		help |= g[i].code == 'h' || g[i].code == OPT_HELP;
	if (a.cmd && a.cmd->run == cmd_info && !help) {
		free(g);
		return cmd_info(&a);
	}
	int rc = apply(&a, g, n);
	free(g);
	if (rc)
		return rc < 0 ? CTL_OK : rc; /* < 0: help was asked for */
	if (!a.cmd)
		return ctl_usage(NULL, "no command given (the commands: %s)", command_names());
	if ((rc = check_operands(&a, argv + optind + 1, argc - optind - 1)))
		return rc;
	return a.cmd->run(&a);
}
