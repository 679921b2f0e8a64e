/*
 * fenced_writer: why a lock hands out fencing tokens.
 * SPDX-License-Identifier: MIT
 *
 * A lock server cannot stop a holder that was paused (garbage collection,
 * swap, a stopped VM) from waking up after its lock ran out and writing as
 * if it still held it. The storage can: it remembers the highest token it
 * accepted and refuses writes that bring a smaller one (keylockd-protocol(7),
 * Fencing tokens).
 *
 * The story, with two connections to keylockd and one key:
 *   1. A locks with a 200 ms ttl (token t1) and writes. Then A "pauses".
 *   2. B asks for the key; it is granted when A's ttl runs out (t2 > t1).
 *   3. B writes with t2.
 *   4. A wakes up and writes with t1: the storage refuses it.
 *
 * Usage: fenced_writer [SERVER]  (default $KEYLOCK_SERVER, 127.0.0.1:7711)
 * Exits 0 when the stale write was refused and B's data survived.
 * Build: cc fenced_writer.c $(pkg-config --cflags --libs keylock)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <keylock.h>

#define KEY		"store:ledger"
#define TTL_MS		200
#define WAIT_MS		5000

/*
 * The storage: a file holding "highest-token\ndata\n". A write carrying a
 * token below the highest one seen is refused with ESTALE. The file's own
 * fcntl lock only makes check-and-write atomic on this host; the fencing is
 * the token comparison.
 */
static int
store_write(const char *path, uint64_t token, const char *data)
{
	struct flock	 fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	char		 buf[64];
	uint64_t	 highest = 0;
	ssize_t		 n;
	int		 fd, ret = -1, saved;

	if ((fd = open(path, O_RDWR | O_CREAT, 0644)) == -1)
		return -1;
	if (fcntl(fd, F_SETLKW, &fl) == -1)
		goto out;
	if ((n = pread(fd, buf, sizeof(buf) - 1, 0)) == -1)
		goto out;
	buf[n] = '\0';
	if (n > 0)
		highest = strtoull(buf, NULL, 10);
	if (token < highest) {
		errno = ESTALE;
		goto out;
	}
	n = snprintf(buf, sizeof(buf), "%" PRIu64 "\n", token);
	if (ftruncate(fd, 0) == -1 || pwrite(fd, buf, (size_t)n, 0) != n ||
	    pwrite(fd, data, strlen(data), n) != (ssize_t)strlen(data))
		goto out;
	ret = 0;
out:
	saved = errno;
	close(fd);
	errno = saved;
	return ret;
}

/* The data line of the ledger, or "" (buf holds len bytes). */
static const char *
store_read(const char *path, char *buf, size_t len)
{
	FILE	*f = fopen(path, "r");

	buf[0] = '\0';
	if (f == NULL)
		return buf;
	if (fgets(buf, (int)len, f) == NULL || fgets(buf, (int)len, f) == NULL)
		buf[0] = '\0';
	fclose(f);
	return buf;
}

static struct keylock *
connect_or_die(const char *server, const char *name)
{
	struct keylock		*kl;
	enum keylock_status	 st;

	if ((kl = keylock_new()) == NULL) {
		fprintf(stderr, "fenced_writer: out of memory\n");
		exit(1);
	}
	if ((st = keylock_connect(kl, server, NULL)) != KEYLOCK_OK ||
	    (st = keylock_name(kl, name)) != KEYLOCK_OK) {
		fprintf(stderr, "fenced_writer: %s: %s %s\n", name,
		    keylock_status_word(st), keylock_message(kl));
		exit(1);
	}
	return kl;
}

int
main(int argc, char **argv)
{
	struct keylock_lock_opts	 lease = { .ttl_ms = TTL_MS };
	struct keylock			*a, *b;
	enum keylock_status		 st;
	const char			*server = argc > 1 ? argv[1] : NULL;
	const char			*key = KEY;
	char				 dir[] = "/tmp/fenced_writer.XXXXXX";
	char				 path[64], data[64];
	uint64_t			 t1, t2;
	int				 ok;

	if (mkdtemp(dir) == NULL) {
		perror("fenced_writer: mkdtemp");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/ledger", dir);
	a = connect_or_die(server, "writer-a");
	b = connect_or_die(server, "writer-b");

	if ((st = keylock_lock(a, &key, 1, &lease, WAIT_MS, &t1)) !=
	    KEYLOCK_OK || store_write(path, t1, "A's first write\n") == -1) {
		fprintf(stderr, "fenced_writer: A: %s %s\n",
		    keylock_status_word(st), keylock_message(a));
		return 1;
	}
	printf("1. A holds %s with token %" PRIu64 " (ttl %d ms) and "
	    "wrote; now A pauses\n", KEY, t1, TTL_MS);

	/* B queues behind A and is granted when A's ttl runs out. */
	if ((st = keylock_lock(b, &key, 1, NULL, WAIT_MS, &t2)) !=
	    KEYLOCK_OK) {
		fprintf(stderr, "fenced_writer: B: %s %s\n",
		    keylock_status_word(st), keylock_message(b));
		return 1;
	}
	printf("2. A's ttl ran out; B holds %s with token %" PRIu64 "\n",
	    KEY, t2);
	if (store_write(path, t2, "B's write\n") == -1) {
		perror("fenced_writer: B's write");
		return 1;
	}
	printf("3. B wrote with token %" PRIu64 "\n", t2);

	/* A wakes up and, unaware, writes with its old token. */
	if (store_write(path, t1, "A's stale write\n") == 0) {
		printf("4. the storage took A's stale write: NOT fenced\n");
		ok = 0;
	} else {
		printf("4. the storage refused A's write with token %" PRIu64
		    ": %s\n", t1, strerror(errno));
		ok = errno == ESTALE;
	}
	/* And the server tells A, too, once A asks. */
	st = keylock_unlock(a, &key, 1, NULL);
	printf("   A's UNLOCK: %s %s\n", keylock_status_word(st),
	    keylock_message(a));
	ok = ok && st == KEYLOCK_ERR_NOTHELD;
	store_read(path, data, sizeof(data));
	printf("   the ledger holds: %s", data);
	ok = ok && strcmp(data, "B's write\n") == 0;

	keylock_free(a);
	keylock_free(b);
	unlink(path);
	rmdir(dir);
	return ok ? 0 : 1;
}
