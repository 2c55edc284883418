/* SPDX-License-Identifier: MIT */
/* prefixd: command line, signals, then the server. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "daemon.h"
#include "prefixd_version.h"
#include "remote.h"
#include "remote_index.h"
#include "server.h"
#include "sock.h"

#include "wire.h"

#define DEFAULT_MEMORY (2ull << 30)
#define DEFAULT_MAX_CONNS 1024
#define DEFAULT_REQUEST_MEMORY (64ull << 20)
#define DEFAULT_REQUEST_TIMEOUT 10
#define DEFAULT_CLAIM_TIMEOUT_MS 5000
/* Descriptors besides connections: arenas, descriptors in flight, logs. */
#define FDS_RESERVED 256

static void usage(FILE *f)
{
	fprintf(f,
		"usage: prefixd [--socket PATH] [--memory SIZE] [--quota SIZE] [--pin-max SIZE]\n"
		"               [--threads N] [--block-tokens B] [--group GROUP]\n"
		"               [--max-connections N] [--max-user-connections N]\n"
		"               [--request-memory SIZE] [--request-timeout SECS]\n"
		"               [--idle-timeout SECS] [--claim-timeout SECS]\n"
		"               [--disk-dir DIR [--disk-budget SIZE] [--disk-sync]]\n"
		"               [--shared-group GROUP [--shared-publishers UID[,UID...]]]\n"
		"               [--remote URL... [--remote-cluster] [--remote-key-file FILE]\n"
		"                [--remote-auth-file FILE] [--remote-users shared|all]\n"
		"                [--remote-ttl SECS] [--remote-timeout MS]\n"
		"                [--remote-index on|off|KEYS]]\n"
		"               [--force]\n"
		"\n"
		"Keeps frozen prefix KV caches in shared memory for local inference processes.\n"
		"\n"
		"  --socket PATH       Unix socket to listen on (default: $PREFIXD_SOCKET, else\n"
		"                      $XDG_RUNTIME_DIR/prefixd.sock, else /run/prefixd.sock)\n"
		"  --memory SIZE       memory for KV blocks, e.g. 512M, 1.5G (default: 2G); never exceeded.\n"
		"                      Full, the least recently used unleased, unpinned blocks of any\n"
		"                      user and model make room, and their memory goes back\n"
		"  --quota SIZE        the most one user's blocks may hold (default: all of --memory);\n"
		"                      a user at their quota gives up their own oldest blocks first\n"
		"  --pin-max SIZE      the most pinned chains may hold (default: a quarter of --memory);\n"
		"                      pins past it are refused (prefixctl pin)\n"
		"  --threads N         worker threads (default: the number of cores)\n"
		"  --block-tokens B    tokens per block, a power of two up to 4096 (default: 64);\n"
		"                      clients must use the same\n"
		"  --group GROUP       let GROUP's members connect (socket mode 0660; default 0600:\n"
		"                      only this user). Each user's prefixes stay their own.\n"
		"  --max-connections N connections served at once (default: 1024, fewer if the\n"
		"                      descriptor limit is lower); past it a client is told so\n"
		"  --max-user-connections N\n"
		"                      connections of one user at once (default: a quarter of\n"
		"                      --max-connections), so that no user can take them all\n"
		"  --request-memory SIZE\n"
		"                      memory for the requests being read, in all (default: 64M);\n"
		"                      a request past it is refused, so RSS stays bounded\n"
		"  --request-timeout SECS\n"
		"                      a request must arrive whole, and its reply be taken, within\n"
		"                      SECS of its first byte, and a new connection must send its\n"
		"                      first request within SECS (default: 10)\n"
		"  --idle-timeout SECS close a connection that holds no lease after SECS without a\n"
		"                      request (default: 0, never: libprefixd does not reconnect)\n"
		"  --claim-timeout SECS\n"
		"                      single flight: a process that claimed a prefix to compute\n"
		"                      must publish some of it within SECS (a fraction is fine),\n"
		"                      or the processes waiting for it take it over (default: 5)\n"
		"  --disk-dir DIR      keep blocks on disk too, in DIR (made if missing; one daemon\n"
		"                      a DIR): written soon after they are published, served again\n"
		"                      after eviction from memory and after a restart\n"
		"  --disk-budget SIZE  the most the records in DIR may hold (default: 4 x --memory,\n"
		"                      at most 90%% of the free space at start, DIR's records\n"
		"                      counted as free, and never less than those records);\n"
		"                      full, the least recently used blocks held only on disk go\n"
		"  --disk-sync         answer a PUBLISH only once its blocks' records are on disk,\n"
		"                      synced (default: written behind, soon after the answer, so\n"
		"                      a kill -9 or a crash loses what was not written yet)\n"
		"  --remote URL        share blocks with other hosts' daemons through Redis:\n"
		"                      redis://HOST:PORT[/DB] or unix:PATH; repeated, the seed\n"
		"                      nodes of a Redis Cluster (with --remote-cluster)\n"
		"  --remote-cluster    the --remote servers are nodes of a Redis Cluster\n"
		"  --remote-key-file FILE\n"
		"                      sign every record with a MAC keyed by FILE's first line (32\n"
		"                      bytes at least, mode 600) and drop those without a valid one;\n"
		"                      without it, every writer to the Redis is trusted\n"
		"  --remote-auth-file FILE\n"
		"                      the Redis password (AUTH), the first line of FILE (mode 600)\n"
		"  --remote-users shared|all\n"
		"                      which namespaces go remote: the shared one (default), or\n"
		"                      every user's too (uids must then mean the same on every host)\n"
		"  --remote-ttl SECS   records expire in Redis after SECS (default: 0, never; Redis's\n"
		"                      maxmemory policy evicts them)\n"
		"  --remote-timeout MS the most a MATCH waits for a Redis that sends nothing\n"
		"                      (default: 50); then it is a miss\n"
		"  --remote-index on|off|KEYS\n"
		"                      keep an index of the keys Redis holds (keyspace\n"
		"                      notifications E$gxe, set with CONFIG SET unless set, a\n"
		"                      CONFIG GET a second, a SCAN) so a miss it rules out\n"
		"                      costs no round trip; KEYS: at most (default: 1000000,\n"
		"                      16 MiB), past it every miss asks Redis\n"
		"  --shared-group GROUP\n"
		"                      a shared namespace: GROUP's members may attach its prefixes\n"
		"                      (prefix-run --shared), besides their own\n"
		"  --shared-publishers UID[,UID...]\n"
		"                      the users (uids or names) who may publish into the shared\n"
		"                      namespace; root may too, no one else\n"
		"  --force             start with a --memory larger than this machine's memory\n"
		"  -h, --help          this text\n"
		"  --version           the version\n"
		"\n"
		"Stops cleanly on SIGTERM or SIGINT; SIGHUP is ignored. Logs to stderr.\n"
		"Socket activation: a listening socket passed by systemd (LISTEN_FDS) is served\n"
		"instead of --socket, and left in place at exit.\n");
}

