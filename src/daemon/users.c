/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The users of keylockd.conf(5) and what each may do. A user's secret is
 * read once per load from a file that must be as private as ssh wants a
 * key to be; the copies are wiped before they are freed. AUTH compares
 * the name and the secret given with those of every user, so that its
 * time tells nothing about which of the two was wrong. Never touches a
 * connection, never logs.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "kl.h"
#include "proto.h"
#include "users.h"
#include "util.h"

#define USER_KEYS_MAX		256	/* keys= per user */
#define USER_OP_UIDS_MAX	64	/* operator-uids entries */

struct user_key {
	char		*key;
	size_t		 len;
	bool		 prefix;	/* "key*": every key that starts so */
};

struct user {
	char		*name;		/* NULL: a version 1 secret */
	char		*secret;	/* NULL: by certificate only */
	size_t		 secretlen;
	char		*cn;		/* tls-cn=, or NULL */
	struct user_key	*keys;
	size_t		 nkeys;
	bool		 all;		/* keys=* */
	bool		 operator;
};

struct users {
	struct user	*v;
	size_t		 n;
	uid_t		 op_uids[USER_OP_UIDS_MAX];
	size_t		 nop_uids;
};

static const struct user user_client_secret = { .all = true };
static const struct user user_operator_secret = { .all = true,
    .operator = true };
static const struct user user_revoked = { .all = false };

const struct user *const users_client_secret = &user_client_secret;
const struct user *const users_operator_secret = &user_operator_secret;
const struct user *const users_revoked = &user_revoked;

/* One `user` value split: its name and options, pointing into a copy. */
struct user_spec {
	const char	*name;
	const char	*secret_file;
	const char	*cn;
	const char	*keys[USER_KEYS_MAX];
	size_t		 nkeys;
	bool		 operator;
};

/* A key pattern: an exact key, "prefix*", or "*". */
static bool
user_pattern_check(const char *p, char *err, size_t errlen)
{
	size_t	len = strlen(p);
	char	why[128];

	if (len > 0 && p[len - 1] == '*')
		len--;
	if (len == 0)
		return p[0] == '*' ? true : (snprintf(err, errlen, "keys= "
		    "needs a key, prefix* or *"), false);
	if (memchr(p, '*', len) != NULL) {
		snprintf(err, errlen, "keys=%s: * may only end a pattern", p);
		return false;
	}
	if (!proto_key_is_valid(p, len, why, sizeof(why))) {
		snprintf(err, errlen, "keys=: %s", why);
		return false;
	}
	return true;
}

/* Splits buf (modified) into sp; false with a message. */
static bool
user_spec_parse(char *buf, struct user_spec *sp, char *err, size_t errlen)
{
	char	*tok, *save = NULL, *v;
	char	 why[128];

	memset(sp, 0, sizeof(*sp));
	if ((tok = strtok_r(buf, " \t", &save)) == NULL) {
		snprintf(err, errlen, "expected NAME secret-file=PATH "
		    "keys=PATTERN ...");
		return false;
	}
	if (strchr(tok, '=') != NULL || strlen(tok) > KL_NAME_MAX ||
	    !proto_key_is_valid(tok, strlen(tok), why, sizeof(why))) {
		snprintf(err, errlen, "a user name is 1 to %d bytes by the "
		    "key rules, without =", KL_NAME_MAX);
		return false;
	}
	sp->name = tok;
	while ((tok = strtok_r(NULL, " \t", &save)) != NULL) {
		if ((v = strchr(tok, '=')) == NULL || v[1] == '\0') {
			snprintf(err, errlen, "user %s: %s: expected "
			    "option=value", sp->name, tok);
			return false;
		}
		*v++ = '\0';
		if (strcmp(tok, "secret-file") == 0 && sp->secret_file == NULL)
			sp->secret_file = v;
		else if (strcmp(tok, "tls-cn") == 0 && sp->cn == NULL)
			sp->cn = v;
		else if (strcmp(tok, "operator") == 0) {
			if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0) {
				snprintf(err, errlen, "user %s: operator= "
				    "yes or no", sp->name);
				return false;
			}
			sp->operator = strcmp(v, "yes") == 0;
		} else if (strcmp(tok, "keys") == 0) {
			if (sp->nkeys == USER_KEYS_MAX) {
				snprintf(err, errlen, "user %s: more than %d "
				    "keys=", sp->name, USER_KEYS_MAX);
				return false;
			}
			if (!user_pattern_check(v, err, errlen))
				return false;
			sp->keys[sp->nkeys++] = v;
		} else {
			snprintf(err, errlen, "user %s: %s=: unknown or given "
			    "twice (secret-file=, keys=, operator=, tls-cn=)",
			    sp->name, tok);
			return false;
		}
	}
	if (sp->secret_file == NULL && sp->cn == NULL) {
		snprintf(err, errlen, "user %s: needs secret-file= (or "
		    "tls-cn=)", sp->name);
		return false;
	}
	if (sp->nkeys == 0) {
		snprintf(err, errlen, "user %s: needs keys= (a key, prefix* or "
		    "*)", sp->name);
		return false;
	}
	return true;
}

