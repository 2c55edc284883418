/* SPDX-License-Identifier: MIT */
#include "serve_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon_util.h"

static void sleep_ms(int ms)
{
	struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000 };
	nanosleep(&t, NULL);
}

int sp_start(struct serve_proc *p, const char *log, const char *const *args)
{
	const char *argv[42] = { PREFIX_SERVE };
	int n = 1;
	for (; args && args[n - 1] && n < 41; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	snprintf(p->log, sizeof(p->log), "%s", log);
	p->port = -1;
	/* The child's freopen would write what stdio holds for the caller
	 * (a benchmark's report) a second time. */
	fflush(NULL);
	p->pid = fork();
	if (p->pid < 0)
		return -1;
	if (p->pid == 0) {
		/* A server dies with its test (or benchmark), and holds none of
		 * its output open (a pipe reading it would never end). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (!freopen(log, "w", stderr) || !freopen("/dev/null", "w", stdout))
			_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 3000; i++) {
		const char *s = strstr(td_read_file(log), "listening on ");
		const char *end = s ? strchr(s, '\n') : NULL;
		if (end) {
			while (end > s && end[-1] != ':')
				end--;
			p->port = atoi(end);
			return 0;
		}
		if (waitpid(p->pid, NULL, WNOHANG) == p->pid) {
			p->pid = -1;
			break;
		}
		sleep_ms(10);
	}
	fprintf(stderr, "prefix-serve did not start listening:\n%s\n", td_read_file(log));
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
		p->pid = -1;
	}
	return -1;
}

int sp_wait_healthy(const struct serve_proc *p, int timeout_ms)
{
	for (int waited = 0; waited < timeout_ms; waited += 10) {
		char *r = NULL;
		int st = sp_http(p->port, "GET", "/health", NULL, NULL, &r);
		free(r);
		if (st == 200)
			return 0;
		sleep_ms(10);
	}
	fprintf(stderr, "prefix-serve did not become healthy:\n%s\n", td_read_file(p->log));
	return -1;
}

int sp_stop(struct serve_proc *p)
{
	int st = 0;
	if (p->pid <= 0)
		return -1;
	kill(p->pid, SIGTERM);
	if (waitpid(p->pid, &st, 0) != p->pid)
		return -1;
	p->pid = -1;
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (code)
		fprintf(stderr, "prefix-serve exited with %d:\n%s\n", code, td_read_file(p->log));
	return code;
}

int sp_connect(int port, int recv_timeout_ms)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		fd = -1;
	}
	if (fd >= 0 && recv_timeout_ms > 0) {
		struct timeval tv = { recv_timeout_ms / 1000, (recv_timeout_ms % 1000) * 1000 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	return fd;
}

int sp_send(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

char *sp_recv_all(int fd)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (len + 4096 > cap) {
			char *b = realloc(buf, cap *= 2);
			if (!b) {
				free(buf);
				return NULL;
			}
			buf = b;
		}
		ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	if (buf)
		buf[len] = 0;
	return buf;
}

int sp_status(const char *response)
{
	int st;
	if (!response || sscanf(response, "HTTP/1.%*d %d", &st) != 1)
		return -1;
	return st;
}

int sp_http(int port, const char *method, const char *path, const char *headers,
	    const char *body, char **response)
{
	if (response)
		*response = NULL;
	int fd = sp_connect(port, SP_HTTP_TIMEOUT_MS);
	if (fd < 0)
		return -1;
	size_t blen = body ? strlen(body) : 0;
	char *req = NULL, clen[96] = "";
	if (body)
		snprintf(clen, sizeof(clen),
			 "Content-Type: application/json\r\nContent-Length: %zu\r\n", blen);
	int n = asprintf(&req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s\r\n",
			 method, path, headers ? headers : "", clen);
	if (n < 0) {
		close(fd);
		return -1;
	}
	/* A send cut short may follow an early answer: read it anyway. */
	if (sp_send(fd, req, (size_t)n) || (body && sp_send(fd, body, blen)))
		shutdown(fd, SHUT_WR);
	free(req);
	char *buf = sp_recv_all(fd);
	close(fd);
	int status = sp_status(buf);
	if (response)
		*response = buf;
	else
		free(buf);
	return status;
}

const char *sp_body(const char *response)
{
	const char *b = response ? strstr(response, "\r\n\r\n") : NULL;
	return b ? b + 4 : "";
}
