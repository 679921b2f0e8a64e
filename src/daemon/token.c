/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The fencing-token high-water mark on disk. The file holds one decimal
 * number H: no token >= H was ever handed out. At start the daemon hands
 * out from the stored H and first raises the mark to H + 2 blocks
 * (written to a temporary file, fsync'd, renamed, directory fsync'd).
 * It never writes per grant and never hands out a token at or above the
 * durable mark. The mark stays a block ahead of the range handed out, so
 * a failed write is noticed while that block still serves the grants
 * already queued; until a write succeeds token_ready() refuses new ones.
 */
#include <sys/file.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "token.h"
#include "util.h"

#define TOKEN_MAX	((1ULL << 63) - 1)

static int
token_fsync_dir(const char *dir)
{
	int	fd, rc;

	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

/* Writes mark durably; -1 with errno on failure. */
static int
token_write_mark(struct token *t, uint64_t mark)
{
	char	buf[32];
	int	fd, n;

	n = snprintf(buf, sizeof(buf), "%" PRIu64 "\n", mark);
	fd = open(t->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
	if (fd == -1)
		return -1;
	if (write(fd, buf, (size_t)n) != n || fsync(fd) == -1) {
		int	e = errno;

		close(fd);
		unlink(t->tmp);
		errno = e;
		return -1;
	}
	if (close(fd) == -1 || rename(t->tmp, t->path) == -1)
		return -1;
	return token_fsync_dir(t->dir);
}

/* Reads the stored mark; 1 if there is none, -1 on a damaged file. */
static int
token_read_mark(const char *path, uint64_t *mark)
{
	char	buf[32];
	ssize_t	n;
	int	fd;
	size_t	len;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		if (errno != ENOENT)
			return -1;
		*mark = 1;
		return 0;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	len = (size_t)n;
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
		len--;
	if (!kl_parse_u64(buf, len, 1, TOKEN_MAX, mark))
		return -1;
	return 0;
}

static char *
token_join(const char *dir, const char *name)
{
	size_t	 n = strlen(dir) + strlen(name) + 2;
	char	*p;

	if ((p = kl_malloc(n)) != NULL)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

/* This process's lock of its state directory (token_lock_dir). */
static int	token_lockfd = -1;

int
token_lock_fd(void)
{
	return token_lockfd;
}

/* The descriptor a live upgrade's old process passed down, if it is a
 * lock of path that this process now holds too (the same open file
 * description); else -1, and it is closed. */
static int
token_lock_inherited(const char *path)
{
	const char	*s = getenv(KL_STATE_LOCK_ENV);
	struct stat	 a, b;
	char		*end;
	long		 fd;

	if (s == NULL)
		return -1;
	errno = 0;
	fd = strtol(s, &end, 10);
	unsetenv(KL_STATE_LOCK_ENV);
	if (errno != 0 || *end != '\0' || end == s || fd < 3 || fd > 65535 ||
	    fstat((int)fd, &a) == -1)
		return -1;
	if (stat(path, &b) == -1 || a.st_dev != b.st_dev ||
	    a.st_ino != b.st_ino || flock((int)fd, LOCK_EX | LOCK_NB) == -1 ||
	    fcntl((int)fd, F_SETFD, FD_CLOEXEC) == -1) {
		close((int)fd);
		return -1;
	}
	return (int)fd;
}

void
token_lock_release(void)
{
	if (token_lockfd != -1)
		close(token_lockfd);
	token_lockfd = -1;
}

void
token_lock_note_pid(void)
{
	char	buf[32];
	int	n;

	if (token_lockfd == -1)
		return;
	n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
	if (ftruncate(token_lockfd, 0) == 0)
		(void)!pwrite(token_lockfd, buf, (size_t)n, 0);
}

int
token_lock_dir(const char *dir, char *errbuf, size_t errlen)
{
	char	*path;
	char	 buf[32];
	struct stat	 a, b;
	ssize_t	 n;
	int	 fd;
	bool	 inherited;

	if (mkdir(dir, 0750) == -1 && errno != EEXIST) {
		snprintf(errbuf, errlen, "state dir %s: %s", dir,
		    strerror(errno));
		return -1;
	}
	if ((path = token_join(dir, KL_STATE_LOCK_FILE)) == NULL) {
		snprintf(errbuf, errlen, "out of memory");
		return -1;
	}
	/* this process holds it already (a server made again in one
	 * process, as the fuzzers do) */
	if (token_lockfd != -1 && fstat(token_lockfd, &a) == 0 &&
	    stat(path, &b) == 0 && a.st_dev == b.st_dev &&
	    a.st_ino == b.st_ino) {
		kl_free(path);
		return 0;
	}
	if (!(inherited = (fd = token_lock_inherited(path)) != -1)) {
		if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC,
		    0640)) == -1) {
			snprintf(errbuf, errlen, "state dir %s: cannot open "
			    "its lock file %s: %s", dir, path,
			    strerror(errno));
			kl_free(path);
			return -1;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) == -1) {
			int	e = errno;

			n = pread(fd, buf, sizeof(buf) - 1, 0);
			buf[n > 0 ? n : 0] = '\0';
			buf[strcspn(buf, "\n")] = '\0';
			if (e == EWOULDBLOCK)
				snprintf(errbuf, errlen, "state dir %s is in "
				    "use by another keylockd%s%s (it holds "
				    "the lock of %s): two servers on one "
				    "state directory would hand out the same "
				    "fencing tokens", dir,
				    buf[0] != '\0' ? ", pid " : "", buf,
				    path);
			else
				snprintf(errbuf, errlen, "state dir %s: cannot "
				    "lock %s: %s", dir, path, strerror(e));
			close(fd);
			kl_free(path);
			return -1;
		}
	}
	kl_free(path);
	if (token_lockfd != -1 && token_lockfd != fd)
		close(token_lockfd);
	token_lockfd = fd;
	/* a live upgrade's new process: once it has taken over */
	if (!inherited)
		token_lock_note_pid();
	return 0;
}

