/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * promcheck: a strict checker of the Prometheus text exposition format,
 * version 0.0.4, written from the format's documentation
 * (prometheus/docs, content/docs/instrumenting/exposition_formats.md)
 * plus the naming rules promtool lints for. It reads one exposition
 * (a file or stdin), prints every problem as FILE:LINE: message and exits
 * 1 if there was one, 0 if none, 2 on a usage or I/O error.
 *
 * Checked: UTF-8; the final line feed; metric and label name charsets
 * ([a-zA-Z_:][a-zA-Z0-9_:]*, [a-zA-Z_][a-zA-Z0-9_]*, no "__" prefix); HELP
 * and TYPE at most once per family, before its first sample, TYPE one of
 * counter, gauge, histogram, summary, untyped; the escapes allowed in HELP
 * (\\ \n) and in label values (\\ \" \n); values as Go's ParseFloat reads
 * them and timestamps as int64; each family one uninterrupted group; no
 * duplicate series and no repeated label; counters named *_total and not
 * negative; histograms with only _bucket, _sum and _count samples, le
 * buckets in increasing order with non-decreasing counts, ending at +Inf
 * equal to _count, _sum present; summaries with quantiles in [0, 1] in
 * increasing order, _sum and _count. With -s, every family must also have
 * HELP, TYPE and samples; with -p PREFIX every metric name must start
 * with it.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define PC_MAX_LABELS	32
#define PC_MAX_NAME	256
#define PC_MAX_VALUE	1024

enum pc_type {
	PC_UNTYPED,
	PC_COUNTER,
	PC_GAUGE,
	PC_HISTOGRAM,
	PC_SUMMARY
};

static const char *const pc_type_names[] = {
	"untyped", "counter", "gauge", "histogram", "summary"
};

struct pc_label {
	char	name[PC_MAX_NAME];
	char	value[PC_MAX_VALUE];	/* unescaped */
};

struct pc_sample {
	char		name[PC_MAX_NAME];
	struct pc_label	labels[PC_MAX_LABELS];
	int		nlabels;
	double		value;
	int		line;
};

/* A series: one group of histogram or summary samples sharing labels
 * (le and quantile aside). */
struct pc_series {
	char		key[2048];	/* sorted labels without le/quantile */
	double		last_bound;	/* le or quantile seen last */
	double		last_count;	/* cumulative bucket count */
	bool		has_bound, has_inf, has_sum, has_count;
	double		inf_count, count;
	int		line;		/* first sample */
};

struct pc_family {
	char		 name[PC_MAX_NAME];
	enum pc_type	 type;
	bool		 has_help, has_type, has_samples, closed;
	int		 line;
	struct pc_series *series;
	size_t		 nseries;
};

struct pc {
	const char		*file;
	int			 line;
	int			 errors;
	bool			 strict;
	const char		*prefix;
	struct pc_family	*fams;
	size_t			 nfams;
	size_t			 current;	/* the group being read, */
	bool			 in_group;	/* if any */
	char			**seen;		/* series keys, for duplicates */
	size_t			 nseen, capseen;
};

static void	pc_error(struct pc *, int, const char *, ...)
		    __attribute__((format(printf, 3, 4)));

static void
pc_error(struct pc *pc, int line, const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "%s:%d: ", pc->file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	pc->errors++;
}

static void *
pc_xrealloc(void *p, size_t n)
{
	if ((p = realloc(p, n)) == NULL) {
		perror("promcheck");
		exit(2);
	}
	return p;
}

static bool
pc_utf8_valid(const unsigned char *s, size_t len)
{
	size_t	i = 0;

	while (i < len) {
		unsigned char	c = s[i];
		size_t		n;
		uint32_t	cp;

		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xe0) == 0xc0) {
			n = 1;
			cp = c & 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			n = 2;
			cp = c & 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			n = 3;
			cp = c & 0x07;
		} else
			return false;
		for (size_t k = 1; k <= n; k++) {
			if (i + k >= len || (s[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) ||
		    (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += n + 1;
	}
	return true;
}

static bool
pc_is_metric_name(const char *s)
{
	if (!(isalpha((unsigned char)*s) || *s == '_' || *s == ':'))
		return false;
	for (s++; *s != '\0'; s++)
		if (!(isalnum((unsigned char)*s) || *s == '_' || *s == ':'))
			return false;
	return true;
}

static bool
pc_is_label_name(const char *s)
{
	if (!(isalpha((unsigned char)*s) || *s == '_'))
		return false;
	for (s++; *s != '\0'; s++)
		if (!(isalnum((unsigned char)*s) || *s == '_'))
			return false;
	return true;
}

static bool
pc_ends_with(const char *s, const char *suffix)
{
	size_t	n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Go's strconv.ParseFloat, decimal forms only: [+-]digits[.digits]
 * [e[+-]digits], ".5", "5.", NaN and [+-]Inf in any case. */
static bool
pc_parse_float(const char *s, double *v)
{
	const char	*p = s;
	char		*end;
	bool		 digits = false;

	if (strcasecmp(s, "nan") == 0) {
		*v = NAN;
		return true;
	}
	if (*p == '+' || *p == '-')
		p++;
	if (strcasecmp(p, "inf") == 0 || strcasecmp(p, "infinity") == 0) {
		*v = *s == '-' ? -INFINITY : INFINITY;
		return true;
	}
	while (isdigit((unsigned char)*p)) {
		p++;
		digits = true;
	}
	if (*p == '.')
		for (p++; isdigit((unsigned char)*p); p++)
			digits = true;
	if (!digits)
		return false;
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!isdigit((unsigned char)*p))
			return false;
		while (isdigit((unsigned char)*p))
			p++;
	}
	if (*p != '\0')
		return false;
	errno = 0;
	*v = strtod(s, &end);
	return *end == '\0' && errno != ERANGE;
}

static bool
pc_parse_int64(const char *s)
{
	const char	*p = s;
	char		*end;

	if (*p == '-' || *p == '+')
		p++;
	if (!isdigit((unsigned char)*p))
		return false;
	errno = 0;
	(void)strtoll(s, &end, 10);
	return *end == '\0' && errno == 0;
}

static struct pc_family *
pc_family(struct pc *pc, const char *name, bool create)
{
	for (size_t i = 0; i < pc->nfams; i++)
		if (strcmp(pc->fams[i].name, name) == 0)
			return &pc->fams[i];
	if (!create)
		return NULL;
	pc->fams = pc_xrealloc(pc->fams, (pc->nfams + 1) *
	    sizeof(*pc->fams));
	memset(&pc->fams[pc->nfams], 0, sizeof(pc->fams[0]));
	snprintf(pc->fams[pc->nfams].name, PC_MAX_NAME, "%s", name);
	pc->fams[pc->nfams].line = pc->line;
	return &pc->fams[pc->nfams++];
}

/* The family a sample name belongs to: a histogram or summary x owns
 * x_bucket, x_sum and x_count when x has been typed so. */
static struct pc_family *
pc_family_of(struct pc *pc, const char *name, const char **suffix)
{
	static const char *const sfx[] = { "_bucket", "_sum", "_count" };
	char			 base[PC_MAX_NAME];
	struct pc_family	*f;

	*suffix = "";
	for (size_t i = 0; i < 3; i++) {
		size_t	n = strlen(name), m = strlen(sfx[i]);

		if (n <= m || strcmp(name + n - m, sfx[i]) != 0)
			continue;
		snprintf(base, sizeof(base), "%.*s", (int)(n - m), name);
		f = pc_family(pc, base, false);
		if (f != NULL && (f->type == PC_HISTOGRAM ||
		    f->type == PC_SUMMARY)) {
			*suffix = sfx[i];
			return f;
		}
	}
	return pc_family(pc, name, true);
}

/* Makes fam the group being read; a family seen before and left is an
 * interrupted group. */
static void
pc_enter(struct pc *pc, struct pc_family *fam)
{
	size_t	i = (size_t)(fam - pc->fams);

	if (pc->in_group && pc->current == i)
		return;
	if (fam->closed)
		pc_error(pc, pc->line, "%s: lines of one metric family must "
		    "form one uninterrupted group (first seen at line %d)",
		    fam->name, fam->line);
	if (pc->in_group)
		pc->fams[pc->current].closed = true;
	pc->current = i;
	pc->in_group = true;
}

/* Reads HELP text: only \\ and \n are escapes. */
static void
pc_check_help(struct pc *pc, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s != '\\')
			continue;
		if (s[1] != '\\' && s[1] != 'n') {
			pc_error(pc, pc->line, "HELP: bad escape \\%c (only "
			    "\\\\ and \\n)", s[1] != '\0' ? s[1] : ' ');
			return;
		}
		s++;
	}
}

