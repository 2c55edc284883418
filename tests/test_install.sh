#!/bin/sh
# SPDX-License-Identifier: MIT
#
# `meson install` of a build tree, staged under a temporary DESTDIR, then
# used as a user would: the installed programs run with no LD_LIBRARY_PATH
# (their rpath is relative, so a staged tree runs where it is), the README's
# two C examples build against the installed headers and pkg-config files
# and run against the installed daemon, and the man pages and the systemd
# units are where they belong. Run by tests/test_install.c (suite install),
# which sets:
#   PFX_BUILD       the build directory     PFX_MESON   the meson command
#   PFX_CC          the C compiler          PFX_SANITIZE  b_sanitize ("none")
#   PFX_VERSION     the project's version   PFX_FIXTURES  tests/fixtures
#   PFX_PREFIX, PFX_BINDIR, PFX_LIBDIR, PFX_INCLUDEDIR, PFX_MANDIR (absolute)
set -eu

fail() {
	echo "test_install.sh: FAIL: $*" >&2
	exit 1
}
say() {
	echo "test_install.sh: $*" >&2
}

tmp=$(mktemp -d /tmp/prefixd-install-XXXXXX)
daemon=
cleanup() {
	if [ -n "$daemon" ]; then
		kill "$daemon" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

root=$tmp/root
bin=$root$PFX_BINDIR
lib=$root$PFX_LIBDIR
inc=$root$PFX_INCLUDEDIR

# shellcheck disable=SC2086 # PFX_MESON may be "python3 /path/meson.py"
$PFX_MESON install -C "$PFX_BUILD" --no-rebuild --destdir "$root" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log" >&2; fail "meson install --destdir"; }

unset LD_LIBRARY_PATH LD_PRELOAD
if [ "$PFX_PREFIX" = /usr ]; then
	# No rpath under /usr (the loader's own directory): point it at the
	# staged libraries instead.
	say "prefix /usr: no rpath to check"
	export LD_LIBRARY_PATH="$lib"
fi

# The programs, and the libraries they load: the staged ones, not the
# build tree's (meson rewrites the rpath at install) nor the system's.
for t in prefixd prefixctl prefix-run; do
	[ -x "$bin/$t" ] || fail "$bin/$t is not installed"
	out=$("$bin/$t" --version) || fail "$t --version exits $?"
	[ "$out" = "$t $PFX_VERSION" ] || fail "$t --version says '$out', not '$t $PFX_VERSION'"
done
# One version scheme: each library's file is named after its SONAME (the
# ABI version), libprefixd.so.5 -> libprefixd.so.5.0.0 (README, Installing).
for l in libprefixd libprefixd-runtime; do
	so=$(readelf -d "$lib/$l.so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
	[ -n "$so" ] || fail "no soname in $lib/$l.so"
	file=$(basename "$(readlink -f "$lib/$l.so")")
	case $file in
	"$so".*) ;;
	*) fail "$l: the file $file does not carry the version of its SONAME $so" ;;
	esac
	[ "$(readlink -f "$lib/$so")" = "$(readlink -f "$lib/$l.so")" ] ||
		fail "$lib/$so is not $file"
