/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The C tests' hold on a private etcd cluster: a thin caller of
 * tests/etcd/cluster.sh (which does the work for the shell tests too).
 * The cluster lives in a mkdtemp directory and is brought down at exit,
 * or by the script's watchdog if the test dies of a signal. Members are
 * m1..mN, in the order of the endpoint list.
 */
#ifndef EC_H
#define EC_H

#include <stddef.h>

#define EC_ENDPOINTS_MAX	1024

struct ec {
	char	dir[256];
	char	script[512];
	char	endpoints[EC_ENDPOINTS_MAX];
	int	n;
};

/* Starts n members (1 or 3) and waits until they are healthy. Exits 77
 * (skip) when etcd is not installed; returns -1 with a message on stderr
 * when the cluster does not come up. */
int	 ec_start(struct ec *c, int n);
/* cluster.sh DIR cmd [arg]: its first output line into out (may be NULL);
 * returns the script's exit status. */
int	 ec_run(struct ec *c, char *out, size_t outlen, const char *cmd,
	    const char *arg);
/* kill, stop, cont or restart member name; 0 on success. */
int	 ec_member(struct ec *c, const char *cmd, const char *name);
int	 ec_wait_healthy(struct ec *c, int secs);
/* The leader's name into name; 0 on success. */
int	 ec_leader(struct ec *c, char *name, size_t len);
/* The client URL of member i (1-based), in a static buffer. */
const char *ec_url(const struct ec *c, int i);
void	 ec_down(struct ec *c);

#endif /* EC_H */
