/*-------------------------------------------------------------------------
 *
 * s3_xml.c
 *	  Reading the few elements the S3 client needs from a response body
 *	  (ListObjectsV2's Contents, Key, Size, IsTruncated; an error's Code
 *	  and Message; a multipart upload's UploadId), as untrusted input.
 *
 * This is not an XML parser: it finds "<name>" (or "<name attributes>")
 * ... "</name>" within given bounds and decodes the five predefined entities and numeric character
 * references of the text between.  That suffices for S3's responses,
 * whose elements of interest carry no attributes and hold text only
 * (S3 API reference, ListObjectsV2 and "Error responses"; a document
 * element may carry an xmlns attribute); anything else,
 * an unterminated element, a bad reference, a NUL, is "not found" or an
 * error the caller reports naming the request.  Every scan is bounded by
 * the length given, never by a NUL.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"

#include "replica/s3_xml.h"

/* the first occurrence of needle (len nlen) in [hay, hay + hlen), or NULL */
static const char *
find_bytes(const char *hay, size_t hlen, const char *needle, size_t nlen)
{
	const char *p = hay;
	const char *end = hay + hlen;

	while (nlen <= (size_t) (end - p))
	{
		const char *c = memchr(p, needle[0], end - p - nlen + 1);

		if (c == NULL)
			return NULL;
		if (memcmp(c, needle, nlen) == 0)
			return c;
		p = c + 1;
	}
	return NULL;
}

/*
 * cs_xml_find(doc, doclen, name, out) -> bool
 *	  The content of the first element <name>...</name> (its start tag may
 *	  carry attributes, as <ListBucketResult xmlns="...">) in the doclen
 *	  bytes at doc, into out; false when there is none, or it is not
 *	  closed.  <nameX> for a longer name does not match.
 */
bool
cs_xml_find(const char *doc, size_t doclen, const char *name, CsXmlSpan *out)
{
	char		open[80];
	char		close[80];
	int			olen;
	int			clen;
	const char *p = doc;
	const char *end = doc + doclen;

	olen = snprintf(open, sizeof(open), "<%s", name);
	clen = snprintf(close, sizeof(close), "</%s>", name);
	if (olen >= (int) sizeof(open) || clen >= (int) sizeof(close))
		return false;
	for (;;)
	{
		const char *s = find_bytes(p, end - p, open, olen);
		const char *gt;
		const char *e;

		if (s == NULL || s + olen >= end)
			return false;
		p = s + olen;
		if (*p != '>' && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n')
			continue;			/* a longer name */
		gt = memchr(p, '>', end - p);
		if (gt == NULL || gt[-1] == '/')
			return false;		/* unterminated, or empty <name/> */
		e = find_bytes(gt + 1, end - gt - 1, close, clen);
		if (e == NULL)
			return false;
		out->start = gt + 1;
		out->len = e - (gt + 1);
		return true;
	}
}

/* Decode one reference at p ("&...;", at most len bytes) into buf; bytes used or 0. */
static size_t
decode_reference(const char *p, size_t len, StringInfo buf)
{
	static const struct
	{
		const char *name;
		char		c;
	}			named[] = {
		{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}
	};
	const char *semi = memchr(p, ';', Min(len, 12));
	unsigned long cp = 0;
	const char *d;
	unsigned char utf8[8];

	if (semi == NULL)
		return 0;
	for (int i = 0; i < lengthof(named); i++)
		if ((size_t) (semi - p + 1) == strlen(named[i].name) &&
			memcmp(p, named[i].name, semi - p + 1) == 0)
		{
			appendStringInfoChar(buf, named[i].c);
			return semi - p + 1;
		}
	if (semi - p < 3 || p[1] != '#')
		return 0;
	if (p[2] == 'x')
	{
		for (d = p + 3; d < semi; d++)
		{
			int			v = (*d >= '0' && *d <= '9') ? *d - '0' :
				(*d >= 'a' && *d <= 'f') ? *d - 'a' + 10 :
				(*d >= 'A' && *d <= 'F') ? *d - 'A' + 10 : -1;

			if (v < 0 || d == p + 3 + 6)
				return 0;
			cp = cp * 16 + v;
		}
		if (semi == p + 3)
			return 0;
	}
	else
	{
		for (d = p + 2; d < semi; d++)
		{
			if (*d < '0' || *d > '9' || d == p + 2 + 7)
				return 0;
			cp = cp * 10 + (*d - '0');
		}
	}
	if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	unicode_to_utf8((pg_wchar) cp, utf8);
	appendBinaryStringInfo(buf, (char *) utf8, pg_utf_mblen(utf8));
	return semi - p + 1;
}

static char *decoded_text(CsXmlSpan span, size_t max);

/*
 * cs_xml_text(span, max) -> palloc'd string, or NULL
 *	  The text of span with its references decoded.  NULL when it holds
 *	  markup ('<'), a NUL, a bad reference, a control character, is not
 *	  valid UTF-8 (S3's encoding), or would be longer than max bytes.
 */
char *
cs_xml_text(CsXmlSpan span, size_t max)
{
	char	   *text = decoded_text(span, max);

	if (text == NULL)
		return NULL;
	for (const char *c = text; *c; c++)
		if ((unsigned char) *c < 0x20 || *c == 0x7f)
			return NULL;
	if (!pg_verify_mbstr(PG_UTF8, text, strlen(text), true))
		return NULL;
	return text;
}

/*
 * cs_xml_display_text(span, max) -> palloc'd string, or NULL
 *	  As cs_xml_text(), for a message shown to the user (an error's Code
 *	  and Message): a control character, a byte of an invalid UTF-8
 *	  sequence, and in a database whose encoding is neither UTF8 nor
 *	  SQL_ASCII every non-ASCII character, become '?', so the text is
 *	  valid in the server's encoding.  NULL as cs_xml_text() for markup,
 *	  a bad reference or length.
 */
char *
cs_xml_display_text(CsXmlSpan span, size_t max)
{
	char	   *text = decoded_text(span, max);
	int			enc = GetDatabaseEncoding();
	bool		ascii_only = enc != PG_UTF8 && enc != PG_SQL_ASCII;
	size_t		len;
	size_t		i = 0;

	if (text == NULL)
		return NULL;
	len = strlen(text);
	while (i < len)
	{
		unsigned char c = (unsigned char) text[i];
		int			n;

		if (c < 0x80)
		{
			if (c < 0x20 || c == 0x7f)
				text[i] = '?';
			i++;
			continue;
		}
		n = pg_utf_mblen((const unsigned char *) text + i);
		if (i + n > len || !pg_utf8_islegal((const unsigned char *) text + i, n))
		{
			text[i++] = '?';
			continue;
		}
		if (ascii_only)
			memset(text + i, '?', n);
		i += n;
	}
	return text;
}

/* The text of span with its references decoded; NULL as cs_xml_text(). */
static char *
decoded_text(CsXmlSpan span, size_t max)
{
	StringInfoData buf;
	size_t		i = 0;

	initStringInfo(&buf);
	while (i < span.len)
	{
		char		c = span.start[i];

		if (c == '<' || c == '\0')
			return NULL;
		if (c == '&')
		{
			size_t		used = decode_reference(span.start + i, span.len - i, &buf);

			if (used == 0)
				return NULL;
			i += used;
		}
		else
		{
			appendStringInfoChar(&buf, c);
			i++;
		}
		if ((size_t) buf.len > max)
			return NULL;
	}
	return buf.data;
}
