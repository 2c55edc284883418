/* SPDX-License-Identifier: MIT */
/* The listening socket: resolved, bound, listening, its port as bound. */
#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BACKLOG 511

int listen_tcp(const char *host, int port, bool reuse_port, char bound[128],
	       struct pfx_error *err)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai;
	char service[16];
	snprintf(service, sizeof(service), "%d", port);
	int rc = getaddrinfo(host, service, &hints, &ai);
	if (rc)
		return pfx_errorf(err, -EINVAL, "cannot resolve --host %s: %s", host,
				  gai_strerror(rc));
	int fd = -1, e = 0;
	/* The first address that binds, as the resolver orders them. */
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			e = errno;
			continue;
		}
		int one = 1;
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
		    (reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one))) ||
		    bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, BACKLOG)) {
			e = errno;
			close(fd);
			fd = -1;
			continue;
		}
		break;
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		if (e == EADDRINUSE)
			return pfx_errorf(err, -e, "%s port %d is in use: stop what listens there, "
					  "pick another --port, or give every prefix-serve on it "
					  "--reuse-port", host, port);
		return pfx_errorf(err, -e, "cannot listen on %s port %d: %s", host, port,
				  strerror(e));
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char addr[INET6_ADDRSTRLEN] = "?";
	int p = port;
	if (!getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &s6->sin6_addr, addr, sizeof(addr));
			p = ntohs(s6->sin6_port);
		} else {
			struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &s4->sin_addr, addr, sizeof(addr));
			p = ntohs(s4->sin_port);
		}
	}
	snprintf(bound, 128, ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", addr, p);
	return fd;
}
