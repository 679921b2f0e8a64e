/*
 * keylockd: a lock server. SPDX-License-Identifier: MIT
 *
 * promnames: the metric names that PromQL expressions use, for the test
 * that contrib/'s dashboard and alerts ask only for what /metrics
 * exports. It reads the expressions of a Grafana dashboard (-d: every
 * "expr" member, and the queries of its query variables), of a
 * Prometheus rules file (-r: every expr: value, plain or a block scalar)
 * or of standard input (-e: one expression a line, for its own test),
 * and prints each name an expression uses, once per expression: with
 * -d and -r as NAME<TAB>WHERE, with -e as the names of each line on one
 * line. -q prints a dashboard's expressions instead, one a line, with 5m
 * for Grafana's $__rate_interval, $__interval and $__range, for promtool
 * to parse. A dashboard must take its data source from a variable: every
 * "datasource" names "${datasource}" (the built-in annotations aside),
 * and a datasource variable of type prometheus exists.
 *
 * The lexer skips strings, numbers and durations, comments, ranges and
 * subqueries ([5m], [1h:1m]), Grafana variables ($__rate_interval,
 * ${x}), keywords and aggregation operators, the label lists after by,
 * without, on, ignoring, group_left and group_right, and identifiers
 * followed by "(" (functions). Inside {} only the label __name__ can name
 * a metric. What remains is a metric name. Problems (an unterminated
 * string, unbalanced brackets, a __name__ regex it cannot check) are
 * printed as WHERE: message; the exit status is then 1 (2: usage, I/O).
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#define PN_NAMES_MAX	64	/* distinct names in one expression */
#define PN_NAME_MAX	256
#define PN_WHERE_MAX	512

struct pn {
	int	 errors;
	bool	 one_line;	/* -e: a line's names on one line */
	bool	 exprs;		/* -q: the dashboard's expressions */
	char	 names[PN_NAMES_MAX][PN_NAME_MAX];
	int	 nnames;
};

static const char *const pn_keywords[] = {
	"and", "or", "unless", "offset", "bool", "inf", "nan", "atan2",
	/* aggregation operators: followed by "(" or by a by/without list */
	"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
	"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio",
	NULL
};

/* Followed by a list of label names in parentheses. */
static const char *const pn_label_lists[] = {
	"by", "without", "on", "ignoring", "group_left", "group_right", NULL
};

static void	pn_error(struct pn *, const char *, const char *, ...)
		    __attribute__((format(printf, 3, 4)));

static void
pn_error(struct pn *pn, const char *where, const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "%s: ", where);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	pn->errors++;
}

static bool
pn_in(const char *const *list, const char *s, size_t len)
{
	for (; *list != NULL; list++)
		if (strlen(*list) == len && strncasecmp(*list, s, len) == 0)
			return true;
	return false;
}

static bool
pn_is_ident(int c, bool first)
{
	return isalpha(c) || c == '_' || c == ':' || (!first && isdigit(c));
}

static void
pn_add(struct pn *pn, const char *where, const char *s, size_t len)
{
	if (len == 0 || len >= PN_NAME_MAX) {
		pn_error(pn, where, "a metric name of %zu bytes", len);
		return;
	}
	for (int i = 0; i < pn->nnames; i++)
		if (strlen(pn->names[i]) == len &&
		    memcmp(pn->names[i], s, len) == 0)
			return;
	if (pn->nnames == PN_NAMES_MAX) {
		pn_error(pn, where, "over %d metric names", PN_NAMES_MAX);
		return;
	}
	memcpy(pn->names[pn->nnames], s, len);
	pn->names[pn->nnames++][len] = '\0';
}

static size_t
pn_space(const char *s, size_t n, size_t i)
{
	while (i < n && isspace((unsigned char)s[i]))
		i++;
	return i;
}

/* The end of the string that starts at s[i] (a quote), past its closing
 * quote; 0 if it has none. Backquoted strings have no escapes. */
static size_t
pn_string(const char *s, size_t n, size_t i)
{
	char	q = s[i];

	for (i++; i < n; i++) {
		if (s[i] == '\\' && q != '`')
			i++;
		else if (s[i] == q)
			return i + 1;
	}
	return 0;
}

/* A {} selector from s[i] = '{': the value of an equality matcher on
 * __name__ is a metric name. Returns the index past '}', or 0. */
