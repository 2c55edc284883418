/* SPDX-License-Identifier: MIT */
/*
 * Arenas: what the daemon writes, a client reads through its own read-only
 * mapping; a client can neither write nor map for writing, and nobody can
 * change the size under a mapping.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arena.h"
#include "sock.h"

static void on_segv(int sig)
{
	_exit(42);
}

static struct shm_arena *arena(uint32_t slots)
{
	struct shm_arena *a;
	cr_assert_eq(shm_arena_create(7, 10000, slots, &a), 0);
	return a;
}

Test(shm, client_sees_daemon_writes)
{
	struct shm_arena *a = arena(4);
	cr_expect_eq(shm_arena_slot_bytes(a), 12288, "slots are page-rounded");
	cr_expect_eq(shm_arena_size(a), 4 * 12288);
	uint64_t off;
	cr_assert_eq(shm_arena_slot_new(a, &off), 0);
	int fd = shm_arena_ro_fd(a);
	cr_assert_geq(fd, 0);
	const void *ro;
	cr_assert_eq(shm_map_ro(fd, shm_arena_size(a), &ro), 0);
	memcpy(shm_arena_base(a) + off, "kv bytes", 9);
	cr_expect_str_eq((const char *)ro + off, "kv bytes");
	shm_unmap(ro, shm_arena_size(a));
	close(fd);
	shm_arena_free(a);
}

Test(shm, client_cannot_map_for_writing)
{
	struct shm_arena *a = arena(2);
	int fd = shm_arena_ro_fd(a);
	void *p = mmap(NULL, shm_arena_size(a), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_expect_eq(p, MAP_FAILED, "PROT_WRITE mapping of the client's descriptor");
	cr_expect_eq(errno, EACCES);
	const void *ro;
	cr_assert_eq(shm_map_ro(fd, shm_arena_size(a), &ro), 0);
	cr_expect_neq(mprotect((void *)ro, shm_arena_size(a), PROT_READ | PROT_WRITE), 0,
		      "mprotect to writable");
	cr_expect_eq(write(fd, "x", 1), -1, "write(2) on the client's descriptor");
	shm_unmap(ro, shm_arena_size(a));
	close(fd);
	shm_arena_free(a);
}

Test(shm, write_through_client_mapping_faults)
{
	struct shm_arena *a = arena(2);
	int fd = shm_arena_ro_fd(a);
	const void *ro;
	cr_assert_eq(shm_map_ro(fd, shm_arena_size(a), &ro), 0);
	pid_t pid = fork();
	if (pid == 0) {
		/* Our own handler, so sanitizers' SIGSEGV reports do not hide
		 * which signal it was: exit 42 means the write faulted. */
		struct sigaction sa = { .sa_handler = on_segv };
		sigaction(SIGSEGV, &sa, NULL);
		((volatile char *)ro)[100] = 1;
		_exit(0); /* not reached when the mapping is read-only */
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 42, "the write must fault (status %d)", st);
	cr_expect_eq(((const char *)ro)[100], 0);
	shm_unmap(ro, shm_arena_size(a));
	close(fd);
	shm_arena_free(a);
}

Test(shm, size_is_sealed)
{
	struct shm_arena *a = arena(2);
	int fd = shm_arena_ro_fd(a);
	cr_expect_neq(ftruncate(fd, 0), 0, "shrinking through the read-only fd");
	/* Even a writable descriptor cannot shrink or grow it. */
	char path[64];
	int rw = -1;
	for (int cand = 3; cand < 1024 && rw < 0; cand++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", cand);
		char target[128] = "";
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n > 0 && strstr(target, "prefixd-arena") && cand != fd &&
		    (fcntl(cand, F_GETFL) & O_ACCMODE) == O_RDWR)
			rw = cand;
	}
	cr_assert_geq(rw, 0, "the arena's own descriptor");
	cr_expect_eq(ftruncate(rw, 4096), -1);
	cr_expect_eq(errno, EPERM);
	cr_expect_eq(ftruncate(rw, (off_t)shm_arena_size(a) * 2), -1);
	cr_expect_eq(fcntl(rw, F_ADD_SEALS, 0), -1, "seals are sealed");
	close(fd);
	shm_arena_free(a);
}

Test(shm, map_ro_checks_the_descriptor)
{
	const void *p;
	int plain = memfd_create("unsealed", MFD_CLOEXEC);
	cr_assert_eq(ftruncate(plain, 4096), 0);
	cr_expect_eq(shm_map_ro(plain, 4096, &p), -EPERM, "an unsealed memfd is refused");
	close(plain);
	struct shm_arena *a = arena(1);
	int fd = shm_arena_ro_fd(a);
	cr_expect_eq(shm_map_ro(fd, shm_arena_size(a) + 1, &p), -EINVAL, "larger than the arena");
	cr_expect_eq(shm_map_ro(fd, 0, &p), -EINVAL);
	close(fd);
	shm_arena_free(a);
}