static const char *
pc_skip_blank(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

/* Copies the next token (up to a blank) into buf; returns what follows. */
static const char *
pc_token(const char *s, char *buf, size_t len)
{
	size_t	n = strcspn(s, " \t");

	snprintf(buf, len, "%.*s", (int)n, s);
	return s + n;
}

static void
pc_comment(struct pc *pc, const char *s)
{
	char			 kw[16], name[PC_MAX_NAME], type[32];
	struct pc_family	*f;

	s = pc_skip_blank(s + 1);
	if (strncmp(s, "HELP", 4) != 0 && strncmp(s, "TYPE", 4) != 0)
		return;
	if (s[4] != ' ' && s[4] != '\t')
		return;		/* "# HELPING" is a plain comment */
	s = pc_token(s, kw, sizeof(kw));
	s = pc_skip_blank(s);
	s = pc_token(s, name, sizeof(name));
	if (name[0] == '\0') {
		pc_error(pc, pc->line, "%s without a metric name", kw);
		return;
	}
	if (!pc_is_metric_name(name)) {
		pc_error(pc, pc->line, "%s: bad metric name \"%s\"", kw, name);
		return;
	}
	f = pc_family(pc, name, true);
	pc_enter(pc, f);
	s = pc_skip_blank(s);
	if (strcmp(kw, "HELP") == 0) {
		if (f->has_help)
			pc_error(pc, pc->line, "%s: a second HELP line",
			    name);
		f->has_help = true;
		pc_check_help(pc, s);
		return;
	}
	if (f->has_type)
		pc_error(pc, pc->line, "%s: a second TYPE line", name);
	if (f->has_samples)
		pc_error(pc, pc->line, "%s: TYPE after the first sample",
		    name);
	f->has_type = true;
	s = pc_token(s, type, sizeof(type));
	if (*pc_skip_blank(s) != '\0')
		pc_error(pc, pc->line, "%s: TYPE takes exactly two tokens",
		    name);
	for (size_t i = 0; i < 5; i++)
		if (strcmp(type, pc_type_names[i]) == 0) {
			f->type = (enum pc_type)i;
			return;
		}
	pc_error(pc, pc->line, "%s: unknown TYPE \"%s\"", name, type);
}

/* Parses {name="value",...}; returns the rest or NULL. */
static const char *
pc_labels(struct pc *pc, const char *s, struct pc_sample *smp)
{
	s++;	/* '{' */
	for (;;) {
		struct pc_label	*l;
		size_t		 n, o = 0;

		s = pc_skip_blank(s);
		if (*s == '}')
			return s + 1;
		if (smp->nlabels == PC_MAX_LABELS) {
			pc_error(pc, pc->line, "too many labels");
			return NULL;
		}
		l = &smp->labels[smp->nlabels];
		n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
		    "TUVWXYZ0123456789_");
		snprintf(l->name, sizeof(l->name), "%.*s", (int)n, s);
		if (n == 0 || !pc_is_label_name(l->name)) {
			pc_error(pc, pc->line, "bad label name at \"%.10s\"",
			    s);
			return NULL;
		}
		if (strncmp(l->name, "__", 2) == 0)
			pc_error(pc, pc->line, "label name %s: names "
			    "starting with __ are reserved", l->name);
		s = pc_skip_blank(s + n);
		if (*s != '=') {
			pc_error(pc, pc->line, "label %s: expected =",
			    l->name);
			return NULL;
		}
		s = pc_skip_blank(s + 1);
		if (*s != '"') {
			pc_error(pc, pc->line, "label %s: expected a quoted "
			    "value", l->name);
			return NULL;
		}
		for (s++; *s != '"'; s++) {
			char	c = *s;

			if (c == '\0') {
				pc_error(pc, pc->line, "label %s: "
				    "unterminated value", l->name);
				return NULL;
			}
			if (c == '\\') {
				s++;
				if (*s == 'n')
					c = '\n';
				else if (*s == '\\' || *s == '"')
					c = *s;
				else {
					pc_error(pc, pc->line, "label %s: "
					    "bad escape \\%c", l->name,
					    *s != '\0' ? *s : ' ');
					return NULL;
				}
			}
			if (o + 1 < sizeof(l->value))
				l->value[o++] = c;
		}
		l->value[o] = '\0';
		for (int i = 0; i < smp->nlabels; i++)
			if (strcmp(smp->labels[i].name, l->name) == 0)
				pc_error(pc, pc->line, "label %s repeated",
				    l->name);
		smp->nlabels++;
		s = pc_skip_blank(s + 1);
		if (*s == ',')
			s++;
		else if (*s != '}') {
			pc_error(pc, pc->line, "expected , or } after label "
			    "%s", l->name);
			return NULL;
		}
	}
}

