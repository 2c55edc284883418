/* SPDX-License-Identifier: MIT */
/*
 * bench/tokenize: the tokenizer (text.h) on about 1 MB of mixed text built
 * from tests/tokenizers/corpus.jsonl (prose, code, digits, emoji, CJK, RTL,
 * whitespace runs), for each of the five tokenizers in tests/tokenizers/,
 * one thread (the load uses two where the machine has them):
 *   - load time of the folder (tokenizer.json and config), best of 3;
 *   - encode throughput in MB/s (the whole text in one call, Hugging Face's
 *     parse-special behaviour, best of 3);
 *   - streaming decode, ns per token, over the ids of that encode;
 *   - for llama3, heap bytes held by the loaded tokenizer against its
 *     tokenizer.json size (target <= 2x).
 * When node and the npm package @anush008/tokenizers (Rust tokenizers
 * 0.22.2, the reference) can be found (TOKREF_DIR = a directory with
 * node_modules/@anush008/tokenizers, else node's own search from the current
 * directory), the same text is encoded by it in the same way and the ratio
 * printed (target: ours >= 2x its throughput, load <= 0.5x its time).
 * TinyLlama's original file is one Rust refuses (legacy merges with
 * spaces); the reference run skips it.
 *
 *   tokenize [--mb N] [--only NAME]
 *
 * Prints one JSON object.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "corpus.h"
#include "opts.h"
#include "report.h"
#include "text.h"

#define NAME "tokenize"

static const char *const names[] = { "neox", "smollm", "tinyllama", "llama3", "qwen3" };

/* The corpus lines, joined by newlines, repeated up to mb megabytes. */
static char *build_text(double mb, size_t *len)
{
	struct bench_corpus c;
	bench_corpus_read(TOKDIR, &c);
	size_t want = (size_t)(mb * 1e6), n = 0;
	char *out = malloc(want + 65536);
	for (size_t i = 0; n < want; i++) {
		size_t l = c.len[i % c.n];
		if (n + l + 1 > want + 65536)
			break;
		memcpy(out + n, c.line[i % c.n], l);
		n += l;
		out[n++] = '\n';
	}
	bench_corpus_free(&c);
	*len = n;
	return out;
}

/* The reference's figures for one tokenizer, by running node; 0 on success. */
static int reference(const char *name, const char *textfile, double *load_s, double *mbps)
{
	char script[] = "/tmp/pfx-tokref-XXXXXX.cjs";
	int fd = mkstemps(script, 4);
	if (fd < 0)
		return -1;
	FILE *f = fdopen(fd, "w");
	fprintf(f,
		"const path = require('path');\n"
		"let T;\n"
		"const d = process.env.TOKREF_DIR;\n"
		"try { T = require(d ? path.join(d, 'node_modules', '@anush008/tokenizers')\n"
		"                    : '@anush008/tokenizers'); } catch (e) { process.exit(3); }\n"
		"const fs = require('fs');\n"
		"const text = fs.readFileSync(process.argv[3], 'utf8');\n"
		"(async () => {\n"
		"  let best = 1e9, tok;\n"
		"  for (let i = 0; i < 3; i++) { const t0 = process.hrtime.bigint();\n"
		"    tok = T.Tokenizer.fromFile(process.argv[2]);\n"
		"    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9); }\n"
		"  let enc = 1e9;\n"
		"  for (let i = 0; i < 3; i++) { const t0 = process.hrtime.bigint();\n"
		"    await tok.encode(text, null, { addSpecialTokens: false });\n"
		"    enc = Math.min(enc, Number(process.hrtime.bigint() - t0) / 1e9); }\n"
		"  console.log(best + ' ' + (Buffer.byteLength(text) / 1e6 / enc));\n"
		"})();\n");
	fclose(f);
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "node '%s' '%s/%s/tokenizer.json' '%s' 2>/dev/null", script, TOKDIR, name,
		 textfile);
	FILE *p = popen(cmd, "r");
	int r = -1;
	if (p) {
		if (fscanf(p, "%lf %lf", load_s, mbps) == 2)
			r = 0;
		pclose(p);
	}
	unlink(script);
	return r;
}