done
soname=$(readelf -d "$lib/libprefixd.so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
# Whether $1 loads the staged libprefixd (ldd may say .../bin/../lib/...).
loads_staged() {
	ldd "$1" >"$tmp/ldd" 2>&1 || { cat "$tmp/ldd" >&2; fail "ldd $1"; }
	if grep -q "not found" "$tmp/ldd"; then
		cat "$tmp/ldd" >&2
		fail "$1: a library is not found"
	fi
	path=$(sed -n "s/^[[:space:]]*$soname => \([^ ]*\) .*/\1/p" "$tmp/ldd")
	[ -n "$path" ] && [ "$(readlink -f "$path")" = "$(readlink -f "$lib/$soname")" ] ||
		{ cat "$tmp/ldd" >&2; fail "$1 does not load the installed $soname"; }
	if readelf -d "$1" | grep -F "$PFX_BUILD" >&2; then
		fail "$1 still has the build tree in its rpath"
	fi
}
loads_staged "$bin/prefixctl"
loads_staged "$bin/prefix-run"
loads_staged "$lib/libprefixd-runtime.so"
# The admin tool needs libprefixd and json-c, never the model runtime and
# its OpenBLAS (what a model costs is prefix-run info's).
ldd "$bin/prefixctl" >"$tmp/ldd" 2>&1 || fail "ldd $bin/prefixctl"
if grep -Ei "openblas|libblas|prefixd-runtime" "$tmp/ldd" >&2; then
	fail "prefixctl links the model runtime or OpenBLAS"
fi
# Nor do the developer tools' random checkpoints and .npy files ship in
# the runtime library (tools/devkit): its symbol table, internal symbols
# included (one of the kernels' shows the table is there to look in).
nm --defined-only "$lib/libprefixd-runtime.so" >"$tmp/nm" 2>&1 || fail "nm $lib/libprefixd-runtime.so"
grep -q "kern_gemv" "$tmp/nm" || fail "no symbol table in $lib/libprefixd-runtime.so to check"
if grep -E "pfx_random_checkpoint|st_write|npy_write" "$tmp/nm" >&2; then
	fail "libprefixd-runtime carries tools/devkit code"
fi

# Headers and pkg-config files. define-variable moves the prefix to the
# staged tree (the files name the final one).
for h in prefixd.h prefixd_proto.h prefixd-runtime/model.h prefixd-runtime/session.h \
	prefixd-runtime/cache.h prefixd-runtime/sample.h prefixd-runtime/pfx_error.h \
	prefixd-runtime/text.h; do
	[ -f "$inc/$h" ] || fail "$PFX_INCLUDEDIR/$h is not installed"
done
# Every function the runtime's headers declare is exported (its version
# script lists them by name), and nothing else of the runtime's.
grep -hv '^[[:space:]]*\(/\*\|\*\)' "$inc"/prefixd-runtime/*.h | grep -o 'pfx_[a-z0-9_]*[[:space:]]*(' |
	tr -d ' \t(' | sort -u >"$tmp/declared"
nm -D --defined-only "$lib/libprefixd-runtime.so" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' |
	sort -u >"$tmp/exported"
if ! cmp -s "$tmp/declared" "$tmp/exported"; then
	diff "$tmp/declared" "$tmp/exported" >&2 || true
	fail "libprefixd-runtime exports other functions than its headers declare (<: declared only, >: exported only); see runtime/libprefixd-runtime.map"
fi

export PKG_CONFIG_PATH="$lib/pkgconfig"
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
pc() {
	pkg-config --define-variable=prefix="$root$PFX_PREFIX" "$@"
}
for p in prefixd prefixd-runtime; do
	v=$(pc --modversion "$p") || fail "pkg-config $p"
	[ "$v" = "$PFX_VERSION" ] || fail "pkg-config --modversion $p: $v"
done
# The runtime's headers are included as <prefixd-runtime/session.h>: its
# flags name the include directory itself, not the one of the headers.
case $(pc --cflags prefixd-runtime) in
*/prefixd-runtime*) fail "pkg-config --cflags prefixd-runtime points into include/prefixd-runtime: $(pc --cflags prefixd-runtime)" ;;
esac

# The README's examples, whole.
cat >"$tmp/runtime.c" <<'EOF'
/* README, "Using the runtime from C". */
#include <stdio.h>
#include <stdlib.h>

