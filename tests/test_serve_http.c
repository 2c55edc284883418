/* SPDX-License-Identifier: MIT */
/*
 * prefix-serve over raw HTTP: the server started on --port 0 in a temporary
 * directory, its "listening on" line read from its stderr, requests made on
 * plain sockets, and SIGTERM's exit status checked. The model is a random
 * Llama (a few MB of weights, slow enough that a request of a few hundred
 * tokens is still running when the test acts on it) beside the tiny-chat
 * tokenizer (tests/tokenizers/tiny-chat, ChatML).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon_util.h"
#include "random_model.h"
#include "serve_util.h"

#define TOKDIR SOURCE_ROOT "/tests/tokenizers/tiny-chat"

/* The model every test uses, made once by the runner (the hook below). */
static char model[64];

static void make_model(void)
{
	snprintf(model, sizeof(model), "/tmp/pfx-serve-model-%d", (int)getpid());
	/* Big enough that loading and a few hundred decode steps take a
	 * while (about 11M parameters, 44 MB), small enough to write fast. */
	struct pfx_config c = {
		.arch = "LlamaForCausalLM", .hidden = 384, .n_layers = 6, .n_heads = 6,
		.n_kv_heads = 6, .head_dim = 64, .intermediate = 1024, .vocab = 512,
		.max_positions = 2048, .rotary_dim = 64, .rope_base = 10000.0f,
		.norm_eps = 1e-5f, .norm = PFX_NORM_RMS, .act = PFX_ACT_SILU,
	};
	struct pfx_error err = { "" };
	if (pfx_random_checkpoint(model, &c, "F32", 7, &err)) {
		fprintf(stderr, "cannot write the model: %s\n", err.msg);
		abort();
	}
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "cp %s/tokenizer.json %s/tokenizer_config.json %s/", TOKDIR,
		 TOKDIR, model);
	if (system(cmd))
		abort();
}

/* The runner makes it; the tests, in processes of their own, find it
 * through the environment. */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	make_model();
	setenv("PFX_SERVE_TEST_MODEL", model, 1);
}

static void find_model(void)
{
	const char *m = getenv("PFX_SERVE_TEST_MODEL");
	cr_assert(m, "no model: the runner's hook did not run");
	snprintf(model, sizeof(model), "%s", m);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
	(void)stats;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", model);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", model);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ==== The server ==== */

struct srv {
	pid_t pid;
	int port;
	char dir[64];
	char log[96];
	bool stopped;
	char *final_log;           /* the log as it was when the server stopped */
};

static const char *read_log(const struct srv *s)
{
	static char buf[1 << 20];
	if (s->final_log)
		return s->final_log;
	buf[0] = 0;
	FILE *fp = fopen(s->log, "r");
	if (fp) {
		size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
		buf[n] = 0;
		fclose(fp);
	}
	return buf;
}

static int get(int port, const char *path, char **resp);

/* Starts prefix-serve with the model, --port 0 (unless extra names a port),
 * --no-cache, --threads 1 and extra (NULL-terminated); returns once it
 * listens, and once /health says 200 when ready. */
static void srv_start_args(struct srv *s, bool ready, const char *const *extra)
{
	memset(s, 0, sizeof(*s));
	find_model();
	snprintf(s->dir, sizeof(s->dir), "/tmp/pfx-serve-XXXXXX");
	cr_assert(mkdtemp(s->dir));
	snprintf(s->log, sizeof(s->log), "%s/log", s->dir);
	const char *argv[48] = { "prefix-serve", "--model", model, "--threads", "1" };
	int n = 5;
	bool port = false, socket = false;
	for (int i = 0; extra && extra[i]; i++) {
		port |= !strcmp(extra[i], "--port");
		socket |= !strcmp(extra[i], "--socket");
		argv[n++] = extra[i];
	}
	if (!socket)
		argv[n++] = "--no-cache";
	if (!port) {
		argv[n++] = "--port";
		argv[n++] = "0";
	}
	argv[n] = NULL;
	s->pid = fork();
	cr_assert(s->pid >= 0);
	if (!s->pid) {
		/* A test that fails between start and stop leaves no server. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int nul = open("/dev/null", O_RDWR);
		dup2(fd, 2);
		dup2(nul, 1);
		dup2(nul, 0);
		execv(PREFIX_SERVE, (char **)argv);
		_exit(127);
	}
	double t0 = now();
	for (;;) {
		const char *l = strstr(read_log(s), "prefix-serve: listening on ");
		if (l && strchr(l, '\n')) {
			const char *colon = memrchr(l, ':', (size_t)(strchr(l, '\n') - l));
			cr_assert(colon, "%s", l);
			s->port = atoi(colon + 1);
			break;
		}
		int st;
		cr_assert_eq(waitpid(s->pid, &st, WNOHANG), 0, "prefix-serve exited: %s",
			     read_log(s));
		cr_assert_lt(now() - t0, 30, "prefix-serve does not listen: %s", read_log(s));
		usleep(2000);
	}
	cr_assert_gt(s->port, 0);
	/* Ready by its own word: with --reuse-port another process may be
	 * the one answering /health. */
	while (ready && !strstr(read_log(s), "prefix-serve: ready")) {
		int st;
		cr_assert_eq(waitpid(s->pid, &st, WNOHANG), 0, "prefix-serve exited: %s",
			     read_log(s));
		cr_assert_lt(now() - t0, 60, "prefix-serve is not ready: %s", read_log(s));
		usleep(5000);
	}
	while (ready) {
		char *r = NULL;
		int status = get(s->port, "/health", &r);
		free(r);
		if (status == 200)
			break;
		cr_assert_lt(now() - t0, 60, "prefix-serve is not ready: %s", read_log(s));
		usleep(10000);
	}
}

static void srv_start(struct srv *s, const char *const *extra)
{
	srv_start_args(s, true, extra);
}

/* SIGTERM and the exit status (128 + signal when killed). */
static int srv_stop(struct srv *s)
{
	if (s->stopped)
		return 0;
	s->stopped = true;
	kill(s->pid, SIGTERM);
	int st = 0;
	double t0 = now();
	while (waitpid(s->pid, &st, WNOHANG) == 0) {
		if (now() - t0 > 40) {
			kill(s->pid, SIGKILL);
			waitpid(s->pid, &st, 0);
			break;
		}
		usleep(5000);
	}
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	/* Kept for the test's checks until its process ends (reachable from
	 * kept: no leak). */
	static char *kept[16] __attribute__((used));
	static int nkept;
	s->final_log = strdup(read_log(s));
	if (nkept < 16)
		kept[nkept++] = s->final_log;
	if (code)
		fprintf(stderr, "prefix-serve exited %d:\n%s\n", code, read_log(s));
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", s->dir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", s->dir);
	return code;
}

/* ==== Raw HTTP ==== */

/* The socket client is tests/support/serve_util's; these assert. */
static int dial(int port)
{
	int fd = sp_connect(port, 30000);
	cr_assert(fd >= 0, "connect: %s", strerror(errno));
	return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
	cr_assert_eq(sp_send(fd, p, n), 0, "send: %s", strerror(errno));
}