static int
pc_label_cmp(const void *a, const void *b)
{
	return strcmp(((const struct pc_label *)a)->name,
	    ((const struct pc_label *)b)->name);
}

/* name{sorted labels}, leaving out the label skip (NULL: none). */
static void
pc_series_key(const struct pc_sample *smp, const char *name,
    const char *skip, char *buf, size_t len)
{
	struct pc_label	sorted[PC_MAX_LABELS];
	size_t		off;

	memcpy(sorted, smp->labels, sizeof(sorted[0]) * (size_t)smp->nlabels);
	qsort(sorted, (size_t)smp->nlabels, sizeof(sorted[0]), pc_label_cmp);
	off = (size_t)snprintf(buf, len, "%s{", name);
	for (int i = 0; i < smp->nlabels && off < len; i++) {
		if (skip != NULL && strcmp(sorted[i].name, skip) == 0)
			continue;
		off += (size_t)snprintf(buf + off, len - off, "%s=\"%s\",",
		    sorted[i].name, sorted[i].value);
	}
	if (off < len)
		snprintf(buf + off, len - off, "}");
}

static const char *
pc_label_value(const struct pc_sample *smp, const char *name)
{
	for (int i = 0; i < smp->nlabels; i++)
		if (strcmp(smp->labels[i].name, name) == 0)
			return smp->labels[i].value;
	return NULL;
}