int main(int argc, char **argv)
{
	double mb = 1.0;
	const char *only = NULL;
	static const struct option opts[] = { { "mb", required_argument, 0, 'm' },
					      { "only", required_argument, 0, 'o' },
					      { 0, 0, 0, 0 } };
	for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		if (c == 'm')
			mb = opt_double(NAME, "mb", optarg, 0.01, 64);
		else if (c == 'o')
			only = optarg;
		else {
			fprintf(stderr, "usage: tokenize [--mb N] [--only NAME]\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "tokenize: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	bool known = !only;
	for (size_t k = 0; k < sizeof(names) / sizeof(*names); k++)
		known |= only && !strcmp(only, names[k]);
	if (!known) {
		fprintf(stderr, "tokenize: --only must be one of neox, smollm, tinyllama, llama3, qwen3, "
				"not '%s'\n", only);
		return 2;
	}
	size_t len;
	char *text = build_text(mb, &len);
	char textfile[] = "/tmp/pfx-toktext-XXXXXX";
	int fd = mkstemp(textfile);
	if (fd < 0 || write(fd, text, len) != (ssize_t)len) {
		fprintf(stderr, "tokenize: cannot write the text to /tmp\n");
		return 1;
	}
	close(fd);
	struct bench_cpu cpu0;
	bench_cpu_now(&cpu0);
	report_begin(NAME);
	report_fmt("text_bytes", "%zu", len);
	for (size_t k = 0; k < sizeof(names) / sizeof(*names); k++) {
		if (only && strcmp(only, names[k]))
			continue;
		char dir[512];
		snprintf(dir, sizeof(dir), "%s/%s", TOKDIR, names[k]);
		struct pfx_tokenizer *t = NULL;
		struct pfx_error err;
		double load = 1e9;
		size_t held = 0;
		for (int i = 0; i < 3; i++) {
			pfx_tokenizer_free(t);
			struct mallinfo2 before = mallinfo2();
			double t0 = bench_now();
			if (pfx_tokenizer_load(dir, &t, &err)) {
				fprintf(stderr, "tokenize: %s\n", err.msg);
				return 1;
			}
			double dt = bench_now() - t0;
			load = dt < load ? dt : load;
			held = mallinfo2().uordblks - before.uordblks;
		}
		int32_t *ids = NULL;
		size_t n = 0;
		double enc = 1e9;
		for (int i = 0; i < 3; i++) {
			free(ids);
			double t0 = bench_now();
			if (pfx_tokenize(t, text, len, PFX_TEXT_PARSE_SPECIAL, &ids, &n, &err)) {
				fprintf(stderr, "tokenize: %s: %s\n", names[k], err.msg);
				return 1;
			}
			double dt = bench_now() - t0;
			enc = dt < enc ? dt : enc;
		}
		struct pfx_detok_stream *s;
		double t0 = bench_now();
		size_t out = 0;
		if (pfx_detok_stream_new(t, 0, &s, &err))
			return 1;
		for (size_t i = 0; i < n; i++) {
			const char *p;
			size_t l;
			if (pfx_detok_stream_push(s, ids[i], &p, &l, &err)) {
				fprintf(stderr, "tokenize: %s: %s\n", names[k], err.msg);
				return 1;
			}
			out += l;
		}
		const char *p;
		size_t l;
		pfx_detok_stream_finish(s, &p, &l, &err);
		out += l;
		double dec = bench_now() - t0;
		pfx_detok_stream_free(s);
		double ns_token = n ? dec * 1e9 / (double)n : 0.0;
		char fig[512];
		int at = snprintf(fig, sizeof(fig),
				  "{\"load_s\": %.4f, \"encode_mb_s\": %.2f, \"tokens\": %zu, "
				  "\"stream_decode_ns_per_token\": %.1f, \"decoded_bytes\": %zu",
				  load, (double)len / 1e6 / enc, n, ns_token, out);
		report_target(report_key("%s_stream_decode_ns_per_token", names[k]), ns_token,
			      REPORT_AT_MOST, 1000);
		if (!strcmp(names[k], "llama3")) {
			char file[600];
			struct stat st;
			snprintf(file, sizeof(file), "%s/tokenizer.json", dir);
			if (!stat(file, &st)) {
				double ratio = (double)held / (double)st.st_size;
				at += snprintf(fig + at, sizeof(fig) - (size_t)at,
					       ", \"heap_bytes\": %zu, \"file_bytes\": %lld, "
					       "\"heap_vs_file\": %.2f",
					       held, (long long)st.st_size, ratio);
				report_target("llama3_heap_vs_file", ratio, REPORT_AT_MOST, 2);
			}
		}
		double rl, rmbps;
		if (strcmp(names[k], "tinyllama") && !reference(names[k], textfile, &rl, &rmbps)) {
			double er = (double)len / 1e6 / enc / rmbps, lr = load / rl;
			at += snprintf(fig + at, sizeof(fig) - (size_t)at,
				       ", \"rust_load_s\": %.4f, \"rust_encode_mb_s\": %.2f, "
				       "\"encode_vs_rust\": %.2f, \"load_vs_rust\": %.2f",
				       rl, rmbps, er, lr);
			report_target(report_key("%s_encode_vs_rust", names[k]), er, REPORT_AT_LEAST, 2);
			report_target(report_key("%s_load_vs_rust", names[k]), lr, REPORT_AT_MOST, 0.5);
		}
		snprintf(fig + at, sizeof(fig) - (size_t)at, "}");
		report_fmt(names[k], "%s", fig);
		free(ids);
		pfx_tokenizer_free(t);
	}
	double others, steal;
	bench_cpu_since(&cpu0, &others, &steal);
	report_noise(others, steal);
	report_machine();
	bool met = report_end("one thread (load: up to two); load: best of 3; encode: best of 3 over text_bytes of "
			      "corpus lines; *_vs_rust: beside Rust tokenizers 0.22.2 on the same "
			      "text (TOKREF_DIR), absent when node or the package is missing");
	unlink(textfile);
	free(text);
	return met ? 0 : 1;
}