static size_t
pn_matchers(struct pn *pn, const char *where, const char *s, size_t n,
    size_t i)
{
	size_t	name, namelen, op, end;

	for (i++;;) {
		if ((i = pn_space(s, n, i)) < n && s[i] == '}')
			return i + 1;
		for (name = i; i < n && pn_is_ident((unsigned char)s[i],
		    i == name) && s[i] != ':'; i++)
			;
		namelen = i - name;
		i = pn_space(s, n, i);
		for (op = i; i < n && strchr("=!~", s[i]) != NULL; i++)
			;
		i = pn_space(s, n, i);
		if (namelen == 0 || i == op || i >= n || strchr("\"'`",
		    s[i]) == NULL || (end = pn_string(s, n, i)) == 0) {
			pn_error(pn, where, "a bad label matcher at \"%.20s\"",
			    s + name);
			return 0;
		}
		if (namelen == 8 && memcmp(s + name, "__name__", 8) == 0) {
			if (s[op] != '=' || s[op + 1] == '~')
				pn_error(pn, where, "a __name__ matcher other "
				    "than = cannot be checked");
			else
				pn_add(pn, where, s + i + 1, end - i - 2);
		}
		if ((i = pn_space(s, n, end)) < n && s[i] == ',')
			i++;
	}
}

/* Adds the metric names of one PromQL expression to pn->names. */
static void
pn_expr(struct pn *pn, const char *where, const char *s, size_t n)
{
	size_t	i = 0, j, k;
	int	depth = 0;

	while (i < n) {
		unsigned char	c = (unsigned char)s[i];

		if (isspace(c) || strchr("+-*/%^=!<>,@", c) != NULL) {
			i++;
		} else if (c == '#') {
			while (i < n && s[i] != '\n')
				i++;
		} else if (c == '"' || c == '\'' || c == '`') {
			if ((i = pn_string(s, n, i)) == 0) {
				pn_error(pn, where, "an unterminated string");
				return;
			}
		} else if (c == '{') {
			if ((i = pn_matchers(pn, where, s, n, i)) == 0)
				return;
		} else if (c == '[') {
			if ((j = i + strcspn(s + i, "]")) >= n) {
				pn_error(pn, where, "an unterminated [");
				return;
			}
			i = j + 1;
		} else if (c == '$') {
			if (i + 1 < n && s[i + 1] == '{')
				i += strcspn(s + i, "}") + 1;
			else
				for (i++; i < n && pn_is_ident((unsigned char)
				    s[i], false) && s[i] != ':'; i++)
					;
		} else if (isdigit(c) || (c == '.' && i + 1 < n &&
		    isdigit((unsigned char)s[i + 1]))) {
			while (i < n && (isalnum((unsigned char)s[i]) ||
			    s[i] == '.'))
				i++;
		} else if (c == '(' || c == ')') {
			depth += c == '(' ? 1 : -1;
			if (depth < 0) {
				pn_error(pn, where, "an unbalanced )");
				return;
			}
			i++;
		} else if (pn_is_ident(c, true)) {
			for (j = i; i < n && pn_is_ident((unsigned char)s[i],
			    i == j); i++)
				;
			k = pn_space(s, n, i);
			if (pn_in(pn_label_lists, s + j, i - j)) {
				if (k < n && s[k] == '(')
					i = k + strcspn(s + k, ")") + 1;
			} else if (pn_in(pn_keywords, s + j, i - j) ||
			    (k < n && s[k] == '('))
				;	/* an operator or a function */
			else
				pn_add(pn, where, s + j, i - j);
		} else {
			pn_error(pn, where, "an unexpected '%c'", c);
			return;
		}
	}
	if (depth != 0)
		pn_error(pn, where, "an unbalanced (");
}

static void
pn_print(struct pn *pn, const char *where)
{
	for (int i = 0; i < pn->nnames; i++)
		if (pn->one_line)
			printf("%s%s", i ? " " : "", pn->names[i]);
		else
			printf("%s\t%s\n", pn->names[i], where);
	if (pn->one_line)
		putchar('\n');
	pn->nnames = 0;
}

/* A Grafana query variable: label_values(EXPR, LABEL) and
 * query_result(EXPR) hold an expression; label_values(LABEL) holds
 * none. */
static void
pn_variable(struct pn *pn, const char *where, const char *q)
{
	size_t	n = strlen(q), comma = 0;
	int	depth = 0;

	if (strncmp(q, "label_values(", 13) == 0) {
		for (size_t i = 13, j; i < n; i++) {
			if (q[i] == '"') {
				if ((j = pn_string(q, n, i)) == 0)
					break;
				i = j - 1;
			} else if (q[i] == '(' || q[i] == '{')
				depth++;
			else if (q[i] == ')' || q[i] == '}')
				depth--;
			else if (q[i] == ',' && depth == 0)
				comma = i;
		}
		if (comma != 0)
			pn_expr(pn, where, q + 13, comma - 13);
	} else if (strncmp(q, "query_result(", 13) == 0 && n > 14)
		pn_expr(pn, where, q + 13, n - 14);
	else
		pn_expr(pn, where, q, n);
	pn_print(pn, where);
}

