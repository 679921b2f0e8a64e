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

#include <stdint.h>

#define KL_TOKEN_BLOCK	(1ULL << 20)	/* tokens reserved per write */
#define KL_TOKEN_FILE	"token"

struct token;

/* Opens (creating if needed) dir/token and reserves the first block.
 * Returns NULL with a message in errbuf on failure. */
struct token	*token_open(const char *dir, char *errbuf, size_t errlen);
/* The next token; reserves a new block when the current one is used up.
 * If the mark cannot be written it logs and keeps going in memory. */
uint64_t	 token_next(struct token *t);
uint64_t	 token_peek(const struct token *t);	/* next to be issued */
void		 token_close(struct token *t);

#endif /* TOKEN_H */
