/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Helpers for the hostile-client tests and the chaos soak (hostile_util.h).
 * They read /proc and open sockets; nothing here asserts except the two
 * probe calls made from a test's main thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostile_util.h"

#define HU_PROBE_GAP_MS	3	/* pause between probe rounds */

static long
hu_status_kib(pid_t pid, const char *field)
{
	char	 path[64], line[256];
	size_t	 flen = strlen(field);
	long	 v = -1;
	FILE	*f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
			v = strtol(line + flen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

long
hu_rss_kib(pid_t pid)
{
	return hu_status_kib(pid, "VmRSS");
}

long
hu_hwm_kib(pid_t pid)
{
	return hu_status_kib(pid, "VmHWM");
}

long
hu_vmsize_kib(pid_t pid)
{
	return hu_status_kib(pid, "VmSize");
}

long
hu_cpu_ms(pid_t pid)
{
	char		 path[64], buf[1024], *p;
	unsigned long	 ut, st;
	long		 hz = sysconf(_SC_CLK_TCK);
	ssize_t		 n;
	int		 fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* the command name may hold spaces: fields count from its ')' */
	if ((p = strrchr(buf, ')')) == NULL ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
	    &ut, &st) != 2)
		return -1;
	return (long)((ut + st) * 1000 / (unsigned long)hz);
}

int
hu_nfds(pid_t pid)
{
	char		 path[64];
	struct dirent	*de;
	DIR		*dir;
	int		 n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if ((dir = opendir(path)) == NULL)
		return -1;
	while ((de = readdir(dir)) != NULL)
		if (de->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

enum hu_mem
hu_memory_kind(pid_t pid)
{
	char		 path[64], line[512];
	enum hu_mem	 kind = HU_MEM_PLAIN;
	FILE		*f;

	/* ASan reserves terabytes of shadow (static runtime, no library) */
	if (hu_status_kib(pid, "VmSize") > 1024L * 1024 * 1024)
		return HU_MEM_ASAN;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return HU_MEM_PLAIN;
	while (kind == HU_MEM_PLAIN && fgets(line, sizeof(line), f) != NULL)
		if (strstr(line, "libasan") != NULL)
			kind = HU_MEM_ASAN;
		else if (strstr(line, "vgpreload") != NULL ||
		    strstr(line, "valgrind") != NULL)
			kind = HU_MEM_VALGRIND;
	fclose(f);
	return kind;
}

bool
hu_memory_is_instrumented(pid_t pid)
{
	return hu_memory_kind(pid) != HU_MEM_PLAIN;
}

int
hu_socket(const struct kt_daemon *d, enum kt_transport t, int rcvbuf)
{
	int	fd, err;

	if (t == KT_UNIX) {
		struct sockaddr_un sun;

		memset(&sun, 0, sizeof(sun));
		sun.sun_family = AF_UNIX;
		if (strlen(d->sock) >= sizeof(sun.sun_path)) {
			errno = ENAMETOOLONG;
			return -1;
		}
		strcpy(sun.sun_path, d->sock);
		if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) ==
		    -1)
			return -1;
		if (rcvbuf > 0)
			setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
			    sizeof(rcvbuf));
		/* blocking: a full backlog waits instead of EAGAIN */
		if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
			err = errno;
			close(fd);
			errno = err;
			return -1;
		}
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	} else {
		struct sockaddr_in sin;
		int		one = 1;

		memset(&sin, 0, sizeof(sin));
		sin.sin_family = AF_INET;
		sin.sin_port = htons((uint16_t)d->port);
		if (inet_pton(AF_INET, d->host, &sin.sin_addr) != 1) {
			errno = EINVAL;
			return -1;
		}
		if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC |
		    SOCK_NONBLOCK, 0)) == -1)
			return -1;
		if (rcvbuf > 0)
			setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
			    sizeof(rcvbuf));
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == -1 &&
		    errno != EINPROGRESS) {
			err = errno;
			close(fd);
			errno = err;
			return -1;
		}
	}
	return fd;
}

bool
hu_connected(int fd, int64_t timeout_ms)
{
	struct pollfd	pfd = { fd, POLLOUT, 0 };
	socklen_t	elen;
	int		err = 0;

	if (poll(&pfd, 1, (int)timeout_ms) != 1)
		return false;
	elen = sizeof(err);
	return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 &&
	    err == 0;
}