/* Everything until the server closes (malloc'd, NUL-terminated). */
static char *read_all(int fd)
{
	char *b = sp_recv_all(fd);
	cr_assert(b, "out of memory");
	return b;
}

/* A request with "Connection: close": the status, and the whole response. */
static int request(int port, const char *method, const char *path, const char *headers,
		   const char *body, char **resp)
{
	return sp_http(port, method, path, headers, body, resp);
}

static int get(int port, const char *path, char **resp)
{
	return request(port, "GET", path, NULL, NULL, resp);
}

static int post(int port, const char *path, const char *body, char **resp)
{
	return request(port, "POST", path, NULL, body, resp);
}

static const char *body_of(const char *resp)
{
	const char *b = strstr(resp, "\r\n\r\n");
	return b ? b + 4 : "";
}

/* A header's value (static, the first line of it), NULL when absent. */
static const char *header(const char *resp, const char *name)
{
	static char v[256];
	char key[64];
	snprintf(key, sizeof(key), "\r\n%s:", name);
	const char *end = strstr(resp, "\r\n\r\n");
	const char *p = strcasestr(resp, key);
	if (!p || (end && p > end))
		return NULL;
	p += strlen(key);
	p += strspn(p, " ");
	snprintf(v, sizeof(v), "%.*s", (int)strcspn(p, "\r\n"), p);
	return v;
}

/* Chunked transfer decoded (malloc'd). */
static char *dechunk(const char *b)
{
	char *out = malloc(strlen(b) + 1);
	size_t len = 0;
	for (;;) {
		char *end;
		unsigned long n = strtoul(b, &end, 16);
		const char *data = strstr(end, "\r\n");
		if (!n || !data)
			break;
		data += 2;
		memcpy(out + len, data, n);
		len += n;
		b = data + n + 2;
	}
	out[len] = 0;
	return out;
}

/* The OpenAI error object of a response: checks its shape, returns its type. */
static void expect_error(const char *resp, int status, const char *type)
{
	cr_expect_eq(sp_status(resp), status, "%s", resp);
	cr_expect(strstr(header(resp, "Content-Type") ? header(resp, "Content-Type") : "",
			 "application/json"), "%s", resp);
	json_object *j = json_tokener_parse(body_of(resp));
	cr_assert(j, "not JSON: %s", resp);
	json_object *e, *v;
	cr_assert(json_object_object_get_ex(j, "error", &e), "%s", resp);
	cr_expect(json_object_object_get_ex(e, "message", &v) &&
		  json_object_get_string_len(v) > 0, "%s", resp);
	cr_expect(json_object_object_get_ex(e, "param", NULL), "%s", resp);
	cr_expect(json_object_object_get_ex(e, "code", NULL), "%s", resp);
	cr_expect(json_object_object_get_ex(e, "type", &v) &&
		  !strcmp(json_object_get_string(v), type), "type %s wanted: %s", type, resp);
	json_object_put(j);
}

#define CHAT(extra) "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}]" extra "}"

/* A streamed chat on its own connection: sends it and returns the socket
 * once the first text has come (the role chunk comes before the request
 * is admitted; text, once it runs). */
static int start_stream(int port, int max_tokens)
{
	char body[512];
	snprintf(body, sizeof(body),
		 CHAT(",\"stream\":true,\"ignore_eos\":true,\"max_tokens\":%d"), max_tokens);
	int fd = dial(port);
	char head[1024];
	snprintf(head, sizeof(head),
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
		 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(body), body);
	send_all(fd, head, strlen(head));
	char buf[16384];
	size_t len = 0;
	static const char text[] = "\"delta\":{\"content\"";
	while (!memmem(buf, len, text, sizeof(text) - 1)) {
		ssize_t n = recv(fd, buf + len, sizeof(buf) - len, 0);
		cr_assert(n > 0, "the stream did not start: %.*s", (int)len, buf);
		len += (size_t)n;
	}
	cr_assert_eq(sp_status(buf), 200, "%.*s", (int)len, buf);
	return fd;
}

static int count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

