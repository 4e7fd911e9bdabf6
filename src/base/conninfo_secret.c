/*-------------------------------------------------------------------------
 *
 * conninfo_secret.c
 *	  Keeping a password given in changestream.conninfo out of the messages
 *	  changestream writes.  libpq's own errors may quote parts of the
 *	  connection string (a parse error quotes the text it could not read),
 *	  so every such text passes through cs_redact_password() before it is
 *	  put in a message.  The documented way is a passfile, which keeps the
 *	  password out of the setting altogether (README).
 *
 *	  The password is found as libpq reads it: the keyword form
 *	  "password = value" (value single-quoted with backslash escapes, or a
 *	  run of non-space characters), and in a URI the "user:password@"
 *	  userinfo and a "password=" query parameter.
 *
 * Source: "Connection Strings" (libpq-connstring) in the PostgreSQL
 * documentation; conninfo_parse() and conninfo_uri_parse_options() in
 * src/interfaces/libpq/fe-connect.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "lib/stringinfo.h"
#include "nodes/pg_list.h"

#include "base/conninfo_secret.h"

#define MASK "********"

/* Keyword form: the values of every "password" keyword. */
static List *
keyword_passwords(const char *s)
{
	List	   *found = NIL;
	const char *p = s;

	while ((p = strstr(p, "password")) != NULL)
	{
		const char *q = p + strlen("password");
		StringInfoData v;

		/* a keyword starts the string or follows a space */
		if (p != s && !isspace((unsigned char) p[-1]))
		{
			p = q;
			continue;
		}
		while (isspace((unsigned char) *q))
			q++;
		p = q;
		if (*q != '=')
			continue;
		q++;
		while (isspace((unsigned char) *q))
			q++;
		initStringInfo(&v);
		if (*q == '\'')
		{
			for (q++; *q && *q != '\''; q++)
			{
				if (*q == '\\' && q[1])
					q++;
				appendStringInfoChar(&v, *q);
			}
		}
		else
			for (; *q && !isspace((unsigned char) *q); q++)
				appendStringInfoChar(&v, *q);
		if (v.len > 0)
			found = lappend(found, v.data);
		p = q;
	}
	return found;
}

/* URI form: the userinfo's password and a password= query parameter. */
static List *
uri_passwords(const char *s)
{
	List	   *found = NIL;
	const char *start = strstr(s, "://");
	const char *end;
	const char *at;
	const char *colon;
	const char *q;

	if (start == NULL)
		return NIL;
	start += 3;
	end = start + strcspn(start, "/?");
	at = memchr(start, '@', end - start);
	if (at != NULL)
	{
		colon = memchr(start, ':', at - start);
		if (colon != NULL && at > colon + 1)
			found = lappend(found, pnstrdup(colon + 1, at - colon - 1));
	}
	for (q = strchr(s, '?'); q != NULL; q = strchr(q + 1, '&'))
	{
		if (strncmp(q + 1, "password=", 9) == 0)
		{
			const char *v = q + 10;
			size_t		n = strcspn(v, "&");

			if (n > 0)
				found = lappend(found, pnstrdup(v, n));
		}
	}
	return found;
}

/* text with every occurrence of secret replaced by MASK (palloc'd) */
static char *
replace_all(const char *text, const char *secret)
{
	StringInfoData out;
	size_t		n = strlen(secret);
	const char *p = text;
	const char *hit;

	initStringInfo(&out);
	while ((hit = strstr(p, secret)) != NULL)
	{
		appendBinaryStringInfo(&out, p, hit - p);
		appendStringInfoString(&out, MASK);
		p = hit + n;
	}
	appendStringInfoString(&out, p);
	return out.data;
}

/*
 * cs_redact_password
 *	  text (a message, for example libpq's error for conninfo) with every
 *	  password found in conninfo replaced by "********"; each
 *	  space-separated word of a password is masked as well, as a parse
 *	  error may quote only a part.  conninfo may be NULL.  Returns a
 *	  palloc'd string; never raises (except out of memory).
 */
char *
cs_redact_password(const char *text, const char *conninfo)
{
	char	   *result = pstrdup(text ? text : "");
	List	   *secrets;
	ListCell   *lc;

	if (conninfo == NULL || conninfo[0] == '\0')
		return result;
	secrets = list_concat(keyword_passwords(conninfo), uri_passwords(conninfo));
	foreach(lc, secrets)
	{
		char	   *secret = lfirst(lc);
		char	   *word;
		char	   *save = NULL;

		result = replace_all(result, secret);
		for (word = strtok_r(secret, " \t\n\r'\"", &save); word != NULL;
			 word = strtok_r(NULL, " \t\n\r'\"", &save))
		{
			if (strlen(word) >= 3 && strcmp(word, "***") != 0)
				result = replace_all(result, word);
		}
	}
	return result;
}