__attribute__((format(printf, 1, 2))) static int bad(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "prefixd: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\nTry 'prefixd --help'.\n");
	va_end(ap);
	return 2;
}

/* "512M", "1.5G", "4G", "1048576": binary units, an optional trailing
 * "B"/"iB". A fraction needs a unit and is rounded down to whole bytes. */
static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (*s < '0' || *s > '9')
		return -1;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	/* Up to 9 decimals, kept as frac / scale: exact, no double rounding. */
	uint64_t frac = 0, scale = 1;
	if (*end == '.') {
		end++;
		if (*end < '0' || *end > '9')
			return -1;
		for (; *end >= '0' && *end <= '9'; end++)
			if (scale < 1000000000) {
				frac = frac * 10 + (uint64_t)(*end - '0');
				scale *= 10;
			}
	}
	int shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	}
	if (shift && *end == 'i')
		end++;
	if (*end == 'B')
		end++;
	if (*end || v >= (UINT64_MAX >> shift) || (scale > 1 && !shift))
		return -1;
	/* frac < scale <= 1e9 < 2^30, and << 40 stays below 2^70: split the
	 * shift so the product fits in 64 bits. */
	uint64_t part = ((frac << (shift / 2)) / scale) << (shift - shift / 2);
	part += ((frac << (shift / 2)) % scale << (shift - shift / 2)) / scale;
	*out = ((uint64_t)v << shift) + part;
	return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* What DIR's own files of a disk tier hold: *span the bytes they take on
 * the file system (free once they are gone), *records what the disk
 * budget counts of the records (their sizes). Temporary files are what a
 * start deletes anyway. */
static void own_files(const char *dir, uint64_t *span, uint64_t *records)
{
	*span = *records = 0;
	DIR *d = opendir(dir);
	for (struct dirent *e; d && (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		bool rec = n > 4 && !strcmp(e->d_name + n - 4, ".rec");
		bool tmp = n > 4 && !strcmp(e->d_name + n - 4, ".tmp");
		struct stat st;
		if ((!rec && !tmp) || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode))
			continue;
		*span += (uint64_t)st.st_blocks * 512;
		if (rec)
			*records += (uint64_t)st.st_size;
	}
	if (d)
		closedir(d);
}

