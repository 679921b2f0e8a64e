/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The live-upgrade state format (HACKING.md, Live upgrade): the bytes one
 * keylockd process hands the binary that replaces it. A header (magic,
 * version, section count, total length) and then sections, each a tag, a
 * length and a payload of fixed-width little-endian numbers and
 * length-prefixed byte strings. The writer grows one buffer; the reader
 * is a parser of untrusted bytes: every read is bounds-checked, a short
 * or overlong section, a count past what is left, a version it does not
 * know, all end in a failure with a reason, never a read out of bounds.
 * Pure: no allocation beyond the writer's buffer, no I/O, no clock.
 */
#ifndef KSTATE_H
#define KSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KS_MAGIC	"KLDSTATE"	/* 8 bytes, no NUL */
#define KS_MAGIC_LEN	8
#ifndef KS_VERSION	/* a test builds a binary of another version */
#define KS_VERSION	5		/* the one this binary writes and reads */
#endif
#define KS_HEADER_LEN	24		/* magic, version, sections, length */
#define KS_SECTION_HEAD	12		/* tag (4), length (8) */
#define KS_WHY_MAX	160

/* The sections, in the order they are written and must be
 * read. */
enum ks_tag {
	KS_TAG_HANDOFF = 1,	/* who wrote it, when it froze, upgrades */
	KS_TAG_TABLE,		/* the lock table (lt_state.c) */
	KS_TAG_TOKEN,		/* the fencing-token mark */
	KS_TAG_STATS,		/* the server's counters */
	KS_TAG_LISTENERS,	/* listening sockets, by descriptor index */
	KS_TAG_SESSIONS,	/* sessions (ks_sessions.h) */
	KS_TAG_CONNS		/* connections, by descriptor index */
};

struct ks_reader;

struct ks_writer {
	unsigned char	*buf;
	size_t		 len, cap;
	size_t		 section;	/* offset of the open section; 0: none */
	uint32_t	 nsections;
	bool		 nomem;		/* an append failed: the state is void */
	/* NULL: buf is the heap's, grown by realloc. Else buf is the
	 * caller's (ks_writer_init_on) and this makes it at least n bytes,
	 * setting buf and cap; false if it cannot. */
	bool		(*grow)(struct ks_writer *w, size_t n);
	void		*grow_arg;
};

/* Starts a state (its header); ks_writer_finish() completes it. */
void		 ks_writer_init(struct ks_writer *w);
/* The same into buf[0..cap), which grow() enlarges when it must (a
 * mapping of the file the state goes to, so that it is written once, in
 * place); ks_writer_cleanup() leaves such a buffer to its owner. */
void		 ks_writer_init_on(struct ks_writer *w, void *buf, size_t cap,
		    bool (*grow)(struct ks_writer *, size_t), void *arg);
void		 ks_writer_cleanup(struct ks_writer *w);
/* Room for n more bytes at once, so that a large state is not copied as
 * it grows; a hint (appends still grow it). */
void		 ks_writer_reserve(struct ks_writer *w, size_t n);
void		 ks_section_begin(struct ks_writer *w, enum ks_tag tag);
void		 ks_section_end(struct ks_writer *w);
/* Fills in the header; false if memory ran out at any point. */
bool		 ks_writer_finish(struct ks_writer *w);

/* The numbers: little-endian, inline while there is room (a state has
 * a few numbers per key of the table, and is written and read in the
 * pause of a live upgrade); ks_append() and ks_take_n() are the rest. */
void		 ks_append(struct ks_writer *w, const void *p, size_t n);
uint64_t	 ks_take_n(struct ks_reader *r, size_t n);

static inline void
ks_put_n(struct ks_writer *w, uint64_t v, size_t n)
{
	unsigned char	b[8];

	if (n <= w->cap - w->len) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		memcpy(w->buf + w->len, &v, n);
#else
		for (size_t i = 0; i < n; i++)
			w->buf[w->len + i] = (unsigned char)(v >> (8 * i));
#endif
		w->len += n;
		return;
	}
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	ks_append(w, b, n);
}

static inline void
ks_put_u8(struct ks_writer *w, uint8_t v)
{
	ks_put_n(w, v, 1);
}

static inline void
ks_put_u16(struct ks_writer *w, uint16_t v)
{
	ks_put_n(w, v, 2);
}

static inline void
ks_put_u32(struct ks_writer *w, uint32_t v)
{
	ks_put_n(w, v, 4);
}

static inline void
ks_put_u64(struct ks_writer *w, uint64_t v)
{
	ks_put_n(w, v, 8);
}

/* A u32 length, then the bytes. */
void		 ks_put_bytes(struct ks_writer *w, const void *p, size_t n);
/* A NUL-terminated string, or NULL, as bytes (NULL: length UINT32_MAX). */
void		 ks_put_str(struct ks_writer *w, const char *s);

struct ks_reader {
	const unsigned char *p;
	size_t		 len, off;
	bool		 bad;
	char		 why[KS_WHY_MAX];	/* the first failure */
};

/*
 * Checks the header of buf[0..len): the magic, the version (a different
 * one, older or newer, is refused: this binary reads only its own), the
 * total length. Then *r reads the sections with ks_section_next(). false
 * with the reason in r->why.
 */
bool		 ks_reader_open(struct ks_reader *r, const void *buf,
		    size_t len);
/* The next section, which must have tag (the order is fixed); its payload
 * in *sect. false with the reason in r->why. */
bool		 ks_section_next(struct ks_reader *r, enum ks_tag tag,
		    struct ks_reader *sect);
/* Whether sect was read to its last byte without a failure; else notes
 * the trailing bytes in sect->why. */
bool		 ks_section_done(struct ks_reader *sect);
/* Whether every section of r was read. */
bool		 ks_reader_done(struct ks_reader *r);

/* Each returns 0 (and marks r bad) past the end, or once r is bad. */
static inline uint64_t
ks_get_n(struct ks_reader *r, size_t n)
{
	const unsigned char	*p = r->p + r->off;
	uint64_t		 v = 0;

	if (r->bad || n > r->len - r->off)
		return ks_take_n(r, n);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(&v, p, n);
#else
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
#endif
	r->off += n;
	return v;
}

static inline uint8_t
ks_get_u8(struct ks_reader *r)
{
	return (uint8_t)ks_get_n(r, 1);
}

static inline uint16_t
ks_get_u16(struct ks_reader *r)
{
	return (uint16_t)ks_get_n(r, 2);
}

static inline uint32_t
ks_get_u32(struct ks_reader *r)
{
	return (uint32_t)ks_get_n(r, 4);
}

static inline uint64_t
ks_get_u64(struct ks_reader *r)
{
	return ks_get_n(r, 8);
}

/* A u8 that must be 0 or 1. */
bool		 ks_get_bool(struct ks_reader *r);
/* Bytes of at most max; NULL (bad) if longer or past the end. The
 * pointer is into the state. */
const void	*ks_get_bytes(struct ks_reader *r, size_t *n, size_t max);
/* A count of items of at least min_size bytes each that must fit in
 * what is left: so a forged count cannot make a reader loop or allocate
 * past the state's own size. */
uint32_t	 ks_get_count(struct ks_reader *r, size_t min_size);
/* Marks r bad with a reason (the first one stays); returns false. */
bool		 ks_fail(struct ks_reader *r, const char *fmt, ...)
		    __attribute__((format(printf, 2, 3)));

#endif /* KSTATE_H */
