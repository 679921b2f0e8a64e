/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Hostile use of the process: a client that takes every descriptor the
 * daemon may have (accept pauses without spinning and recovers), and a
 * holder stopped with kill -STOP (its ttl releases the key).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "hostile_test.h"
#include "hostile_util.h"
#include "kltest.h"

/* Reads what is there on fd within ms; returns bytes (0 if none). */
static ssize_t
read_within(int fd, char *buf, size_t cap, int64_t ms)
{
	struct pollfd	pfd = { fd, POLLIN, 0 };
	ssize_t		n;

	if (poll(&pfd, 1, (int)ms) != 1)
		return 0;
	n = recv(fd, buf, cap, MSG_DONTWAIT);
	return n > 0 ? n : 0;
}

/* Lines of the daemon's log that contain s. */
static int
log_count(const struct kt_daemon *d, const char *s)
{
	char	 line[1024];
	int	 n = 0;
	FILE	*f = fopen(d->log, "r");

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, s) != NULL;
	fclose(f);
	return n;
}

/*
 * Descriptor exhaustion: with RLIMIT_NOFILE 64 the daemon accepts what it
 * can, pauses accepting instead of spinning on EMFILE, keeps serving the
 * connections it has, and takes the queued ones once descriptors free up.
 */
START_TEST(fd_exhaustion_pauses_accept_without_spinning_and_recovers)
{
	enum { NOPEN = 100 };
	struct rlimit	 lim = { 64, 64 };
	struct hu_probe	 probe;
	struct kt_conn	*m, *fresh;
	char		 buf[256];
	int		 fds[NOPEN], nfds0, nserved = 0, nqueued = 0, warns0;
	bool		 served[NOPEN];
	json_int_t	 clients, prev = -1;
	long		 cpu0, cpu1;
	uint64_t	 t0, stable_since;

	kt_start_default();
	/* prlimit(1) on the running daemon, which kltest started */
	ck_assert_msg(prlimit(kt_d->pid, RLIMIT_NOFILE, &lim, NULL) == 0,
	    "prlimit: %s", strerror(errno));
	m = kt_connect();
	hu_probe_start(&probe, "probe:fds");
	nfds0 = hu_nfds(kt_d->pid);
	warns0 = log_count(kt_d, "accept");
	for (int i = 0; i < NOPEN; i++) {
		fds[i] = hu_socket(kt_d, KT_TCP, 0);
		ck_assert(fds[i] != -1 && hu_connected(fds[i], kt_ms(3000)));
		ck_assert_int_eq(send(fds[i], "PING\n", 5, MSG_NOSIGNAL), 5);
	}
	/* wait until the daemon has taken all it can */
	t0 = stable_since = kt_now_ms();
	for (;;) {
		clients = kt_stat(m, "clients");
		if (clients != prev)
			stable_since = kt_now_ms();
		prev = clients;
		if (kt_now_ms() - stable_since > 300)
			break;
		ck_assert(kt_now_ms() - t0 < (uint64_t)kt_ms(10000));
		kt_sleep_ms(20);
	}
	hu_probe_stop(&probe, "fd exhaustion", 30, ht_p99_bound());
	for (int i = 0; i < NOPEN; i++) {
		served[i] = read_within(fds[i], buf, sizeof(buf), 0) > 0;
		nserved += served[i];
	}
	nqueued = NOPEN - nserved;
	ck_assert_msg(nqueued > 0 && nserved > 0, "%d of %d connections "
	    "served with a 64-descriptor limit: no exhaustion", nserved,
	    NOPEN);
	ck_assert_int_eq(clients, nserved + 2);

	/* exhausted: does it spin? */
	cpu0 = hu_cpu_ms(kt_d->pid);
	kt_sleep_ms(1000);
	cpu1 = hu_cpu_ms(kt_d->pid);
	fprintf(stderr, "fd exhaustion: RLIMIT_NOFILE 64, %d descriptors at "
	    "start; %d of %d connections accepted, %d queued in the backlog; "
	    "daemon CPU while exhausted %ld ms in 1 s; %d \"accept\" log lines "
	    "so far\n", nfds0, nserved, NOPEN, nqueued, cpu1 - cpu0,
	    log_count(kt_d, "accept") - warns0);
	ck_assert_msg(cpu1 - cpu0 < 150 * (long)kt_slow(), "the daemon used "
	    "%ld ms of CPU in 1 s with nothing to do but a full backlog: it "
	    "spins on EMFILE", cpu1 - cpu0);
	kt_req(m, "OK PONG", "PING");

	/* recovery: free the served ones; the queued ones get their PONG */
	t0 = kt_now_ms();
	for (int i = 0; i < NOPEN; i++)
		if (served[i])
			close(fds[i]);
	for (int i = 0; i < NOPEN; i++) {
		ssize_t n;

		if (served[i])
			continue;
		n = read_within(fds[i], buf, sizeof(buf) - 1,
		    kt_ms(KT_REPLY_MS));
		ck_assert_msg(n == 8 && memcmp(buf, "OK PONG\n", 8) == 0,
		    "queued connection %d: got \"%s\" after the daemon had "
		    "descriptors again", i, kt_esc(buf, (size_t)n));
		close(fds[i]);
	}
	fresh = kt_connect();
	kt_req(fresh, "OK PONG", "PING");
	fprintf(stderr, "fd exhaustion: recovered: the %d queued connections "
	    "and a new one answered within %llu ms of the descriptors being "
	    "freed\n", nqueued, (unsigned long long)(kt_now_ms() - t0));
	kt_wait_stat(m, "clients", 2);
}
END_TEST