bool
users_spec_check(const char *val, char *err, size_t errlen)
{
	struct user_spec	 sp;
	char			*buf;
	bool			 ok;

	if ((buf = kl_strndup(val, strlen(val))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	ok = user_spec_parse(buf, &sp, err, errlen);
	kl_free(buf);
	return ok;
}

/*
 * A secret file (a user's secret-file, etcd-password-file): its first
 * line, without its line end, into out (room for KL_SECRET_MAX + 1 bytes,
 * NUL-terminated), and its length into *len. The file must be a regular
 * file, owned by root or by this process's user, and neither readable
 * nor writable by group or others (as ssh wants a private key); what
 * names the setting in err.
 */
bool
secret_file_read(const char *what, const char *path, char *out,
    size_t *len, char *err, size_t errlen)
{
	char		 buf[KL_SECRET_MAX + 2];
	struct stat	 st;
	ssize_t		 r;
	size_t		 n;
	int		 fd;

	/* O_NONBLOCK: a FIFO is refused below, not waited on */
	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
	    O_CLOEXEC)) == -1) {
		snprintf(err, errlen, "%s %s: %s", what, path,
		    strerror(errno));
		return false;
	}
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s %s: not a regular file", what, path);
		close(fd);
		return false;
	}
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
		snprintf(err, errlen, "%s %s: mode %04o is too open: group "
		    "and others must not read or write it (chmod 600)", what,
		    path, (unsigned)(st.st_mode & 07777));
		close(fd);
		return false;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		snprintf(err, errlen, "%s %s: owned by uid %u: it must be "
		    "root's or keylockd's own", what, path,
		    (unsigned)st.st_uid);
		close(fd);
		return false;
	}
	do
		r = read(fd, buf, sizeof(buf) - 1);
	while (r == -1 && errno == EINTR);
	close(fd);
	if (r < 0) {
		snprintf(err, errlen, "%s %s: %s", what, path,
		    strerror(errno));
		return false;
	}
	for (n = 0; n < (size_t)r && buf[n] != '\r' && buf[n] != '\n'; n++)
		;
	if (n == 0 || n > KL_SECRET_MAX || memchr(buf, '\0', n) != NULL ||
	    memchr(buf, ' ', n) != NULL || memchr(buf, '\t', n) != NULL) {
		explicit_bzero(buf, sizeof(buf));
		snprintf(err, errlen, "%s %s: the secret must be one line of "
		    "1 to %d bytes without spaces", what, path, KL_SECRET_MAX);
		return false;
	}
	memcpy(out, buf, n);
	out[n] = '\0';
	*len = n;
	explicit_bzero(buf, sizeof(buf));
	return true;
}

/* The secret of a user (secret_file_read). */
static bool
user_read_secret(struct user *u, const char *path, char *err, size_t errlen)
{
	char	 what[KL_SECRET_MAX + 32];
	char	 buf[KL_SECRET_MAX + 1];
	size_t	 n;

	snprintf(what, sizeof(what), "user %s: secret-file", u->name);
	if (!secret_file_read(what, path, buf, &n, err, errlen))
		return false;
	u->secret = kl_strndup(buf, n);
	explicit_bzero(buf, sizeof(buf));
	if (u->secret == NULL) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	u->secretlen = n;
	return true;
}

static void
user_cleanup(struct user *u)
{
	if (u->secret != NULL)
		explicit_bzero(u->secret, u->secretlen);
	kl_free(u->secret);
	kl_free(u->name);
	kl_free(u->cn);
	for (size_t i = 0; i < u->nkeys; i++)
		kl_free(u->keys[i].key);
	kl_free(u->keys);
}

