/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * Fencing tokens: strictly increasing for the life of the state directory,
 * across restarts and crashes. Tokens are reserved in blocks: the file
 * holds a high-water mark that is fsync'd before any token below it is
 * handed out, so nothing is written per grant and a crash never reuses one.
 */
#ifndef TOKEN_H
#define TOKEN_H

#include <stddef.h>
#include <stdint.h>

#define KL_TOKEN_BLOCK	(1ULL << 20)	/* tokens reserved per write */
#define KL_TOKEN_FILE	"token"

/*
 * The part of a struct token that token_next() reads inline, its first
 * member: the next token to issue and the durable mark it stays under.
 * Everything else, and what happens at the mark, is token.c's.
 */
struct token_range {
	uint64_t	 next;	/* next to issue */
	uint64_t	 mark;	/* durable: nothing >= mark issued */
};

struct token;

/* Opens (creating if needed) dir/token and reserves the first block.
 * Returns NULL with a message in errbuf on failure. */
struct token	*token_open(const char *dir, char *errbuf, size_t errlen);
uint64_t	 token_peek(const struct token *t);	/* next to be issued */
void		 token_close(struct token *t);
/* token_next() at the mark, out of line. */
uint64_t	 token_next_block(struct token *t);
/*
 * Hands the caller every token left below the durable mark: returns the
 * first of [first, *end), never empty, and token_next() goes on from
 * *end. At the mark it first makes the next block durable, as
 * token_next() does, so the caller may issue the range without a write.
 */
uint64_t	 token_reserve(struct token *t, uint64_t *end);

/* The next token; reserves a new block when the current one is used up.
 * If the mark cannot be written it logs and keeps going in memory. */
static inline uint64_t
token_next(struct token *t)
{
	struct token_range	*r = (struct token_range *)(void *)t;

	if (r->next < r->mark)
		return r->next++;
	return token_next_block(t);
}

#endif /* TOKEN_H */