static struct pc_series *
pc_series(struct pc_family *f, const char *key, int line)
{
	for (size_t i = 0; i < f->nseries; i++)
		if (strcmp(f->series[i].key, key) == 0)
			return &f->series[i];
	f->series = pc_xrealloc(f->series, (f->nseries + 1) *
	    sizeof(*f->series));
	memset(&f->series[f->nseries], 0, sizeof(f->series[0]));
	snprintf(f->series[f->nseries].key, sizeof(f->series[0].key), "%s",
	    key);
	f->series[f->nseries].line = line;
	return &f->series[f->nseries++];
}

/* The bucket and quantile rules of histograms and summaries. */
static void
pc_check_grouped(struct pc *pc, struct pc_family *f, const char *suffix,
    const struct pc_sample *smp)
{
	const bool		 hist = f->type == PC_HISTOGRAM;
	const char		*bound_label = hist ? "le" : "quantile";
	const char		*bv;
	char			 key[2048];
	struct pc_series	*sr;
	double			 b;

	pc_series_key(smp, f->name, bound_label, key, sizeof(key));
	sr = pc_series(f, key, smp->line);
	bv = pc_label_value(smp, bound_label);
	if (strcmp(suffix, "_sum") == 0 || strcmp(suffix, "_count") == 0) {
		if (bv != NULL)
			pc_error(pc, smp->line, "%s: %s has a %s label",
			    smp->name, suffix, bound_label);
		if (strcmp(suffix, "_sum") == 0)
			sr->has_sum = true;
		else {
			sr->has_count = true;
			sr->count = smp->value;
			if (smp->value < 0 || isnan(smp->value) ||
			    smp->value != floor(smp->value))
				pc_error(pc, smp->line, "%s: a count must be "
				    "a non-negative integer", smp->name);
		}
		return;
	}
	if (hist && strcmp(suffix, "_bucket") != 0) {
		pc_error(pc, smp->line, "%s: a histogram has only _bucket, "
		    "_sum and _count samples", smp->name);
		return;
	}
	if (!hist && suffix[0] != '\0') {
		pc_error(pc, smp->line, "%s: a summary has no _bucket "
		    "samples", smp->name);
		return;
	}
	if (bv == NULL) {
		pc_error(pc, smp->line, "%s: no %s label", smp->name,
		    bound_label);
		return;
	}
	if (!pc_parse_float(bv, &b) || isnan(b)) {
		pc_error(pc, smp->line, "%s: %s=\"%s\" is not a number",
		    smp->name, bound_label, bv);
		return;
	}
	if (!hist && (b < 0 || b > 1))
		pc_error(pc, smp->line, "%s: quantile %s is outside [0, 1]",
		    smp->name, bv);
	if (sr->has_inf)
		pc_error(pc, smp->line, "%s: a bucket after le=\"+Inf\"",
		    smp->name);
	if (sr->has_bound && b <= sr->last_bound)
		pc_error(pc, smp->line, "%s: %s=\"%s\" is not above the "
		    "previous one (%g): not in increasing order", smp->name,
		    bound_label, bv, sr->last_bound);
	if (hist) {
		if (sr->has_sum || sr->has_count)
			pc_error(pc, smp->line, "%s: bucket after _sum or "
			    "_count", smp->name);
		if (smp->value < 0 || isnan(smp->value) ||
		    smp->value != floor(smp->value))
			pc_error(pc, smp->line, "%s: a bucket count must be "
			    "a non-negative integer", smp->name);
		if (sr->has_bound && smp->value < sr->last_count)
			pc_error(pc, smp->line, "%s{le=\"%s\"}: %g is below "
			    "the previous bucket's %g: buckets must be "
			    "cumulative", smp->name, bv, smp->value,
			    sr->last_count);
		sr->last_count = smp->value;
		if (isinf(b) && b > 0) {
			sr->has_inf = true;
			sr->inf_count = smp->value;
		}
	}
	sr->has_bound = true;
	sr->last_bound = b;
}

