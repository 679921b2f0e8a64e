/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Fencing tokens: strictly increasing for the life of the state directory,
 * across restarts and crashes. Tokens are reserved in blocks: the file
 * holds a high-water mark that is fsync'd before any token below it is
 * handed out, so nothing is written per grant and a crash never reuses one.
 * When the mark cannot be raised, new grants are refused (token_ready())
 * rather than a token handed out that a crash could hand out again.
 */
#ifndef TOKEN_H
#define TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_TOKEN_BLOCK		(1ULL << 20)	/* tokens per range */
#define KL_TOKEN_FILE		"token"
#define KL_TOKEN_RETRY_MS	1000	/* a failed mark is tried again */

/* token.c's own: here only so that token_ready() tests failing inline,
 * as every LOCK does. */
struct token {
	uint64_t	 next;		/* next to hand out */
	uint64_t	 mark;		/* durable: nothing >= mark handed out */
	uint64_t	 retry_at;	/* failing: the next try, in ms */
	bool		 failing;	/* the last write of the mark failed */
	char		*path;
	char		*tmp;
	char		*dir;
};

/* Opens (creating if needed) dir/token and makes the first two blocks
 * durable. Returns NULL with a message in errbuf on failure. */
struct token	*token_open(const char *dir, char *errbuf, size_t errlen);

/*
 * The state directory is one process's (keylockd(8), --state-dir): an
 * exclusive flock(2) on KL_STATE_LOCK_FILE in it, taken at start and held
 * until the process ends. A live upgrade's new process inherits the old
 * one's locked descriptor (its number in KL_STATE_LOCK_ENV), so the lock
 * is never free between the two. -1 and errbuf when another process holds
 * it or it cannot be taken. token_lock_fd(): the locked descriptor, -1
 * if none.
 */
#define KL_STATE_LOCK_FILE	"lock"
#define KL_STATE_LOCK_ENV	"KEYLOCKD_STATE_LOCK"	/* "FD" */
int		 token_lock_dir(const char *dir, char *errbuf, size_t errlen);
int		 token_lock_fd(void);
/* The lock file names this process (for another's error message): at
 * start, and in a live upgrade by the new process once it took over and
 * by the old one again when the upgrade failed. */
void		 token_lock_note_pid(void);
/* Closes the lock (server_free()); a live upgrade's new process that
 * inherited it keeps it. */
void		 token_lock_release(void);
uint64_t	 token_peek(const struct token *t);	/* next handed out */
void		 token_close(struct token *t);
/*
 * The new process of a live upgrade, once the old one is frozen: the old
 * one kept serving while this one opened the file, and may have raised
 * its own mark meanwhile, over this one's and below it. The mark on disk
 * is read again and, if it is below this process's (or unreadable), this
 * one's is written again. false with a message if that write fails.
 */
bool		 token_recheck(struct token *t, char *errbuf, size_t errlen);
/*
 * Hands the caller the next range of tokens: returns the first of
 * [first, *end), never empty, at most KL_TOKEN_BLOCK long, every one below
 * the mark on disk, so the caller may issue them without a write. The mark
 * is kept a block ahead of the range: when less than that would be left,
 * it is raised first. If that write fails the range comes from the block
 * kept ahead and token_ready() turns false. With nothing at all left below
 * the mark it exits the process (fatalx) rather than hand out a token that
 * a crash could hand out again.
 */
uint64_t	 token_reserve(struct token *t, uint64_t *end);
/*
 * token_ready(): whether new grants may be made: false from a failed
 * write of the mark until one succeeds. Called at now_ms while false, it
 * tries the write again (token_retry()), at most once every
 * KL_TOKEN_RETRY_MS.
 */
bool		 token_retry(struct token *t, uint64_t now_ms);

static inline bool
token_ready(struct token *t, uint64_t now_ms)
{
	return !t->failing || token_retry(t, now_ms);
}

#endif /* TOKEN_H */
