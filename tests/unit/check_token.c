/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Unit tests of the fencing-token mark (token.h, keylockd-protocol(7) "Fencing
 * tokens"): tokens rise strictly, also across a restart and a crash (a
 * second token_open on the same directory with or without token_close),
 * the mark on disk stays above every token handed out, also when it cannot
 * be written (grants are refused until it can, and with nothing left below
 * it the process exits), and a damaged or unusable state directory makes
 * token_open fail with a message. Each test gets a fresh mkdtemp directory
 * from a checked fixture. Tokens are issued as the lock table does: a
 * range from token_reserve() at a time.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* nftw, mkdtemp */
#endif
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "token.h"
#include "util.h"

static char	base[PATH_MAX];		/* the test's mkdtemp dir */
static char	errbuf[512];

/* The range being issued, as the lock table keeps it, of the token
 * mark in dir. */
struct range {
	const char	*dir;
	uint64_t	 next, end;
};

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP || flag == FTW_D)
		chmod(path, 0700);
	return remove(path);
}

static void
setup(void)
{
	const char	*tmp = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/check_token.XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(base));
	errbuf[0] = '\0';
}

static void
teardown(void)
{
	chmod(base, 0700);
	nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* base/name into buf. */
static const char *
path_in(char *buf, size_t len, const char *name)
{
	int	n = snprintf(buf, len, "%s/%s", base, name);

	ck_assert(n > 0 && (size_t)n < len);
	return buf;
}

static void
write_file(const char *path, const char *data, size_t len)
{
	FILE	*f = fopen(path, "w");

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

/* The number stored in dir/token. */
static uint64_t
read_mark(const char *dir)
{
	char		 path[PATH_MAX + 16], buf[64];
	FILE		*f;
	size_t		 n;
	uint64_t	 v;

	snprintf(path, sizeof(path), "%s/%s", dir, KL_TOKEN_FILE);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	ck_assert_uint_gt(n, 0);
	ck_assert_msg(buf[n - 1] == '\n', "mark file does not end in LF");
	n--;
	ck_assert_msg(kl_parse_u64(buf, n, 1, UINT64_MAX, &v),
	    "mark file is not one decimal number: %.*s", (int)n, buf);
	return v;
}

static struct token *
open_ok(const char *dir)
{
	struct token	*t;

	errbuf[0] = '\0';
	t = token_open(dir, errbuf, sizeof(errbuf));
	ck_assert_msg(t != NULL, "token_open(%s): %s", dir, errbuf);
	return t;
}

static void
expect_open_fails(const char *dir, const char *needle)
{
	struct token	*t;

	errbuf[0] = '\0';
	t = token_open(dir, errbuf, sizeof(errbuf));
	if (t != NULL)
		token_close(t);
	ck_assert_msg(t == NULL, "token_open(%s) succeeded", dir);
	ck_assert_msg(errbuf[0] != '\0', "token_open failed without a "
	    "message");
	ck_assert_msg(strstr(errbuf, needle) != NULL,
	    "message \"%s\" does not name \"%s\"", errbuf, needle);
}

/* The next token of r, reserving the next range of t when r is used up;
 * every range below the mark on disk. */
static uint64_t
next_token(struct token *t, struct range *r)
{
	if (r->next >= r->end) {
		r->next = token_reserve(t, &r->end);
		ck_assert_uint_lt(r->next, r->end);
		ck_assert_uint_le(r->end, read_mark(r->dir));
	}
	return r->next++;
}

/* Issues n tokens, checking each is above the previous; returns the last. */
static uint64_t
issue(struct token *t, struct range *r, uint64_t n, uint64_t after)
{
	uint64_t	last = after, v;

	for (uint64_t i = 0; i < n; i++) {
		v = next_token(t, r);
		if (v <= last)
			ck_abort_msg("token %" PRIu64 " after %" PRIu64, v,
			    last);
		last = v;
	}
	return last;
}

/* ---- order ---- */

START_TEST(tokens_are_strictly_increasing)
{
	struct token	*t = open_ok(base);
	struct range	 r = { base, 0, 0 };
	uint64_t	 first, last;

	first = token_peek(t);
	ck_assert_uint_ge(first, 1);
	ck_assert_uint_eq(next_token(t, &r), first);
	last = issue(t, &r, 1000, first);
	ck_assert_uint_eq(last, first + 1000);
	/* peek: the next token handed out, after the range */
	ck_assert_uint_eq(token_peek(t), r.end);
	token_close(t);
}
END_TEST

START_TEST(tokens_are_positive_and_below_2_63)
{
	struct token	*t = open_ok(base);
	struct range	 r = { base, 0, 0 };
	uint64_t	 v = next_token(t, &r);

	ck_assert_uint_gt(v, 0);
	ck_assert_uint_lt(r.end, UINT64_C(1) << 63);
	token_close(t);
}
END_TEST

START_TEST(peek_does_not_consume_a_token)
{
	struct token	*t = open_ok(base);
	uint64_t	 p = token_peek(t), end;

	ck_assert_uint_eq(token_peek(t), p);
	ck_assert_uint_eq(token_reserve(t, &end), p);
	ck_assert_uint_eq(token_peek(t), end);
	token_close(t);
}
END_TEST

/* ---- restarts and crashes ---- */

START_TEST(restart_after_close_issues_higher_tokens)
{
	struct token	*t = open_ok(base);
	struct range	 r = { base, 0, 0 }, r2 = { base, 0, 0 };
	uint64_t	 last, v;

	last = issue(t, &r, 100, 0);
	token_close(t);
	t = open_ok(base);
	v = next_token(t, &r2);
	ck_assert_uint_gt(v, last);
	issue(t, &r2, 10, v);
	token_close(t);
}
END_TEST

START_TEST(restart_without_close_issues_higher_tokens)
{
	struct token	*crashed = open_ok(base), *t;
	struct range	 r = { base, 0, 0 }, r2 = { base, 0, 0 };
	uint64_t	 last, v;

	/* A crash: the first instance never closes before the next opens. */
	last = issue(crashed, &r, 100, 0);
	t = open_ok(base);
	v = next_token(t, &r2);
	ck_assert_uint_gt(v, r.end - 1);
	ck_assert_uint_gt(v, last);
	token_close(t);
	token_close(crashed);
}
END_TEST

START_TEST(restart_after_a_block_boundary_issues_higher_tokens)
{
	struct token	*t = open_ok(base), *t2;
	struct range	 r = { base, 0, 0 }, r2 = { base, 0, 0 };
	uint64_t	 v;

	issue(t, &r, KL_TOKEN_BLOCK + 5, 0);
	t2 = open_ok(base);	/* crash: t still open */
	v = next_token(t2, &r2);
	/* above all that t could still issue without another write */
	ck_assert_uint_ge(v, r.end);
	token_close(t2);
	token_close(t);
}
END_TEST

START_TEST(many_restarts_and_crashes_keep_tokens_increasing)
{
	struct token	*prev = NULL;
	uint64_t	 last = 0;

	for (int i = 0; i < 20; i++) {
		struct token	*t = open_ok(base);
		struct range	 r = { base, 0, 0 };

		/* Odd rounds crash: the previous instance is still open. */
		if (prev != NULL) {
			token_close(prev);
			prev = NULL;
		}
		last = issue(t, &r, 3, last);
		if (i % 2 == 0)
			token_close(t);
		else
			prev = t;
	}
	token_close(prev);
	ck_assert_uint_ge(last, 60);
}
END_TEST

START_TEST(a_reserved_range_is_durable_and_a_block_ahead)
{
	struct token	*t = open_ok(base), *t2;
	uint64_t	 first, end, first2, end2, end3;

	first = token_reserve(t, &end);
	/* a block, all of it under the mark on disk, and a block to spare */
	ck_assert_uint_eq(end, first + KL_TOKEN_BLOCK);
	ck_assert_uint_eq(read_mark(base), end + KL_TOKEN_BLOCK);
	ck_assert_uint_eq(token_peek(t), end);
	/* used up: the mark is raised before the spare block is handed out */
	first2 = token_reserve(t, &end2);
	ck_assert_uint_eq(first2, end);
	ck_assert_uint_eq(end2, end + KL_TOKEN_BLOCK);
	ck_assert_uint_eq(read_mark(base), end2 + KL_TOKEN_BLOCK);
	ck_assert_uint_eq(token_reserve(t, &end3), end2);
	ck_assert_uint_eq(read_mark(base), end3 + KL_TOKEN_BLOCK);
	/* a crash now: a new instance issues above all of them */
	t2 = open_ok(base);
	ck_assert_uint_ge(token_reserve(t2, &end), end3);
	token_close(t2);
	token_close(t);
}
END_TEST

/* ---- a mark that cannot be written ---- */

/* A directory where the temporary file goes: the next write of the mark
 * fails, as root too (EISDIR). */
static void
block_writes(bool on)
{
	char	p[PATH_MAX + 32];

	path_in(p, sizeof(p), KL_TOKEN_FILE ".tmp");
	if (on)
		ck_assert_msg(mkdir(p, 0700) == 0, "%s: %s", p,
		    strerror(errno));
	else
		ck_assert_msg(rmdir(p) == 0, "%s: %s", p, strerror(errno));
}

/*
 * The range after a failed write comes from the block kept ahead, under
 * the mark on disk, and grants are refused until a write succeeds, tried
 * again once a second. (Before, the mark was raised in memory alone and
 * the next block handed out: a crash then could reuse its tokens.)
 */
START_TEST(a_failed_mark_refuses_grants_and_hands_out_durable_tokens)
{
	struct token	*t = open_ok(base);
	uint64_t	 end, first, mark;

	ck_assert(token_ready(t, 0));
	token_reserve(t, &end);
	mark = read_mark(base);
	block_writes(true);
	first = token_reserve(t, &end);
	ck_assert_uint_lt(first, end);
	ck_assert_msg(end <= read_mark(base), "tokens up to %" PRIu64
	    " handed out, %" PRIu64 " durable", end, read_mark(base));
	ck_assert_uint_eq(read_mark(base), mark);
	ck_assert(!token_ready(t, 5000));
	/* written again: not before a second has passed */
	block_writes(false);
	ck_assert(!token_ready(t, 5000 + KL_TOKEN_RETRY_MS - 1));
	ck_assert_uint_eq(read_mark(base), mark);
	ck_assert(token_ready(t, 5000 + KL_TOKEN_RETRY_MS));
	ck_assert_uint_eq(read_mark(base), end + 2 * KL_TOKEN_BLOCK);
	ck_assert(token_ready(t, 0));
	/* and tokens go on from where they were */
	mark = end;
	ck_assert_uint_eq(token_reserve(t, &end), mark);
	ck_assert_uint_le(end, read_mark(base));
	token_close(t);
}
END_TEST

/* With nothing left below the mark and the mark not writable, the process
 * exits rather than hand out a token a crash could hand out again. */
START_TEST(nothing_left_below_a_failed_mark_exits)
{
	pid_t	pid;
	int	status;

	ck_assert_int_ne(pid = fork(), -1);
	if (pid == 0) {
		struct token	*t = open_ok(base);
		uint64_t	 end;

		block_writes(true);
		token_reserve(t, &end);
		token_reserve(t, &end);	/* the spare block */
		token_reserve(t, &end);	/* nothing left: exits */
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1,
	    "status %#x, want exit 1", status);
}
END_TEST

/* ---- the mark on disk ---- */

START_TEST(mark_is_above_every_token_after_open)
{
	struct token	*t = open_ok(base);
	uint64_t	 first = token_peek(t);

	ck_assert_uint_ge(read_mark(base), first + 1);
	ck_assert_uint_eq(read_mark(base), first + 2 * KL_TOKEN_BLOCK);
	token_close(t);
}
END_TEST

/* A live upgrade's new process opened the file while the old one served
 * and then raised its own mark over it, lower: token_recheck() writes
 * this process's mark again; a mark above it stays. */
START_TEST(recheck_writes_a_lowered_mark_again)
{
	struct token	*t = open_ok(base);
	char		 path[PATH_MAX + 16], err[256];
	uint64_t	 mark = read_mark(base);

	snprintf(path, sizeof(path), "%s/%s", base, KL_TOKEN_FILE);
	ck_assert(token_recheck(t, err, sizeof(err)));
	ck_assert_uint_eq(read_mark(base), mark);
	write_file(path, "7\n", 2);
	ck_assert(token_recheck(t, err, sizeof(err)));
	ck_assert_uint_eq(read_mark(base), mark);
	write_file(path, "garbage\n", 8);
	ck_assert(token_recheck(t, err, sizeof(err)));
	ck_assert_uint_eq(read_mark(base), mark);
	snprintf(err, sizeof(err), "%llu\n", (unsigned long long)mark + 9);
	write_file(path, err, strlen(err));
	ck_assert(token_recheck(t, err, sizeof(err)));
	ck_assert_uint_eq(read_mark(base), mark + 9);
	token_close(t);
}
END_TEST

START_TEST(mark_is_above_every_token_after_a_block_boundary)
{
	struct token	*t = open_ok(base);
	struct range	 r = { base, 0, 0 };
	uint64_t	 last, mark_before = read_mark(base);

	last = issue(t, &r, 2 * KL_TOKEN_BLOCK + 5, 0);
	ck_assert_uint_ge(read_mark(base), last + 1);
	ck_assert_uint_gt(read_mark(base), mark_before);
	ck_assert_uint_ge(read_mark(base), token_peek(t));
	token_close(t);
}
END_TEST

START_TEST(mark_is_not_written_per_token)
{
	struct token	*t = open_ok(base);
	struct range	 r = { base, 0, 0 };
	uint64_t	 mark = read_mark(base);

	issue(t, &r, 1000, 0);
	ck_assert_uint_eq(read_mark(base), mark);
	token_close(t);
}
END_TEST

START_TEST(no_temporary_file_is_left_behind)
{
	char		 p[PATH_MAX + 32];
	struct token	*t = open_ok(base);
	struct range	 r = { base, 0, 0 };

	issue(t, &r, KL_TOKEN_BLOCK + 1, 0);
	token_close(t);
	ck_assert_int_eq(access(path_in(p, sizeof(p), KL_TOKEN_FILE ".tmp"),
	    F_OK), -1);
	ck_assert_int_eq(errno, ENOENT);
}
END_TEST

START_TEST(an_existing_mark_is_where_tokens_start)
{
	char		 p[PATH_MAX + 32];
	struct token	*t;
	uint64_t	 end;

	write_file(path_in(p, sizeof(p), KL_TOKEN_FILE), "12345\n", 6);
	t = open_ok(base);
	ck_assert_uint_ge(token_reserve(t, &end), 12345);
	ck_assert_uint_ge(read_mark(base), 12345 + 2 * KL_TOKEN_BLOCK);
	token_close(t);
}
END_TEST

START_TEST(a_mark_without_newline_is_accepted)
{
	char		 p[PATH_MAX + 32];
	struct token	*t;
	uint64_t	 end;

	write_file(path_in(p, sizeof(p), KL_TOKEN_FILE), "777", 3);
	t = open_ok(base);
	ck_assert_uint_ge(token_reserve(t, &end), 777);
	token_close(t);
}
END_TEST

/* ---- damaged marks ---- */

static void
damaged_mark_fails(const char *content, size_t len)
{
	char	p[PATH_MAX + 32];

	write_file(path_in(p, sizeof(p), KL_TOKEN_FILE), content, len);
	expect_open_fails(base, KL_TOKEN_FILE);
	ck_assert_msg(strstr(errbuf, "damaged") != NULL, "message \"%s\" does "
	    "not say the mark is damaged", errbuf);
	/* The damaged file is left for the operator, not overwritten. */
	ck_assert_int_eq(access(p, F_OK), 0);
}

START_TEST(garbage_mark_fails_with_a_message)
{
	damaged_mark_fails("hello world\n", 12);
}
END_TEST

START_TEST(empty_mark_fails_with_a_message)
{
	damaged_mark_fails("", 0);
}
END_TEST

START_TEST(mark_of_2_64_fails_with_a_message)
{
	damaged_mark_fails("18446744073709551616\n", 21);
}
END_TEST

START_TEST(mark_of_2_63_fails_with_a_message)
{
	damaged_mark_fails("9223372036854775808\n", 20);
}
END_TEST

START_TEST(mark_of_zero_fails_with_a_message)
{
	damaged_mark_fails("0\n", 2);
}
END_TEST

START_TEST(negative_mark_fails_with_a_message)
{
	damaged_mark_fails("-5\n", 3);
}
END_TEST

START_TEST(mark_with_nul_byte_fails_with_a_message)
{
	damaged_mark_fails("12\0" "34\n", 6);
}
END_TEST

START_TEST(mark_near_2_63_fails_rather_than_wrap)
{
	char	p[PATH_MAX + 32];

	/* 2^63 - 1: no block of tokens below 2^63 is left. */
	write_file(path_in(p, sizeof(p), KL_TOKEN_FILE),
	    "9223372036854775807\n", 20);
	expect_open_fails(base, KL_TOKEN_FILE);
}
END_TEST

/* ---- the state directory ---- */

START_TEST(missing_state_dir_is_created)
{
	char		 dir[PATH_MAX + 32];
	struct stat	 sb;
	struct token	*t;
	uint64_t	 end;

	path_in(dir, sizeof(dir), "state");
	ck_assert_int_eq(stat(dir, &sb), -1);
	t = open_ok(dir);
	ck_assert_int_eq(stat(dir, &sb), 0);
	ck_assert(S_ISDIR(sb.st_mode));
	ck_assert_uint_gt(token_reserve(t, &end), 0);
	ck_assert_uint_ge(read_mark(dir), token_peek(t));
	token_close(t);
}
END_TEST

START_TEST(state_dir_under_a_regular_file_fails)
{
	char	file[PATH_MAX + 32], dir[PATH_MAX + 64];

	write_file(path_in(file, sizeof(file), "plain"), "x", 1);
	snprintf(dir, sizeof(dir), "%s/state", file);
	expect_open_fails(dir, "state");
}
END_TEST

START_TEST(state_dir_that_is_a_regular_file_fails)
{
	char	file[PATH_MAX + 32];

	write_file(path_in(file, sizeof(file), "plain"), "x", 1);
	expect_open_fails(file, "plain");
}
END_TEST

START_TEST(unwritable_state_dir_fails)
{
	if (geteuid() == 0) {
		/* root writes anywhere: nothing to check */
		return;
	}
	ck_assert_int_eq(chmod(base, 0500), 0);
	expect_open_fails(base, base);
}
END_TEST

START_TEST(unwritable_parent_of_missing_state_dir_fails)
{
	char	dir[PATH_MAX + 32];

	if (geteuid() == 0)
		return;
	ck_assert_int_eq(chmod(base, 0500), 0);
	expect_open_fails(path_in(dir, sizeof(dir), "state"), "state");
}
END_TEST

START_TEST(state_dir_with_a_missing_parent_fails_with_the_reason)
{
	char	dir[PATH_MAX + 64];

	/* Two levels missing: mkdir fails, and the message says why. */
	snprintf(dir, sizeof(dir), "%s/a/b", base);
	expect_open_fails(dir, "No such file or directory");
}
END_TEST

/* ---- the state directory's lock (token_lock_dir) ---- */

/* The pid written in dir/lock. */
static long
lock_pid(const char *dir)
{
	char	path[PATH_MAX + 16], buf[32];
	FILE	*f;
	size_t	n;

	snprintf(path, sizeof(path), "%s/%s", dir, KL_STATE_LOCK_FILE);
	ck_assert_msg((f = fopen(path, "r")) != NULL, "%s: %s", path,
	    strerror(errno));
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strtol(buf, NULL, 10);
}

/* token_lock_dir(dir) in a child process, which holds nothing of ours
 * (it closes its copy of our descriptor, as a second daemon has none):
 * its exit status 0 if it took the lock, else 1 with its message in
 * msg. */
static int
lock_in_child(const char *dir, char *msg, size_t len)
{
	int	fds[2], st;
	pid_t	pid;
	ssize_t	n;

	ck_assert_int_eq(pipe(fds), 0);
	if ((pid = fork()) == 0) {
		char	eb[512] = "";
		int	rc;

		close(fds[0]);
		token_lock_release();
		rc = token_lock_dir(dir, eb, sizeof(eb));
		(void)!write(fds[1], eb, strlen(eb));
		_exit(rc == 0 ? 0 : 1);
	}
	ck_assert_int_gt(pid, 0);
	close(fds[1]);
	n = read(fds[0], msg, len - 1);
	msg[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

START_TEST(a_second_process_is_refused_with_the_holders_pid)
{
	char	msg[512], want[64];

	ck_assert_msg(token_lock_dir(base, errbuf, sizeof(errbuf)) == 0,
	    "%s", errbuf);
	ck_assert_int_ge(token_lock_fd(), 0);
	ck_assert_int_eq(lock_pid(base), (long)getpid());
	/* taken again by the process that holds it: nothing changes */
	ck_assert_int_eq(token_lock_dir(base, errbuf, sizeof(errbuf)), 0);
	ck_assert_int_eq(lock_in_child(base, msg, sizeof(msg)), 1);
	snprintf(want, sizeof(want), "another keylockd, pid %ld ",
	    (long)getpid());
	ck_assert_msg(strstr(msg, want) != NULL, "\"%s\" lacks \"%s\"", msg,
	    want);
	ck_assert_msg(strstr(msg, base) != NULL, "\"%s\" names no dir", msg);
	/* released, it is free for the next */
	token_lock_release();
	ck_assert_int_eq(token_lock_fd(), -1);
	ck_assert_msg(lock_in_child(base, msg, sizeof(msg)) == 0, "%s", msg);
}
END_TEST

START_TEST(a_lock_file_that_cannot_be_opened_fails_with_the_reason)
{
	char	path[PATH_MAX + 32];

	/* root opens anything it may, but not a directory for writing */
	ck_assert_int_eq(mkdir(path_in(path, sizeof(path),
	    KL_STATE_LOCK_FILE), 0700), 0);
	ck_assert_int_eq(token_lock_dir(base, errbuf, sizeof(errbuf)), -1);
	ck_assert_msg(strstr(errbuf, "cannot open its lock file") != NULL &&
	    strstr(errbuf, strerror(EISDIR)) != NULL, "%s", errbuf);
	ck_assert_int_eq(token_lock_fd(), -1);
}
END_TEST

START_TEST(a_state_dir_that_cannot_be_made_fails_before_the_lock)
{
	char	file[PATH_MAX + 32], dir[PATH_MAX + 64];

	write_file(path_in(file, sizeof(file), "plain"), "x", 1);
	snprintf(dir, sizeof(dir), "%s/state", file);
	ck_assert_int_eq(token_lock_dir(dir, errbuf, sizeof(errbuf)), -1);
	ck_assert_msg(strstr(errbuf, dir) != NULL &&
	    strstr(errbuf, strerror(ENOTDIR)) != NULL, "%s", errbuf);
}
END_TEST

/* A live upgrade's descriptor (KL_STATE_LOCK_ENV) is taken only if it
 * is a lock of this very file: another file's, a closed one's or a
 * word are let go, and the lock is taken afresh; the variable is gone
 * either way (a third process must not see it). */
START_TEST(an_inherited_descriptor_is_taken_only_if_it_is_this_lock)
{
	char		path[PATH_MAX + 32], other[PATH_MAX + 32], v[32];
	struct stat	a, b;
	int		fd, ofd;

	write_file(path_in(other, sizeof(other), "other"), "", 0);
	ck_assert_int_ge(ofd = open(other, O_RDWR), 3);
	snprintf(v, sizeof(v), "%d", ofd);
	setenv(KL_STATE_LOCK_ENV, v, 1);
	ck_assert_msg(token_lock_dir(base, errbuf, sizeof(errbuf)) == 0,
	    "%s", errbuf);
	ck_assert_ptr_null(getenv(KL_STATE_LOCK_ENV));
	/* the lock is this directory's file, not the one passed */
	ck_assert_int_eq(fstat(token_lock_fd(), &a), 0);
	ck_assert_int_eq(stat(path_in(path, sizeof(path),
	    KL_STATE_LOCK_FILE), &b), 0);
	ck_assert(a.st_dev == b.st_dev && a.st_ino == b.st_ino);
	ck_assert_int_eq(lock_pid(base), (long)getpid());
	/* and the other file is not locked */
	ck_assert_int_ge(ofd = open(other, O_RDWR), 3);
	ck_assert_int_eq(flock(ofd, LOCK_EX | LOCK_NB), 0);
	close(ofd);
	token_lock_release();

	setenv(KL_STATE_LOCK_ENV, "3x", 1);
	ck_assert_int_eq(token_lock_dir(base, errbuf, sizeof(errbuf)), 0);
	ck_assert_ptr_null(getenv(KL_STATE_LOCK_ENV));
	token_lock_release();

	/* this file's descriptor, as the old process passes it down */
	ck_assert_int_ge(fd = open(path_in(path, sizeof(path),
	    KL_STATE_LOCK_FILE), O_RDWR), 3);
	ck_assert_int_eq(write(fd, "1\n", 2), 2);	/* the old pid */
	snprintf(v, sizeof(v), "%d", fd);
	setenv(KL_STATE_LOCK_ENV, v, 1);
	ck_assert_int_eq(token_lock_dir(base, errbuf, sizeof(errbuf)), 0);
	ck_assert_int_eq(token_lock_fd(), fd);
	ck_assert_int_eq(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	/* the new process names itself only once it has taken over */
	ck_assert_int_eq(lock_pid(base), 1);
	token_lock_note_pid();
	ck_assert_int_eq(lock_pid(base), (long)getpid());
	token_lock_release();
}
END_TEST

static Suite *
token_suite(void)
{
	Suite	*s = suite_create("token");
	TCase	*tc;

	tc = tcase_create("order");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, tokens_are_strictly_increasing);
	tcase_add_test(tc, tokens_are_positive_and_below_2_63);
	tcase_add_test(tc, peek_does_not_consume_a_token);
	suite_add_tcase(s, tc);

	tc = tcase_create("restart");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, restart_after_close_issues_higher_tokens);
	tcase_add_test(tc, restart_without_close_issues_higher_tokens);
	tcase_add_test(tc, restart_after_a_block_boundary_issues_higher_tokens);
	tcase_add_test(tc, many_restarts_and_crashes_keep_tokens_increasing);
	tcase_add_test(tc, a_reserved_range_is_durable_and_a_block_ahead);
	suite_add_tcase(s, tc);

	tc = tcase_create("failed_mark");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc,
	    a_failed_mark_refuses_grants_and_hands_out_durable_tokens);
	tcase_add_test(tc, nothing_left_below_a_failed_mark_exits);
	suite_add_tcase(s, tc);

	tc = tcase_create("mark");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, mark_is_above_every_token_after_open);
	tcase_add_test(tc, recheck_writes_a_lowered_mark_again);
	tcase_add_test(tc, mark_is_above_every_token_after_a_block_boundary);
	tcase_add_test(tc, mark_is_not_written_per_token);
	tcase_add_test(tc, no_temporary_file_is_left_behind);
	tcase_add_test(tc, an_existing_mark_is_where_tokens_start);
	tcase_add_test(tc, a_mark_without_newline_is_accepted);
	suite_add_tcase(s, tc);

	tc = tcase_create("damaged");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, garbage_mark_fails_with_a_message);
	tcase_add_test(tc, empty_mark_fails_with_a_message);
	tcase_add_test(tc, mark_of_2_64_fails_with_a_message);
	tcase_add_test(tc, mark_of_2_63_fails_with_a_message);
	tcase_add_test(tc, mark_of_zero_fails_with_a_message);
	tcase_add_test(tc, negative_mark_fails_with_a_message);
	tcase_add_test(tc, mark_with_nul_byte_fails_with_a_message);
	tcase_add_test(tc, mark_near_2_63_fails_rather_than_wrap);
	suite_add_tcase(s, tc);

	tc = tcase_create("state_dir");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, missing_state_dir_is_created);
	tcase_add_test(tc, state_dir_under_a_regular_file_fails);
	tcase_add_test(tc, state_dir_that_is_a_regular_file_fails);
	tcase_add_test(tc, unwritable_state_dir_fails);
	tcase_add_test(tc, unwritable_parent_of_missing_state_dir_fails);
	tcase_add_test(tc,
	    state_dir_with_a_missing_parent_fails_with_the_reason);
	suite_add_tcase(s, tc);

	tc = tcase_create("state_lock");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, a_second_process_is_refused_with_the_holders_pid);
	tcase_add_test(tc,
	    a_lock_file_that_cannot_be_opened_fails_with_the_reason);
	tcase_add_test(tc, a_state_dir_that_cannot_be_made_fails_before_the_lock);
	tcase_add_test(tc,
	    an_inherited_descriptor_is_taken_only_if_it_is_this_lock);
	suite_add_tcase(s, tc);
	return s;
}

const struct check_program check_program = {
	.name = "check_token",
	.suites = { token_suite, NULL }
};