/* One user from its `user` value. */
static bool
user_build(struct user *u, const char *val, char *err, size_t errlen)
{
	struct user_spec	 sp;
	char			*buf;
	bool			 ok = false;

	memset(u, 0, sizeof(*u));
	if ((buf = kl_strndup(val, strlen(val))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	if (!user_spec_parse(buf, &sp, err, errlen))
		goto out;
	u->operator = sp.operator;
	if ((u->name = kl_strndup(sp.name, strlen(sp.name))) == NULL ||
	    (sp.cn != NULL && (u->cn = kl_strndup(sp.cn,
	    strlen(sp.cn))) == NULL) ||
	    (u->keys = kl_calloc(sp.nkeys, sizeof(*u->keys))) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < sp.nkeys; i++) {
		struct user_key	*k = &u->keys[u->nkeys];
		size_t		 len = strlen(sp.keys[i]);

		if (strcmp(sp.keys[i], "*") == 0)
			u->all = true;
		k->prefix = sp.keys[i][len - 1] == '*';
		k->len = k->prefix ? len - 1 : len;
		if ((k->key = kl_strndup(sp.keys[i], k->len)) == NULL) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
		u->nkeys++;
	}
	if (sp.secret_file != NULL &&
	    !user_read_secret(u, sp.secret_file, err, errlen))
		goto out;
	ok = true;
out:
	kl_free(buf);
	return ok;
}

/* operator-uids: "UID,NAME,...". */
static bool
users_parse_uids(struct users *us, const char *list, char *err,
    size_t errlen)
{
	const char	*p = list;
	char		 name[256];
	uint64_t	 v;
	size_t		 n;

	while (p != NULL && *p != '\0') {
		n = strcspn(p, ", \t");
		if (n == 0 || n >= sizeof(name)) {
			p += n + (p[n] != '\0');
			continue;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		if (us->nop_uids == USER_OP_UIDS_MAX) {
			snprintf(err, errlen, "operator-uids: more than %d",
			    USER_OP_UIDS_MAX);
			return false;
		}
		if (kl_parse_u64(name, n, 0, UINT32_MAX - 1, &v)) {
			us->op_uids[us->nop_uids++] = (uid_t)v;
		} else {
			struct passwd	*pw;

			errno = 0;
			if ((pw = getpwnam(name)) == NULL) {
				snprintf(err, errlen, "operator-uids: %s: no "
				    "such user", name);
				return false;
			}
			us->op_uids[us->nop_uids++] = pw->pw_uid;
		}
		p += n + (p[n] != '\0');
	}
	return true;
}

struct users *
users_load(const struct config *cfg, char *err, size_t errlen)
{
	struct users	*us;

	if ((us = kl_calloc(1, sizeof(*us))) == NULL ||
	    (cfg->nusers > 0 && (us->v = kl_calloc((size_t)cfg->nusers,
	    sizeof(*us->v))) == NULL)) {
		kl_free(us);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	for (int i = 0; i < cfg->nusers; i++) {
		if (!user_build(&us->v[us->n], cfg->users[i], err, errlen)) {
			user_cleanup(&us->v[us->n]);
			users_free(us);
			return NULL;
		}
		us->n++;
		for (size_t j = 0; j + 1 < us->n; j++) {
			const struct user	*a = &us->v[j], *b = &us->v[us->n - 1];

			if (strcmp(a->name, b->name) == 0) {
				snprintf(err, errlen, "user %s: defined twice",
				    a->name);
				users_free(us);
				return NULL;
			}
			if (a->cn != NULL && b->cn != NULL &&
			    strcmp(a->cn, b->cn) == 0) {
				snprintf(err, errlen, "users %s and %s: the "
				    "same tls-cn=%s", a->name, b->name, a->cn);
				users_free(us);
				return NULL;
			}
		}
	}
	if (!users_parse_uids(us, cfg->operator_uids, err, errlen)) {
		users_free(us);
		return NULL;
	}
	return us;
}

void
users_free(struct users *us)
{
	if (us == NULL)
		return;
	for (size_t i = 0; i < us->n; i++)
		user_cleanup(&us->v[i]);
	kl_free(us->v);
	kl_free(us);
}

size_t
users_count(const struct users *us)
{
	return us->n;
}

/* 0 when a (of alen) equals b (of blen); the time depends only on alen. */
static unsigned char
user_diff(const char *a, size_t alen, const char *b, size_t blen)
{
	unsigned char	diff = (unsigned char)(alen != blen);

	for (size_t i = 0; i < alen; i++)
		diff |= (unsigned char)(a[i] ^ (i < blen ? b[i] : 0));
	return diff;
}

const struct user *
users_auth(const struct users *us, const char *name, size_t namelen,
    const char *secret, size_t secretlen)
{
	const struct user	*found = NULL;

	for (size_t i = 0; i < us->n; i++) {
		const struct user	*u = &us->v[i];
		unsigned char		 d;

		if (u->secret == NULL)
			continue;	/* by certificate only */
		d = user_diff(u->name, strlen(u->name), name, namelen);
		d |= user_diff(u->secret, u->secretlen, secret, secretlen);
		if (d == 0)
			found = u;
	}
	return found;
}

const struct user *
users_find_cn(const struct users *us, const char *cn)
{
	for (size_t i = 0; i < us->n; i++)
		if (us->v[i].cn != NULL && strcmp(us->v[i].cn, cn) == 0)
			return &us->v[i];
	return NULL;
}

bool
users_have_cn(const struct users *us)
{
	for (size_t i = 0; i < us->n; i++)
		if (us->v[i].cn != NULL)
			return true;
	return false;
}

static bool
user_str_eq(const char *a, const char *b)
{
	return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

const struct user *
users_successor(const struct users *next, const struct user *u)
{
	if (u == NULL || u->name == NULL)
		return NULL;
	for (size_t i = 0; i < next->n; i++) {
		const struct user	*n = &next->v[i];

		if (strcmp(n->name, u->name) != 0)
			continue;
		if (!user_str_eq(n->cn, u->cn) ||
		    (n->secret == NULL) != (u->secret == NULL) ||
		    (n->secret != NULL && (n->secretlen != u->secretlen ||
		    memcmp(n->secret, u->secret, n->secretlen) != 0)))
			return NULL;
		return n;
	}
	return NULL;
}

bool
users_uid_is_operator(const struct users *us, uid_t uid)
{
	if (uid == 0 || uid == geteuid())
		return true;
	for (size_t i = 0; i < us->nop_uids; i++)
		if (us->op_uids[i] == uid)
			return true;
	return false;
}

enum {
	USER_TAG_NONE = 0,
	USER_TAG_CLIENT,	/* auth-file */
	USER_TAG_OPERATOR,	/* admin-auth-file */
	USER_TAG_REVOKED,
	USER_TAG_NAMED
};

unsigned
users_state_tag(const struct user *u)
{
	if (u == NULL)
		return USER_TAG_NONE;
	if (u == users_client_secret)
		return USER_TAG_CLIENT;
	if (u == users_operator_secret)
		return USER_TAG_OPERATOR;
	if (u == users_revoked || u->name == NULL)
		return USER_TAG_REVOKED;
	return USER_TAG_NAMED;
}

const struct user *
users_from_state(const struct users *us, unsigned tag, const char *name)
{
	switch (tag) {
	case USER_TAG_NONE:
		return NULL;
	case USER_TAG_CLIENT:
		return users_client_secret;
	case USER_TAG_OPERATOR:
		return users_operator_secret;
	case USER_TAG_NAMED:
		for (size_t i = 0; name != NULL && i < us->n; i++)
			if (strcmp(us->v[i].name, name) == 0)
				return &us->v[i];
		return users_revoked;
	default:
		return users_revoked;
	}
}

const char *
user_name(const struct user *u)
{
	return u->name;
}

bool
user_is_operator(const struct user *u)
{
	return u->operator;
}

bool
user_has_all_keys(const struct user *u)
{
	return u->all;
}

bool
user_may_use(const struct user *u, const char *key, size_t len)
{
	if (u->all)
		return true;
	for (size_t i = 0; i < u->nkeys; i++) {
		const struct user_key	*k = &u->keys[i];

		if (k->prefix ? len >= k->len && memcmp(key, k->key,
		    k->len) == 0 : len == k->len && memcmp(key, k->key,
		    len) == 0)
			return true;
	}
	return false;
}