/* -q: the expression on one line, with a duration for Grafana's
 * interval variables, for promtool to parse. */
static void
pn_print_expr(const char *e)
{
	static const char *const	 vars[] = { "${__rate_interval}",
	    "$__rate_interval", "${__interval}", "$__interval", "${__range}",
	    "$__range", NULL };
	size_t				 n;

	while (*e != '\0') {
		for (n = 0; vars[n] != NULL; n++)
			if (strncmp(e, vars[n], strlen(vars[n])) == 0)
				break;
		if (vars[n] != NULL) {
			fputs("5m", stdout);
			e += strlen(vars[n]);
		} else {
			putchar(*e == '\n' ? ' ' : *e);
			e++;
		}
	}
	putchar('\n');
}

static bool
pn_is_ds_variable(const char *uid)
{
	return strcmp(uid, "${datasource}") == 0 ||
	    strcmp(uid, "$datasource") == 0;
}

/* A "datasource" member: "${datasource}", as a string or as the uid of
 * an object of type prometheus; or Grafana's own, for annotations. */
static void
pn_datasource(struct pn *pn, const char *where, json_t *ds)
{
	const char	*type, *uid;

	if (json_is_string(ds) && pn_is_ds_variable(json_string_value(ds)))
		return;
	type = json_string_value(json_object_get(ds, "type"));
	uid = json_string_value(json_object_get(ds, "uid"));
	if (type != NULL && uid != NULL && ((strcmp(type, "prometheus") ==
	    0 && pn_is_ds_variable(uid)) || (strcmp(type, "grafana") == 0 &&
	    strcmp(uid, "-- Grafana --") == 0)))
		return;
	pn_error(pn, where, "a datasource that is not ${datasource} of "
	    "type prometheus (type %s, uid %s)", type ? type : "none",
	    uid ? uid : "none");
}

/* Every "expr" and "datasource" below o; where names the innermost
 * object with a title (a panel or a row). */
static void
pn_walk(struct pn *pn, const char *where, json_t *o)
{
	char		 here[PN_WHERE_MAX], w[PN_WHERE_MAX + 80];
	const char	*key, *title, *ref;
	json_t		*v;
	size_t		 i;

	if (json_is_array(o)) {
		json_array_foreach(o, i, v)
			pn_walk(pn, where, v);
		return;
	}
	if (!json_is_object(o))
		return;
	if ((title = json_string_value(json_object_get(o, "title"))) != NULL) {
		snprintf(here, sizeof(here), "panel \"%s\"", title);
		where = here;
	}
	json_object_foreach(o, key, v) {
		if (strcmp(key, "datasource") == 0)
			pn_datasource(pn, where, v);
		else if (strcmp(key, "expr") == 0 && json_is_string(v)) {
			ref = json_string_value(json_object_get(o, "refId"));
			snprintf(w, sizeof(w), "%s, query %.64s", where,
			    ref ? ref : "?");
			if (pn->exprs)
				pn_print_expr(json_string_value(v));
			else {
				pn_expr(pn, w, json_string_value(v),
				    json_string_length(v));
				pn_print(pn, w);
			}
		} else
			pn_walk(pn, where, v);
	}
}

static void
pn_dashboard(struct pn *pn, const char *file)
{
	json_error_t	 err;
	json_t		*root, *v, *q;
	const char	*type, *name;
	char		 where[PN_WHERE_MAX];
	bool		 ds = false;
	size_t		 i;

	if ((root = json_load_file(file, 0, &err)) == NULL) {
		fprintf(stderr, "%s:%d: %s\n", file, err.line, err.text);
		exit(2);
	}
	if (!json_is_array(json_object_get(root, "panels")))
		pn_error(pn, file, "no panels");
	pn_walk(pn, file, json_object_get(root, "panels"));
	pn_walk(pn, file, json_object_get(root, "annotations"));
	json_array_foreach(json_object_get(json_object_get(root,
	    "templating"), "list"), i, v) {
		type = json_string_value(json_object_get(v, "type"));
		name = json_string_value(json_object_get(v, "name"));
		snprintf(where, sizeof(where), "variable %s", name ? name :
		    "?");
		q = json_object_get(v, "query");
		if (json_is_object(q))
			q = json_object_get(q, "query");
		if (type != NULL && strcmp(type, "datasource") == 0 &&
		    name != NULL && strcmp(name, "datasource") == 0 &&
		    json_is_string(q) &&
		    strcmp(json_string_value(q), "prometheus") == 0)
			ds = true;
		if (type == NULL || strcmp(type, "query") != 0)
			continue;
		pn_datasource(pn, where, json_object_get(v, "datasource"));
		if (!json_is_string(q))
			pn_error(pn, where, "no query");
		else if (!pn->exprs)
			pn_variable(pn, where, json_string_value(q));
	}
	if (!ds)
		pn_error(pn, file, "no variable \"datasource\" of type "
		    "datasource for prometheus");
	json_decref(root);
}

