/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * The live-upgrade state format's writer and reader (kstate.h). Numbers
 * are little-endian whatever the host; the reader never reads a byte past
 * the section it is in.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kstate.h"
#include "util.h"

#define KS_GROW_MIN	4096

void
ks_append(struct ks_writer *w, const void *p, size_t n)
{
	unsigned char	*buf;
	size_t		 cap;

	if (w->nomem)
		return;
	if (n > w->cap - w->len) {
		cap = w->cap < KS_GROW_MIN ? KS_GROW_MIN : w->cap;
		while (cap - w->len < n) {
			if (cap > SIZE_MAX / 2) {
				w->nomem = true;
				return;
			}
			cap *= 2;
		}
		if (w->grow != NULL) {
			if (!w->grow(w, cap)) {
				w->nomem = true;
				return;
			}
		} else if ((buf = kl_realloc(w->buf, cap)) == NULL) {
			w->nomem = true;
			return;
		} else {
			w->buf = buf;
			w->cap = cap;
		}
	}
	memcpy(w->buf + w->len, p, n);
	w->len += n;
}

static void
ks_le(unsigned char *out, uint64_t v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t
ks_from_le(const unsigned char *in, size_t n)
{
	uint64_t	v = 0;

	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)in[i] << (8 * i);
	return v;
}

void
ks_writer_init(struct ks_writer *w)
{
	unsigned char	head[KS_HEADER_LEN];

	memset(w, 0, sizeof(*w));
	memset(head, 0, sizeof(head));
	ks_append(w, head, sizeof(head));
}

void
ks_writer_init_on(struct ks_writer *w, void *buf, size_t cap,
    bool (*grow)(struct ks_writer *, size_t), void *arg)
{
	unsigned char	head[KS_HEADER_LEN];

	memset(w, 0, sizeof(*w));
	w->buf = buf;
	w->cap = buf != NULL ? cap : 0;
	w->grow = grow;
	w->grow_arg = arg;
	memset(head, 0, sizeof(head));
	ks_append(w, head, sizeof(head));
}

void
ks_writer_reserve(struct ks_writer *w, size_t n)
{
	unsigned char	*buf;

	if (w->nomem || n <= w->cap - w->len)
		return;
	if (w->grow != NULL) {
		(void)w->grow(w, w->len + n);	/* appends try again */
		return;
	}
	if ((buf = kl_realloc(w->buf, w->len + n)) == NULL)
		return;		/* appends grow it then, or fail */
	w->buf = buf;
	w->cap = w->len + n;
}

void
ks_writer_cleanup(struct ks_writer *w)
{
	/* a state holds session IDs, secrets (ks_sessions.h); a buffer of
	 * the caller's is the caller's to clear */
	if (w->grow == NULL) {
		if (w->buf != NULL)
			explicit_bzero(w->buf, w->cap);
		kl_free(w->buf);
	}
	memset(w, 0, sizeof(*w));
}

void
ks_section_begin(struct ks_writer *w, enum ks_tag tag)
{
	unsigned char	head[KS_SECTION_HEAD];

	ks_section_end(w);
	ks_le(head, (uint64_t)tag, 4);
	ks_le(head + 4, 0, 8);
	w->section = w->len;
	ks_append(w, head, sizeof(head));
	w->nsections++;
}

void
ks_section_end(struct ks_writer *w)
{
	if (w->section == 0)
		return;
	if (!w->nomem)
		ks_le(w->buf + w->section + 4,
		    w->len - w->section - KS_SECTION_HEAD, 8);
	w->section = 0;
}

bool
ks_writer_finish(struct ks_writer *w)
{
	ks_section_end(w);
	if (w->nomem)
		return false;
	memcpy(w->buf, KS_MAGIC, KS_MAGIC_LEN);
	ks_le(w->buf + 8, KS_VERSION, 4);
	ks_le(w->buf + 12, w->nsections, 4);
	ks_le(w->buf + 16, w->len, 8);
	return true;
}

void
ks_put_bytes(struct ks_writer *w, const void *p, size_t n)
{
	if (n >= UINT32_MAX) {
		w->nomem = true;
		return;
	}
	ks_put_u32(w, (uint32_t)n);
	if (n > 0)
		ks_append(w, p, n);
}