void
hu_close_rst(int fd)
{
	struct linger	lg = { 1, 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

/* The probe */

/* The probe's plain connection: a request, and its reply line. */
static enum kt_read
hu_plain_rt(struct hu_probe *p, const char *req, const char **line,
    size_t *len)
{
	enum kt_read	r;

	if (kt_conn_sendf(p->c, "%s", req) != 0) {
		snprintf(p->why, sizeof(p->why), "sending: %s",
		    strerror(errno));
		return KT_ERROR;
	}
	if ((r = kt_conn_readline(p->c, p->reply_ms)) == KT_LINE) {
		*line = p->c->line;
		*len = p->c->linelen;
	}
	return r;
}

static void
hu_plain_close(struct hu_probe *p)
{
	kt_conn_close(p->c);
	p->c = NULL;
}

static const struct hu_probe_io hu_probe_plain = {
	hu_plain_rt, hu_plain_close
};

/* One round trip; false (p->err set) on a wrong or missing reply. */
static bool
hu_probe_rt(struct hu_probe *p, const char *req, const char *want_prefix)
{
	uint64_t	 t0 = kt_now_us(), dt;
	const char	*line = NULL;
	size_t		 len = 0, plen = strlen(want_prefix);
	enum kt_read	 r;

	p->why[0] = '\0';
	r = p->io->rt(p, req, &line, &len);
	dt = kt_now_us() - t0;
	if (r != KT_LINE) {
		snprintf(p->err, sizeof(p->err), "probe%s: \"%s\": %s after "
		    "%llu ms%s%s", p->io == &hu_probe_plain ? "" : " (TLS)",
		    req, r == KT_TIMEOUT ? "no reply" : r == KT_EOF ?
		    "connection closed" : "read error",
		    (unsigned long long)(dt / 1000), p->why[0] ? ": " : "",
		    p->why);
		return false;
	}
	if (len < plen || memcmp(line, want_prefix, plen) != 0) {
		snprintf(p->err, sizeof(p->err), "probe: \"%s\": got \"%s\", "
		    "want \"%s...\"", req, kt_esc(line, len), want_prefix);
		return false;
	}
	if (p->n == p->cap) {
		size_t		 cap = p->cap ? p->cap * 2 : 4096;
		uint32_t	*nl = realloc(p->lat_us, cap * sizeof(*nl));

		if (nl == NULL) {
			snprintf(p->err, sizeof(p->err), "probe: no memory");
			return false;
		}
		p->lat_us = nl;
		p->cap = cap;
	}
	p->lat_us[p->n++] = dt > UINT32_MAX ? UINT32_MAX : (uint32_t)dt;
	atomic_fetch_add(&p->done, 1);
	return true;
}

static void *
hu_probe_main(void *arg)
{
	struct hu_probe	*p = arg;
	char		 lock[128], unlock[128];

	snprintf(lock, sizeof(lock), "LOCK %s timeout=%lld", p->key,
	    (long long)p->reply_ms);
	snprintf(unlock, sizeof(unlock), "UNLOCK %s", p->key);
	while (!atomic_load(&p->stop)) {
		if (!hu_probe_rt(p, "PING", "OK PONG") ||
		    !hu_probe_rt(p, lock, "OK ") ||
		    !hu_probe_rt(p, unlock, "OK 1"))
			break;
		if (p->max_ops != 0 && p->n >= p->max_ops)
			break;
		kt_sleep_ms(HU_PROBE_GAP_MS);
	}
	return NULL;
}

void
hu_probe_init(struct hu_probe *p, const char *key, int64_t reply_ms)
{
	memset(p, 0, sizeof(*p));
	p->reply_ms = reply_ms;
	snprintf(p->key, sizeof(p->key), "%s", key);
	atomic_init(&p->stop, false);
	atomic_init(&p->done, 0);
}

void
hu_probe_launch_at(const char *file, int line, struct hu_probe *p)
{
	if (pthread_create(&p->thread, NULL, hu_probe_main, p) != 0)
		kt_fail_at(file, line, "pthread_create: %s", strerror(errno));
	p->running = true;
}

void
hu_probe_start_at(const char *file, int line, struct hu_probe *p,
    const struct kt_daemon *d, const char *key, int64_t reply_ms)
{
	hu_probe_init(p, key, reply_ms);
	p->c = kt_connect_at(file, line, d, KT_TCP);
	p->io = &hu_probe_plain;
	hu_probe_launch_at(file, line, p);
}

size_t
hu_probe_done(struct hu_probe *p)
{
	return atomic_load(&p->done);
}

static int
hu_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

struct hu_lat
hu_lat_of(uint32_t *us, size_t n)
{
	struct hu_lat	l = { n, 0, 0, 0 };

	if (n == 0)
		return l;
	qsort(us, n, sizeof(*us), hu_cmp_u32);
	l.p50_ms = us[(n - 1) / 2] / 1000.0;
	l.p99_ms = us[(n * 99 + 99) / 100 - 1] / 1000.0;
	l.max_ms = us[n - 1] / 1000.0;
	return l;
}

struct hu_lat
hu_probe_stop_at(const char *file, int line, struct hu_probe *p,
    const char *what, size_t min_ops, double p99_ms)
{
	struct hu_lat	l;
	char		bound[64];

	if (p->running) {
		uint64_t deadline = kt_now_ms() + (uint64_t)kt_ms(10000);

		/* a short test still gets a sample worth a percentile */
		while (p->n < min_ops && p->err[0] == '\0' &&
		    kt_now_ms() < deadline && pthread_kill(p->thread, 0) == 0)
			kt_sleep_ms(5);
		atomic_store(&p->stop, true);
		pthread_join(p->thread, NULL);
		p->running = false;
	}
	l = hu_lat_of(p->lat_us, p->n);
	if (p99_ms < 1e8)
		snprintf(bound, sizeof(bound), "bound: p99 < %.0f ms", p99_ms);
	else
		snprintf(bound, sizeof(bound), "not asserted");
	fprintf(stderr, "%s: others unaffected? probe PING/LOCK/UNLOCK: %zu "
	    "round trips, p50 %.2f ms, p99 %.2f ms, max %.2f ms (%s)\n", what,
	    l.n, l.p50_ms, l.p99_ms, l.max_ms, bound);
	free(p->lat_us);
	p->lat_us = NULL;
	if (p->io != NULL)
		p->io->close(p);
	if (p->err[0] != '\0')
		kt_fail_at(file, line, "%s: %s", what, p->err);
	if (l.n < min_ops)
		kt_fail_at(file, line, "%s: the probe got only %zu replies, "
		    "want at least %zu", what, l.n, min_ops);
	if (l.p99_ms >= p99_ms)
		kt_fail_at(file, line, "%s: probe p99 %.2f ms, want under "
		    "%.0f ms", what, l.p99_ms, p99_ms);
	return l;
}