struct token *
token_open(const char *dir, char *errbuf, size_t errlen)
{
	struct token	*t;

	if (mkdir(dir, 0750) == -1 && errno != EEXIST) {
		snprintf(errbuf, errlen, "state dir %s: %s", dir,
		    strerror(errno));
		return NULL;
	}
	if ((t = kl_calloc(1, sizeof(*t))) == NULL ||
	    (t->dir = kl_strndup(dir, strlen(dir))) == NULL ||
	    (t->path = token_join(dir, KL_TOKEN_FILE)) == NULL ||
	    (t->tmp = token_join(dir, KL_TOKEN_FILE ".tmp")) == NULL) {
		token_close(t);
		snprintf(errbuf, errlen, "out of memory");
		return NULL;
	}
	if (token_read_mark(t->path, &t->next) == -1) {
		snprintf(errbuf, errlen, "%s: unreadable or damaged token "
		    "mark (remove it only if no client keeps tokens)", t->path);
		token_close(t);
		return NULL;
	}
	if (t->next > TOKEN_MAX - 2 * KL_TOKEN_BLOCK) {
		snprintf(errbuf, errlen, "%s: the token space below 2^63 is "
		    "used up", t->path);
		token_close(t);
		return NULL;
	}
	if (token_write_mark(t, t->next + 2 * KL_TOKEN_BLOCK) == -1) {
		snprintf(errbuf, errlen, "%s: cannot write the token mark: %s",
		    t->path, strerror(errno));
		token_close(t);
		return NULL;
	}
	t->mark = t->next + 2 * KL_TOKEN_BLOCK;
	return t;
}

/* Raises the durable mark to a block beyond the next range, if it is
 * not there already; logs when the mark starts or stops failing. */
bool
token_recheck(struct token *t, char *errbuf, size_t errlen)
{
	uint64_t	disk;

	if (token_read_mark(t->path, &disk) == 0 && disk >= t->mark)
		return true;
	if (token_write_mark(t, t->mark) == -1) {
		snprintf(errbuf, errlen, "%s: cannot write the token mark "
		    "again: %s", t->path, strerror(errno));
		return false;
	}
	log_warnx("%s: the token mark was lowered while this process "
	    "started; written again", t->path);
	return true;
}

static void
token_raise(struct token *t)
{
	uint64_t	mark = t->next + 2 * KL_TOKEN_BLOCK;

	if (t->mark >= mark)
		return;
	if (mark > TOKEN_MAX || token_write_mark(t, mark) == -1) {
		if (!t->failing)
			log_warn("%s: cannot raise the token mark to %" PRIu64
			    "; new LOCKs are refused until it can be",
			    t->path, mark);
		t->failing = true;
		return;
	}
	if (t->failing)
		log_info("%s: the token mark is raised to %" PRIu64 "; LOCKs "
		    "are granted again", t->path, mark);
	t->failing = false;
	t->mark = mark;
}

uint64_t
token_reserve(struct token *t, uint64_t *end)
{
	uint64_t	first = t->next;

	token_raise(t);
	if (t->mark <= first)
		fatalx("%s: no fencing token is left below the mark on disk, "
		    "and the mark cannot be raised: stopping rather than "
		    "hand out a token that could be handed out again",
		    t->path);
	*end = t->next = first + KL_TOKEN_BLOCK < t->mark ?
	    first + KL_TOKEN_BLOCK : t->mark;
	return first;
}

bool
token_retry(struct token *t, uint64_t now_ms)
{
	if (now_ms >= t->retry_at) {
		t->retry_at = now_ms + KL_TOKEN_RETRY_MS;
		token_raise(t);
	}
	return !t->failing;
}

uint64_t
token_peek(const struct token *t)
{
	return t->next;
}

void
token_close(struct token *t)
{
	if (t == NULL)
		return;
	kl_free(t->path);
	kl_free(t->tmp);
	kl_free(t->dir);
	kl_free(t);
}