/* A metric's value from /metrics ("name{labels}" as a prefix), -1 if absent. */
static double metric(int port, const char *name)
{
	char *r;
	cr_assert_eq(get(port, "/metrics", &r), 200);
	const char *p = body_of(r);
	double v = -1;
	for (const char *l = p; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
		if (!strncmp(l, name, strlen(name))) {
			v = strtod(strchr(l, ' ') + 1, NULL);
			break;
		}
	free(r);
	usleep(5000); /* callers poll: keep the log short */
	return v;
}

/* ==== Tests ==== */

Test(serve_http, health_is_503_while_loading_then_200)
{
	struct srv s;
	srv_start_args(&s, false, NULL);
	/* The line comes before the model loads (44 MB to map and hash on
	 * one thread): the first answer is the loading one. */
	char *r;
	int first = get(s.port, "/health", &r);
	cr_expect_eq(first, 503, "%s", r);
	cr_expect(strstr(body_of(r), "loading"), "%s", r);
	cr_expect(header(r, "Retry-After"), "%s", r);
	free(r);
	double t0 = now();
	int st;
	while ((st = get(s.port, "/health", NULL)) == 503)
		cr_assert_lt(now() - t0, 60);
	cr_expect_eq(st, 200);
	cr_expect(strstr(read_log(&s), "prefix-serve: ready"), "%s", read_log(&s));
	cr_expect_eq(srv_stop(&s), 0);
}

/* A stop signal while the model loads: out at once, status 0. */
Test(serve_http, sigterm_while_loading_exits_0)
{
	struct srv s;
	srv_start_args(&s, false, NULL);
	cr_expect_eq(get(s.port, "/health", NULL), 503);
	cr_expect_eq(srv_stop(&s), 0);
	cr_expect(strstr(read_log(&s), "stopped while loading") ||
		  strstr(read_log(&s), "prefix-serve: stopped"), "%s", read_log(&s));
}

Test(serve_http, api_key_file_401_without_the_key_200_with_it)
{
	struct srv s;
	char key[128];
	snprintf(key, sizeof(key), "/tmp/pfx-serve-key-%d", (int)getpid());
	FILE *fp = fopen(key, "w");
	cr_assert(fp);
	fputs("sk-test-123\n", fp);
	fclose(fp);
	chmod(key, 0600);
	const char *args[] = { "--api-key-file", key, NULL };
	srv_start(&s, args);
	char *r;
	cr_expect_eq(get(s.port, "/v1/models", &r), 401);
	expect_error(r, 401, "authentication_error");
	free(r);
	cr_expect_eq(request(s.port, "GET", "/v1/models", "Authorization: Bearer sk-test-12\r\n",
			     NULL, NULL), 401);
	cr_expect_eq(request(s.port, "GET", "/v1/models", "Authorization: Bearer sk-test-1234\r\n",
			     NULL, NULL), 401);
	cr_expect_eq(request(s.port, "GET", "/v1/models", "Authorization: Basic sk-test-123\r\n",
			     NULL, NULL), 401);
	cr_expect_eq(request(s.port, "POST", "/v1/chat/completions", NULL, CHAT(""), NULL), 401);
	cr_expect_eq(request(s.port, "GET", "/v1/models", "Authorization: Bearer sk-test-123\r\n",
			     NULL, NULL), 200);
	cr_expect_eq(request(s.port, "POST", "/v1/chat/completions",
			     "Authorization: bearer sk-test-123\r\n", CHAT(",\"max_tokens\":2"), &r),
		     200, "%s", r);
	free(r);
	/* Health and metrics stay open (man page). */
	cr_expect_eq(get(s.port, "/health", NULL), 200);
	cr_expect_eq(get(s.port, "/metrics", NULL), 200);
	cr_expect_eq(srv_stop(&s), 0);
	unlink(key);
}

Test(serve_http, unknown_path_404_wrong_method_405)
{
	struct srv s;
	srv_start(&s, NULL);
	char *r;
	get(s.port, "/v1/nothing", &r);
	expect_error(r, 404, "not_found_error");
	free(r);
	get(s.port, "/v1/chat/completions", &r);
	expect_error(r, 405, "invalid_request_error");
	cr_expect_str_eq(header(r, "Allow") ? header(r, "Allow") : "", "POST");
	free(r);
	post(s.port, "/health", "{}", &r);
	expect_error(r, 405, "invalid_request_error");
	cr_expect_str_eq(header(r, "Allow") ? header(r, "Allow") : "", "GET");
	free(r);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve_http, body_past_max_body_is_413)
{
	struct srv s;
	const char *args[] = { "--max-body", "2048", NULL };
	srv_start(&s, args);
	char big[4096];
	memset(big, ' ', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	memcpy(big, "{\"a\":1", 6);
	big[sizeof(big) - 2] = '}';
	char *r;
	/* Declared by Content-Length: refused before the body is read. */
	double t0 = now();
	post(s.port, "/v1/chat/completions", big, &r);
	expect_error(r, 413, "invalid_request_error");
	cr_expect_lt(now() - t0, 5);
	free(r);
	/* Chunked, with no length: refused at the end of the body. */
	int fd = dial(s.port);
	const char *h = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
			"Transfer-Encoding: chunked\r\n\r\n";
	send_all(fd, h, strlen(h));
	for (int i = 0; i < 3; i++) {
		char chunk[1200];
		int n = snprintf(chunk, sizeof(chunk), "400\r\n");
		memset(chunk + n, ' ', 1024);
		memcpy(chunk + n + 1024, "\r\n", 2);
		send_all(fd, chunk, (size_t)n + 1026);
	}
	send_all(fd, "0\r\n\r\n", 5);
	r = read_all(fd);
	close(fd);
	expect_error(r, 413, "invalid_request_error");
	free(r);
	/* Within the limit, the body is read (and is no valid request). */
	cr_expect_eq(post(s.port, "/v1/completions", "{\"prompt\":[1,2],\"max_tokens\":2}", NULL),
		     200);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve_http, oversized_headers_are_refused_and_others_served)
{
	struct srv s;
	srv_start(&s, NULL);
	size_t n = 48 << 10; /* past the 32 KiB a connection may hold */
	char *h = malloc(n + 256);
	int k = snprintf(h, 256, "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(h + k, 'a', n);
	strcpy(h + k + n, "\r\n\r\n");
	int fd = dial(s.port);
	/* The server may close before it has read it all. */
	for (size_t off = 0, len = strlen(h); off < len;) {
		ssize_t w = send(fd, h + off, len - off, MSG_NOSIGNAL);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	char *r = read_all(fd);
	close(fd);
	cr_expect_eq(sp_status(r), 431, "oversized headers answered: %.200s", r);
	free(r);
	free(h);
	cr_expect_eq(get(s.port, "/health", NULL), 200);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve_http, slow_loris_is_dropped_after_the_timeout_while_others_are_served)
{
	struct srv s;
	const char *args[] = { "--timeout", "2", NULL };
	srv_start(&s, args);
	int slow = dial(s.port);
	const char *h = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ";
	send_all(slow, h, strlen(h));
	double t0 = now();
	bool dropped = false;
	int served = 0;
	/* A byte every 200 ms: never idle, never whole. */
	while (now() - t0 < 6) {
		if (send(slow, "a", 1, MSG_NOSIGNAL) != 1) {
			dropped = true;
			break;
		}
		struct pollfd p = { .fd = slow, .events = POLLIN };
		if (poll(&p, 1, 0) == 1) {
			char c;
			if (recv(slow, &c, 1, MSG_DONTWAIT) <= 0) {
				dropped = true;
				break;
			}
		}
		served += get(s.port, "/health", NULL) == 200;
		usleep(200000);
	}
	double t = now() - t0;
	close(slow);
	cr_expect(dropped, "a client trickling its headers was not dropped in %.1f s", t);
	cr_expect_gt(t, 1.5, "dropped after %.1f s, before --timeout 2", t);
	cr_expect_lt(t, 4.5, "dropped after %.1f s", t);
	cr_expect_gt(served, 3, "others were served %d times meanwhile", served);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve_http, malformed_json_is_400)
{
	struct srv s;
	srv_start(&s, NULL);
	char *r;
	post(s.port, "/v1/chat/completions", "{\"messages\": [", &r);
	expect_error(r, 400, "invalid_request_error");
	free(r);
	post(s.port, "/v1/chat/completions", "", &r);
	expect_error(r, 400, "invalid_request_error");
	free(r);
	post(s.port, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":-1}", &r);
	expect_error(r, 400, "invalid_request_error");
	free(r);
	/* The server goes on. */
	cr_expect_eq(post(s.port, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":2}", &r),
		     200, "%s", r);
	free(r);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve_http, queue_full_is_429_with_retry_after)
{
	struct srv s;
	const char *args[] = { "--parallel", "1", "--queue", "0", NULL };
	srv_start(&s, args);
	int busy = start_stream(s.port, 1500);
	char *r;
	post(s.port, "/v1/chat/completions", CHAT(",\"max_tokens\":2"), &r);
	expect_error(r, 429, "rate_limit_error");
	cr_expect(header(r, "Retry-After") && atoi(header(r, "Retry-After")) > 0, "%s", r);
	free(r);
	close(busy);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve_http, stream_framing)
{
	struct srv s;
	srv_start(&s, NULL);
	char *r;
	cr_assert_eq(post(s.port, "/v1/chat/completions",
			  CHAT(",\"stream\":true,\"max_tokens\":6,\"ignore_eos\":true,"
			       "\"stream_options\":{\"include_usage\":true}"), &r), 200, "%s", r);
	cr_expect_str_eq(header(r, "Content-Type") ? header(r, "Content-Type") : "",
			 "text/event-stream");
	cr_expect_str_eq(header(r, "Cache-Control") ? header(r, "Cache-Control") : "", "no-cache");
	char *b = dechunk(body_of(r));
	/* Events: "data: ...\n\n", nothing between them. */
	int nev = 0, ntext = 0;
	char *last = NULL, *usage = NULL;
	for (char *p = b; *p;) {
		cr_assert(!strncmp(p, "data: ", 6), "an event is not 'data: ': %s", p);
		char *end = strstr(p, "\n\n");
		cr_assert(end, "an event without its blank line: %s", p);
		*end = 0;
		const char *data = p + 6;
		if (nev == 0)
			cr_expect(strstr(data, "\"role\":\"assistant\""), "first: %s", data);
		if (strcmp(data, "[DONE]")) {
			json_object *j = json_tokener_parse(data);
			cr_assert(j, "not JSON: %s", data);
			json_object *v;
			cr_expect(json_object_object_get_ex(j, "object", &v) &&
				  !strcmp(json_object_get_string(v), "chat.completion.chunk"), "%s", data);
			if (strstr(data, "\"content\":\"") && !strstr(data, "\"role\""))
				ntext++;
			if (strstr(data, "\"usage\":{"))
				usage = p;
			json_object_put(j);
		}
		last = p;
		nev++;
		p = end + 2;
	}
	cr_expect_str_eq(last ? last : "", "data: [DONE]");
	cr_expect(ntext >= 1, "no text chunk");
	cr_expect(usage && strstr(usage, "\"choices\":[]") && strstr(usage, "\"completion_tokens\":6"),
		  "usage chunk: %s", usage ? usage : "none");
	free(b);
	free(r);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve_http, client_gone_mid_stream_is_cancelled)
{
	struct srv s;
	const char *args[] = { "--parallel", "1", NULL };
	srv_start(&s, args);
	int fd = start_stream(s.port, 1800);
	double running = metric(s.port, "vllm:num_requests_running{");
	cr_expect_eq(running, 1, "running %g: %s", running, read_log(&s));
	close(fd);
	double t0 = now();
	while (metric(s.port, "vllm:num_requests_running{") != 0)
		cr_assert_lt(now() - t0, 10, "the sequence still runs %.1f s after its client left",
			     now() - t0);
	/* Cancelled well before its 1800 tokens; the server serves on. */
	char *r;
	cr_expect_eq(post(s.port, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":2}", &r),
		     200, "%s", r);
	free(r);
	cr_expect_lt(metric(s.port, "vllm:generation_tokens_total{"), 1800);

	/* Not streamed: the same, and 499 in the log and the metrics. */
	fd = dial(s.port);
	const char *body = CHAT(",\"ignore_eos\":true,\"max_tokens\":1800");
	char head[512];
	snprintf(head, sizeof(head), "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
		 "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
	send_all(fd, head, strlen(head));
	t0 = now();
	while (metric(s.port, "vllm:num_requests_running{") != 1)
		cr_assert_lt(now() - t0, 10, "the request does not run");
	close(fd);
	t0 = now();
	while (metric(s.port, "vllm:num_requests_running{") != 0)
		cr_assert_lt(now() - t0, 10, "still running %.1f s after its client left", now() - t0);
	t0 = now();
	while (!strstr(read_log(&s), " 499"))
		cr_assert_lt(now() - t0, 10, "no 499 logged: %s", read_log(&s));
	char *r499;
	cr_assert_eq(get(s.port, "/metrics", &r499), 200);
	cr_expect(strstr(r499, "status=\"499\"} 1\n"), "%s", r499);
	free(r499);
	cr_expect_eq(srv_stop(&s), 0);
	cr_expect(strstr(read_log(&s), "(client gone)"), "%s", read_log(&s));
	cr_expect(strstr(read_log(&s), "POST /v1/chat/completions 499"), "%s", read_log(&s));
}

Test(serve_http, sigterm_finishes_the_running_request_then_exits_0)
{
	struct srv s;
	srv_start(&s, NULL);
	int fd = start_stream(s.port, 60);
	kill(s.pid, SIGTERM);
	char *rest = read_all(fd);
	close(fd);
	cr_expect(strstr(rest, "\"finish_reason\":\"length\""), "%s", rest);
	cr_expect(strstr(rest, "data: [DONE]"), "%s", rest);
	free(rest);
	int st;
	double t0 = now();
	while (waitpid(s.pid, &st, WNOHANG) == 0)
		cr_assert_lt(now() - t0, 30, "still running after SIGTERM");
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, read_log(&s));
	cr_expect(strstr(read_log(&s), "prefix-serve: stopped"), "%s", read_log(&s));
	s.stopped = true;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", s.dir);
	cr_expect_eq(system(cmd), 0);
}

/* A second signal while a request finishes: out at once, status 1. */
Test(serve_http, a_second_signal_stops_at_once)
{
	struct srv s;
	srv_start(&s, NULL);
	int fd = start_stream(s.port, 1800);
	kill(s.pid, SIGTERM);
	double t0 = now();
	while (!strstr(read_log(&s), "prefix-serve: stopping"))
		cr_assert_lt(now() - t0, 10);
	kill(s.pid, SIGINT);
	int st;
	while (waitpid(s.pid, &st, WNOHANG) == 0)
		cr_assert_lt(now() - t0, 10, "still running after two signals");
	s.stopped = true;
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
	cr_expect(strstr(read_log(&s), "a second signal"), "%s", read_log(&s));
	close(fd);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", s.dir);
	cr_expect_eq(system(cmd), 0);
}

Test(serve_http, two_processes_on_one_port_with_reuse_port)
{
	struct srv a, b, c;
	const char *ra[] = { "--reuse-port", NULL };
	srv_start(&a, ra);
	char port[16];
	snprintf(port, sizeof(port), "%d", a.port);
	const char *rb[] = { "--reuse-port", "--port", port, NULL };
	srv_start(&b, rb);
	cr_expect_eq(b.port, a.port);
	/* Both answer: the kernel spreads connections by their addresses
	 * (all 20 to one process: a chance of 2^-19). */
	int before_a = count(read_log(&a), "GET /health 200");
	int before_b = count(read_log(&b), "GET /health 200");
	for (int i = 0; i < 20; i++)
		cr_expect_eq(get(a.port, "/health", NULL), 200);
	usleep(100000); /* the log lines come after the responses */
	int served_a = count(read_log(&a), "GET /health 200") - before_a;
	int served_b = count(read_log(&b), "GET /health 200") - before_b;
	cr_expect_eq(served_a + served_b, 20, "%d + %d", served_a, served_b);
	cr_expect(served_a > 0 && served_b > 0, "%d + %d", served_a, served_b);
	cr_expect_eq(srv_stop(&a), 0);
	char *r;
	cr_expect_eq(post(b.port, "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":2}", &r),
		     200, "%s", r);
	free(r);
	/* Without --reuse-port the port is refused, saying why. */
	memset(&c, 0, sizeof(c));
	find_model();
	snprintf(c.log, sizeof(c.log), "/tmp/pfx-serve-inuse-%d", (int)getpid());
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s --model %s --port %s --no-cache 2>%s", PREFIX_SERVE, model,
		 port, c.log);
	int st = system(cmd);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%d", st);
	cr_expect(strstr(read_log(&c), "in use") && strstr(read_log(&c), "--reuse-port"), "%s",
		  read_log(&c));
	unlink(c.log);
	cr_expect_eq(srv_stop(&b), 0);
}

Test(serve_http, metrics_after_requests)
{
	struct srv s;
	const char *args[] = { "--model-name", "tiny", NULL };
	srv_start(&s, args);
	/* Waiting for the server counted some 200s; this page one more. */
	double ok0 = metric(s.port, "prefix_serve_requests_total{model_name=\"tiny\",status=\"200\"}");
	char *r;
	cr_assert_eq(post(s.port, "/v1/chat/completions", CHAT(",\"max_tokens\":4,\"ignore_eos\":true"), &r),
		     200, "%s", r);
	json_object *j = json_tokener_parse(body_of(r));
	cr_assert(j, "%s", r);
	json_object *u, *v;
	cr_assert(json_object_object_get_ex(j, "usage", &u));
	cr_assert(json_object_object_get_ex(u, "prompt_tokens", &v));
	int prompt = json_object_get_int(v);
	json_object_put(j);
	free(r);
	get(s.port, "/nope", NULL);
	get(s.port, "/x%0Aprefix-serve:%20forged", NULL);
	cr_assert_eq(get(s.port, "/metrics", &r), 200);
	const char *m = body_of(r);
	cr_expect(strstr(header(r, "Content-Type"), "text/plain"), "%s", r);
	char want[256];
	snprintf(want, sizeof(want), "vllm:prompt_tokens_total{model_name=\"tiny\"} %d\n", prompt);
	cr_expect(strstr(m, want), "%s in %s", want, m);
	cr_expect(strstr(m, "vllm:generation_tokens_total{model_name=\"tiny\"} 4\n"), "%s", m);
	snprintf(want, sizeof(want), "prefix_serve_requests_total{model_name=\"tiny\",status=\"200\"} %d\n",
		 (int)ok0 + 2);
	cr_expect(strstr(m, want), "%s in %s", want, m);
	cr_expect(strstr(m, "prefix_serve_requests_total{model_name=\"tiny\",status=\"404\"} 2\n"), "%s", m);
	cr_expect(strstr(m, "prefix_serve_cached_prompt_tokens_total{model_name=\"tiny\"} "), "%s", m);
	cr_expect(strstr(m, "# TYPE vllm:time_to_first_token_seconds histogram\n"), "%s", m);
	cr_expect(strstr(m, "vllm:time_to_first_token_seconds_count{model_name=\"tiny\"} 1\n"), "%s", m);
	cr_expect(strstr(m, "vllm:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 1\n"), "%s", m);
	cr_expect(strstr(m, "vllm:time_per_output_token_seconds_count{model_name=\"tiny\"} 1\n"), "%s", m);
	cr_expect(strstr(m, "vllm:num_requests_running{model_name=\"tiny\"} 0\n"), "%s", m);
	cr_expect(strstr(m, "vllm:num_requests_waiting{model_name=\"tiny\"} 0\n"), "%s", m);
	/* The chat's prompt is kept for the next request (--local-kv). */
	cr_expect(!strstr(m, "prefix_serve_local_kv_bytes{model_name=\"tiny\"} 0\n") &&
		  strstr(m, "prefix_serve_local_kv_bytes{model_name=\"tiny\"} "), "%s", m);
	free(r);
	/* The log line of the completion. */
	cr_expect_eq(srv_stop(&s), 0);
	const char *log = read_log(&s);
	cr_expect(strstr(log, "POST /v1/chat/completions 200 prompt=") && strstr(log, "generated=4 ttft_ms="),
		  "%s", log);
	cr_expect(strstr(log, "GET /nope 404"), "%s", log);
	/* A path cannot forge a log line. */
	cr_expect(strstr(log, "GET /x?prefix-serve:?forged 404"), "%s", log);
	cr_expect(!strstr(log, "\nprefix-serve: forged"), "%s", log);
}

Test(serve_http, models_lists_the_model)
{
	struct srv s;
	const char *args[] = { "--model-name", "tiny", NULL };
	srv_start(&s, args);
	char *r;
	cr_assert_eq(get(s.port, "/v1/models", &r), 200);
	json_object *j = json_tokener_parse(body_of(r));
	cr_assert(j, "%s", r);
	json_object *v, *d;
	cr_expect(json_object_object_get_ex(j, "object", &v) &&
		  !strcmp(json_object_get_string(v), "list"), "%s", r);
	cr_assert(json_object_object_get_ex(j, "data", &d) && json_object_array_length(d) == 1,
		  "%s", r);
	cr_expect(json_object_object_get_ex(json_object_array_get_idx(d, 0), "id", &v) &&
		  !strcmp(json_object_get_string(v), "tiny"), "%s", r);
	json_object_put(j);
	free(r);
	cr_expect_eq(srv_stop(&s), 0);
}

/* GET /v1/models/{model}: the served model's object (its name may hold a
 * "/"), OpenAI's 404 model_not_found for any other. */
Test(serve_http, retrieve_model_by_id)
{
	struct srv s;
	const char *args[] = { "--model-name", "org/tiny", NULL };
	srv_start(&s, args);
	char *r;
	cr_assert_eq(get(s.port, "/v1/models/org/tiny", &r), 200, "%s", r);
	json_object *j = json_tokener_parse(body_of(r));
	cr_assert(j, "%s", r);
	json_object *v;
	cr_expect(json_object_object_get_ex(j, "id", &v) &&
		  !strcmp(json_object_get_string(v), "org/tiny"), "%s", r);
	cr_expect(json_object_object_get_ex(j, "object", &v) &&
		  !strcmp(json_object_get_string(v), "model"), "%s", r);
	cr_expect(json_object_object_get_ex(j, "created", &v) &&
		  json_object_is_type(v, json_type_int), "%s", r);
	cr_expect(json_object_object_get_ex(j, "owned_by", NULL), "%s", r);
	json_object_put(j);
	free(r);
	cr_assert_eq(get(s.port, "/v1/models/tiny", &r), 404, "%s", r);
	expect_error(r, 404, "invalid_request_error");
	cr_expect(strstr(r, "\"code\":\"model_not_found\""), "%s", r);
	cr_expect(strstr(r, "\"param\":\"model\""), "%s", r);
	cr_expect(strstr(r, "The model 'tiny' does not exist"), "%s", r);
	free(r);
	cr_assert_eq(post(s.port, "/v1/models/org/tiny", "{}", &r), 405, "%s", r);
	free(r);
	cr_expect_eq(srv_stop(&s), 0);
}

/* Options are checked before anything starts: exit 2 and why. */
Test(serve_http, bad_options_exit_2_saying_why)
{
	static const struct {
		const char *args, *says;
		int status;
	} cases[] = {
		{ "", "--model DIR is required", 2 },
		{ "--model m --port 70000", "--port takes a whole number from 0 to 65535", 2 },
		{ "--model m --parallel 0", "--parallel takes", 2 },
		{ "--model m --queue -1", "--queue takes", 2 },
		{ "--model m --timeout x", "--timeout takes", 2 },
		{ "--model m --kv-dtype f8", "--kv-dtype is f32, f16 or bf16", 2 },
		{ "--model m --weights f16", "--weights is native or f32", 2 },
		{ "--model m --block-tokens 48", "power of two", 2 },
		{ "--model m --frobnicate", "unknown option", 2 },
		{ "--model m --port 1 --port 2", "--port is given twice", 2 },
		{ "--model m --no-cache --socket /x", "contradict", 2 },
		{ "--model m extra", "unexpected argument", 2 },
		{ "--model /nonexistent/m", "--model /nonexistent/m: No such file or directory", 1 },
		{ "--model " SOURCE_ROOT "/README.md", "is not a directory", 1 },
		{ "--model /tmp --host no.such.host.invalid", "cannot resolve --host", 1 },
		{ "--model /tmp --api-key-file /nonexistent/key", "cannot read --api-key-file", 1 },
		{ "--model /tmp --api-key-file /dev/null", "its first line is empty", 1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char cmd[512], out[4096] = "";
		snprintf(cmd, sizeof(cmd), "%s %s 2>&1", PREFIX_SERVE, cases[i].args);
		FILE *p = popen(cmd, "r");
		cr_assert(p);
		size_t n = fread(out, 1, sizeof(out) - 1, p);
		out[n] = 0;
		int st = pclose(p);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == cases[i].status,
			  "%s: status %d: %s", cases[i].args, st, out);
		cr_expect(strstr(out, cases[i].says), "%s: %s", cases[i].args, out);
	}
	char cmd[256], out[8192] = "";
	snprintf(cmd, sizeof(cmd), "%s --help", PREFIX_SERVE);
	FILE *p = popen(cmd, "r");
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	cr_expect_eq(pclose(p), 0);
	cr_expect(strstr(out, "--reuse-port") && strstr(out, "--api-key-file"), "%s", out);
}

/* Several requests, streamed and not, on one kept-alive connection. */
Test(serve_http, keep_alive_serves_several_requests_on_one_connection)
{
	struct srv s;
	srv_start(&s, NULL);
	int fd = dial(s.port);
	/* GETs first, an unknown path among them: answered, kept alive. */
	const char *gets[] = { "/health", "/nope", "/v1/models", "/metrics" };
	const int want[] = { 200, 404, 200, 200 };
	for (int i = 0; i < 4; i++) {
		char head[256], buf[65536];
		snprintf(head, sizeof(head), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", gets[i]);
		send_all(fd, head, strlen(head));
		size_t len = 0;
		for (;;) {
			ssize_t n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
			cr_assert(n > 0, "%s: the connection closed: %.*s", gets[i], (int)len, buf);
			len += (size_t)n;
			buf[len] = 0;
			const char *b = strstr(buf, "\r\n\r\n");
			if (b && header(buf, "Content-Length") &&
			    strlen(b + 4) >= (size_t)atoi(header(buf, "Content-Length")))
				break;
		}
		cr_expect_eq(sp_status(buf), want[i], "%s: %s", gets[i], buf);
	}
	const char *bodies[] = { CHAT(",\"max_tokens\":3,\"ignore_eos\":true,\"stream\":true"),
				 CHAT(",\"max_tokens\":3,\"ignore_eos\":true"),
				 CHAT(",\"max_tokens\":2,\"ignore_eos\":true,\"stream\":true") };
	for (int i = 0; i < 3; i++) {
		char head[512];
		snprintf(head, sizeof(head),
			 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
			 "Content-Length: %zu\r\n\r\n%s", strlen(bodies[i]), bodies[i]);
		send_all(fd, head, strlen(head));
		/* One response: a chunked stream ends with "0\r\n\r\n", the
		 * other has its Content-Length. */
		char buf[65536];
		size_t len = 0;
		for (;;) {
			ssize_t n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
			cr_assert(n > 0, "response %d cut short: %.*s", i, (int)len, buf);
			len += (size_t)n;
			buf[len] = 0;
			const char *b = strstr(buf, "\r\n\r\n");
			if (!b)
				continue;
			if (strstr(buf, "chunked") ? !!strstr(b, "\r\n0\r\n\r\n")
			    : header(buf, "Content-Length") &&
			      strlen(b + 4) >= (size_t)atoi(header(buf, "Content-Length")))
				break;
		}
		cr_expect_eq(sp_status(buf), 200, "%s", buf);
		if (i != 1)
			cr_expect(strstr(buf, "data: [DONE]"), "%s", buf);
		else
			cr_expect(strstr(buf, "\"completion_tokens\":3"), "%s", buf);
	}
	close(fd);
	cr_expect_eq(srv_stop(&s), 0);
}

struct client {
	int port, tokens;
	char *resp;
};

static void *stream_client(void *arg)
{
	struct client *c = arg;
	char body[512];
	snprintf(body, sizeof(body),
		 CHAT(",\"stream\":true,\"ignore_eos\":true,\"max_tokens\":%d,"
		      "\"stream_options\":{\"include_usage\":true}"), c->tokens);
	/* No Criterion assertions off the main thread: failures show in resp. */
	sp_http(c->port, "POST", "/v1/chat/completions", NULL, body, &c->resp);
	if (!c->resp)
		c->resp = strdup("the exchange failed");
	return NULL;
}

/* More streams than run at once, queued and admitted as others end: each
 * whole, in order, with its own usage (suspend and resume under load). */
Test(serve_http, concurrent_streams_each_complete)
{
	struct srv s;
	const char *args[] = { "--parallel", "3", "--queue", "16", NULL };
	srv_start(&s, args);
	enum { N = 12 };
	struct client c[N];
	pthread_t t[N];
	for (int i = 0; i < N; i++) {
		c[i] = (struct client){ .port = s.port, .tokens = 10 + 5 * i };
		cr_assert_eq(pthread_create(&t[i], NULL, stream_client, &c[i]), 0);
	}
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < N; i++) {
		cr_expect_eq(sp_status(c[i].resp), 200, "%d: %.300s", i, c[i].resp);
		char *b = dechunk(body_of(c[i].resp));
		char want[64];
		snprintf(want, sizeof(want), "\"completion_tokens\":%d", c[i].tokens);
		cr_expect(!strncmp(b, "data: ", 6) && strstr(b, "\"role\":\"assistant\"") &&
			  strstr(b, "\"role\"") < strstr(b, "\"finish_reason\":\"length\""),
			  "%d: %.300s", i, b);
		cr_expect(strstr(b, want), "%d: %s wanted in %.300s", i, want, b);
		size_t bl = strlen(b);
		cr_expect(bl > 14 && !strcmp(b + bl - 14, "data: [DONE]\n\n"), "%d: ends %s", i,
			  bl > 40 ? b + bl - 40 : b);
		free(b);
		free(c[i].resp);
	}
	cr_expect_eq(metric(s.port, "vllm:num_requests_running{"), 0);
	cr_expect_eq(srv_stop(&s), 0);
}

/* Voluntary context switches (wake-ups) of the server's thread named
 * name, from /proc; -1 if it has none. */
static long thread_wakeups(pid_t pid, const char *name)
{
	char path[320], buf[4096];
	long n = -1;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	cr_assert(d, "%s: %s", path, strerror(errno));
	for (struct dirent *e; n < 0 && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid, e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t got = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[got] = 0;
		buf[strcspn(buf, "\n")] = 0;
		if (strcmp(buf, name))
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/status", (int)pid, e->d_name);
		f = fopen(path, "r");
		cr_assert(f);
		got = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[got] = 0;
		const char *v = strstr(buf, "\nvoluntary_ctxt_switches:");
		cr_assert(v);
		n = atol(v + strlen("\nvoluntary_ctxt_switches:"));
	}
	closedir(d);
	return n;
}

/* A stream's chunks go out from the engine thread after each step: the
 * HTTP thread is not woken once a token (it was, a context switch and a
 * cross-CPU wake-up a step). It still wakes for the request itself and
 * at most once a second; a quarter of the tokens leaves room for that. */
Test(serve_http, streaming_does_not_wake_the_http_thread_each_token)
{
	struct srv s;
	const char *args[] = { "--parallel", "1", NULL };
	srv_start(&s, args);
	enum { TOKENS = 160 };
	char *r = NULL;
	cr_assert_eq(get(s.port, "/health", &r), 200);
	free(r);
	long w0 = thread_wakeups(s.pid, "MHD-loop");
	cr_assert(w0 >= 0, "no MHD-loop thread");
	struct client c = { .port = s.port, .tokens = TOKENS };
	double t0 = now();
	stream_client(&c);
	double secs = now() - t0;
	long woken = thread_wakeups(s.pid, "MHD-loop") - w0;
	char *b = dechunk(body_of(c.resp));
	char want[64];
	snprintf(want, sizeof(want), "\"completion_tokens\":%d", TOKENS);
	cr_expect(strstr(b, want), "%s wanted in %.300s", want, b);
	cr_expect(woken < TOKENS / 4 + (long)secs, "the HTTP thread woke %ld times for %d tokens "
		  "in %.1f s", woken, TOKENS, secs);
	free(b);
	free(c.resp);
	cr_expect_eq(srv_stop(&s), 0);
}

/* --help within 80 columns, and every option it names in the man page. */
Test(serve_http, help_fits_80_columns_and_the_man_page_has_every_option)
{
	char cmd[256], out[16384] = "";
	snprintf(cmd, sizeof(cmd), "%s --help", PREFIX_SERVE);
	FILE *p = popen(cmd, "r");
	cr_assert(p);
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	cr_expect_eq(pclose(p), 0);
	FILE *m = fopen(SOURCE_ROOT "/docs/prefix-serve.1", "r");
	cr_assert(m);
	static char man[1 << 17];
	size_t ml = fread(man, 1, sizeof(man) - 1, m);
	man[ml] = 0;
	fclose(m);
	int options = 0;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		cr_expect_leq(strlen(line), 80, "over 80 columns: %s", line);
		for (char *o = strstr(line, "--"); o; o = strstr(o + 2, "--")) {
			char name[64], roff[160];
			size_t k = strspn(o + 2, "abcdefghijklmnopqrstuvwxyz-");
			if (!k || k > 40)
				continue;
			snprintf(name, sizeof(name), "%.*s", (int)k, o + 2);
			/* The man page writes each - as \-. */
			size_t r = 0;
			r += (size_t)snprintf(roff, sizeof(roff), "\\-\\-");
			for (const char *c = name; *c && r < sizeof(roff) - 3; c++)
				r += (size_t)snprintf(roff + r, sizeof(roff) - r, *c == '-' ? "\\-" : "%c", *c);
			cr_expect(strstr(man, roff), "--%s is not in prefix-serve(1)", name);
			options++;
		}
	}
	cr_expect_gt(options, 25);
}

/* n choices streamed with logprobs: each choice's role first, its text with
 * one logprob per token, its finish last; the text equals the same request
 * not streamed (a seed makes the sampling repeat). */
Test(serve_http, choices_stream_with_logprobs)
{
	struct srv s;
	srv_start(&s, NULL);
#define NCH 2
	const char *opts = ",\"n\":2,\"max_tokens\":5,\"ignore_eos\":true,\"logprobs\":true,"
			   "\"top_logprobs\":2,\"temperature\":0.8,\"seed\":11";
	char body[512];
	snprintf(body, sizeof(body), CHAT("%s,\"stream\":true"), opts);
	char *r;
	cr_assert_eq(post(s.port, "/v1/chat/completions", body, &r), 200, "%s", r);
	char *b = dechunk(body_of(r));
	int role[NCH] = { 0 }, finish[NCH] = { 0 }, lp[NCH] = { 0 };
	char text[NCH][256] = { "", "" };
	for (char *p = b; *p;) {
		char *end = strstr(p, "\n\n");
		cr_assert(end);
		*end = 0;
		if (strcmp(p, "data: [DONE]")) {
			json_object *j = json_tokener_parse(p + 6), *ch, *c0, *v, *d, *l;
			cr_assert(j, "%s", p);
			cr_assert(json_object_object_get_ex(j, "choices", &ch));
			c0 = json_object_array_get_idx(ch, 0);
			cr_assert(json_object_object_get_ex(c0, "index", &v));
			int i = json_object_get_int(v);
			cr_assert(i >= 0 && i < NCH, "%s", p);
			cr_assert(json_object_object_get_ex(c0, "delta", &d));
			if (json_object_object_get_ex(d, "role", NULL)) {
				cr_expect(!role[i] && !finish[i], "%s", p);
				role[i]++;
			} else if (json_object_object_get_ex(d, "content", &v)) {
				cr_expect(role[i] && !finish[i], "text before the role: %s", p);
				strncat(text[i], json_object_get_string(v), 255 - strlen(text[i]));
			}
			if (json_object_object_get_ex(c0, "logprobs", &l) && l &&
			    json_object_object_get_ex(l, "content", &v) && v)
				lp[i] += (int)json_object_array_length(v);
			if (json_object_object_get_ex(c0, "finish_reason", &v) && v) {
				cr_expect_str_eq(json_object_get_string(v), "length");
				finish[i]++;
			}
			json_object_put(j);
		}
		p = end + 2;
	}
	free(b);
	free(r);
	snprintf(body, sizeof(body), CHAT("%s"), opts);
	cr_assert_eq(post(s.port, "/v1/chat/completions", body, &r), 200, "%s", r);
	json_object *j = json_tokener_parse(body_of(r)), *ch, *v;
	cr_assert(j && json_object_object_get_ex(j, "choices", &ch), "%s", r);
	for (int i = 0; i < NCH; i++) {
		cr_expect_eq(role[i], 1, "choice %d", i);
		cr_expect_eq(finish[i], 1, "choice %d", i);
		cr_expect_eq(lp[i], 5, "choice %d: %d logprobs", i, lp[i]);
		json_object *m;
		cr_assert(json_object_object_get_ex(json_object_array_get_idx(ch, (size_t)i), "message", &m));
		cr_assert(json_object_object_get_ex(m, "content", &v));
		cr_expect_str_eq(text[i], json_object_get_string(v), "choice %d", i);
	}
	json_object_put(j);
	free(r);
	cr_expect_eq(srv_stop(&s), 0);
}

/* --per-ip: a third connection from one address is closed at once while
 * two are open; once one closes, requests are served again. */
Test(serve_http, per_ip_limit)
{
	struct srv s;
	const char *args[] = { "--per-ip", "2", NULL };
	srv_start(&s, args);
	int a = dial(s.port), b = dial(s.port);
	/* Both accepted: a request on each, kept alive. */
	const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
	char buf[1024];
	send_all(a, req, strlen(req));
	cr_assert_gt(recv(a, buf, sizeof(buf), 0), 0);
	send_all(b, req, strlen(req));
	cr_assert_gt(recv(b, buf, sizeof(buf), 0), 0);
	int c = dial(s.port);
	send(c, req, strlen(req), MSG_NOSIGNAL);
	ssize_t n = recv(c, buf, sizeof(buf), 0);
	cr_expect_leq(n, 0, "a third connection was served: %.*s", (int)(n > 0 ? n : 0), buf);
	close(c);
	close(a);
	double t0 = now();
	while (get(s.port, "/health", NULL) != 200)
		cr_assert_lt(now() - t0, 5, "not served after a connection closed");
	close(b);
	cr_expect_eq(srv_stop(&s), 0);
}

/* --max-conns: past it, a connection waits in the backlog, unserved, until
 * one of the open ones closes. */
Test(serve_http, max_conns_limit)
{
	struct srv s;
	const char *args[] = { "--max-conns", "2", NULL };
	srv_start(&s, args);
	const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
	char buf[1024];
	int a = dial(s.port), b = dial(s.port);
	send_all(a, req, strlen(req));
	cr_assert_gt(recv(a, buf, sizeof(buf), 0), 0);
	send_all(b, req, strlen(req));
	cr_assert_gt(recv(b, buf, sizeof(buf), 0), 0);
	int c = dial(s.port); /* the kernel's backlog takes it */
	send_all(c, req, strlen(req));
	struct pollfd p = { .fd = c, .events = POLLIN };
	cr_expect_eq(poll(&p, 1, 500), 0, "a third connection was served");
	close(a);
	cr_expect_eq(poll(&p, 1, 5000), 1, "the third is not served once one closed");
	ssize_t n = recv(c, buf, sizeof(buf) - 1, 0);
	cr_expect(n > 0 && sp_status(buf) == 200, "%.*s", (int)(n > 0 ? n : 0), buf);
	close(b);
	close(c);
	cr_expect_eq(srv_stop(&s), 0);
}

/* A long prompt is parsed, rendered and encoded off the HTTP thread: while
 * a chat of 5,000 messages (160 KB, seconds to render under ASan, against
 * milliseconds to upload) is prepared and refused (past --ctx: the same
 * 400 before any header), a running stream keeps getting its chunks.
 * Counted by order, not time: the stream's events that arrive between the
 * long request's last byte sent and its answer's first byte. Prepared on
 * the HTTP thread, none is sent meanwhile (checked: 0). */
Test(serve_http, a_long_prompt_does_not_stall_running_streams)
{
	struct srv s;
	srv_start(&s, NULL);
	int a = start_stream(s.port, 1800);
	size_t msgs = 5000;
	static const char m[] = "{\"role\":\"user\",\"content\":\"hi\"},";
	char *body = malloc(msgs * sizeof(m) + 64);
	size_t len = (size_t)sprintf(body, "{\"messages\":[");
	for (size_t i = 0; i < msgs; i++)
		len += (size_t)sprintf(body + len, "%s", m);
	len += (size_t)sprintf(body + len,
			       "{\"role\":\"user\",\"content\":\"end\"}],\"max_tokens\":4}");
	int b = dial(s.port);
	char head[256];
	snprintf(head, sizeof(head), "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
		 "Connection: close\r\nContent-Type: application/json\r\n"
		 "Content-Length: %zu\r\n\r\n", len);
	send_all(b, head, strlen(head));
	send_all(b, body, len);
	free(body);
	/* From here: the stream's events until b's answer begins. */
	int during = 0;
	char buf[65536];
	for (bool answered = false; !answered;) {
		struct pollfd p[2] = { { .fd = a, .events = POLLIN }, { .fd = b, .events = POLLIN } };
		cr_assert_gt(poll(p, 2, 30000), 0, "neither the stream nor the long request moves");
		if (p[1].revents)
			answered = true;
		else if (p[0].revents) {
			ssize_t n = recv(a, buf, sizeof(buf) - 1, 0);
			cr_assert_gt(n, 0, "the stream ended early");
			buf[n] = 0;
			during += count(buf, "data: ");
		}
	}
	char *r = read_all(b);
	close(b);
	expect_error(r, 400, "invalid_request_error");
	cr_expect(strstr(r, "context_length_exceeded"), "%s", r);
	free(r);
	cr_expect_geq(during, 2, "%d events of the running stream while the long prompt was "
		      "encoded", during);
	close(a);
	cr_expect_eq(srv_stop(&s), 0);
}

/* A client that hangs up while its request waits in the queue leaves the
 * queue at once, not when the request would have run: with one sequence
 * at a time, the queued request's hang-up empties the queue while the
 * first request still runs (none of its 1800 tokens counted as done);
 * the log and the metrics say 499. */
Test(serve_http, client_gone_while_queued_leaves_the_queue)
{
	struct srv s;
	const char *args[] = { "--parallel", "1", NULL };
	srv_start(&s, args);
	int a = start_stream(s.port, 1800);
	int b = dial(s.port);
	const char *body = CHAT(",\"max_tokens\":4");
	char head[512];
	snprintf(head, sizeof(head), "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
		 "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
	send_all(b, head, strlen(head));
	double t0 = now();
	while (metric(s.port, "vllm:num_requests_waiting{") != 1)
		cr_assert_lt(now() - t0, 10, "the request is not queued");
	close(b);
	t0 = now();
	while (metric(s.port, "vllm:num_requests_waiting{") != 0)
		cr_assert_lt(now() - t0, 60, "still queued %.1f s after its client left", now() - t0);
	cr_expect_lt(metric(s.port, "vllm:generation_tokens_total{"), 1800,
		     "the queue emptied only once the running request ended");
	cr_expect_eq(metric(s.port, "vllm:num_requests_running{"), 1);
	t0 = now();
	while (!strstr(read_log(&s), "POST /v1/chat/completions 499 (client gone)"))
		cr_assert_lt(now() - t0, 10, "no 499 logged: %s", read_log(&s));
	char *r;
	cr_assert_eq(get(s.port, "/metrics", &r), 200);
	cr_expect(strstr(r, "status=\"499\"} 1\n"), "%s", r);
	free(r);
	close(a);
	cr_expect_eq(srv_stop(&s), 0);
}