/*
 * kill -STOP of a holder with ttl=300: the waiter is granted when the ttl
 * runs out, and the holder, continued, learns with ERR NOTHELD.
 */
START_TEST(stopped_holder_with_ttl_is_released_at_ttl)
{
	int		 up[2], down[2], st;
	struct hu_probe	 probe;
	struct kt_conn	*w, *m;
	unsigned long long tok_h, s_us, a_us;
	char		 msg[600];
	uint64_t	 tok_w, t_req, t_grant;
	ssize_t		 n;
	pid_t		 pid;

	kt_start_default();
	m = kt_connect();
	w = kt_connect();
	ck_assert(pipe(up) == 0 && pipe(down) == 0);
	pid = fork();
	ck_assert(pid != -1);
	if (pid == 0) {
		/* the holder: never calls Check */
		struct kt_conn	*h = kt_conn_open(kt_d, KT_TCP, 3000);
		struct timespec	 ts;
		uint64_t	 s, a, tok = 0;
		char		 go;
		int		 len;

		if (h == NULL)
			_exit(2);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		s = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
		if (kt_conn_sendf(h, "LOCK stop:k ttl=300") != 0 ||
		    kt_conn_readline(h, 10000) != KT_LINE ||
		    !kt_line_token(h, &tok))
			_exit(3);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		a = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
		len = snprintf(msg, sizeof(msg), "%llu %llu %llu",
		    (unsigned long long)tok, (unsigned long long)s,
		    (unsigned long long)a);
		if (write(up[1], msg, (size_t)len) != len ||
		    read(down[0], &go, 1) != 1)
			_exit(4);
		if (kt_conn_sendf(h, "UNLOCK stop:k") != 0 ||
		    kt_conn_readline(h, 10000) != KT_LINE)
			_exit(5);
		len = snprintf(msg, sizeof(msg), "%.*s|", (int)h->linelen,
		    h->line);
		if (kt_conn_sendf(h, "PING") != 0 ||
		    kt_conn_readline(h, 10000) != KT_LINE)
			_exit(6);
		len += snprintf(msg + len, sizeof(msg) - (size_t)len, "%.*s",
		    (int)h->linelen, h->line);
		_exit(write(up[1], msg, (size_t)len) == len ? 0 : 7);
	}
	close(up[1]);
	close(down[0]);
	n = read(up[0], msg, sizeof(msg) - 1);
	ck_assert_msg(n > 0, "the holder did not get its lock");
	msg[n] = '\0';
	ck_assert_int_eq(sscanf(msg, "%llu %llu %llu", &tok_h, &s_us, &a_us),
	    3);
	ck_assert_int_eq(kill(pid, SIGSTOP), 0);
	hu_probe_start(&probe, "probe:stop");
	t_req = kt_now_ms();
	kt_send(w, "LOCK stop:k timeout=%lld", (long long)kt_ms(5000));
	kt_recv_at(KT_AT, w, kt_ms(5000));
	t_grant = kt_now_ms();
	ck_assert_msg(kt_line_token(w, &tok_w), "waiter: got \"%s\"",
	    kt_esc(w->line, w->linelen));
	ck_assert_uint_gt(tok_w, tok_h);
	/* the grant: >= holder's request + ttl, <= its reply + ttl + slack */
	ck_assert_msg(t_grant * 1000 + 3000 >= s_us + 300000, "waiter granted "
	    "%lld ms after the holder asked with ttl=300",
	    (long long)(t_grant * 1000 - s_us) / 1000);
	ck_assert_msg(t_grant * 1000 <= a_us + 1000 *
	    (uint64_t)kt_upper(300, 450), "waiter granted %lld ms after the "
	    "holder's grant, ttl=300", (long long)(t_grant * 1000 - a_us) /
	    1000);
	hu_probe_stop(&probe, "stopped holder", 10, ht_p99_bound());
	ck_assert_int_eq(kill(pid, SIGCONT), 0);
	ck_assert_int_eq(write(down[1], "g", 1), 1);
	n = read(up[0], msg, sizeof(msg) - 1);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "holder ended "
	    "with status 0x%x", st);
	msg[n > 0 ? n : 0] = '\0';
	ck_assert_msg(strncmp(msg, "ERR NOTHELD ", 12) == 0 &&
	    strstr(msg, "|OK PONG") != NULL, "the continued holder's UNLOCK "
	    "and PING got \"%s\"", kt_esc(msg, strlen(msg)));
	fprintf(stderr, "stopped holder: SIGSTOP with ttl=300; the waiter "
	    "asked at +%lld ms and was granted at +%lld ms after the holder's "
	    "grant; SIGCONT: UNLOCK got \"%.*s\"\n",
	    (long long)(t_req * 1000 - a_us) / 1000,
	    (long long)(t_grant * 1000 - a_us) / 1000,
	    (int)strcspn(msg, "|"), msg);
	kt_req(w, "OK 1", "UNLOCK stop:k");
	ck_assert_int_ge(kt_stat(m, "expired"), 1);
	kt_wait_stat(m, "keys", 0);
	close(up[0]);
	close(down[1]);
}
END_TEST

void
ht_add_resources(Suite *s)
{
	TCase	*tc;

	tc = kt_tcase(s, "exhaustion", KT_PRIVATE, 60, kt_setup_none);
	tcase_add_test(tc,
	    fd_exhaustion_pauses_accept_without_spinning_and_recovers);
	tc = kt_tcase(s, "stop", KT_PRIVATE, 60, kt_setup_none);
	tcase_add_test(tc, stopped_holder_with_ttl_is_released_at_ttl);
}
