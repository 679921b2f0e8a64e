/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Users (keylockd-protocol(7), ACCESS CONTROL; keylockd.conf(5), user):
 * each has a name, a secret read from a file of its own that only its
 * owner may read, the keys it may use (exact keys, "prefix*" patterns,
 * "*" for all), whether it is an operator, and optionally the common name
 * of a client certificate that stands for it. Also the unix-socket
 * operators by uid (operator-uids). Nothing here touches a connection or
 * a socket; commands.c asks.
 */
#ifndef USERS_H
#define USERS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct config;
struct user;
struct users;

/* Who a connection is, besides the users of the configuration: the
 * version 1 client secret (auth-file) and the operator's secret
 * (admin-auth-file), both with every key; and a connection whose user
 * was removed or changed by a reload (no key, no right, AUTH again). */
extern const struct user *const users_client_secret;
extern const struct user *const users_operator_secret;
extern const struct user *const users_revoked;

/* The syntax of one `user` value, for config.c's FILE:LINE messages:
 * true, or false with a message in err. Reads no file. */
bool		 users_spec_check(const char *val, char *err, size_t errlen);
/* A secret file's one line, checked as ssh checks a private key's file
 * (users.c); out has room for KL_SECRET_MAX + 1 bytes. */
bool		 secret_file_read(const char *what, const char *path,
		    char *out, size_t *len, char *err, size_t errlen);
/* The users and operator-uids of cfg, their secret files read and their
 * modes checked (not readable or writable by group or others, owned by
 * root or by this process's user). NULL with a message in err. */
struct users	*users_load(const struct config *cfg, char *err,
		    size_t errlen);
void		 users_free(struct users *us);
size_t		 users_count(const struct users *us);

/* AUTH name secret: the user, or NULL. The time it takes depends only on
 * the configuration, not on whether the name or the secret was wrong. */
const struct user *users_auth(const struct users *us, const char *name,
		    size_t namelen, const char *secret, size_t secretlen);
/* The user whose tls-cn= is cn, or NULL. */
const struct user *users_find_cn(const struct users *us, const char *cn);
/* Whether some user is mapped from a client certificate. */
bool		 users_have_cn(const struct users *us);
/* After a reload: the user of next that takes u's place, the same name
 * with the same secret and certificate name; NULL when u is gone or
 * changed. */
const struct user *users_successor(const struct users *next,
		    const struct user *u);
/* A unix peer with this uid has operator rights: root, this process's
 * user, or one of operator-uids. */
bool		 users_uid_is_operator(const struct users *us, uid_t uid);

/*
 * Live upgrade: who a connection is, as a tag (users_state_tag) and its
 * user's name, and back in the new process, by name against the users of
 * its configuration: a user it no longer has is users_revoked, as after a
 * reload (keylockd-protocol(7), ACCESS CONTROL). NULL for NULL.
 */
unsigned	 users_state_tag(const struct user *u);
const struct user *users_from_state(const struct users *us, unsigned tag,
		    const char *name);

/* NULL for the version 1 secrets. */
const char	*user_name(const struct user *u);
bool		 user_is_operator(const struct user *u);
/* Whether u may use every key ("*"); then user_may_use() is always
 * true. */
bool		 user_has_all_keys(const struct user *u);
bool		 user_may_use(const struct user *u, const char *key,
		    size_t len);

#endif /* USERS_H */