#include <prefixd-runtime/cache.h>
#include <prefixd-runtime/model.h>
#include <prefixd-runtime/session.h>

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	struct pfx_model_opts opts = { .threads = 1, .block_tokens = 4 };
	struct pfx_model *m;
	struct pfx_error err;
	if (pfx_model_load(argv[1], &opts, &m, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	float *logits = malloc(sizeof(float) * (size_t)pfx_model_config(m)->vocab);
	const int32_t prompt[13] = { 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53 };
	const int32_t q1[2] = { 60, 61 }, q2[3] = { 70, 71, 72 };
	struct pfx_session *s;
	if (!logits || pfx_session_new(m, &s, &err) ||
	    pfx_session_append(s, prompt, 13, PFX_LOGITS_NONE, NULL, &err) ||
	    pfx_session_freeze(s, &err) ||
	    pfx_session_run(s, q1, 2, PFX_LOGITS_LAST, logits, &err) ||
	    pfx_session_run(s, q2, 3, PFX_LOGITS_LAST, logits, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	printf("length %zu\n", pfx_session_length(s));
	pfx_session_free(s);

	/* Through prefixd (prefixd-runtime/cache.h). */
	struct pfx_cache *c;
	if (pfx_cache_open(m, argv[2], NULL, 0, &c, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	for (int i = 0; i < 2; i++) {
		struct pfx_prefill_info info;
		struct pfx_error cache_err;
		if (pfx_session_new(m, &s, &err) ||
		    pfx_session_prefill(s, c, prompt, 13, PFX_LOGITS_LAST, logits, &info, &cache_err,
					&err)) {
			fprintf(stderr, "%s\n", err.msg);
			return 1;
		}
		printf("prefill %d: attached %zu computed %zu\n", i, info.attached, info.computed);
		pfx_session_free(s);
	}
	pfx_cache_close(c);
	free(logits);
	pfx_model_free(m);
	return 0;
}
EOF
cat >"$tmp/client.c" <<'EOF'
/* README: "A process that is not a model runtime uses libprefixd directly". */
#include <stdio.h>
#include <string.h>

#include "prefixd.h"

#define BLOCK_BYTES 8192

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	struct prefixd_layout layout = { .block_tokens = 4, .block_bytes = BLOCK_BYTES };
	memset(layout.fingerprint, 7, sizeof(layout.fingerprint));
	struct prefixd *c;
	if (prefixd_connect(argv[1], &layout, &c)) { /* HELLO */
		fprintf(stderr, "connect: %s\n", prefixd_errmsg());
		return 1;
	}
	const uint32_t tokens[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct prefixd_prompt *p;
	if (prefixd_prompt_new(&layout, &p) || prefixd_prompt_append(p, tokens, 8))
		return 1;
	uint64_t lease;
	uint32_t hit, stored, dedup;
	const void *kv[64];
	if (prefixd_match_prompt(c, p, 64, &lease, &hit, kv)) {
		fprintf(stderr, "match: %s\n", prefixd_errmsg());
		return 1;
	}
	/* ... compute the rest, prefixd_publish() the new blocks ... */
	static unsigned char blocks[2][BLOCK_BYTES];
	memset(blocks[0], 0xa5, BLOCK_BYTES);
	memset(blocks[1], 0x5a, BLOCK_BYTES);
	const void *computed[2] = { blocks[0], blocks[1] };
	if (hit < 2 && prefixd_publish(c, lease, tokens, hit, 2 - hit, computed + hit, &stored, &dedup)) {
		fprintf(stderr, "publish: %s\n", prefixd_errmsg());
		return 1;
	}
	if (lease)
		prefixd_release(c, lease);
	printf("first match %u\n", hit);
	if (prefixd_match_prompt(c, p, 64, &lease, &hit, kv)) {
		fprintf(stderr, "match: %s\n", prefixd_errmsg());
		return 1;
	}
	printf("second match %u, %s\n", hit,
	       hit == 2 && !memcmp(kv[0], blocks[0], BLOCK_BYTES) && !memcmp(kv[1], blocks[1], BLOCK_BYTES)
		       ? "same bytes" : "OTHER BYTES");
	prefixd_release(c, lease);
	prefixd_prompt_free(p);
	prefixd_close(c);
	return 0;
}
EOF
san=
if [ "$PFX_SANITIZE" != none ]; then
	# The installed libraries are instrumented: so must the programs be.
	san="-fsanitize=$PFX_SANITIZE"
fi
# shellcheck disable=SC2046,SC2086
$PFX_CC -std=c11 -Wall $san -o "$tmp/runtime" "$tmp/runtime.c" \
	$(pc --cflags --libs prefixd-runtime) -Wl,-rpath,"$lib" >"$tmp/cc.log" 2>&1 ||
	{ cat "$tmp/cc.log" >&2; fail "the runtime example does not build against pkg-config prefixd-runtime"; }
# shellcheck disable=SC2046,SC2086
$PFX_CC -std=c11 -Wall $san -o "$tmp/client" "$tmp/client.c" \
	$(pc --cflags --libs prefixd) -Wl,-rpath,"$lib" >"$tmp/cc.log" 2>&1 ||
	{ cat "$tmp/cc.log" >&2; fail "the libprefixd example does not build against pkg-config prefixd"; }

# The installed daemon, for the examples and the installed prefixctl.
"$bin/prefixd" --socket "$tmp/sock" --block-tokens 4 --memory 64M --threads 1 2>"$tmp/daemon.log" &
daemon=$!
i=0
until grep -q "listening on" "$tmp/daemon.log"; do
	i=$((i + 1))
	if [ $i -gt 500 ] || ! kill -0 "$daemon" 2>/dev/null; then
		cat "$tmp/daemon.log" >&2
		fail "the installed prefixd does not start"
	fi
	sleep 0.01
done

"$tmp/client" "$tmp/sock" >"$tmp/client.out" 2>&1 || { cat "$tmp/client.out" >&2; fail "the libprefixd example"; }
grep -q "^second match 2, same bytes$" "$tmp/client.out" ||
	{ cat "$tmp/client.out" >&2; fail "the libprefixd example did not attach what it published"; }
"$tmp/runtime" "$PFX_FIXTURES/neox-tiny" "$tmp/sock" >"$tmp/runtime.out" 2>&1 ||
	{ cat "$tmp/runtime.out" >&2; fail "the runtime example"; }
grep -q "^length 13$" "$tmp/runtime.out" && grep -q "^prefill 1: attached 12 computed 1$" "$tmp/runtime.out" ||
	{ cat "$tmp/runtime.out" >&2; fail "the runtime example did not attach its prefix"; }
"$bin/prefixctl" --socket "$tmp/sock" stats >"$tmp/stats.out" 2>&1 ||
	{ cat "$tmp/stats.out" >&2; fail "the installed prefixctl cannot read the installed daemon's stats"; }

kill -TERM "$daemon"
rc=0
wait "$daemon" || rc=$?
daemon=
[ $rc -eq 0 ] || { cat "$tmp/daemon.log" >&2; fail "the installed prefixd exits $rc on SIGTERM"; }

# The man page, and every option of --help in it.
man=$root$PFX_MANDIR/man8/prefixd.8
[ -f "$man" ] || fail "$PFX_MANDIR/man8/prefixd.8 is not installed"
for opt in $("$bin/prefixd" --help | grep -o -- '--[a-z][a-z-]*' | sort -u); do
	roff=$(printf '%s' "$opt" | sed 's/-/\\-/g')
	grep -qF -- "$roff" "$man" || fail "prefixd.8 does not describe $opt"
done
if command -v groff >/dev/null; then
	groff -man -Tutf8 -ww -z "$man" >"$tmp/groff.log" 2>&1 || true
	if [ -s "$tmp/groff.log" ]; then
		cat "$tmp/groff.log" >&2
		fail "groff warns about prefixd.8"
	fi
fi
# The client pages, and every option of --help and of each COMMAND --help
# (the commands listed under "commands:" in --help) in them.
for t in prefixctl prefix-run; do
	man=$root$PFX_MANDIR/man1/$t.1
	[ -f "$man" ] || fail "$PFX_MANDIR/man1/$t.1 is not installed"
	"$bin/$t" --help >"$tmp/help" || fail "$t --help exits $?"
	cmds=$(sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p' "$tmp/help")
	[ -n "$cmds" ] || fail "$t --help lists no commands"
	for c in $cmds; do
		"$bin/$t" "$c" --help >>"$tmp/help" || fail "$t $c --help exits $?"
	done
	for opt in $(grep -o -- '--[a-z][a-z-]*' "$tmp/help" | sort -u); do
		roff=$(printf '%s' "$opt" | sed 's/-/\\-/g')
		grep -qF -- "$roff" "$man" || fail "$t.1 does not describe $opt"
	done
	if command -v groff >/dev/null; then
		groff -man -Tutf8 -ww -z "$man" >"$tmp/groff.log" 2>&1 || true
		if [ -s "$tmp/groff.log" ]; then
			cat "$tmp/groff.log" >&2
			fail "groff warns about $t.1"
		fi
	fi
done

# The systemd units, pointing at the installed daemon.
units=$root$PFX_PREFIX/lib/systemd
grep -qx "ExecStart=$PFX_BINDIR/prefixd \$PREFIXD_OPTS" "$units/system/prefixd.service" ||
	fail "system prefixd.service does not start $PFX_BINDIR/prefixd"
# The disk tier's place under ProtectSystem=strict: /var/lib/prefixd, made
# writable for the daemon's user by StateDirectory= (README, prefixd.8).
if grep -qx "ProtectSystem=strict" "$units/system/prefixd.service"; then
	grep -qx "StateDirectory=prefixd" "$units/system/prefixd.service" ||
		fail "system prefixd.service: ProtectSystem=strict and no StateDirectory=prefixd, so --disk-dir /var/lib/prefixd is read-only"
fi
grep -qF -- '\-\-disk\-dir /var/lib/prefixd' "$root$PFX_MANDIR/man8/prefixd.8" ||
	fail "prefixd.8 does not say where the disk tier goes under systemd"
grep -qx "ListenStream=/run/prefixd.sock" "$units/system/prefixd.socket" ||
	fail "system prefixd.socket does not listen on /run/prefixd.sock"
grep -qx "ExecStart=$PFX_BINDIR/prefixd \$PREFIXD_OPTS" "$units/user/prefixd.service" ||
	fail "user prefixd.service does not start $PFX_BINDIR/prefixd"
[ -f "$units/user/prefixd.socket" ] || fail "no user prefixd.socket"
[ -f "$root$PFX_PREFIX/lib/sysusers.d/prefixd.conf" ] || fail "no sysusers.d/prefixd.conf"

say "ok: installed under $PFX_PREFIX (staged), programs, libraries, examples, man pages, units"