void
ks_put_str(struct ks_writer *w, const char *s)
{
	if (s == NULL)
		ks_put_u32(w, UINT32_MAX);
	else
		ks_put_bytes(w, s, strlen(s));
}

bool
ks_fail(struct ks_reader *r, const char *fmt, ...)
{
	va_list	ap;

	if (!r->bad) {
		va_start(ap, fmt);
		vsnprintf(r->why, sizeof(r->why), fmt, ap);
		va_end(ap);
	}
	r->bad = true;
	return false;
}

bool
ks_reader_open(struct ks_reader *r, const void *buf, size_t len)
{
	uint64_t	version, total;

	memset(r, 0, sizeof(*r));
	r->p = buf;
	r->len = len;
	if (len < KS_HEADER_LEN || memcmp(buf, KS_MAGIC, KS_MAGIC_LEN) != 0)
		return ks_fail(r, "not a keylockd state (no magic)");
	version = ks_from_le(r->p + 8, 4);
	if (version != KS_VERSION)
		return ks_fail(r, "state version %llu, this binary reads "
		    "version %d only", (unsigned long long)version,
		    KS_VERSION);
	total = ks_from_le(r->p + 16, 8);
	if (total != len)
		return ks_fail(r, "state of %zu bytes says it has %llu", len,
		    (unsigned long long)total);
	r->off = KS_HEADER_LEN;
	return true;
}

bool
ks_section_next(struct ks_reader *r, enum ks_tag tag, struct ks_reader *sect)
{
	uint64_t	t, n;

	memset(sect, 0, sizeof(*sect));
	if (r->bad)
		return false;
	if (r->len - r->off < KS_SECTION_HEAD)
		return ks_fail(r, "section %d missing", (int)tag);
	t = ks_from_le(r->p + r->off, 4);
	n = ks_from_le(r->p + r->off + 4, 8);
	if (t != (uint64_t)tag)
		return ks_fail(r, "section %llu where %d belongs",
		    (unsigned long long)t, (int)tag);
	r->off += KS_SECTION_HEAD;
	if (n > r->len - r->off)
		return ks_fail(r, "section %d runs past the end", (int)tag);
	sect->p = r->p + r->off;
	sect->len = (size_t)n;
	r->off += (size_t)n;
	return true;
}

bool
ks_section_done(struct ks_reader *sect)
{
	if (!sect->bad && sect->off != sect->len)
		ks_fail(sect, "%zu bytes left over in a section",
		    sect->len - sect->off);
	return !sect->bad;
}

bool
ks_reader_done(struct ks_reader *r)
{
	if (!r->bad && r->off != r->len)
		ks_fail(r, "%zu bytes after the last section",
		    r->len - r->off);
	return !r->bad;
}

static const unsigned char *
ks_take(struct ks_reader *r, size_t n)
{
	const unsigned char	*p;

	if (r->bad)
		return NULL;
	if (n > r->len - r->off) {
		ks_fail(r, "truncated");
		return NULL;
	}
	p = r->p + r->off;
	r->off += n;
	return p;
}

uint64_t
ks_take_n(struct ks_reader *r, size_t n)
{
	const unsigned char	*p = ks_take(r, n);

	return p != NULL ? ks_from_le(p, n) : 0;
}

bool
ks_get_bool(struct ks_reader *r)
{
	uint8_t	v = ks_get_u8(r);

	if (v > 1)
		ks_fail(r, "a flag of %u", v);
	return v == 1;
}

const void *
ks_get_bytes(struct ks_reader *r, size_t *n, size_t max)
{
	uint32_t	len = ks_get_u32(r);

	*n = 0;
	if (r->bad)
		return NULL;
	if (len > max) {
		ks_fail(r, "a string of %u bytes, over %zu", len, max);
		return NULL;
	}
	*n = len;
	return ks_take(r, len);
}

uint32_t
ks_get_count(struct ks_reader *r, size_t min_size)
{
	uint32_t	n = ks_get_u32(r);

	if (r->bad)
		return 0;
	if (min_size > 0 && n > (r->len - r->off) / min_size) {
		ks_fail(r, "a count of %u does not fit in what is left", n);
		return 0;
	}
	return n;
}
