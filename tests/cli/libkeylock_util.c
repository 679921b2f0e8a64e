/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * What check_libkeylock adds to the C tests' harness (kltest.h, which
 * starts a private keylockd per test): clients of that daemon, and a fake
 * server, a listening socket in the test itself, for replies the daemon
 * will not produce.
 */
#include <sys/socket.h>
#include <sys/types.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "keylock.h"
#include "kltest.h"
#include "libkeylock_util.h"

#define T_CASE_S	20	/* per test */

struct keylock *
lk_client_at(const char *server, const char *name)
{
	struct keylock	*kl = keylock_new();

	ck_assert_ptr_nonnull(kl);
	/* the library's reply deadline, scaled like every upper bound */
	keylock_set_timeout(kl, kt_ms(KEYLOCK_TIMEOUT_DEFAULT));
	ck_assert_st(kl, keylock_connect(kl, server, NULL), KEYLOCK_OK);
	if (name != NULL)
		ck_assert_st(kl, keylock_name(kl, name), KEYLOCK_OK);
	return kl;
}

struct keylock *
lk_client(const char *name)
{
	return lk_client_at(kt_d->addr, name);
}

int
lk_fake_listen(char *server, size_t len)
{
	struct sockaddr_in	sin;
	socklen_t		slen = sizeof(sin);
	int			fd;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_ne(fd = socket(AF_INET, SOCK_STREAM, 0), -1);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(listen(fd, 8), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &slen), 0);
	snprintf(server, len, "127.0.0.1:%d", ntohs(sin.sin_port));
	return fd;
}

int
lk_fake_pair(struct keylock *kl, int *lfd)
{
	char	server[32];
	int	fd;

	*lfd = lk_fake_listen(server, sizeof(server));
	ck_assert_st(kl, keylock_connect(kl, server, NULL), KEYLOCK_OK);
	ck_assert_int_ne(fd = accept(*lfd, NULL, NULL), -1);
	return fd;
}

long long
lk_stats_int(struct keylock *kl, const char *name)
{
	json_t		*root;
	long long	 v;

	ck_assert_st(kl, keylock_stats_json(kl, &root), KEYLOCK_OK);
	ck_assert_msg(json_is_integer(json_object_get(root, name)),
	    "STATS has no integer %s", name);
	v = json_integer_value(json_object_get(root, name));
	json_decref(root);
	return v;
}

TCase *
lk_tcase(Suite *s, const char *name)
{
	return kt_tcase(s, name, KT_PRIVATE, T_CASE_S, kt_setup);
}