Test(shm, slots)
{
	struct shm_arena *a = arena(3);
	uint64_t off[3], extra;
	for (int i = 0; i < 3; i++)
		cr_assert_eq(shm_arena_slot_new(a, &off[i]), 0);
	cr_expect(off[0] != off[1] && off[1] != off[2] && off[0] != off[2]);
	cr_expect_eq(shm_arena_slot_new(a, &extra), -ENOSPC);
	cr_expect_eq(shm_arena_slot_reuse(a, &extra), -ENOSPC, "none freed yet");
	cr_expect_eq(shm_arena_slot_free(a, off[1] + 1, false), -EINVAL, "not a slot boundary");
	cr_expect_eq(shm_arena_slot_free(a, shm_arena_size(a), false), -EINVAL, "past the end");
	cr_expect_eq(shm_arena_slot_free(a, off[1], false), 0);
	cr_expect_eq(shm_arena_slot_free(a, off[1], false), -EINVAL, "double free");
	cr_expect_eq(shm_arena_slots_free(a), 1);
	cr_expect_eq(shm_arena_slot_new(a, &extra), -ENOSPC, "every slot was used once");
	cr_assert_eq(shm_arena_slot_reuse(a, &extra), 0);
	cr_expect_eq(extra, off[1]);
	cr_expect_eq(shm_arena_slot_reuse(a, &extra), -ENOSPC);
	shm_arena_free(a);
}

/* Without F_SEAL_FUTURE_WRITE (it forbids punching pages out), the mode
 * keeps other users from reopening a client's descriptor read-write
 * through /proc: a memfd is made 0777. */
Test(shm, another_user_cannot_reopen_an_arena_for_writing)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to become another user");
	struct shm_arena *a = arena(2);
	int fd = shm_arena_ro_fd(a);
	pid_t pid = fork();
	if (pid == 0) {
		if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
			_exit(3);
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		int rw = open(path, O_RDWR);
		if (rw >= 0)
			_exit(1); /* it could write the arena */
		_exit(fchmod(fd, 0666) ? 0 : 2); /* nor may it change the mode */
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "another user reopened or chmod'ed (status %d)", st);
	close(fd);
	shm_arena_free(a);
}

static long resident_kib(int fd)
{
	struct stat sb;
	return fstat(fd, &sb) ? -1 : (long)sb.st_blocks / 2;
}

/* A slot freed with a punch gives its pages back, even while a client maps
 * the arena; one freed without keeps them for the next block. */
Test(shm, a_punched_slot_gives_its_memory_back)
{
	struct shm_arena *a;
	cr_assert_eq(shm_arena_create(0, 64 << 10, 4, &a), 0);
	int fd = shm_arena_ro_fd(a);
	const void *ro;
	cr_assert_eq(shm_map_ro(fd, shm_arena_size(a), &ro), 0);
	uint64_t off[2];
	cr_assert_eq(shm_arena_slot_new(a, &off[0]), 0);
	cr_assert_eq(shm_arena_slot_new(a, &off[1]), 0);
	memset(shm_arena_base(a) + off[0], 7, 64 << 10);
	memset(shm_arena_base(a) + off[1], 7, 64 << 10);
	cr_expect_eq(((const char *)ro)[off[0]], 7);
	cr_expect_eq(resident_kib(fd), 128);
	cr_assert_eq(shm_arena_slot_free(a, off[0], true), 0);
	cr_expect_eq(resident_kib(fd), 64, "the punched slot's pages are gone");
	cr_assert_eq(shm_arena_slot_free(a, off[1], false), 0);
	cr_expect_eq(resident_kib(fd), 64, "the other slot stays resident");
	cr_expect_eq(shm_arena_slots_resident_free(a), 1);
	uint64_t again;
	cr_assert_eq(shm_arena_slot_reuse(a, &again), 0);
	cr_expect_eq(again, off[1], "a resident slot is reused first");
	cr_assert_eq(shm_arena_slot_new(a, &again), 0);
	cr_expect_eq(again, off[0], "then a punched one");
	shm_unmap(ro, shm_arena_size(a));
	close(fd);
	shm_arena_free(a);
}

/* A descriptor passed over a Unix socket maps the same memory. */
Test(shm, descriptor_passes_over_a_socket)
{
	struct shm_arena *a = arena(1);
	int sv[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	int fd = shm_arena_ro_fd(a), got, n;
	uint8_t *body;
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_MATCH, PD_FLAG_REPLY, 0, 1, 0 };
	cr_assert_eq(pd_send(sv[0], &h, NULL, &fd, 1), 0);
	close(fd);
	cr_assert_eq(pd_recv(sv[1], &h, &body, &got, &n), 0);
	cr_assert_eq(n, 1);
	strcpy((char *)shm_arena_base(a), "shared");
	const void *ro;
	cr_assert_eq(shm_map_ro(got, shm_arena_size(a), &ro), 0);
	cr_expect_str_eq(ro, "shared");
	shm_unmap(ro, shm_arena_size(a));
	close(got);
	close(sv[0]);
	close(sv[1]);
	shm_arena_free(a);
}