static void
pc_check_duplicate(struct pc *pc, const struct pc_sample *smp)
{
	char	key[2048];

	pc_series_key(smp, smp->name, NULL, key, sizeof(key));
	for (size_t i = 0; i < pc->nseen; i++)
		if (strcmp(pc->seen[i], key) == 0) {
			pc_error(pc, smp->line, "duplicate series %s", key);
			return;
		}
	if (pc->nseen == pc->capseen) {
		pc->capseen = pc->capseen ? pc->capseen * 2 : 64;
		pc->seen = pc_xrealloc(pc->seen, pc->capseen *
		    sizeof(*pc->seen));
	}
	if ((pc->seen[pc->nseen++] = strdup(key)) == NULL) {
		perror("promcheck");
		exit(2);
	}
}

static void
pc_sample_line(struct pc *pc, const char *s)
{
	struct pc_sample	 smp;
	struct pc_family	*f;
	const char		*suffix;
	char			 tok[128];
	size_t			 n;

	memset(&smp, 0, sizeof(smp));
	smp.line = pc->line;
	n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "0123456789_:");
	snprintf(smp.name, sizeof(smp.name), "%.*s", (int)n, s);
	if (n == 0 || !pc_is_metric_name(smp.name)) {
		pc_error(pc, pc->line, "bad metric name at \"%.20s\"", s);
		return;
	}
	s += n;
	if (*pc_skip_blank(s) == '{' &&
	    (s = pc_labels(pc, pc_skip_blank(s), &smp)) == NULL)
		return;
	if (*s != ' ' && *s != '\t') {
		pc_error(pc, pc->line, "%s: expected a blank before the "
		    "value", smp.name);
		return;
	}
	s = pc_token(pc_skip_blank(s), tok, sizeof(tok));
	if (!pc_parse_float(tok, &smp.value)) {
		pc_error(pc, pc->line, "%s: bad value \"%s\"", smp.name, tok);
		return;
	}
	s = pc_skip_blank(s);
	if (*s != '\0') {
		s = pc_token(s, tok, sizeof(tok));
		if (!pc_parse_int64(tok))
			pc_error(pc, pc->line, "%s: bad timestamp \"%s\"",
			    smp.name, tok);
		if (*pc_skip_blank(s) != '\0')
			pc_error(pc, pc->line, "%s: text after the timestamp",
			    smp.name);
	}
	if (pc->prefix != NULL && strncmp(smp.name, pc->prefix,
	    strlen(pc->prefix)) != 0)
		pc_error(pc, pc->line, "%s: does not start with %s", smp.name,
		    pc->prefix);
	f = pc_family_of(pc, smp.name, &suffix);
	pc_enter(pc, f);
	f->has_samples = true;
	pc_check_duplicate(pc, &smp);
	switch (f->type) {
	case PC_COUNTER:
		if (!pc_ends_with(f->name, "_total"))
			pc_error(pc, pc->line, "%s: a counter's name should "
			    "end in _total", f->name);
		if (smp.value < 0 || isnan(smp.value))
			pc_error(pc, pc->line, "%s: a counter cannot be "
			    "negative or NaN", smp.name);
		break;
	case PC_HISTOGRAM:
	case PC_SUMMARY:
		pc_check_grouped(pc, f, suffix, &smp);
		break;
	case PC_GAUGE:
	case PC_UNTYPED:
		break;
	}
}

