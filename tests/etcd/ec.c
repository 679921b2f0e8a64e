/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * ec.h: runs tests/etcd/cluster.sh with fork and exec, reading the first
 * line it prints. The script's path comes from top_srcdir (make check's
 * AM_TESTS_ENVIRONMENT); the cluster's directory is made under TMPDIR.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/wait.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ec.h"

static struct ec	*ec_atexit;
static pid_t		 ec_owner;	/* the process that started it */

/* Only in the starting process: Check's forked test children exit too. */
static void
ec_down_atexit(void)
{
	if (ec_atexit != NULL && getpid() == ec_owner)
		ec_down(ec_atexit);
}

int
ec_run(struct ec *c, char *out, size_t outlen, const char *cmd,
    const char *arg)
{
	char	watch[32];
	int	fds[2], st;
	pid_t	pid;

	if (pipe(fds) != 0)
		return -1;
	snprintf(watch, sizeof(watch), "%ld", (long)ec_owner);
	if ((pid = fork()) == -1)
		return -1;
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		if (strcmp(cmd, "start") == 0)
			execl("/bin/sh", "sh", c->script, c->dir, cmd, arg,
			    "--watch", watch, (char *)NULL);
		else
			execl("/bin/sh", "sh", c->script, c->dir, cmd, arg,
			    (char *)NULL);
		_exit(127);
	}
	close(fds[1]);

	char	buf[EC_ENDPOINTS_MAX];
	size_t	len = 0;
	ssize_t	n;

	while ((n = read(fds[0], buf + len, sizeof(buf) - 1 - len)) > 0 ||
	    (n < 0 && errno == EINTR))
		if (n > 0 && (len += (size_t)n) == sizeof(buf) - 1)
			break;
	close(fds[0]);
	buf[len] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	if (out != NULL)
		snprintf(out, outlen, "%s", buf);
	while (waitpid(pid, &st, 0) == -1)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int
ec_start(struct ec *c, int n)
{
	const char	*top = getenv("top_srcdir");
	const char	*tmp = getenv("TMPDIR");
	char		 nbuf[8];
	int		 rc;

	memset(c, 0, sizeof(*c));
	snprintf(c->script, sizeof(c->script), "%s/tests/etcd/cluster.sh",
	    top != NULL ? top : ".");
	snprintf(c->dir, sizeof(c->dir), "%s/keylockd-etcd.XXXXXX",
	    tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
	if (mkdtemp(c->dir) == NULL) {
		fprintf(stderr, "ec: mkdtemp: %s\n", strerror(errno));
		return -1;
	}
	c->n = n;
	ec_owner = getpid();
	snprintf(nbuf, sizeof(nbuf), "%d", n);
	rc = ec_run(c, c->endpoints, sizeof(c->endpoints), "start", nbuf);
	if (rc == 77) {
		fprintf(stderr, "SKIP: etcd is not installed (etcd-server)\n");
		rmdir(c->dir);
		exit(77);
	}
	if (rc != 0 || c->endpoints[0] == '\0') {
		fprintf(stderr, "ec: no etcd cluster of %d (status %d)\n", n,
		    rc);
		ec_down(c);
		return -1;
	}
	ec_atexit = c;
	atexit(ec_down_atexit);
	return 0;
}

int
ec_member(struct ec *c, const char *cmd, const char *name)
{
	return ec_run(c, NULL, 0, cmd, name);
}

int
ec_wait_healthy(struct ec *c, int secs)
{
	char	buf[16];

	snprintf(buf, sizeof(buf), "%d", secs);
	return ec_run(c, NULL, 0, "wait-healthy", buf);
}

int
ec_leader(struct ec *c, char *name, size_t len)
{
	return ec_run(c, name, len, "leader", NULL) == 0 && name[0] != '\0' ?
	    0 : -1;
}

const char *
ec_url(const struct ec *c, int i)
{
	static char	url[128];
	const char	*p = c->endpoints;

	for (int k = 1; k < i && p != NULL; k++)
		if ((p = strchr(p, ',')) != NULL)
			p++;
	if (p == NULL)
		return "";
	snprintf(url, sizeof(url), "%.*s", (int)strcspn(p, ","), p);
	return url;
}

void
ec_down(struct ec *c)
{
	if (c->dir[0] == '\0')
		return;
	ec_run(c, NULL, 0, "down", NULL);
	rmdir(c->dir);
	c->dir[0] = '\0';
	if (ec_atexit == c)
		ec_atexit = NULL;
}