/* 4 x the memory budget, within 90% of what DIR's file system has free
 * (of its parent's, when DIR is still to be made) counting DIR's own
 * records as free: they are the tier's to keep or let go. Never less than
 * those records, so that a restart without --disk-budget keeps every
 * record the last run left, however full the disk is now. */
static uint64_t default_disk_budget(const char *dir, uint64_t memory)
{
	uint64_t want = memory * 4, span, records;
	struct statvfs fs;
	char parent[4096];
	snprintf(parent, sizeof(parent), "%s", dir);
	int rc = statvfs(dir, &fs);
	own_files(dir, &span, &records);
	if (rc) {
		char *slash = strrchr(parent, '/');
		if (slash && slash != parent)
			*slash = 0;
		else
			snprintf(parent, sizeof(parent), "%s", slash ? "/" : ".");
		rc = statvfs(parent, &fs);
	}
	if (!rc) {
		uint64_t usable = ((uint64_t)fs.f_bavail * fs.f_frsize + span) / 10 * 9;
		if (usable < want)
			want = usable > (1u << 20) ? usable : (1u << 20);
	}
	return want > records ? want : records;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "memory", required_argument, NULL, 'm' },
		{ "quota", required_argument, NULL, 'q' },
		{ "pin-max", required_argument, NULL, 'p' },
		{ "threads", required_argument, NULL, 't' },
		{ "block-tokens", required_argument, NULL, 'b' },
		{ "group", required_argument, NULL, 'g' },
		{ "test-key-bytes", required_argument, NULL, 'k' },
		{ "max-connections", required_argument, NULL, 'C' },
		{ "max-user-connections", required_argument, NULL, 'U' },
		{ "request-memory", required_argument, NULL, 'R' },
		{ "request-timeout", required_argument, NULL, 'T' },
		{ "idle-timeout", required_argument, NULL, 'I' },
		{ "claim-timeout", required_argument, NULL, 'W' },
		{ "disk-dir", required_argument, NULL, 'D' },
		{ "disk-budget", required_argument, NULL, 'B' },
		{ "shared-group", required_argument, NULL, 'S' },
		{ "shared-publishers", required_argument, NULL, 'P' },
		{ "disk-sync", no_argument, NULL, 'Y' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "force", no_argument, NULL, 'F' },
		{ "remote", required_argument, NULL, 1000 },
		{ "remote-cluster", no_argument, NULL, 1001 },
		{ "remote-key-file", required_argument, NULL, 1002 },
		{ "remote-auth-file", required_argument, NULL, 1003 },
		{ "remote-users", required_argument, NULL, 1004 },
		{ "remote-ttl", required_argument, NULL, 1005 },
		{ "remote-timeout", required_argument, NULL, 1006 },
		{ "remote-index", required_argument, NULL, 1007 },
		{ 0 },
	};
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	struct server_cfg cfg = { .memory = DEFAULT_MEMORY, .threads = cores > 0 ? (int)cores : 1,
				  .block_tokens = PREFIXD_DEFAULT_BLOCK_TOKENS, .key_bytes = 32,
				  .max_conns = DEFAULT_MAX_CONNS, .request_memory = DEFAULT_REQUEST_MEMORY,
				  .request_timeout_s = DEFAULT_REQUEST_TIMEOUT,
				  .claim_timeout_ms = DEFAULT_CLAIM_TIMEOUT_MS };
	long max_user = 0;
	bool force = false, remote_flags = false;
	struct remote_cfg rc_cfg = { .timeout_ms = REMOTE_DEFAULT_TIMEOUT_MS,
				     .index_max = REMOTE_INDEX_DEFAULT_MAX };
	char socket_buf[256];
	const char *quota = NULL, *pin_max = NULL, *disk_budget = NULL;
	long v;
	int o;
	opterr = 0;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			cfg.socket_path = optarg;
			break;
		case 'm':
			if (parse_size(optarg, &cfg.memory) || cfg.memory < (64u << 10))
				return bad("--memory: '%s' is not a size of at least 64K (e.g. 512M, 1.5G)", optarg);
			break;
		case 'q':
			quota = optarg;
			break;
		case 'p':
			pin_max = optarg;
			break;
		case 't':
			if (parse_int(optarg, 1, 256, &v))
				return bad("--threads: '%s' is not a number from 1 to 256", optarg);
			cfg.threads = (int)v;
			break;
		case 'b':
			if (parse_int(optarg, 1, PREFIXD_MAX_BLOCK_TOKENS, &v) || (v & (v - 1)))
				return bad("--block-tokens: '%s' is not a power of two from 1 to %d", optarg, PREFIXD_MAX_BLOCK_TOKENS);
			cfg.block_tokens = (uint32_t)v;
			break;
		case 'g':
			if (shared_group_id(optarg, &cfg.group))
				return bad("--group: no group '%s'", optarg);
			cfg.has_group = 1;
			break;
		case 'k':
			if (parse_int(optarg, 1, 32, &v))
				return bad("--test-key-bytes: '%s' is not a number from 1 to 32", optarg);
			cfg.key_bytes = (int)v;
			break;
		case 'C':
			if (parse_int(optarg, 1, 1 << 20, &v))
				return bad("--max-connections: '%s' is not a number from 1 to 1048576", optarg);
			cfg.max_conns = (uint32_t)v;
			break;
		case 'U':
			if (parse_int(optarg, 1, 1 << 20, &max_user))
				return bad("--max-user-connections: '%s' is not a number from 1 to 1048576", optarg);
			break;
		case 'R':
			if (parse_size(optarg, &cfg.request_memory) || cfg.request_memory < PD_MAX_BODY)
				return bad("--request-memory: '%s' is not a size of at least 4M (the largest request)", optarg);
			break;
		case 'T':
			if (parse_int(optarg, 1, 3600, &v))
				return bad("--request-timeout: '%s' is not a number of seconds from 1 to 3600", optarg);
			cfg.request_timeout_s = (uint32_t)v;
			break;
		case 'I':
			if (parse_int(optarg, 0, 1 << 30, &v))
				return bad("--idle-timeout: '%s' is not a number of seconds (0: never)", optarg);
			cfg.idle_timeout_s = (uint32_t)v;
			break;
		case 'W': {
			char *end;
			errno = 0;
			double secs = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(secs >= 0.01 && secs <= 3600))
				return bad("--claim-timeout: '%s' is not a number of seconds from 0.01 to 3600", optarg);
			cfg.claim_timeout_ms = (uint64_t)(secs * 1000 + 0.5);
			break;
		}
		case 'D':
			if (!*optarg)
				return bad("--disk-dir: an empty path");
			cfg.disk_dir = optarg;
			break;
		case 'B':
			disk_budget = optarg;
			break;
		case 'S':
			if (shared_parse_group(&cfg.shared, optarg))
				return bad("--shared-group: no group '%s' (give a group name or a gid)",
					   optarg);
			break;
		case 'P': {
			const char *why, *at;
			if (!shared_parse_publishers(&cfg.shared, optarg, &why, &at))
				break;
			if (at)
				return bad("--shared-publishers: %s '%.*s' (give uids or user names, separated by commas)",
					   why, (int)strcspn(at, ","), at);
			return bad("--shared-publishers: %s", why);
		}
		case 'F':
			force = true;
			break;
		case 'Y':
			cfg.disk_sync = true;
			break;
		case 1000:
			if (rc_cfg.n_seeds == REMOTE_MAX_SEEDS)
				return bad("--remote: %d servers at most", REMOTE_MAX_SEEDS);
			rc_cfg.seeds[rc_cfg.n_seeds++] = optarg;
			break;
		case 1001:
			rc_cfg.cluster = remote_flags = true;
			break;
		case 1002:
			if (!*optarg)
				return bad("--remote-key-file: an empty path");
			rc_cfg.key_file = optarg;
			remote_flags = true;
			break;
		case 1003:
			if (!*optarg)
				return bad("--remote-auth-file: an empty path");
			rc_cfg.auth_file = optarg;
			remote_flags = true;
			break;
		case 1004:
			if (strcmp(optarg, "shared") && strcmp(optarg, "all"))
				return bad("--remote-users: '%s' is neither 'shared' nor 'all'", optarg);
			rc_cfg.all_users = !strcmp(optarg, "all");
			remote_flags = true;
			break;
		case 1005:
			if (parse_int(optarg, 0, 10L * 365 * 86400, &v))
				return bad("--remote-ttl: '%s' is not a number of seconds from 0 (never) to 315360000", optarg);
			rc_cfg.ttl_s = (uint64_t)v;
			remote_flags = true;
			break;
		case 1006:
			if (parse_int(optarg, 1, 60000, &v))
				return bad("--remote-timeout: '%s' is not a number of milliseconds from 1 to 60000", optarg);
			rc_cfg.timeout_ms = (uint32_t)v;
			remote_flags = true;
			break;
		case 1007:
			if (!strcmp(optarg, "off"))
				rc_cfg.index_max = 0;
			else if (!strcmp(optarg, "on"))
				rc_cfg.index_max = REMOTE_INDEX_DEFAULT_MAX;
			else if (parse_int(optarg, 1, REMOTE_INDEX_MAX_MAX, &v))
				return bad("--remote-index: '%s' is neither 'on', 'off' nor a number of keys from 1 to %u", optarg, REMOTE_INDEX_MAX_MAX);
			else
				rc_cfg.index_max = (uint32_t)v;
			remote_flags = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("prefixd %s\n", PREFIXD_VERSION);
			return 0;
		default:
			return bad("unknown or incomplete option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return bad("unexpected argument '%s'", argv[optind]);
	if (cfg.shared.npub && !cfg.shared.on)
		return bad("--shared-publishers: only with --shared-group");
	if (disk_budget && !cfg.disk_dir)
		return bad("--disk-budget: only with --disk-dir");
	if (cfg.disk_sync && !cfg.disk_dir)
		return bad("--disk-sync: only with --disk-dir");
	if (disk_budget && (parse_size(disk_budget, &cfg.disk_budget) || cfg.disk_budget < (64u << 10)))
		return bad("--disk-budget: '%s' is not a size of at least 64K (e.g. 10G)", disk_budget);
	if (cfg.disk_dir && !disk_budget)
		cfg.disk_budget = default_disk_budget(cfg.disk_dir, cfg.memory);
	/* Read once --memory is known, whatever the order of the flags. */
	cfg.quota = cfg.memory;
	cfg.pin_max = cfg.memory / 4;
	if (quota && (parse_size(quota, &cfg.quota) || !cfg.quota || cfg.quota > cfg.memory))
		return bad("--quota: '%s' is not a size from 1 to --memory (%llu bytes)", quota,
			   (unsigned long long)cfg.memory);
	if (pin_max && (parse_size(pin_max, &cfg.pin_max) || cfg.pin_max > cfg.memory))
		return bad("--pin-max: '%s' is not a size from 0 to --memory (%llu bytes)", pin_max,
			   (unsigned long long)cfg.memory);
	/* A budget the machine cannot back is no limit: memory runs out first. */
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
	if (ram && cfg.memory > ram && !force)
		return bad("--memory: %.1f GiB is more than this machine's %.1f GiB of RAM, so the "
			   "system would run out of memory before the budget is full; give a smaller "
			   "--memory, or --force to start anyway",
			   (double)cfg.memory / (1 << 30), (double)ram / (1 << 30));
	if (ram && cfg.memory > ram / 4 * 3)
		pd_warn("--memory %.1f GiB is %s this machine's %.1f GiB of RAM: the system will run out of memory before the budget is full",
			(double)cfg.memory / (1 << 30), cfg.memory > ram ? "more than" : "most of",
			(double)ram / (1 << 30));
	if (!cfg.socket_path) {
		if (pd_default_socket(socket_buf, sizeof(socket_buf)))
			return bad("$XDG_RUNTIME_DIR is too long for a socket path; use --socket");
		cfg.socket_path = socket_buf;
	}
	if (cfg.key_bytes < 32)
		pd_warn("TEST MODE: %d-byte index keys (hash collisions on purpose)", cfg.key_bytes);
	if (sodium_init() < 0) {
		pd_err("libsodium failed to initialise");
		return 1;
	}
	if (remote_flags && !rc_cfg.n_seeds)
		return bad("--remote-cluster, --remote-key-file, --remote-auth-file, --remote-users, --remote-ttl, --remote-timeout and --remote-index: only with --remote");
	if (rc_cfg.n_seeds) {
		char why[512];
		if (remote_open(&rc_cfg, cfg.block_tokens, &cfg.remote, why, sizeof(why)))
			return bad("%s", why);
	}
	/* Signals are read from a signalfd by the listener: block them in
	 * every thread. A peer that hangs up must not kill the daemon. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	/* Every client holds a socket and receives arena descriptors: take
	 * all the descriptors the system allows this process. */
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	/* Connections must run out before descriptors do: a client is then
	 * told why, where at the descriptor limit it would hang. */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < (rlim_t)cfg.max_conns + FDS_RESERVED) {
		uint32_t fit = rl.rlim_cur > FDS_RESERVED + 1 ? (uint32_t)(rl.rlim_cur - FDS_RESERVED) : 1;
		pd_warn("%u connections at most: the descriptor limit is %llu", fit,
			(unsigned long long)rl.rlim_cur);
		cfg.max_conns = fit;
	}
	cfg.max_user_conns = max_user ? (uint32_t)max_user : (cfg.max_conns + 3) / 4;
	if (cfg.max_user_conns > cfg.max_conns)
		cfg.max_user_conns = cfg.max_conns;
	signal(SIGPIPE, SIG_IGN);
	return server_run(&cfg);
}