static void
pc_finish(struct pc *pc)
{
	for (size_t i = 0; i < pc->nfams; i++) {
		struct pc_family	*f = &pc->fams[i];

		if (pc->strict && (!f->has_help || !f->has_type))
			pc_error(pc, f->line, "%s: no %s line", f->name,
			    !f->has_help ? "HELP" : "TYPE");
		if (pc->strict && !f->has_samples)
			pc_error(pc, f->line, "%s: HELP or TYPE but no "
			    "samples", f->name);
		for (size_t k = 0; k < f->nseries; k++) {
			struct pc_series	*sr = &f->series[k];

			if (!sr->has_sum)
				pc_error(pc, sr->line, "%s: no _sum", sr->key);
			if (!sr->has_count)
				pc_error(pc, sr->line, "%s: no _count",
				    sr->key);
			if (f->type != PC_HISTOGRAM)
				continue;
			if (!sr->has_inf)
				pc_error(pc, sr->line, "%s: no bucket with "
				    "le=\"+Inf\"", sr->key);
			else if (sr->has_count && sr->inf_count != sr->count)
				pc_error(pc, sr->line, "%s: le=\"+Inf\" bucket "
				    "%g differs from _count %g", sr->key,
				    sr->inf_count, sr->count);
		}
	}
}

static char *
pc_slurp(FILE *f, size_t *len)
{
	char	*buf = NULL;
	size_t	 cap = 0, n;

	*len = 0;
	do {
		if (*len + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 65536;
			buf = pc_xrealloc(buf, cap);
		}
		n = fread(buf + *len, 1, cap - *len - 1, f);
		*len += n;
	} while (n > 0);
	if (ferror(f)) {
		free(buf);
		return NULL;
	}
	buf[*len] = '\0';
	return buf;
}

int
main(int argc, char *argv[])
{
	struct pc	 pc;
	FILE		*in = stdin;
	char		*buf, *p, *nl;
	size_t		 len;
	int		 ch;

	memset(&pc, 0, sizeof(pc));
	pc.file = "<stdin>";
	while ((ch = getopt(argc, argv, "p:s")) != -1) {
		if (ch == 'p')
			pc.prefix = optarg;
		else if (ch == 's')
			pc.strict = true;
		else {
			fprintf(stderr, "usage: promcheck [-s] [-p prefix] "
			    "[file]\n");
			return 2;
		}
	}
	if (optind < argc) {
		pc.file = argv[optind];
		if ((in = fopen(pc.file, "r")) == NULL) {
			perror(pc.file);
			return 2;
		}
	}
	if ((buf = pc_slurp(in, &len)) == NULL) {
		perror(pc.file);
		return 2;
	}
	if (in != stdin)
		fclose(in);
	if (memchr(buf, '\0', len) != NULL)
		pc_error(&pc, 1, "a NUL byte in the input");
	if (!pc_utf8_valid((const unsigned char *)buf, len))
		pc_error(&pc, 1, "the input is not valid UTF-8");
	if (len == 0)
		pc_error(&pc, 1, "empty exposition");
	else if (buf[len - 1] != '\n')
		pc_error(&pc, 1, "the last line does not end with a line "
		    "feed");
	for (p = buf; p < buf + len; p = nl + 1) {
		char	*s, *e;

		pc.line++;
		if ((nl = memchr(p, '\n', (size_t)(buf + len - p))) == NULL)
			nl = buf + len;	/* reported above */
		*nl = '\0';
		if (strchr(p, '\r') != NULL)
			pc_error(&pc, pc.line, "a carriage return (lines end "
			    "with \\n only)");
		s = p + strspn(p, " \t");
		e = s + strlen(s);	/* leading and trailing blanks */
		while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
			*--e = '\0';
		if (*s == '\0')
			continue;
		if (*s == '#')
			pc_comment(&pc, s);
		else
			pc_sample_line(&pc, s);
	}
	pc_finish(&pc);
	for (size_t i = 0; i < pc.nfams; i++)
		free(pc.fams[i].series);
	for (size_t i = 0; i < pc.nseen; i++)
		free(pc.seen[i]);
	free(pc.seen);
	free(pc.fams);
	free(buf);
	if (pc.errors > 0) {
		fprintf(stderr, "%s: %d problem%s\n", pc.file, pc.errors,
		    pc.errors == 1 ? "" : "s");
		return 1;
	}
	return 0;
}