static size_t
pn_indent(const char *line)
{
	return strspn(line, " ");
}

/* The expr: values of a rules file. A plain value may go on over the
 * lines indented deeper than its key, as a block scalar (| or >) does. */
static void
pn_rules(struct pn *pn, const char *file)
{
	FILE		*in;
	char		 line[4096], where[PN_WHERE_MAX], *expr = NULL, *p;
	size_t		 indent = 0, len = 0, cap = 0, n;
	int		 lineno = 0, start = 0;

	if ((in = fopen(file, "r")) == NULL) {
		perror(file);
		exit(2);
	}
	for (bool more = true; more;) {
		more = fgets(line, sizeof(line), in) != NULL;
		if (more) {
			lineno++;
			if (strchr(line, '\n') == NULL && !feof(in))
				pn_error(pn, file, "line %d is too long",
				    lineno);
			line[strcspn(line, "\n")] = '\0';
		}
		if (expr != NULL && more && (line[pn_space(line,
		    strlen(line), 0)] == '\0' || pn_indent(line) > indent)) {
			n = strlen(line);
			if (len + n + 2 > cap && (expr = realloc(expr,
			    cap = 2 * cap + n + 2)) == NULL) {
				perror("promnames");
				exit(2);
			}
			expr[len++] = '\n';
			memcpy(expr + len, line, n + 1);
			len += n;
			continue;
		}
		if (expr != NULL) {
			snprintf(where, sizeof(where), "%s:%d", file, start);
			pn_expr(pn, where, expr, len);
			pn_print(pn, where);
			free(expr);
			expr = NULL;
		}
		if (!more)
			break;
		p = line + pn_indent(line);
		if (strncmp(p, "- ", 2) == 0)
			p += 2 + pn_indent(p + 2);
		if (strncmp(p, "expr:", 5) != 0)
			continue;
		indent = (size_t)(p - line);
		start = lineno;
		p += 5 + pn_indent(p + 5);
		if (*p == '"' || *p == '\'') {
			pn_error(pn, file, "line %d: a quoted expr (write it "
			    "plain or as a block)", lineno);
			continue;
		}
		if (*p == '|' || *p == '>')
			p += strcspn(p, "#");	/* its lines follow */
		len = strlen(p);
		cap = len + 1;
		if ((expr = strdup(p)) == NULL) {
			perror("promnames");
			exit(2);
		}
	}
	fclose(in);
}

static void
pn_usage(void)
{
	fprintf(stderr, "usage: promnames [-e] [-d|-q dashboard.json] "
	    "[-r rules.yml]...\n");
	exit(2);
}

int
main(int argc, char *argv[])
{
	struct pn	 pn;
	char		 line[4096], where[32];
	int		 ch, lineno = 0;
	bool		 stdin_mode = false;

	memset(&pn, 0, sizeof(pn));
	if (argc < 2)
		pn_usage();
	while ((ch = getopt(argc, argv, "d:eq:r:")) != -1) {
		switch (ch) {
		case 'q':
			pn.exprs = true;
			pn_dashboard(&pn, optarg);
			pn.exprs = false;
			break;
		case 'd':
			pn_dashboard(&pn, optarg);
			break;
		case 'r':
			pn_rules(&pn, optarg);
			break;
		case 'e':
			stdin_mode = true;
			break;
		default:
			pn_usage();
		}
	}
	if (optind < argc)
		pn_usage();
	pn.one_line = true;
	while (stdin_mode && fgets(line, sizeof(line), stdin) != NULL) {
		snprintf(where, sizeof(where), "<stdin>:%d", ++lineno);
		pn_expr(&pn, where, line, strcspn(line, "\n"));
		pn_print(&pn, where);
	}
	return pn.errors > 0;
}
